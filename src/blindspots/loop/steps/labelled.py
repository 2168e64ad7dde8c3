"""What earlier rounds labelled: S(1..i) (fine-tuned on) and every T (test images), which mining skips
and core-set takes as centres. One place, read by the mine, select and portfolio steps."""
from __future__ import annotations

from blindspots.loop.context import LoopContext
from blindspots.loop.project import Project

__all__ = ["labelled_before", "used_for_finetuning"]


def used_for_finetuning(project: Project, before_round: int) -> list[str]:
    """Ids of S(1..i): every counterexample of rounds < before_round."""
    out: list[str] = []
    for j in range(before_round):
        out += list(project.answers.candidates(j, "S")["id"])
    return list(dict.fromkeys(out))


def labelled_before(ctx: LoopContext, i: int) -> set[str]:
    """Ids pixel-labelled in rounds 0..i-1, as counterexamples (S) or test images (T): not mined again."""
    tests = {x for r in range(i) for x in ctx.project.answers.candidates(r, "T")["id"]}
    return {str(x) for x in [*used_for_finetuning(ctx.project, i), *tests]}

"""One count of a round's answers, said the same way by `round`, `status`, the round page and the
rating page: images rated by enough people (the quota: `ratings.raters` answers, or one
out-of-domain flag) and answers in hand, both labelled; and when the quota can never be reached
(fewer people than raters), what to do about it.

Why one place: the rating page counted images, `status` counted answers and the round page counted
images with any answer, so one person saw "76 / 76", "76/228" and "0 of 76" for the same state.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from blindspots.config import CONFIG_FILE, save_config
from blindspots.loop.next_action import NextAction

__all__ = ["RatingProgress", "rating_progress", "set_raters"]


@dataclass(frozen=True)
class RatingProgress:
    """Where the ratings of round i's candidates M(i+1) stand.

    images: candidates in M; complete: images rated by enough people (or flagged out-of-domain);
    answers: answers in hand (each person's latest per image); needed: answers the quota asks for
    (raters x images, an out-of-domain flag counting as the whole quota of its image); raters: the
    quota; people: names who can answer (annotators of the app and anyone whose ratings were
    imported); missing: ids still short of the quota.
    """

    round: int
    images: int
    complete: int
    answers: int
    needed: int
    raters: int
    people: tuple[str, ...]
    missing: tuple[str, ...]
    project: str = "PROJECT"

    @property
    def unreachable(self) -> bool:
        """True when the people who can answer are fewer than the quota: some images can never be done.
        Nobody known yet (no annotator, no rating) is not a verdict: ratings may come by CSV."""
        return bool(self.missing) and 0 < len(self.people) < self.raters

    def counts(self) -> str:
        """'12 of 76 images rated by enough people (3 each), 40 of 228 answers in'."""
        return (f"{self.complete} of {self.images} images rated by enough people ({self.raters} each), "
                f"{self.answers} of {self.needed} answers in")

    def advice(self) -> str:
        """What to do when the quota cannot be reached ('' when it can)."""
        if not self.unreachable:
            return ""
        who = ", ".join(self.people) if self.people else "nobody yet"
        n = max(1, len(self.people))
        return (f"each image needs {self.raters} ratings but only {len(self.people)} "
                f"{'person' if len(self.people) == 1 else 'people'} can rate ({who}): lower the quota to {n} "
                f"(`blindspots.loop.set_raters`, the `config --raters {n}` command) or add people "
                "(the `annotators add` command)")

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "images": self.images, "complete": self.complete, "answers": self.answers,
                "needed": self.needed, "raters": self.raters, "people": list(self.people),
                "unreachable": self.unreachable, "counts": self.counts(), "advice": self.advice(),
                # once every image has its ratings, the loop goes on: the one command that does it
                "next": None if self.missing else NextAction("advance").as_command(self.project)}


def rating_progress(project: Any, round: int) -> RatingProgress:
    """The `RatingProgress` of round `round` of `project` (a `Project`)."""
    ids = [str(x) for x in project.answers.candidates(round, "M")["id"]]
    r = project.answers.ratings_for_round(round)
    need = int(project.config.ratings.raters)
    counts = r.groupby("id").size() if len(r) else pd.Series(dtype=int)
    ood = set(r.loc[r["out_of_domain"], "id"]) if len(r) else set()
    missing = tuple(x for x in ids if x not in ood and int(counts.get(x, 0)) < need)
    answers = sum(need if x in ood else min(int(counts.get(x, 0)), need) for x in ids)
    people = set(project.answers.annotators()["name"]) | (set(r["annotator"]) if len(r) else set())
    return RatingProgress(int(round), len(ids), len(ids) - len(missing), int(answers), need * len(ids), need,
                          tuple(sorted(people)), missing, str(project.path))


def set_raters(project: Any, raters: int) -> tuple[int, int]:
    """Change the project's quota (`ratings.raters`) in blindspots.toml; returns (old, new).

    Takes effect for every round whose S is not formed yet (the ratings in hand are kept: a lower
    quota may complete images at once, a higher one waits for more answers)."""
    if isinstance(raters, bool) or not isinstance(raters, int) or raters < 1:
        raise ValueError(f"--raters: expected an integer >= 1 (answers needed per image), got {raters!r}")
    return _set_rating_setting(project, "raters", raters)


def set_n4(project: Any, n4: int) -> tuple[int, int]:
    """Change `ratings.n4`, the size of S per round (the lowest-MOS candidates get pixel labels), in
    blindspots.toml; returns (old, new). Takes effect for every round whose S is not formed yet."""
    if isinstance(n4, bool) or not isinstance(n4, int) or n4 < 1:
        raise ValueError(f"--n4: expected an integer >= 1 (images pixel-labelled per round), got {n4!r}")
    return _set_rating_setting(project, "n4", n4)


def _set_rating_setting(project: Any, key: str, value: int) -> tuple[int, int]:
    cfg = project.config
    old = int(getattr(cfg.ratings, key))
    new_cfg = replace(cfg, ratings=replace(cfg.ratings, **{key: value}))
    save_config(new_cfg, Path(project.path) / CONFIG_FILE)
    project.config = new_cfg
    project.journal.log_event("config", {f"ratings.{key}": {"old": old, "new": value}})
    return old, value


#: events a person causes between two `blindspots round` calls, in words
_SAID = {
    "masks-import": lambda d: f"{d.get('n', '?')} masks imported ({d.get('kind', '?')}: {d.get('source', '?')})",
    "ratings-import": lambda d: f"{d.get('n', '?')} ratings imported from {d.get('path', '?')}",
    "register": lambda d: f"version {d.get('version', '?')} of {d.get('name', '?')} registered",
    "config": lambda d: "settings changed: " + ", ".join(f"{k} {v.get('old')} -> {v.get('new')}"
                                                         for k, v in d.items() if isinstance(v, dict)),
    "step-done": None,  # said by the step's own line below
}


def activity_since_last_round(project: Any) -> list[str]:
    """What happened since the last `blindspots round` ended (imports, settings, versions): one line
    each, oldest first, with the round and time. Empty before the first `round`."""
    ev = project.journal.events()
    if not len(ev):
        return []
    marks = ev.index[ev["kind"] == "round-run"]
    after = ev.loc[marks[-1] + 1:] if len(marks) else ev.iloc[0:0]
    out = []
    for r in after.itertuples(index=False):
        say = _SAID.get(r.kind)
        if say is None:
            continue
        d = json.loads(r.details) if isinstance(r.details, str) and r.details else {}
        where = "" if r.round is None or pd.isna(r.round) else f"round {int(r.round)}: "
        out.append(f"{where}{say(d)} at {r.time}")
    return out


def steps_done_since(project: Any, after_event: int) -> list[tuple[int, str]]:
    """(round, step) of the steps that finished after event id `after_event`, in order."""
    ev = project.journal.events()
    done = ev[(ev["id"] > after_event) & (ev["kind"] == "step-done")]
    return [(int(r.round), str(r.step)) for r in done.itertuples(index=False)]


def steps_ran(project: Any, after_event: int) -> list[str]:
    """'round 0: scan done', ... for the steps that finished after event id `after_event`."""
    return [f"round {i}: {step} done" for i, step in steps_done_since(project, after_event)]


def last_event_id(project: Any) -> int:
    ev = project.journal.events()
    return int(ev["id"].max()) if len(ev) else 0


def masks_line(project: Any, round: int, needed: list[str]) -> str:
    """'9 of 9 masks of S(1) ∪ T(1) in (last import: labelstudio, 2026-...)' for round `round`."""
    have = set(project.answers.masks_for_round(round)["id"])
    n_in = sum(x in have for x in needed)
    ev = project.journal.events()
    imp = ev[(ev["kind"] == "masks-import") & (ev["round"] == round)] if len(ev) else ev
    last = ""
    if len(imp):
        d = json.loads(imp["details"].iloc[-1] or "{}")
        last = f" (last import: {d.get('n', '?')} masks, {d.get('kind', '?')}, {imp['time'].iloc[-1]})"
    return f"{n_in} of {len(needed)} masks of S({round + 1}) ∪ T({round + 1}) in{last}"

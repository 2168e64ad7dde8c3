"""Step ``select``: S(i+1), the n4 lowest-MOS images (with the portfolio sampler, the n4 that
`mine.samplers.teach` picks by failure, uncertainty and novelty), and T(i+1) ⊂ M(i+1), the unbiased test set
(no out-of-domain image, at most `max_per_class` per main foreground class, none of S(1..i),
which f_t^(i) was fine-tuned on). The paper's last round forms no S."""
from __future__ import annotations

import json

import pandas as pd

from blindspots.human.ratings import Ratings
from blindspots.loop.context import LoopContext, target_column
from blindspots.loop.project import Project
from blindspots.loop.steps.base import Step
from blindspots.loop.steps.labelled import used_for_finetuning
from blindspots.loop.steps.portfolio import teach_s
from blindspots.mine.testset import build_test_set, main_foreground_class

__all__ = ["SelectStep", "used_for_finetuning"]


class SelectStep(Step):
    """S(i+1) and T(i+1), stored as candidates of kinds "S" and "T"."""

    name = "select"

    def settings(self, ctx: LoopContext) -> dict:
        c = ctx.cfg
        return {"n4": c.ratings.n4, "test_size": c.testset.size, "max_per_class": c.testset.max_per_class,
                "background": c.testset.background}

    def run(self, ctx: LoopContext, i: int, seed: int) -> dict:
        p, c = ctx.project, ctx.cfg
        m = p.answers.candidates(i, "M")
        ratings = _round_ratings(ctx, i)
        # The label plan always forms S: people label it to retrain the target in their own stack.
        last = i >= ctx.last_round() and ctx.blocker is None
        if last:
            s = pd.DataFrame({"id": pd.Series([], dtype=object), "score": [], "reason": []})
        else:
            worst = ratings.select_worst(c.ratings.n4, candidates=list(m["id"]), min_raters=1)
            if c.mining.strategy == "portfolio":  # failures the target is unsure of, not seen (mine.samplers.teach)
                chosen = teach_s(ctx, i, [str(x) for x in m["id"]], ratings.mos(), c.ratings.n4)
                worst = ratings.select_worst(len(m), candidates=list(m["id"]), min_raters=1).set_index("image_id")
                worst = worst.loc[chosen].reset_index()
            s = pd.DataFrame({"id": worst["image_id"], "score": worst["mos"],
                              "reason": [json.dumps({"mos": float(v), "n_ratings": int(k)})
                                         for v, k in zip(worst["mos"], worst["n_ratings"])]})
        table = ctx.score_table(i)
        table = table[table["id"].isin(set(m["id"]))]
        bg = [0] if c.testset.background is None else [ctx.classes.index(b) for b in c.testset.background]
        main = main_foreground_class(table, [target_column(p, i)] + [g.name for g in c.competitors], background=bg)
        t = build_test_set(m, main_class=main, out_of_domain=ratings.out_of_domain(),
                           exclude=used_for_finetuning(p, i), size=c.testset.size,
                           max_per_class=c.testset.max_per_class, seed=seed)
        p.answers.set_candidates(i, "S", s)
        p.answers.set_candidates(i, "T", t)
        return {"n_S": int(len(s)), "n_T": int(len(t)), "n_out_of_domain": len(ratings.out_of_domain()),
                "last_round": last}


def _round_ratings(ctx: LoopContext, i: int) -> Ratings:
    r = ctx.project.answers.ratings_for_round(i)
    return Ratings(zip(r["id"], r["annotator"], ["ood" if o else int(s) for s, o in zip(r["score"], r["out_of_domain"])]))


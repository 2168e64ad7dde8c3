"""Step ``mine``: the candidates M(i+1) from the score table, with a sampler from `mine.samplers.registry`.

MAD by default (Eq. 2); "madplus", "portfolio" (M from several proposers, `mine.samplers.portfolio`), or "entropy",
"margin", "bald", "powerbald", "coreset", "badge", "qbc", "surprise", "random" or "scenario" as baselines,
with MAD's budget unless `mining.n`. Margin, BALD, core-set, BADGE and the portfolio first run the round's
target once more over the pool for their columns (`mine.model_columns.acquisition`); qbc runs the target and every
competitor (`mine.samplers.qbc`). Core-set's centres are the target's features of every earlier S and T. MAD's
content constraint [p_k, q_k] comes from S0's masks (the paper) or, without S0, from the target's
predictions on the pool (`class_ranges`).
"""
from __future__ import annotations

import json
import logging
from typing import Any, Callable

import numpy as np
import pandas as pd

from blindspots.atomic import write_atomic
from blindspots.loop.context import LoopContext, target_column
from blindspots.loop.project import ProjectError
from blindspots.loop.steps.base import Step
from blindspots.loop.steps.labelled import labelled_before, used_for_finetuning
from blindspots.loop.steps.portfolio import portfolio_shares
from blindspots.mine.model_columns.names import missing_kinds
from blindspots.mine.samplers.coreset import labelled_features
from blindspots.mine.samplers.mad import class_area_ranges, class_area_ranges_from_table
from blindspots.mine.samplers.qbc import CommitteeColumns, qbc_column
from blindspots.mine.samplers.registry import make_sampler as registered_sampler
from blindspots.mine.samplers.registry import needs_committee, needs_model, sampler_settings
from blindspots.scan import schema
from blindspots.scan.extra import add_columns

# Lazy imports: the scenario clustering (torch, scikit-learn) only when used.

__all__ = ["MineStep", "labelled_before", "make_sampler", "class_ranges", "without_labelled"]

log = logging.getLogger(__name__)


class MineStep(Step):
    """M(i+1), stored as candidates of kind "M" with their reasons."""

    name = "mine"

    def settings(self, ctx: LoopContext) -> dict:
        m = ctx.cfg.mining
        return {"strategy": m.strategy, "n3": m.n3, "distance": m.distance, "quantiles": list(m.quantiles),
                "n": m.n}

    def run(self, ctx: LoopContext, i: int, seed: int) -> dict:
        _add_model_columns(ctx, i)
        full = ctx.score_table(i)
        used = labelled_before(ctx, i)
        # S ∪ S(i+1) adds nothing for an image labelled already, and a T image mined into S would leak
        table = without_labelled(full, used)
        if ctx.cfg.mining.strategy == "surprise":
            _check_surprise_columns(ctx, i, table)
        sampler = make_sampler(ctx, i, labelled_from=full)
        n = ctx.cfg.mining.n
        if n is None and ctx.cfg.mining.strategy != "mad":
            # Same budget as MAD would use, so baselines compare at equal human effort.
            n = len(make_sampler(ctx, i, "mad").select(table, seed=seed))
        sel = sampler.select(table, n, seed=seed)
        if not len(sel):
            log.warning("round %d: %s selected no candidates; the round will have empty M, S and T",
                        i, type(sampler).__name__)
        ctx.project.answers.set_candidates(i, "M", sel)
        n4 = ctx.cfg.ratings.n4
        if len(sel) and n4 >= len(sel) and i < ctx.last_round():
            log.warning("round %d: S is every candidate: n4 = %d is not less than the %d images mined, so all of "
                        "them will be pixel-labelled; to label only the lowest-rated, change it before the ratings "
                        "are in (`blindspots.loop.set_n4`, the `config --n4` command)", i, n4, len(sel))
        return {"n": int(len(sel)), "sampler": type(sampler).__name__,
                "params": {k: v for k, v in sampler.get_params().items() if k not in ("ranges", "classes")}}



def without_labelled(table: pd.DataFrame, labelled: set[str]) -> pd.DataFrame:
    """The rows of `table` that are not labelled already: by id and, with a `content_hash` column, by
    content, so an exact copy of a labelled image is left out as well (duplicates count once, as in
    `mine.samplers.base.usable_mask`)."""
    if not labelled:
        return table
    drop = table["id"].astype(str).isin(labelled)
    if schema.CONTENT_HASH in table.columns:
        h = table[schema.CONTENT_HASH]
        drop |= h.notna() & h.isin(set(h[drop].dropna()))
    return table[~drop.to_numpy(dtype=bool, na_value=False)]


def make_sampler(ctx: LoopContext, i: int, strategy: str | None = None, *,
                 labelled_from: pd.DataFrame | None = None) -> Any:
    """The configured sampler (or `strategy`) for round i's target column, from mine's one registry.

    The loop offers every setting it knows (target and competitor columns, MAD's distance, n3,
    class ranges and classes, failure scenarios, core-set's centres); each strategy takes the ones its
    constructor names (`sampler_settings`). "scenario" before two confirmed failures exist mines with MAD.
    labelled_from: the round's whole score table, labelled rows included (default: read again): the
    centres are the target's features of every image labelled before (each earlier S and T), which
    the table the sampler picks from no longer holds.
    """
    m = ctx.cfg.mining
    strategy = strategy or m.strategy
    offered: dict[str, Callable[[], Any]] = {
        "shares": lambda: portfolio_shares(ctx, i, ctx.score_table(i) if labelled_from is None else labelled_from),
        "centers": lambda: labelled_features(ctx.score_table(i) if labelled_from is None else labelled_from,
                                             sorted(labelled_before(ctx, i)), target_column(ctx.project, i)),
        "target": lambda: target_column(ctx.project, i),
        "competitors": lambda: [g.name for g in ctx.cfg.competitors],
        "distance": lambda: m.distance, "n3": lambda: m.n3,
        "ranges": lambda: class_ranges(ctx), "classes": lambda: ctx.classes,
        "labelled": lambda: sorted({str(x) for x in used_for_finetuning(ctx.project, i)}),
    }
    if strategy == "scenario":
        found = _scenarios(ctx, i)
        if found is None:
            return make_sampler(ctx, i, "mad")
        offered.update({"scenarios": lambda: found[0], "features": lambda: found[1]})
    wanted = sampler_settings(strategy)
    return registered_sampler(strategy, **{k: get() for k, get in offered.items() if k in wanted})


def _add_model_columns(ctx: LoopContext, i: int) -> None:
    """margin, bald, powerbald, coreset, badge: the target f_t^(i) runs once more over the pool for the columns
    they read (`mine.model_columns.acquisition`; kept in the scan folder, resumable)."""
    from blindspots.mine.model_columns.acquisition import add_acquisition_columns

    m, name = ctx.cfg.mining, target_column(ctx.project, i)
    if needs_committee(m.strategy):
        _add_committee_columns(ctx, i)
    missing = missing_kinds(ctx.project.scan_dir, name, needs_model(m.strategy))
    if missing:
        try:
            add_acquisition_columns(ctx.project.scan_dir, ctx.pool, ctx.segmenter(ctx.cfg.target.name, i), name,
                                    kinds=missing, mc_passes=m.mc_passes, dropout=m.dropout, progress=ctx.progress)
        except ValueError as e:  # e.g. BALD on a target without dropout layers: the setting to change
            raise ProjectError(f"mining.{'dropout' if str(e).startswith('dropout') else 'strategy'}: {e}") from None


def _add_committee_columns(ctx: LoopContext, i: int) -> None:
    """qbc: the target f_t^(i) and every competitor run over the pool once more for the committee's per-pixel
    disagreement (`mine.samplers.qbc`; the scan keeps only pairwise distances). Kept in the scan folder, resumable."""
    name = target_column(ctx.project, i)
    if qbc_column(name, "vote") in ctx.score_table(i).columns:
        return
    members = [ctx.segmenter(ctx.cfg.target.name, i), *(ctx.segmenter(g.name, 0) for g in ctx.cfg.competitors)]
    add_columns(ctx.project.scan_dir, ctx.pool, f"al_qbc__{name}", CommitteeColumns(members, name),
                progress=ctx.progress)


def _scenarios(ctx: LoopContext, i: int) -> tuple[Any, pd.DataFrame] | None:
    """(failure scenarios, per-image attributes) of the S of rounds 0..i-1; None before two failures
    exist."""
    from blindspots.scenarios.segmentation import find_scenarios
    from blindspots.scenarios.segmentation_attributes import scan_attributes

    feats = scan_attributes(ctx.project.scan_dir)
    fails = sorted({str(x) for x in used_for_finetuning(ctx.project, i)} & set(feats.index))
    if len(fails) < 2:
        return None
    return find_scenarios(feats, fails), feats


def class_ranges(ctx: LoopContext) -> np.ndarray:
    """float64 [C, 2]: [p_k, q_k] per class for MAD's content constraint (NaN rows: no range), cached
    in reports/class_ranges.json: from S0's masks (the paper), or without S0 from the target's
    (version 0) predictions on the pool (docs/loop.md)."""
    path = ctx.project.reports_dir / "class_ranges.json"
    q = list(ctx.cfg.mining.quantiles)
    source = "S0" if ctx.cfg.data.train else "pool predictions"
    if path.is_file():
        d = json.loads(path.read_text())
        # pool ranges cached before duplicates counted once are computed again
        if d.get("quantiles") == q and d.get("source", "S0") == source and \
                (source == "S0" or d.get("duplicates") == "once"):
            # JSON has no NaN: a class without a range is stored as nulls
            return np.asarray([[np.nan if v is None else v for v in r] for r in d["ranges"]], dtype=np.float64)
    if source == "S0":
        s0 = ctx.labelled_set("train")
        ranges = class_area_ranges((s0.load(i)[1] for i in s0.ids), ctx.classes.num_classes,
                                   ignore_index=ctx.classes.ignore_index, quantiles=tuple(q))
    else:
        # the rule `blindspots mine` uses: usable rows, exact duplicates once
        ranges = class_area_ranges_from_table(ctx.score_table(0), target_column(ctx.project, 0),
                                              quantiles=(q[0], q[1]), num_classes=ctx.classes.num_classes)
    text = json.dumps({"quantiles": q, "source": source, "duplicates": "once",
                       "ranges": [[None if np.isnan(v) else float(v) for v in r] for r in ranges]})
    write_atomic(path, lambda tmp: tmp.write_text(text))
    return np.asarray(ranges, dtype=np.float64)


def _check_surprise_columns(ctx: LoopContext, i: int, table: pd.DataFrame) -> None:
    """The surprise strategy ranks by columns `blindspots surprise score --scan` adds to the round's
    scan; without them, one ProjectError with the two commands (not the sampler's column list)."""
    name = target_column(ctx.project, i)
    if any(str(col).startswith("surprise_") and str(col).endswith(f"__{name}") for col in table.columns):
        return
    p = ctx.project
    spec = p.registry.model(ctx.cfg.target.name, i).spec
    raise ProjectError(
        f"mining.strategy: 'surprise' expected surprise columns of {name!r} in the project's scan, got none; "
        f"fit an estimator of {spec!r} on labelled images (`blindspots.surprise.fit_estimator`), add its "
        f"columns to the scan {str(p.scan_dir)!r} (`blindspots.open_scan(...).add_surprise(estimator, "
        f"name={name!r})`, the `surprise score --scan` command), then advance the project again")

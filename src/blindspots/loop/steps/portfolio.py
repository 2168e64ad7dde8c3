"""The portfolio sampler in a project: proposer shares per round and the rule that picks S from the rated M.

Shares (`portfolio_shares`): round 0 uses `mine.samplers.bandit.PRIOR` (surprise and qbc only where the scan has
their columns).
Before round i mines, every finished round j < i is replayed into the EXP3 shares: its M's proposers (each
reason names one), its S, and what S bought, the target's gain on that round's unbiased test set T(j+1):
the mIoU of version j+1 (fine-tuned on S) minus that of version j (the evaluate step's Table 1 value), both
on T(j+1). The replay is deterministic, so re-running a round gives the same shares. Under the label plan
(people retrain the target in their own stack, so there is no version j+1 here) no gain is measured and
the shares stay at the prior. Each round's shares,
candidates and labelled images per proposer, gain and rewards are written to reports/portfolio.json, which
the round report shows.

S (`teach_s`): `mine.samplers.teach.teach_order` over the rated M, with the target's margin (uncertainty) and pooled
features (novelty against every image labelled before) from the round's score table.
"""
from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import pandas as pd

from blindspots.atomic import write_atomic
from blindspots.loop.context import LoopContext, target_column
from blindspots.loop.maps import round_pairs
from blindspots.loop.steps.labelled import labelled_before
from blindspots.mine.samplers.bandit import PRIOR, ProposerShares, round_rewards
from blindspots.mine.samplers.qbc import qbc_column
from blindspots.mine.model_columns.names import feature_columns, margin_column
from blindspots.mine.samplers.coreset import labelled_features
from blindspots.mine.samplers.teach import teach_order
from blindspots.scan import schema

__all__ = ["PORTFOLIO_FILE", "portfolio_shares", "teach_s"]

# Lazy imports: torch (`training.replay`, only to evaluate the target on a round's test set).

PORTFOLIO_FILE = "portfolio.json"
log = logging.getLogger(__name__)


def _proposers(m: pd.DataFrame) -> dict[str, str]:
    """id -> proposer, from the portfolio reasons of a round's M."""
    out = {}
    for i, r in zip(m["id"], m["reason"]):
        try:
            out[str(i)] = str(json.loads(r).get("proposer"))
        except (TypeError, ValueError, AttributeError):
            continue
    return out


def _gain(ctx: LoopContext, j: int) -> float | None:
    """Version j+1's mIoU minus version j's on round j's test set T(j+1); None when either is missing."""
    from blindspots.training.replay import evaluate_segmenter

    p, name = ctx.project, ctx.cfg.target.name
    before = p.registry.metric(name, j, f"T{j + 1}")
    pairs = round_pairs(ctx, j, "T")
    if before is None or not np.isfinite(before) or not len(pairs) or ctx.blocker is not None:
        return None
    after = evaluate_segmenter(ctx.segmenter(name, j + 1), pairs, ctx.classes.num_classes,
                               ignore_index=ctx.classes.ignore_index)
    return float(after - before)


def portfolio_shares(ctx: LoopContext, i: int, table: pd.DataFrame) -> dict[str, float]:
    """The proposers' shares of round i's M (see the module docstring); writes reports/portfolio.json."""
    name = target_column(ctx.project, i)
    have = {"surprise": schema.surprise("mdsa", name) in table.columns,
            "qbc": qbc_column(name, "vote") in table.columns}
    prior = {p: w for p, w in PRIOR.items() if have.get(p, True)}
    bandit = ProposerShares(prior)
    rounds = []
    for j in range(i):
        prop = _proposers(ctx.project.answers.candidates(j, "M"))
        s = [prop[x] for x in map(str, ctx.project.answers.candidates(j, "S")["id"]) if x in prop]
        gain = _gain(ctx, j) if prop else None
        rewards = {} if gain is None else {p: v for p, v in round_rewards(gain, list(prop.values()), s).items()
                                           if p in bandit.weights}
        rounds.append({"round": j, "shares": bandit.shares(), "M": _counts(prop.values()), "S": _counts(s),
                       "gain_T": gain, "rewards": rewards})
        if rewards:
            bandit.update(rewards)
        else:
            log.info("portfolio: round %d gives no reward (no portfolio M, or no test-set gain to measure)", j)
    shares = bandit.shares()
    rounds.append({"round": i, "shares": shares})
    path = ctx.project.reports_dir / PORTFOLIO_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"rounds": rounds, "floor": bandit.floor, "eta": bandit.eta, "prior": prior}, indent=1)
    write_atomic(path, lambda tmp: tmp.write_text(text))
    return shares


def _counts(values: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in pd.Series(list(values), dtype=object).value_counts().items()}


def teach_s(ctx: LoopContext, i: int, m_ids: list[str], mos: pd.Series, n4: int) -> list[str]:
    """S: n4 of the rated candidates by failure, uncertainty and novelty (`mine.samplers.teach`). Candidates without a
    finite MOS (out of domain, unrated) are never picked."""

    cand = [x for x in m_ids if x in mos.index and np.isfinite(mos[x])]
    if not cand:
        return []
    full = ctx.score_table(i)
    name = target_column(ctx.project, i)
    rows = full.set_index(full["id"].astype(str)).reindex(cand)
    unsure = 1.0 - rows[margin_column(name)].to_numpy(np.float64) if margin_column(name) in rows.columns else None
    cols = feature_columns(full.columns, name)
    feats = rows[cols].to_numpy(np.float64) if cols else None
    centres = labelled_features(full, sorted(labelled_before(ctx, i)), name) if cols else None
    if feats is not None and not np.isfinite(feats).all():
        feats, centres = None, None  # an image without features: rank by failure and uncertainty only
    order, _ = teach_order(mos[cand].to_numpy(np.float64), n4, uncertainty=unsure, features=feats, centers=centres)
    return [cand[j] for j in order]

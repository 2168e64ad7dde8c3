"""The portfolio sampler ("rate broadly, label narrowly"): candidates M drawn from several proposers.

Rating an image costs a small part of drawing its mask, so M can be broad: each proposer fills its share of
M with its own best picks,

- "mad": the paper's MAD competition (`mine.samplers.mad`), failures where the target and a competitor disagree;
- "margin": the target's least sure images (`al_margin__T`; the scan's mean entropy when the margin
  column is absent);
- "coreset": k-center greedy on the target's pooled features, centred on everything labelled (`centers`);
- "shared": MAD+'s shared doubt (`mine.samplers.madplus`), images where every model agrees but all are unsure;
- "surprise": the target's surprise adequacy, where the scan has it;
- "qbc": query by committee (`mine.samplers.qbc`), the committee's vote entropy, where the table has its column
  (`al_qbcvote__T`).

A proposer whose columns the table lacks is left out and its share spread over the others (the reason
records the shares used). The shares come from `mine.samplers.bandit.ProposerShares` (EXP3 over proposers, adapted
to what each one's picks bought; `PRIOR` before the first round). People rate all of M; which rated images
get masks is `mine.samplers.teach` ("teach" or the paper's "lowest_mos").

Public API: `PortfolioSampler(target=None, competitors=None, *, shares=None, centers=None, distance="pixel",
n3=25, ranges=None, classes=None)`, `.select(table, n=None, *, seed=0)` -> DataFrame `id, score, reason,
proposer` in pick order (each proposer's picks interleaved in proportion, so a truncated list keeps the mix);
each reason is {"strategy": "portfolio", "proposer": p, "share": s, "pick": <the proposer's own reason>}.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from blindspots.data.classes import Classes
from blindspots.mine.samplers.bandit import PRIOR, PROPOSERS, allocate
from blindspots.mine.samplers.base import Sampler, check_n, check_table, dumps_reason, ids_at, result_frame
from blindspots.mine.model_columns.names import column_models, margin_column
from blindspots.mine.samplers.coreset import CoreSetSampler
from blindspots.mine.samplers.entropy import EntropySampler
from blindspots.mine.samplers.mad import MADSampler
from blindspots.mine.samplers.madplus import MADPlusSampler
from blindspots.mine.samplers.margin import MarginSampler
from blindspots.mine.samplers.qbc import QBCSampler, qbc_column
from blindspots.mine.samplers.surprise import SurpriseSampler
from blindspots.scan import schema

log = logging.getLogger(__name__)


class PortfolioSampler(Sampler):
    """M from several proposers in proportion to `shares` (see the module docstring).

    target, competitors, distance, n3, ranges, classes: MAD's settings (also MAD+'s shared doubt's).
    shares: proposer -> share of M (any positive numbers; None: `mine.samplers.bandit.PRIOR`, normalised). A
        proposer left out of `shares` proposes nothing.
    centers: float [L, D] pooled features of every labelled image (core-set's centres), or None.
    """

    def __init__(self, target: str | None = None, competitors: Sequence[str] | None = None, *,
                 shares: Mapping[str, float] | None = None, centers: np.ndarray | None = None,
                 distance: str = "pixel", n3: int = 25, ranges: Any = None, classes: Classes | None = None) -> None:
        self.target = target
        self.competitors = None if competitors is None else list(competitors)
        self.shares = None if shares is None else dict(shares)
        self.centers = centers
        self.distance, self.n3, self.ranges, self.classes = distance, n3, ranges, classes

    def _check_shares(self) -> dict[str, float]:
        shares = dict(PRIOR) if self.shares is None else self.shares
        bad = sorted(set(shares) - set(PROPOSERS))
        if bad:
            raise ValueError(f"shares: expected proposers among {list(PROPOSERS)}, got {bad}")
        if any(not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0 for v in shares.values()) or \
                sum(shares.values()) <= 0:
            raise ValueError(f"shares: expected non-negative numbers with a positive sum, got {shares}")
        return {k: float(v) for k, v in shares.items() if v > 0}

    def _mad(self) -> MADSampler:
        return MADSampler(self.target, self.competitors, distance=self.distance, n3=self.n3, ranges=self.ranges,
                          classes=self.classes)

    def _ranked(self, proposer: str, table: pd.DataFrame, target: str, seed: int) -> pd.DataFrame | None:
        """The proposer's whole ranking of the table (id, score, reason), or None when the table lacks its
        columns."""
        if proposer == "mad":
            return self._mad().select(table, None, seed=seed)
        if proposer == "margin":
            if margin_column(target) in table.columns:
                return MarginSampler(target).select(table, None, seed=seed)
            return EntropySampler(target).select(table, None, seed=seed) if schema.entropy(target) in table.columns \
                else None
        if proposer == "coreset":
            if target not in column_models(table.columns, "feat"):
                return None
            return CoreSetSampler(target, centers=self.centers).select(table, None, seed=seed)
        if proposer == "shared":
            mp = MADPlusSampler(self.target, self.competitors, shared=0.5, distance=self.distance, n3=self.n3,
                                ranges=self.ranges, classes=self.classes)
            kind, tgt, comps, _, _ = mp._resolve(table)
            rows, score, info = mp._shared_candidates(table, kind, tgt, comps, set())
            order = np.lexsort((rows, -score))
            reasons = [dumps_reason({"strategy": "madplus", "part": "shared", "target": tgt,
                                     **{k: round(float(v[p]), 6) for k, v in info.items()},
                                     "shared_score": round(float(score[p]), 6)}) for p in order]
            return result_frame(ids_at(table, rows[order]), score[order], reasons)
        if proposer == "surprise":
            if schema.surprise("mdsa", target) not in table.columns:
                return None
            return SurpriseSampler(target).select(table, None, seed=seed)
        if proposer == "qbc":
            if qbc_column(target, "vote") not in table.columns:
                return None
            return QBCSampler(target).select(table, None, seed=seed)
        raise ValueError(f"proposer: expected one of {list(PROPOSERS)}, got {proposer!r}")

    def select(self, table: pd.DataFrame, n: int | None = None, *, seed: int = 0) -> pd.DataFrame:
        """n candidates (None: as many as MAD's M) split over the proposers by share; a proposer that runs
        out of images hands its remaining places to the others (in order of share)."""
        check_table(table, [])
        n = check_n(n)
        shares = self._check_shares()
        target = self.target if self.target is not None else self._mad()._resolve(table)[1]
        ranked: dict[str, pd.DataFrame] = {}
        for p in shares:
            r = self._ranked(p, table, target, seed)
            if r is None:
                log.info("portfolio: proposer %r left out (the table has none of its columns)", p)
            else:
                ranked[p] = r
        if not ranked:
            raise ValueError(f"table: expected the columns of at least one proposer of {list(shares)}, got none")
        if n is None:
            n = len(ranked["mad"]) if "mad" in ranked else max(len(r) for r in ranked.values())
        used = {p: shares[p] for p in ranked}
        total = sum(used.values())
        used = {p: v / total for p, v in used.items()}
        want = allocate(used, n)
        taken: set[str] = set()
        picks: dict[str, list[int]] = {p: [] for p in ranked}  # positions in ranked[p]
        pos = {p: 0 for p in ranked}

        def fill(p: str, k: int) -> None:
            ids = ranked[p]["id"].to_numpy(dtype=object)
            while len(picks[p]) < k and pos[p] < len(ids):
                if ids[pos[p]] not in taken:
                    taken.add(ids[pos[p]])
                    picks[p].append(pos[p])
                pos[p] += 1

        for p in sorted(ranked, key=lambda q: -used[q]):  # larger shares choose first among shared images
            fill(p, want[p])
        short = n - len(taken)
        for p in sorted(ranked, key=lambda q: -used[q]):  # someone ran out: the others fill in
            if short <= 0:
                break
            before = len(picks[p])
            fill(p, before + short)
            short -= len(picks[p]) - before
        rows: list[tuple[float, int, str, int]] = []  # (interleaving key, proposer order, proposer, position)
        for j, p in enumerate(ranked):
            k = len(picks[p])
            rows += [((t + 0.5) / k, j, p, q) for t, q in enumerate(picks[p])]
        rows.sort()
        ids = [ranked[p]["id"].iloc[q] for _, _, p, q in rows]
        scores = np.array([float(ranked[p]["score"].iloc[q]) for _, _, p, q in rows])
        reasons = [dumps_reason({"strategy": "portfolio", "proposer": p, "share": round(used[p], 4),
                                 "pick": json.loads(ranked[p]["reason"].iloc[q])}) for _, _, p, q in rows]
        return result_frame(ids, scores, reasons, proposer=np.array([p for _, _, p, _ in rows], dtype=object))

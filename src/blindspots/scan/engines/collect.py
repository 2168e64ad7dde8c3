"""The shard collector both engines feed: per-batch results into shard rows, finished shards
written, and the scan stopped when a model fails on every image it is given.

The local engine feeds it on its main thread and hands the writes to its writer thread (`run`);
the Ray engine feeds it on the driver as the actors' results come back and writes there (`run`
calls the job at once). Either way a shard is written only when the engine says it has ended,
and shards are held back while some model has failed and never succeeded yet: such a model stops
the scan (`Health.check`: a ValueError naming it) before any shard with its failures is on disk.
"""
from __future__ import annotations

from typing import Callable, Mapping

from blindspots.scan.engines.forward import BatchResult, Health
from blindspots.scan.engines.job import ScanJob
from blindspots.scan.engines.pipeline import Errors
from blindspots.scan.engines.rows import ShardRows, add_batch, add_errors, finish_shard
from blindspots.scan.plan import ShardPlan

Job = Callable[[], None]


def call(job: Job) -> None:
    """Run a write job at once (the Ray driver, the inline local engine)."""
    job()


class ShardCollector:
    """Fold batches and error rows into shard rows; write each shard once it has ended.

    job: the scan; plans: the shards being run; run: how a write job runs (a plain call, or the
    local engine's writer-thread queue: then shard rows are touched by that thread only, in the
    order the jobs were given)."""

    def __init__(self, job: ScanJob, plans: list[ShardPlan], run: Callable[[Job], None] = call) -> None:
        self.job, self.run = job, run
        self.plans = {p.k: p for p in plans}
        self.rows: dict[int, ShardRows] = {}
        self.health = Health()
        self.planned = {m: sum(len(p.ids) for p in plans if m in p.run) for m in job.models}
        self.deferred: list[Job] = []  # shard writes held back while a model has only failed

    def _shard(self, k: int) -> ShardRows:
        return self.rows.setdefault(k, ShardRows())

    def errors(self, msg: Errors) -> None:
        """Error rows for the ids of a shard that could not be decoded."""
        shard = self._shard(msg.k)
        self.run(lambda: add_errors(msg, shard))

    def batch(self, k: int, ok: Mapping[str, int], errors: Mapping[str, Mapping[str, str]],
              result: Callable[[], BatchResult]) -> None:
        """One batch of shard k: ok = model -> images it produced output for, errors = model -> id ->
        message (counted now), result: the batch's statistics (computed inside the write job)."""
        plan, shard = self.plans[k], self._shard(k)
        self.health.add(plan.run, ok, errors)
        self.run(lambda: self._add(result, plan, shard))

    def _add(self, result: Callable[[], BatchResult], plan: ShardPlan, shard: ShardRows) -> None:
        stages = self.job.stages
        with stages("writer: statistics"):
            res = result()
        with stages("writer: rows and maps"):
            add_batch(res, plan, shard, self.job)

    def end_shard(self, k: int) -> None:
        """Every image of shard k is in: write it, or hold it back while a model is undecided."""
        self.health.check(self.planned, final=False)
        plan, shard = self.plans[k], self.rows.pop(k, None) or ShardRows()
        self.deferred.append(lambda: self._finish(plan, shard))
        if not self.health.undecided():
            self._flush()

    def _finish(self, plan: ShardPlan, shard: ShardRows) -> None:
        with self.job.stages("writer: shard files after their maps"):
            finish_shard(plan, shard, self.job)

    def close(self) -> None:
        """The scan's end: a model that failed on every image stops it here; else the held shards go."""
        self.health.check(self.planned, final=True)
        self._flush()

    def _flush(self) -> None:
        for write in self.deferred:
            self.run(write)
        self.deferred.clear()

"""Where a local scan's threads spend their time: seconds per stage, summed over the scan, logged at the end.

The local engine's threads (reader, decode threads, main, writer, map threads) wait on each other; when
a scan runs below its model's speed, the stage that the others wait for is the one to fix. Each thread
adds the time it spends in a named stage (`with stages("main: forward"): ...`); `summary()` lists
them. Logged at DEBUG by `engines.local` (`benchmarks/gpu_all.py` prints it).
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator


class StageTimes:
    """Seconds per stage name, added to from any thread."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self._seconds[name] += elapsed

    def seconds(self) -> dict[str, float]:
        with self._lock:
            return dict(self._seconds)

    def summary(self) -> str:
        """'stage 1.23 s, ...' in the order the stages were first timed."""
        return ", ".join(f"{name} {s:.2f} s" for name, s in self.seconds().items())


class _NoStages:
    """A StageTimes that times nothing (the default: no clock reads on the scan's hot paths)."""

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        yield


NO_STAGES = _NoStages()

"""Thread counts around public surprise calls (surprise._threads, the fused kernels): nothing changed after."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pytest
import torch

from blindspots.surprise import MDSA, _threads
from blindspots.surprise._threads import run_split
from blindspots.surprise.fused import fused_argmax_mdsa_map, fused_mdsa_map
from test_surprise_fused import fitted


def counts() -> tuple[int, int, int]:
    """(torch's count on this thread, torch's count a thread started now begins with, numba's count here)."""
    fresh = []
    t = threading.Thread(target=lambda: fresh.append(torch.get_num_threads()))
    t.start()
    t.join()
    return torch.get_num_threads(), fresh[0], numba.get_num_threads()


@pytest.fixture
def two_threads():
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def test_public_calls_leave_thread_counts_as_they_were(two_threads):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 8)).astype(np.float32)
    y = np.repeat([0, 1], 200)
    est = MDSA().fit(x, y)
    big = rng.normal(size=(20_000, 8)).astype(np.float32)  # split over two worker threads (run_split)
    before = counts()
    assert before[:2] == (2, 2)
    est.score(big, np.zeros(len(big), dtype=np.int64))
    assert counts() == before
    seg = fitted()
    feats = torch.from_numpy(rng.normal(size=(3, 6, 5, 7)).astype(np.float32))
    scores = torch.from_numpy(rng.normal(size=(3, 5, 23, 30)).astype(np.float32))
    for n in (3, 1):  # one image: numba's prange would run on one thread
        _, pred = fused_argmax_mdsa_map(seg, feats[:n], scores[:n])
        fused_mdsa_map(seg, feats[:n], pred)
        assert counts() == before, n


FIRST_USE = """
import numpy as np, torch
torch.set_num_threads(1)
from blindspots.surprise import MDSA
from blindspots.surprise.fused import fused_argmax_mdsa_map
rng = np.random.default_rng(0)
est = MDSA().fit(rng.normal(size=(400, 6)).astype(np.float32), np.repeat([0, 1], 200))
feats = torch.from_numpy(rng.normal(size=(2, 6, 4, 4)).astype(np.float32))
scores = torch.from_numpy(rng.normal(size=(2, 2, 16, 16)).astype(np.float32))
fused_argmax_mdsa_map(est, feats, scores)
print(torch.get_num_threads())
"""


def test_numba_first_parallel_use_leaves_torch_count():
    """numba's first parallel use in a process starts its threading layer, which set the calling thread's
    OpenMP count (torch's) to numba's: in a fresh process, torch at one thread stays at one."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", FIRST_USE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "1"


def test_split_covers_rows_and_keeps_the_caller_count(two_threads):
    seen = np.zeros(1000, dtype=np.int64)
    workers = set()

    def fill(lo: int, hi: int) -> None:
        seen[lo:hi] += 1
        workers.add((threading.current_thread().name, torch.get_num_threads()))

    run_split(1000, 2, fill, align=64)
    np.testing.assert_array_equal(seen, 1)
    assert {c for _, c in workers} == {1}, workers  # each part ran torch at one thread
    assert torch.get_num_threads() == 2


@pytest.fixture
def own_pool(monkeypatch):
    """A pool of the test's own, shut down after it; the shared one is left as it was for other tests."""
    monkeypatch.setattr(_threads, "_POOL", None)
    monkeypatch.setattr(_threads, "_POOL_SIZE", 0)
    yield
    if _threads._POOL is not None:
        _threads._POOL.shutdown(wait=True)


def test_growing_pool_leaks_no_threads_and_races_no_shutdown(two_threads, own_pool):
    """Callers on several threads asking for more and more parts: every call finishes (none submits to a
    pool another one shut down), and the replaced pools' threads exit."""
    errors = []
    earlier = set(threading.enumerate())

    def caller(seed: int) -> None:
        try:
            for parts in range(2, 7):
                out = np.zeros(600)
                run_split(600, parts + seed % 2, lambda lo, hi: out.__setitem__(slice(lo, hi), 1.0))
                assert out.all()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with ThreadPoolExecutor(4) as callers:  # callers of our own, apart from the workers counted below
        list(callers.map(caller, range(4)))
    assert not errors
    deadline = time.monotonic() + 30  # replaced pools' idle threads exit once woken; give them time
    while time.monotonic() < deadline:
        alive = [t for t in set(threading.enumerate()) - earlier if t.name.startswith("blindspots-surprise")]
        if len(alive) <= 7:
            break
        time.sleep(0.05)
    assert len(alive) <= 7, [t.name for t in alive]  # the largest pool: 7 workers

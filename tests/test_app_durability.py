"""`kill -9` of the server mid-burst loses no acknowledged answer: 20 raters send a few
hundred ratings to a real `blindspots serve` on 127.0.0.1; the server process gets SIGKILL once
150 are acknowledged, the rest in flight. Every acknowledged answer is in the store with its
score, SQLite's integrity check is "ok", and the app opened on the store again serves them. The trial is the one
of `benchmarks/app_load.py --kills` (its functions, run small)."""
from __future__ import annotations

import importlib.util
import signal
import sys
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from blindspots.app import create_app
from blindspots.app.services import make_sample_project

torch.set_num_threads(1)
RATERS, PER, KILL_AFTER = 20, 20, 150
BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "app_load.py"


def load_bench():  # noqa: ANN201 - the benchmark module
    spec = importlib.util.spec_from_file_location("app_load_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up while being defined
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("durability") / "sample"
    make_sample_project(root, n_pool=PER + 6, size=16, n_candidates=PER, vote_set=False, review_set=False)
    return root


def test_kill_9_mid_burst_loses_no_acknowledged_answer(sample: Path, tmp_path: Path) -> None:
    bench = load_bench()
    project = sample / "project"
    from blindspots.loop.project import Project

    ids = list(Project.open(project).answers.candidates(0, "M")["id"])
    names = [f"rater{k:02d}" for k in range(RATERS)]
    answers = bench.plan(ids, names, PER, seed=1)
    tokens = {n: f"durability-token-{n}" for n in names}
    bench.add_annotators(project, tokens)
    port = bench.free_port()
    server = bench.start_server(project, port, log=tmp_path / "server.log")
    try:
        kill = bench.kill_mid_burst(server, port, tokens, answers, 0, KILL_AFTER)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)
    assert server.returncode == -signal.SIGKILL
    assert kill.killed_after_s is not None, "the burst ended before the kill: nothing was in flight"
    assert KILL_AFTER <= len(kill.acked) < kill.sent == RATERS * PER
    assert bench.check_acked(project, kill.acked, 0) == (0, 0)  # (lost, changed)
    assert bench.integrity(project) == "ok"
    # the store opens after the crash and the app serves what was acknowledged (a second server
    # process would show the same; `app_load.py --kills` times real restarts)
    with TestClient(create_app(project)) as c:
        name = max(names, key=lambda n: sum(k[0] == n for k in kill.acked))
        q = c.get("/api/ratings/queue", headers={"Authorization": f"Bearer {tokens[name]}"}).json()
    mine = {i: s for (n, i), s in kill.acked.items() if n == name}
    served = {it["id"]: it["score"] for it in q["items"] if it["id"] in mine}
    assert served == mine and q["done"] >= len(mine)

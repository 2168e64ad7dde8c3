"""Group commit of ratings: every submitted answer is committed once before `submit` returns;
a bad row fails alone."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from blindspots.app.batching import GroupWriter
from blindspots.loop.project import Project

from app_project_helpers import minimal_project


@pytest.fixture()
def project(tmp_path: Path) -> Project:
    return minimal_project(tmp_path)


def test_concurrent_submits_are_all_committed_once(project: Project) -> None:
    w = GroupWriter(project, threading.Lock(), max_batch=16)
    errors: list = []

    def rater(k: int) -> None:
        try:
            for j in range(30):
                w.submit((0, f"img_{j:03d}.png", f"r{k}", 1 + (j + k) % 5))
                if j % 7 == 0:  # a repeated answer replaces, never duplicates
                    w.submit((0, f"img_{j:03d}.png", f"r{k}", 1 + (j + k) % 5))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=rater, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    assert not errors
    rows = project.store.db.execute("SELECT annotator, image_id, score FROM ratings").fetchall()
    assert sorted(rows) == sorted((f"r{k}", f"img_{j:03d}.png", 1 + (j + k) % 5) for k in range(8) for j in range(30))
    assert 1 <= w.batches <= 8 * 35


def test_a_bad_row_fails_alone(project: Project) -> None:
    lock = threading.Lock()
    w = GroupWriter(project, lock)
    results: dict = {}
    gate = threading.Event()

    def send(name: str, score: object) -> None:
        gate.wait()
        try:
            w.submit((0, "a.png", name, score))
            results[name] = "ok"
        except ValueError as e:
            results[name] = str(e)

    with lock:  # hold the writer so the rows queue up into one batch
        w._ensure_started()
        threads = [threading.Thread(target=send, args=(n, s)) for n, s in [("good1", 3), ("bad", 7), ("good2", "ood")]]
        for t in threads:
            t.start()
        gate.set()
        import time

        time.sleep(0.3)
    for t in threads:
        t.join()
    w.close()
    assert results["good1"] == "ok" and results["good2"] == "ok" and "score" in results["bad"]
    assert sorted(project.store.db.execute("SELECT annotator FROM ratings").fetchall()) == [("good1",), ("good2",)]
    with pytest.raises(ValueError, match="max_batch"):
        GroupWriter(project, lock, max_batch=0)


def test_async_commit_and_a_withdrawn_row(project: Project) -> None:
    import asyncio

    lock = threading.Lock()
    w = GroupWriter(project, lock)
    w.start()
    asyncio.run(w.commit((0, "a.png", "alice", 4)))
    with pytest.raises(ValueError, match="score"):
        asyncio.run(w.commit((0, "a.png", "bob", 9)))
    with lock:  # the writer takes b.png and waits on the lock: the next rows stay queued
        w.enqueue((0, "b.png", "alice", 1))
        import time

        time.sleep(0.2)
        queued = w.enqueue((0, "c.png", "alice", 2))
        assert queued.cancel()  # its request went away before the commit: the row is withdrawn
        kept = w.enqueue((0, "d.png", "alice", 3))
    kept.result(timeout=10)
    w.close()
    assert sorted(project.store.db.execute("SELECT image_id, score FROM ratings").fetchall()) == \
        [("a.png", 4), ("b.png", 1), ("d.png", 3)]

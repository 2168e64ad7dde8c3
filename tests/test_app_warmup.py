"""The warm-up in the app's lifespan (`create_app(warm_up=True)`, as `blindspots serve` builds it):
anonymous requests through every router before the first real one (nothing written), the group
writer started, the start-up heap frozen for the garbage collector and unfrozen at shutdown."""
from __future__ import annotations

import gc
from pathlib import Path

from fastapi.testclient import TestClient

from blindspots.app import create_app

from app_project_helpers import minimal_project


def test_lifespan_warms_without_writing(tmp_path: Path) -> None:
    project = minimal_project(tmp_path)
    project.answers.add_annotator("alice", "alice-token-123")
    app = create_app(project.path, warm_up=True)
    try:
        with TestClient(app) as c:  # entering runs the lifespan's start-up
            assert gc.get_freeze_count() > 0
            assert app.state.writer._thread is not None and app.state.writer._thread.is_alive()
            assert project.store.db.execute("SELECT COUNT(*) FROM ratings").fetchone()[0] == 0
            assert project.store.db.execute("SELECT COUNT(*) FROM app_sessions").fetchone()[0] == 0
            r = c.get("/api/me", headers={"Authorization": "Bearer alice-token-123"})  # still serves as before
            assert r.status_code == 200 and r.json()["name"] == "alice"
        assert gc.get_freeze_count() == 0 and app.state.writer._thread is None  # shutdown undid both
    finally:
        gc.unfreeze()


def test_no_warm_up_unless_asked(tmp_path: Path) -> None:
    app = create_app(minimal_project(tmp_path).path)
    with TestClient(app):
        assert gc.get_freeze_count() == 0 and app.state.writer._thread is None

"""`app.warmup.prepare`: anonymous requests through every router (nothing written), the group
writer started, the start-up heap frozen for the garbage collector."""
from __future__ import annotations

import gc
from pathlib import Path

from fastapi.testclient import TestClient

from blindspots.app import create_app
from blindspots.app.warmup import prepare

from app_project_helpers import minimal_project


def test_prepare_warms_without_writing(tmp_path: Path) -> None:
    project = minimal_project(tmp_path)
    project.add_annotator("alice", "alice-token-123")
    app = create_app(project.path)
    try:
        prepare(app)
        assert gc.get_freeze_count() > 0
        assert app.state.writer._thread is not None and app.state.writer._thread.is_alive()
    finally:
        gc.unfreeze()
    assert project.db.execute("SELECT COUNT(*) FROM ratings").fetchone()[0] == 0
    assert project.db.execute("SELECT COUNT(*) FROM app_sessions").fetchone()[0] == 0
    with TestClient(app) as c:  # still serves as before
        r = c.get("/api/me", headers={"Authorization": "Bearer alice-token-123"})
        assert r.status_code == 200 and r.json()["name"] == "alice"

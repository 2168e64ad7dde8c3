"""A webhook receiver, the alternative to polling: Label Studio posts an event when an annotation is
created, updated or deleted (or tasks are deleted) in one of the project's Label Studio projects, and
the receiver pulls that project (`pull`), a second after the last event (annotations are committed by
then, and a burst of events gives one pull). A pull that fails (bad annotation, server gone) is logged
and kept in /health; the next event tries again, and `blindspots labelstudio pull` says the same.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from blindspots.integrations.labelstudio.connection import load_connection, save_connection
from blindspots.integrations.labelstudio.pull import pull

# Lazy imports: fastapi, pandas, pyarrow.parquet (the Label Studio commands start without them).

log = logging.getLogger(__name__)


def register_webhooks(project_path: Path, url: str) -> list[int]:
    """Make Label Studio post both projects' annotation events to `url` (once); returns their ids."""
    conn = load_connection(project_path)
    client = conn.client()
    ids = []
    for kind in ("masks", "ratings"):
        pid = conn.ls_project(kind)
        have = [h for h in client.webhooks(pid) if h.get("url") == url]
        ids.append(int(have[0]["id"]) if have else int(client.add_webhook(pid, url)["id"]))
    conn.webhook_url = url
    save_connection(project_path, conn)
    return ids


class _Puller:
    """Pulls a kind once events stop arriving for `delay` seconds (one worker thread per kind)."""

    def __init__(self, project_path: Path, *, ignore_other: bool, delay: float) -> None:
        self.path, self.ignore_other, self.delay = Path(project_path), ignore_other, delay
        self.lock = threading.Lock()
        self.due: dict[str, float] = {}
        self.running: set[str] = set()
        self.state: dict[str, Any] = {"pulls": 0, "last": None, "error": None}

    def poke(self, kind: str) -> None:
        with self.lock:
            self.due[kind] = time.monotonic() + self.delay
            if kind in self.running:
                return
            self.running.add(kind)
        threading.Thread(target=self._work, args=(kind,), daemon=True).start()

    def _work(self, kind: str) -> None:
        from blindspots.loop.project import Project

        while True:
            with self.lock:
                wait = self.due[kind] - time.monotonic()
                if wait <= 0:
                    del self.due[kind]
            if wait > 0:
                time.sleep(wait)
                continue
            try:
                report = pull(Project.open(self.path), kind=kind, ignore_other=self.ignore_other)
                self.state.update(pulls=self.state["pulls"] + 1, last=report.lines(), error=None)
                log.info("webhook pull (%s): %s", kind, "; ".join(report.lines()))
            except Exception as e:  # noqa: BLE001 - reported in /health and the log; the next event retries
                self.state["error"] = f"{kind}: {e}"
                log.warning("webhook pull (%s) failed: %s", kind, e)
            with self.lock:
                if kind not in self.due:
                    self.running.discard(kind)
                    return


def create_webhook_app(project_path: Path, *, ignore_other: bool = False, delay: float = 1.0) -> Any:
    """FastAPI app: POST /webhook (Label Studio's events), GET /health (pulls so far, last result, last error)."""
    from fastapi import Body, FastAPI

    puller = _Puller(project_path, ignore_other=ignore_other, delay=delay)
    app = FastAPI(title="blindspots Label Studio webhook receiver")

    @app.post("/webhook")
    def webhook(body: dict = Body(default={})) -> dict:
        project = body.get("project")
        pid = project.get("id") if isinstance(project, dict) else project
        conn = load_connection(project_path)
        kind = {conn.masks_project: "masks", conn.ratings_project: "ratings"}.get(pid)
        if kind is None:
            return {"status": "ignored", "reason": f"not a project of {project_path.name}: {pid}"}
        puller.poke(kind)
        return {"status": "queued", "kind": kind}

    @app.get("/health")
    def health() -> dict:
        return {"status": "UP", **puller.state}

    return app

"""The web app's own tables in the project store (same SQLite file, WAL): sessions, attached
vote and review sets, and fixed masks of confirmed label issues.

The loop's tables (annotators, ratings, masks, votes, reviews) belong to
`blindspots.loop.project.Project`; answers go through its methods. The app's own tables are
created on first use (`Store.create_app_schema`, `CREATE TABLE IF NOT EXISTS`), so an old
project gains them; their SQL lives in `blindspots.loop.queries.AppTables` too — this module
runs none.

Tables::

    app_sessions  (id_hash PK, annotator, csrf, created, expires)   cookie sessions; the
                  session id is stored hashed like tokens, the CSRF token is per session
    app_sets      (kind, name, path, meta, created; PK (kind, name)) attached vote sets
                  (kind "vote": a `scenarios.export_review` folder) and label-issue review
                  sets (kind "review": a `blindspots label-issues` output folder + images,
                  masks and predicted masks)
    app_fixes     (set, image_id, path, annotator, time; PK (set, image_id)) corrected masks of
                  images with a confirmed label error

and an index on the loop's `ratings (round, annotator)` so a rater's progress is a seek.

Writes from the app's request threads queue on `AppStore.write_lock` before they open their
transaction: SQLite takes one writer at a time, and threads that wait inside SQLite's busy
handler sleep in growing steps, which turns 20 concurrent raters into long latency tails.
"""
from __future__ import annotations

import datetime as _dt
import re
import secrets
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from blindspots.atomic import write_atomic
from blindspots.ids import artifact_name, check_image_id
from blindspots.loop.project import Project, hash_token

SESSION_HOURS = 12
SET_KINDS = ("vote", "review")


def _utc(hours: float = 0.0) -> str:
    t = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=hours)
    return t.isoformat(timespec="milliseconds")


def check_set_name(name: str) -> str:
    """A set name: 1-64 characters of [A-Za-z0-9_-] (it appears in URLs and file names)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        raise ValueError(f"name: expected 1-64 characters of letters, digits, '_' or '-', got {name!r}")
    return name


class AppStore:
    """The app's tables beside a `Project` (one per app; thread-safe through the project's
    per-thread connections)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.write_lock = threading.Lock()
        self.project.create_app_schema()

    # ---- sessions --------------------------------------------------------------------------
    def create_session(self, annotator: str, *, hours: float = SESSION_HOURS) -> tuple[str, str]:
        """A new cookie session for `annotator`: returns (session id, CSRF token). Only the
        SHA-256 of the session id is stored."""
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        with self.write_lock:
            self.project.add_session(hash_token(sid), annotator, csrf, _utc(hours))
        return sid, csrf

    def session(self, sid: str) -> dict | None:
        """{name, role, csrf} of a live session (its annotator still registered), or None."""
        try:
            h = hash_token(sid)
        except ValueError:
            return None
        return self.project.live_session(h, _utc())

    def end_session(self, sid: str) -> None:
        try:
            h = hash_token(sid)
        except ValueError:
            return
        with self.write_lock:
            self.project.delete_sessions(id_hash=h)

    def end_sessions_of(self, annotator: str) -> None:
        with self.write_lock:
            self.project.delete_sessions(annotator=annotator)

    # ---- ratings: undo ----------------------------------------------------------------------
    def delete_rating(self, round: int, image_id: str, annotator: str) -> bool:
        """Withdraw one annotator's rating (the rate page's undo). True if there was one."""
        with self.write_lock:
            return self.project.delete_rating(round, image_id, annotator)

    # ---- attached sets ----------------------------------------------------------------------
    def attach_set(self, kind: str, name: str, path: str | Path, meta: dict | None = None) -> None:
        if kind not in SET_KINDS:
            raise ValueError(f"kind: expected one of {list(SET_KINDS)}, got {kind!r}")
        check_set_name(name)
        p = Path(path).resolve()
        if not p.is_dir():
            raise ValueError(f"path: expected an existing folder, got {str(path)!r}")
        with self.write_lock:
            self.project.put_set(kind, name, str(p), meta or {})

    def detach_set(self, kind: str, name: str) -> bool:
        with self.write_lock:
            return self.project.delete_set(kind, name)

    def sets(self, kind: str) -> list[dict]:
        """[{name, path (Path), meta}] of one kind, by name."""
        return self.project.app_sets(kind)

    # ---- fixed masks of confirmed label issues ----------------------------------------------
    def fix_path(self, set_name: str, image_id: str) -> Path:
        return self.project.path / "masks" / "fixes" / check_set_name(set_name) / artifact_name(check_image_id(image_id))

    def add_fix(self, set_name: str, image_id: str, mask: np.ndarray, annotator: str | None) -> Path:
        """Store a corrected mask (uint8 [H, W]) as an index PNG; written atomically, then committed."""
        path = self.fix_path(set_name, image_id)
        image = Image.fromarray(np.asarray(mask, dtype=np.uint8), mode="L")
        write_atomic(path, lambda t: image.save(t, format="PNG"), fsync=True)
        rel = path.relative_to(self.project.path).as_posix()
        with self.write_lock:
            self.project.put_fix(set_name, image_id, rel, annotator)
        return path

    def fixes(self, set_name: str | None = None) -> list[dict]:
        return self.project.app_fixes(set_name)

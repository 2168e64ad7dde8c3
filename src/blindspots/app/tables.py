"""The web app's own tables in the project store (same SQLite file, WAL): sessions, attached
vote and review sets, and fixed masks of confirmed label issues.

The loop's tables (annotators, ratings, masks, votes, reviews) belong to
`blindspots.loop.project.Project`; answers go through `project.answers`. The app's own tables are
created on first use (`AppTables.create_schema`, `CREATE TABLE IF NOT EXISTS`), so an old
project gains them; their SQL is `AppTables`, over the project's `Store` (its connections and
transactions), and `AppStore` is what the app's routers call.

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
import json
import re
import secrets
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from blindspots.atomic import write_atomic
from blindspots.ids import artifact_name, check_image_id
from blindspots.loop.project import Project, hash_token
from blindspots.loop.store import StorePart, now

# The web app's tables (sessions, attached vote/review sets, fixed masks), created on first use by
# `AppTables.create_schema`, so projects made before the app gain them when it opens them.
APP_SCHEMA = """
CREATE TABLE IF NOT EXISTS app_sessions (
    id_hash TEXT PRIMARY KEY, annotator TEXT NOT NULL, csrf TEXT NOT NULL, created TEXT NOT NULL,
    expires TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS app_sets (
    kind TEXT NOT NULL, name TEXT NOT NULL, path TEXT NOT NULL, meta TEXT NOT NULL, created TEXT NOT NULL,
    PRIMARY KEY (kind, name));
CREATE TABLE IF NOT EXISTS app_fixes (
    "set" TEXT NOT NULL, image_id TEXT NOT NULL, path TEXT NOT NULL, annotator TEXT, time TEXT NOT NULL,
    PRIMARY KEY ("set", image_id));
CREATE INDEX IF NOT EXISTS app_ratings_by_annotator ON ratings (round, annotator);
"""

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


class AppTables(StorePart):
    """The SQL of the web app's own tables (`APP_SCHEMA`): cookie sessions, attached sets, fixed masks."""

    def create_schema(self) -> None:
        """The app's tables and index (idempotent)."""
        self.db.executescript(APP_SCHEMA)

    def add_session(self, id_hash: str, annotator: str, csrf: str, expires: str) -> None:
        """Store a session (its id hashed) and drop expired ones."""
        with self.transaction() as db:
            db.execute("DELETE FROM app_sessions WHERE expires < ?", (now(),))
            db.execute("INSERT INTO app_sessions VALUES (?,?,?,?,?)", (id_hash, annotator, csrf, now(), expires))

    def live_session(self, id_hash: str, at: str) -> dict | None:
        """{name, role, csrf} of a session alive at `at` whose annotator is still registered."""
        row = self.db.execute(
            "SELECT a.name, a.role, s.csrf FROM app_sessions s JOIN annotators a ON a.name = s.annotator "
            "WHERE s.id_hash = ? AND s.expires > ?", (id_hash, at)).fetchone()
        return None if row is None else {"name": row[0], "role": row[1], "csrf": row[2]}

    def delete_sessions(self, *, id_hash: str | None = None, annotator: str | None = None) -> None:
        """End one session (by hashed id) or every session of an annotator."""
        with self.transaction() as db:
            if id_hash is not None:
                db.execute("DELETE FROM app_sessions WHERE id_hash = ?", (id_hash,))
            if annotator is not None:
                db.execute("DELETE FROM app_sessions WHERE annotator = ?", (annotator,))

    def put_set(self, kind: str, name: str, path: str, meta: dict) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO app_sets VALUES (?,?,?,?,?) ON CONFLICT (kind, name) DO UPDATE SET "
                       "path=excluded.path, meta=excluded.meta", (kind, name, path, json.dumps(meta), now()))

    def delete_set(self, kind: str, name: str) -> bool:
        with self.transaction() as db:
            return db.execute("DELETE FROM app_sets WHERE kind=? AND name=?", (kind, name)).rowcount > 0

    def app_sets(self, kind: str) -> list[dict]:
        """[{name, path (Path), meta}] of one kind, by name."""
        rows = self.db.execute("SELECT name, path, meta FROM app_sets WHERE kind=? ORDER BY name", (kind,))
        return [{"name": n, "path": Path(p), "meta": json.loads(m)} for n, p, m in rows]

    def put_fix(self, set_name: str, image_id: str, rel_path: str, annotator: str | None) -> None:
        with self.transaction() as db:
            db.execute('INSERT INTO app_fixes VALUES (?,?,?,?,?) ON CONFLICT ("set", image_id) DO UPDATE SET '
                       "path=excluded.path, annotator=excluded.annotator, time=excluded.time",
                       (set_name, image_id, rel_path, annotator, now()))

    def app_fixes(self, set_name: str | None = None) -> list[dict]:
        q = 'SELECT "set", image_id, path, annotator, time FROM app_fixes'
        rows = self.db.execute(q + (' WHERE "set"=?' if set_name else "") + " ORDER BY 1, 2",
                               (set_name,) if set_name else ())
        return [{"set": s, "id": i, "path": self.path / p, "annotator": a, "time": t} for s, i, p, a, t in rows]


class AppStore:
    """The app's tables beside a `Project` (one per app; thread-safe through the project's
    per-thread connections)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.tables = AppTables(project.store)
        self.write_lock = threading.Lock()
        self.tables.create_schema()

    # ---- sessions --------------------------------------------------------------------------
    def create_session(self, annotator: str, *, hours: float = SESSION_HOURS) -> tuple[str, str]:
        """A new cookie session for `annotator`: returns (session id, CSRF token). Only the
        SHA-256 of the session id is stored."""
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        with self.write_lock:
            self.tables.add_session(hash_token(sid), annotator, csrf, _utc(hours))
        return sid, csrf

    def session(self, sid: str) -> dict | None:
        """{name, role, csrf} of a live session (its annotator still registered), or None."""
        try:
            h = hash_token(sid)
        except ValueError:
            return None
        return self.tables.live_session(h, _utc())

    def end_session(self, sid: str) -> None:
        try:
            h = hash_token(sid)
        except ValueError:
            return
        with self.write_lock:
            self.tables.delete_sessions(id_hash=h)

    def end_sessions_of(self, annotator: str) -> None:
        with self.write_lock:
            self.tables.delete_sessions(annotator=annotator)

    # ---- ratings: undo ----------------------------------------------------------------------
    def delete_rating(self, round: int, image_id: str, annotator: str) -> bool:
        """Withdraw one annotator's rating (the rate page's undo). True if there was one."""
        with self.write_lock:
            return self.project.answers.delete_rating(round, image_id, annotator)

    # ---- attached sets ----------------------------------------------------------------------
    def attach_set(self, kind: str, name: str, path: str | Path, meta: dict | None = None) -> None:
        if kind not in SET_KINDS:
            raise ValueError(f"kind: expected one of {list(SET_KINDS)}, got {kind!r}")
        check_set_name(name)
        p = Path(path).resolve()
        if not p.is_dir():
            raise ValueError(f"path: expected an existing folder, got {str(path)!r}")
        with self.write_lock:
            self.tables.put_set(kind, name, str(p), meta or {})

    def detach_set(self, kind: str, name: str) -> bool:
        with self.write_lock:
            return self.tables.delete_set(kind, name)

    def sets(self, kind: str) -> list[dict]:
        """[{name, path (Path), meta}] of one kind, by name."""
        return self.tables.app_sets(kind)

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
            self.tables.put_fix(set_name, image_id, rel, annotator)
        return path

    def fixes(self, set_name: str | None = None) -> list[dict]:
        return self.tables.app_fixes(set_name)

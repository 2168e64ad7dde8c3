"""The project store: one SQLite file (WAL) — its schema, connections and transactions.

`Store` knows nothing of what the tables mean (that is `blindspots.loop.answers` and `.queries`, each a
`StorePart` over one `Store`); it makes the
schema, checks that an existing file is a readable blindspots store of this schema version,
and hands out one connection per thread (the web app serves from many threads; WAL lets readers
run beside one writer). Every write runs in `transaction()` (BEGIN IMMEDIATE ... COMMIT).

Tables: meta, rounds, steps (the audit log of steps), events, candidates, annotators, ratings,
masks, votes, reviews, models, metrics. The web app adds its own tables to the same file
(`blindspots.app.tables`).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import sqlite3
import threading
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Iterator

from blindspots.ids import artifact_name, check_image_id

import numpy as np

from blindspots.human.scores import OUT_OF_DOMAIN  # noqa: F401 - the store's name for it

STORE_FILE = "store.sqlite"
SCHEMA_VERSION = 1
ROLES = ("admin", "annotator")
VERDICTS = ("error", "fine")
SUBFOLDERS = ("scans", "masks", "checkpoints", "reports")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rounds (
    round INTEGER PRIMARY KEY, status TEXT NOT NULL, model_version INTEGER NOT NULL,
    started_at TEXT NOT NULL, finished_at TEXT);
CREATE TABLE IF NOT EXISTS steps (
    round INTEGER NOT NULL, step TEXT NOT NULL, status TEXT NOT NULL,
    settings TEXT NOT NULL, model_version INTEGER, seed INTEGER, result TEXT,
    started_at TEXT NOT NULL, finished_at TEXT, PRIMARY KEY (round, step));
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, round INTEGER, step TEXT,
    kind TEXT NOT NULL, details TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    round INTEGER NOT NULL, kind TEXT NOT NULL, image_id TEXT NOT NULL, rank INTEGER NOT NULL,
    score REAL, reason TEXT, PRIMARY KEY (round, kind, image_id));
CREATE TABLE IF NOT EXISTS annotators (
    name TEXT PRIMARY KEY, token_hash TEXT NOT NULL, role TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ratings (
    id INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER NOT NULL, image_id TEXT NOT NULL,
    annotator TEXT NOT NULL, score INTEGER, out_of_domain INTEGER NOT NULL, time TEXT NOT NULL,
    UNIQUE (round, image_id, annotator),
    CHECK ((out_of_domain = 1 AND score IS NULL) OR (out_of_domain = 0 AND score BETWEEN 1 AND 5)));
CREATE TABLE IF NOT EXISTS masks (
    round INTEGER NOT NULL, image_id TEXT NOT NULL, path TEXT NOT NULL, source TEXT NOT NULL,
    annotator TEXT, time TEXT NOT NULL, PRIMARY KEY (round, image_id));
CREATE TABLE IF NOT EXISTS votes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, item_id TEXT NOT NULL, annotator TEXT NOT NULL,
    label TEXT, time TEXT NOT NULL, UNIQUE (item_id, annotator));
CREATE TABLE IF NOT EXISTS reviews (
    id INTEGER PRIMARY KEY AUTOINCREMENT, image_id TEXT NOT NULL, region_id TEXT NOT NULL,
    verdict TEXT NOT NULL, annotator TEXT NOT NULL, time TEXT NOT NULL,
    UNIQUE (image_id, region_id, annotator));
CREATE TABLE IF NOT EXISTS models (
    name TEXT NOT NULL, version INTEGER NOT NULL, role TEXT NOT NULL, path TEXT NOT NULL,
    round INTEGER, meta TEXT NOT NULL, created TEXT NOT NULL, PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS metrics (
    model TEXT NOT NULL, version INTEGER NOT NULL, test_set TEXT NOT NULL, miou REAL,
    n_images INTEGER NOT NULL, details TEXT NOT NULL, time TEXT NOT NULL,
    PRIMARY KEY (model, version, test_set));
"""

class ProjectError(ValueError):
    """The project folder is missing or inconsistent (config, store, files)."""


def now() -> str:
    """UTC time as ISO 8601 text (what every table stores)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def hash_token(token: str) -> str:
    """SHA-256 hex of a token (tokens are random and long, so no salt is needed)."""
    if not isinstance(token, str) or len(token) < 8:
        raise ValueError("token: expected a string of at least 8 characters")
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_round(round: int) -> int:
    """A round number: an integer >= 0 (ValueError naming `round` otherwise)."""
    if not isinstance(round, (int, np.integer)) or isinstance(round, bool) or round < 0:
        raise ValueError(f"round: expected an integer >= 0, got {round!r}")
    return int(round)


class Store:
    """The SQLite file of a project folder `path` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path).resolve()
        self._local = threading.local()

    def create_schema(self) -> None:
        """Create every table (idempotent) and record the schema version."""
        self.db.executescript(_SCHEMA)  # executescript commits on its own
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            db.execute("INSERT OR IGNORE INTO meta VALUES ('created', ?)", (now(),))

    def check_schema(self) -> None:
        """ProjectError unless the file is a readable, intact blindspots store of SCHEMA_VERSION."""
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() \
                if self._has_table("meta") else None
            # A truncated file can still show its first page: read every table once.
            bad = self.db.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as e:
            self.close()
            raise ProjectError(f"{STORE_FILE}: expected a readable SQLite store in {str(self.path)!r}, got "
                               f"{e} (restore it from a backup)") from None
        if bad != "ok":
            self.close()
            raise ProjectError(f"{STORE_FILE}: expected an intact SQLite store in {str(self.path)!r}, got "
                               f"damage ({bad}; restore it from a backup)")
        if row is None:
            raise ProjectError(f"{STORE_FILE}: expected a blindspots store, got a database without "
                               "a schema version")
        if int(row[0]) != SCHEMA_VERSION:
            raise ProjectError(f"{STORE_FILE}: expected schema version {SCHEMA_VERSION}, got {row[0]} "
                               "(made by another blindspots version)")

    def _has_table(self, name: str) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                               (name,)).fetchone() is not None

    # ---- connection ------------------------------------------------------------------------
    def connect(self) -> sqlite3.Connection:
        """A new connection to the store (WAL, busy timeout, autocommit off)."""
        db = sqlite3.connect(self.path / STORE_FILE, timeout=30.0, isolation_level=None,
                             check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # an acknowledged answer survives power loss
        db.execute("PRAGMA busy_timeout=30000")
        return db

    @property
    def db(self) -> sqlite3.Connection:
        """This thread's connection."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = self.connect()
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error); committed when the block exits."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None



class StorePart:
    """The tables of one idea (answers, journal, registry, the web app's tables) over a project's `Store`:
    its SQL runs on the store's per-thread connection and in its transactions."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def path(self) -> Path:
        """The project folder (paths in the tables are relative to it)."""
        return self.store.path

    @property
    def db(self) -> sqlite3.Connection:
        """This thread's connection to the store."""
        return self.store.db

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """`Store.transaction`: BEGIN IMMEDIATE ... COMMIT."""
        return self.store.transaction()


def mask_file(root: Path, round: int, image_id: str) -> Path:
    """Where the pixel label of `image_id` for `round` lives in the project folder `root` (index PNG)."""
    return Path(root) / "masks" / f"r{check_round(round)}" / artifact_name(check_image_id(image_id))

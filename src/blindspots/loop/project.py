"""The project store: one folder that holds a troubleshooting project from start to end.

Layout::

    PROJECT/
      blindspots.toml     settings (`blindspots.config`)
      store.sqlite        SQLite in WAL mode: rounds, steps (the audit log), events, candidates,
                          annotators, ratings, masks, votes, reviews, models, metrics
      scans/              the score table (Parquet shards, `blindspots.scan`) and argmax maps;
                          competitors once, each target version as `<target>_v<i>`
      masks/r<i>/<id>.png pixel labels (index PNG, 255 = ignore)
      checkpoints/        fine-tuned target models (`target-r<i>.pt`) and resumable training state
      reports/            leaderboards and figures

Every human answer (`add_rating`, `add_mask`, `add_vote`, `add_review`) is committed before the
call returns; the tables have UNIQUE keys per annotator and item, so a repeated submission
replaces the earlier answer instead of adding a second one (idempotent). Connections are per
thread (the web app serves from many threads); WAL lets readers run beside one writer.

Rounds are numbered from 0 as in Algorithm 1: round i mines M(i+1) with the target f_t^(i),
rates it, forms S(i+1) and T(i+1), and fine-tunes f_t^(i) into f_t^(i+1). Model versions: the
target's version i is f_t^(i); competitors have version 0.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator, Sequence

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.config import CONFIG_FILE, Config, load_config, save_config
from blindspots.ids import artifact_name
from blindspots.loop.models import absolute_spec, is_path_spec

log = logging.getLogger(__name__)

STORE_FILE = "store.sqlite"
SCHEMA_VERSION = 1
OUT_OF_DOMAIN = "ood"
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


def _check_id(image_id: str, name: str = "image_id") -> str:
    if not isinstance(image_id, str) or not image_id:
        raise ValueError(f"{name}: expected a non-empty string id, got {image_id!r}")
    p = PurePosixPath(image_id)
    if p.is_absolute() or ".." in p.parts or "\\" in image_id or "\x00" in image_id:
        raise ValueError(f"{name}: expected a relative id inside the pool, got {image_id!r}")
    return image_id


def _check_round(round: int) -> int:
    if not isinstance(round, (int, np.integer)) or isinstance(round, bool) or round < 0:
        raise ValueError(f"round: expected an integer >= 0, got {round!r}")
    return int(round)


@dataclass(frozen=True)
class ModelRecord:
    """One registered model. spec: what `load_model` takes (options after "?" kept); path: the
    file or folder a path spec names (for a `module:function` spec, the spec itself)."""

    name: str
    version: int
    role: str
    path: Path
    round: int | None
    meta: dict
    spec: str = ""


class Project:
    """A project folder (see the module docstring). Use `Project.create` or `Project.open`."""

    def __init__(self, path: Path, config: Config) -> None:
        self.path = Path(path).resolve()
        self.config = config
        self._local = threading.local()

    # ---- opening ---------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path, config: Config, *, exist_ok: bool = False) -> "Project":
        """Make the folder, write `blindspots.toml`, create the store and register the models.

        Relative paths in `config` are resolved against `config.base_dir` and written absolute,
        so the project can live anywhere.
        """
        path = Path(path)
        if (path / STORE_FILE).exists() and not exist_ok:
            raise ProjectError(f"path: expected a folder without a project, got {str(path)!r} "
                               f"(it already holds {STORE_FILE}; use Project.open)")
        path.mkdir(parents=True, exist_ok=True)
        cfg = _absolute(config)
        save_config(cfg, path / CONFIG_FILE)
        for sub in SUBFOLDERS:
            (path / sub).mkdir(exist_ok=True)
        proj = cls(path, load_config(path / CONFIG_FILE))
        proj.db.executescript(_SCHEMA)  # executescript commits on its own
        with proj.transaction() as db:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            db.execute("INSERT OR IGNORE INTO meta VALUES ('created', ?)", (now(),))
        # A callable spec imports from the folder `init` ran in (see loop/models.py).
        here = {"import_dir": str(Path(config.base_dir).resolve())}
        proj.register_model(cfg.target.name, 0, "target", cfg.target.path, round=None, meta=here)
        for c in cfg.competitors:
            proj.register_model(c.name, 0, "competitor", c.path, round=None, meta=here)
        proj.log_event("create", {"config": cfg.to_dict()})
        return proj

    @classmethod
    def open(cls, path: str | Path, *, check_files: bool = True) -> "Project":
        """Open an existing project; ProjectError if its config, store or files are inconsistent."""
        path = Path(path)
        if not path.is_dir():
            raise ProjectError(f"path: expected a project folder, got {str(path)!r} (not a folder)")
        if not (path / CONFIG_FILE).is_file():
            raise ProjectError(f"path: expected {CONFIG_FILE} in {str(path)!r}, got none")
        if not (path / STORE_FILE).is_file():
            raise ProjectError(f"path: expected {STORE_FILE} in {str(path)!r}, got none "
                               "(create the project with `blindspots init`)")
        try:
            cfg = load_config(path / CONFIG_FILE)
        except ValueError as e:
            raise ProjectError(f"{CONFIG_FILE}: {e}") from None
        proj = cls(path, cfg)
        try:
            row = proj.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() \
                if proj._has_table("meta") else None
            # A truncated file can still show its first page: read every table once.
            bad = proj.db.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as e:
            proj.close()
            raise ProjectError(f"{STORE_FILE}: expected a readable SQLite store in {str(path)!r}, got "
                               f"{e} (restore it from a backup)") from None
        if bad != "ok":
            proj.close()
            raise ProjectError(f"{STORE_FILE}: expected an intact SQLite store in {str(path)!r}, got "
                               f"damage ({bad}; restore it from a backup)")
        if row is None:
            raise ProjectError(f"{STORE_FILE}: expected a blindspots store, got a database without "
                               "a schema version")
        if int(row[0]) != SCHEMA_VERSION:
            raise ProjectError(f"{STORE_FILE}: expected schema version {SCHEMA_VERSION}, got {row[0]} "
                               "(made by another blindspots version)")
        if check_files:
            proj.check_files()
        return proj

    def check_files(self) -> None:
        """Every registered checkpoint and mask file exists, and the config's models match."""
        for rec in self.models():
            if is_path_spec(rec.spec) and not rec.path.exists():
                raise ProjectError(f"models.{rec.name} (version {rec.version}): expected its model file "
                                   f"(checkpoint, TorchScript, ONNX or folder) {str(rec.path)!r}, got none (missing)")
        for name in self.config.model_names:
            if not self.db.execute("SELECT 1 FROM models WHERE name=?", (name,)).fetchone():
                raise ProjectError(f"{CONFIG_FILE}: model {name!r} is not registered in the store; "
                                   "the config was changed after `init`")
        for rnd, iid, p in self.db.execute("SELECT round, image_id, path FROM masks"):
            if not (self.path / p).is_file():
                raise ProjectError(f"masks: expected file {p!r} for image {iid!r} (round {rnd}), got none")

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

    # ---- folders ---------------------------------------------------------------------------
    @property
    def scan_dir(self) -> Path:
        """The one scan folder of the project: competitors are scanned once, each target
        version `<target>_v<i>` is added to it (`blindspots.scan`)."""
        return self.path / "scans"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def reports_dir(self) -> Path:
        return self.path / "reports"

    def mask_path(self, round: int, image_id: str) -> Path:
        """Where the pixel label of `image_id` for `round` lives (index PNG)."""
        return self.path / "masks" / f"r{_check_round(round)}" / artifact_name(_check_id(image_id))

    # ---- audit log -------------------------------------------------------------------------
    def log_event(self, kind: str, details: dict | None = None, *, round: int | None = None,
                  step: str | None = None) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO events (time, round, step, kind, details) VALUES (?,?,?,?,?)",
                       (now(), round, step, kind, json.dumps(details or {}, default=str)))

    def events(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT * FROM events ORDER BY id", self.db)

    # ---- rounds and steps ------------------------------------------------------------------
    def start_round(self, round: int, model_version: int) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO rounds (round, status, model_version, started_at) "
                       "VALUES (?, 'running', ?, ?)", (_check_round(round), int(model_version), now()))

    def finish_round(self, round: int) -> None:
        with self.transaction() as db:
            db.execute("UPDATE rounds SET status='done', finished_at=? WHERE round=?",
                       (now(), _check_round(round)))

    def rounds(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT * FROM rounds ORDER BY round", self.db)

    def step(self, round: int, step: str) -> dict | None:
        """The recorded state of one step: status, settings, model_version, seed, result."""
        row = self.db.execute("SELECT status, settings, model_version, seed, result, started_at, "
                              "finished_at FROM steps WHERE round=? AND step=?",
                              (_check_round(round), step)).fetchone()
        if row is None:
            return None
        return {"status": row[0], "settings": json.loads(row[1]), "model_version": row[2],
                "seed": row[3], "result": json.loads(row[4]) if row[4] else None,
                "started_at": row[5], "finished_at": row[6]}

    def begin_step(self, round: int, step: str, settings: dict, *, model_version: int | None,
                   seed: int | None) -> None:
        """Record that a step started, with the settings, model version and seed it uses."""
        with self.transaction() as db:
            db.execute("INSERT INTO steps (round, step, status, settings, model_version, seed, started_at) "
                       "VALUES (?,?, 'running', ?,?,?,?) ON CONFLICT (round, step) DO UPDATE SET "
                       "status='running', settings=excluded.settings, model_version=excluded.model_version, "
                       "seed=excluded.seed, started_at=excluded.started_at",
                       (_check_round(round), step, json.dumps(settings, default=str), model_version, seed, now()))
            db.execute("INSERT INTO events (time, round, step, kind, details) VALUES (?,?,?,?,?)",
                       (now(), round, step, "step-start", json.dumps({"settings": settings,
                        "model_version": model_version, "seed": seed}, default=str)))

    def end_step(self, round: int, step: str, result: dict | None = None) -> None:
        with self.transaction() as db:
            db.execute("UPDATE steps SET status='done', result=?, finished_at=? WHERE round=? AND step=?",
                       (json.dumps(result or {}, default=str), now(), _check_round(round), step))
            db.execute("INSERT INTO events (time, round, step, kind, details) VALUES (?,?,?,?,?)",
                       (now(), round, step, "step-done", json.dumps(result or {}, default=str)))

    def fail_step(self, round: int, step: str, message: str) -> None:
        """Record that a started step raised (a "step-failed" event with the message). The step's row
        stays "running" (not done), so the next `advance` runs it again; `step_failure` reads it."""
        self.log_event("step-failed", {"error": str(message)}, round=_check_round(round), step=step)

    def step_failure(self, round: int, step: str) -> str | None:
        """The error message if the last attempt of a step failed (and it has not been started or
        finished since), else None."""
        row = self.db.execute("SELECT kind, details FROM events WHERE round=? AND step=? AND kind IN "
                              "('step-start', 'step-done', 'step-failed') ORDER BY id DESC LIMIT 1",
                              (_check_round(round), step)).fetchone()
        if row is None or row[0] != "step-failed":
            return None
        return str(json.loads(row[1]).get("error", ""))

    def steps(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT * FROM steps ORDER BY round, started_at", self.db)

    # ---- candidates (M, S, T per round) ----------------------------------------------------
    def set_candidates(self, round: int, kind: str, table: pd.DataFrame) -> None:
        """Store one selection: kind "M" (mined), "S" (counterexamples) or "T" (test set).

        table: columns `id`, and optionally `score` (float) and `reason` (str), in priority order.
        Replaces an earlier selection of the same round and kind in one transaction.
        """
        if kind not in ("M", "S", "T"):
            raise ValueError(f"kind: expected 'M', 'S' or 'T', got {kind!r}")
        if "id" not in table.columns:
            raise ValueError(f"table: expected a column 'id', got columns {list(table.columns)}")
        scores = table["score"] if "score" in table.columns else pd.Series([None] * len(table))
        reasons = table["reason"] if "reason" in table.columns else pd.Series([""] * len(table))
        rows = [(_check_round(round), kind, _check_id(str(i), "table.id"), r,
                 None if s is None or pd.isna(s) else float(s), str(why))
                for r, (i, s, why) in enumerate(zip(table["id"], scores, reasons))]
        with self.transaction() as db:
            db.execute("DELETE FROM candidates WHERE round=? AND kind=?", (round, kind))
            db.executemany("INSERT INTO candidates VALUES (?,?,?,?,?,?)", rows)

    def candidates(self, round: int, kind: str = "M") -> pd.DataFrame:
        """columns: id, rank, score, reason (priority order)."""
        return pd.read_sql_query("SELECT image_id AS id, rank, score, reason FROM candidates "
                                 "WHERE round=? AND kind=? ORDER BY rank", self.db,
                                 params=(_check_round(round), kind))

    # ---- annotators ------------------------------------------------------------------------
    def add_annotator(self, name: str, token: str, role: str = "annotator") -> None:
        """Register (or re-key) an annotator; only the SHA-256 of the token is stored."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name: expected a non-empty annotator name, got {name!r}")
        if role not in ROLES:
            raise ValueError(f"role: expected one of {list(ROLES)}, got {role!r}")
        with self.transaction() as db:
            db.execute("INSERT INTO annotators VALUES (?,?,?,?) ON CONFLICT (name) DO UPDATE SET "
                       "token_hash=excluded.token_hash, role=excluded.role", (name, hash_token(token), role, now()))

    def annotator_for_token(self, token: str) -> dict | None:
        """{name, role} of the annotator holding `token`, or None."""
        try:
            h = hash_token(token)
        except ValueError:
            return None
        row = self.db.execute("SELECT name, role FROM annotators WHERE token_hash=?", (h,)).fetchone()
        return None if row is None else {"name": row[0], "role": row[1]}

    def remove_annotator(self, name: str) -> bool:
        with self.transaction() as db:
            return db.execute("DELETE FROM annotators WHERE name=?", (name,)).rowcount > 0

    def annotators(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT name, role, created FROM annotators ORDER BY name", self.db)

    # ---- ratings ---------------------------------------------------------------------------
    def add_rating(self, round: int, image_id: str, annotator: str, score: int | str) -> None:
        """One ACR answer: score 1..5, or "ood" (out-of-domain). Committed before returning;
        a second answer by the same annotator for the same image replaces the first."""
        self.add_ratings([(round, image_id, annotator, score)])

    def add_ratings(self, rows: Sequence[tuple[int, str, str, int | str]]) -> int:
        """Many answers (round, image_id, annotator, score) in one transaction; returns the count."""
        clean = []
        for k, (rnd, iid, who, score) in enumerate(rows):
            ood = isinstance(score, str) and score.strip().lower() in (OUT_OF_DOMAIN, "out-of-domain", "inf")
            if not ood:
                ok = isinstance(score, (int, np.integer)) and not isinstance(score, bool) and 1 <= score <= 5
                if not ok:
                    raise ValueError(f"score (row {k}): expected an integer 1..5 or 'ood', got {score!r}")
            if not isinstance(who, str) or not who:
                raise ValueError(f"annotator (row {k}): expected a non-empty name, got {who!r}")
            clean.append((_check_round(rnd), _check_id(iid), who, None if ood else int(score), int(ood), now()))
        with self.transaction() as db:
            db.executemany("INSERT INTO ratings (round, image_id, annotator, score, out_of_domain, time) "
                           "VALUES (?,?,?,?,?,?) ON CONFLICT (round, image_id, annotator) DO UPDATE SET "
                           "score=excluded.score, out_of_domain=excluded.out_of_domain, time=excluded.time",
                           clean)
        return len(clean)

    def ratings_for_round(self, round: int) -> pd.DataFrame:
        """columns: id (str), annotator (str), score (float: 1..5, +inf for out-of-domain as in
        the paper), out_of_domain (bool), time (str)."""
        df = pd.read_sql_query("SELECT image_id AS id, annotator, score, out_of_domain, time FROM ratings "
                               "WHERE round=? ORDER BY id, annotator", self.db, params=(_check_round(round),))
        df["out_of_domain"] = df["out_of_domain"].astype(bool)
        df["score"] = df["score"].astype(float).where(~df["out_of_domain"], np.inf)
        return df

    # ---- masks -----------------------------------------------------------------------------
    def add_mask(self, round: int, image_id: str, mask: np.ndarray, *, source: str,
                 annotator: str | None = None) -> Path:
        """Store a pixel label (uint8 [H, W], class ids, 255 ignore) as an index PNG.

        The file is written atomically before the row is committed; both exist when this returns.
        """
        mask = np.asarray(mask)
        if mask.ndim != 2 or mask.size == 0:
            raise ValueError(f"mask: expected a 2-D [H, W] array, got shape {mask.shape}")
        if not np.issubdtype(mask.dtype, np.integer) or mask.min() < 0 or mask.max() > 255:
            raise ValueError(f"mask: expected integer class ids in 0..255, got dtype {mask.dtype}")
        path = self.mask_path(round, image_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}.{threading.get_ident()}")
        Image.fromarray(mask.astype(np.uint8), mode="L").save(tmp, format="PNG")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        rel = path.relative_to(self.path).as_posix()
        with self.transaction() as db:
            db.execute("INSERT INTO masks VALUES (?,?,?,?,?,?) ON CONFLICT (round, image_id) DO UPDATE SET "
                       "path=excluded.path, source=excluded.source, annotator=excluded.annotator, "
                       "time=excluded.time", (round, image_id, rel, source, annotator, now()))
        return path

    def masks_for_round(self, round: int) -> pd.DataFrame:
        """columns: id, path (absolute), source, annotator, time."""
        df = pd.read_sql_query("SELECT image_id AS id, path, source, annotator, time FROM masks "
                               "WHERE round=? ORDER BY id", self.db, params=(_check_round(round),))
        df["path"] = [str(self.path / p) for p in df["path"]]
        return df

    def load_mask(self, round: int, image_id: str) -> np.ndarray:
        """uint8 [H, W] pixel label of `image_id` in `round`; ValueError if none was stored."""
        row = self.db.execute("SELECT path FROM masks WHERE round=? AND image_id=?",
                              (_check_round(round), image_id)).fetchone()
        if row is None:
            raise ValueError(f"image_id: expected an image with a stored mask in round {round}, got {image_id!r}")
        p = self.path / row[0]
        if not p.is_file():
            raise ProjectError(f"masks: expected file {row[0]!r} for image {image_id!r}, got none")
        with Image.open(p) as im:
            return np.asarray(im)

    # ---- votes and reviews -----------------------------------------------------------------
    def add_vote(self, item_id: str, annotator: str, label: str | None) -> None:
        """A Defuse scenario vote: a class name, or None for "none of the above"."""
        if not isinstance(item_id, str) or not item_id:
            raise ValueError(f"item_id: expected a non-empty string, got {item_id!r}")
        if not isinstance(annotator, str) or not annotator:
            raise ValueError(f"annotator: expected a non-empty name, got {annotator!r}")
        if label is not None and not isinstance(label, str):
            raise ValueError(f"label: expected a class name or None, got {label!r}")
        with self.transaction() as db:
            db.execute("INSERT INTO votes (item_id, annotator, label, time) VALUES (?,?,?,?) "
                       "ON CONFLICT (item_id, annotator) DO UPDATE SET label=excluded.label, time=excluded.time",
                       (item_id, annotator, label, now()))

    def votes(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT item_id, annotator, label, time FROM votes ORDER BY item_id, annotator",
                                 self.db)

    def add_review(self, image_id: str, region_id: str | int, verdict: str, annotator: str) -> None:
        """A label-issue review: verdict "error" (confirmed annotation error) or "fine"."""
        if verdict not in VERDICTS:
            raise ValueError(f"verdict: expected one of {list(VERDICTS)}, got {verdict!r}")
        if not isinstance(annotator, str) or not annotator:
            raise ValueError(f"annotator: expected a non-empty name, got {annotator!r}")
        with self.transaction() as db:
            db.execute("INSERT INTO reviews (image_id, region_id, verdict, annotator, time) VALUES (?,?,?,?,?) "
                       "ON CONFLICT (image_id, region_id, annotator) DO UPDATE SET verdict=excluded.verdict, "
                       "time=excluded.time", (_check_id(image_id), str(region_id), verdict, annotator, now()))

    def reviews(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT image_id AS id, region_id, verdict, annotator, time FROM reviews "
                                 "ORDER BY id, region_id, annotator", self.db)

    # ---- models ----------------------------------------------------------------------------
    def register_model(self, name: str, version: int, role: str, path: str | Path, *,
                       round: int | None, meta: dict | None = None) -> None:
        """Record a model: `path` is a spec (`blindspots.models.load`); a path inside the project
        is stored relative to it, options after "?" are kept."""
        spec = str(path)
        if is_path_spec(spec):
            base, query = spec.partition("?")[0], spec[len(spec.partition("?")[0]):]
            p = Path(base).resolve()
            try:
                rel = p.relative_to(self.path).as_posix() + query  # inside the project: store relative
            except ValueError:
                rel = str(p) + query
        else:
            rel = spec
        with self.transaction() as db:
            db.execute("INSERT INTO models VALUES (?,?,?,?,?,?,?) ON CONFLICT (name, version) DO UPDATE SET "
                       "role=excluded.role, path=excluded.path, round=excluded.round, meta=excluded.meta",
                       (name, int(version), role, rel, round, json.dumps(meta or {}, default=str), now()))

    def models(self) -> list[ModelRecord]:
        out = []
        for name, ver, role, p, rnd, meta in self.db.execute(
                "SELECT name, version, role, path, round, meta FROM models ORDER BY role DESC, name, version"):
            if is_path_spec(p, self.path):
                spec = p if Path(p.partition("?")[0]).is_absolute() else str(self.path / p)
                path = Path(spec.partition("?")[0])
            else:
                spec, path = p, Path(p)
            out.append(ModelRecord(name, ver, role, path, rnd, json.loads(meta), spec))
        return out

    def model(self, name: str, version: int | None = None) -> ModelRecord:
        """One registered model; version None = the latest."""
        recs = [m for m in self.models() if m.name == name and (version is None or m.version == version)]
        if not recs:
            raise ValueError(f"name: expected a registered model (and version), got {name!r} version {version}")
        return max(recs, key=lambda m: m.version)

    def target_version(self) -> int:
        """The latest version of the target, i.e. i in f_t^(i)."""
        return self.model(self.config.target.name).version

    # ---- metrics ---------------------------------------------------------------------------
    def set_metric(self, model: str, version: int, test_set: str, miou: float, n_images: int,
                   details: dict | None = None) -> None:
        with self.transaction() as db:
            db.execute("INSERT INTO metrics VALUES (?,?,?,?,?,?,?) ON CONFLICT (model, version, test_set) "
                       "DO UPDATE SET miou=excluded.miou, n_images=excluded.n_images, details=excluded.details, "
                       "time=excluded.time",
                       (model, int(version), test_set, None if miou is None or np.isnan(miou) else float(miou),
                        int(n_images), json.dumps(details or {}, default=str), now()))

    def metrics(self) -> pd.DataFrame:
        """columns: model, version, test_set, miou, n_images, details, time."""
        return pd.read_sql_query("SELECT * FROM metrics ORDER BY model, version, test_set", self.db)

    def metric(self, model: str, version: int, test_set: str) -> float | None:
        row = self.db.execute("SELECT miou FROM metrics WHERE model=? AND version=? AND test_set=?",
                              (model, int(version), test_set)).fetchone()
        return None if row is None else (np.nan if row[0] is None else float(row[0]))


def _absolute(cfg: Config) -> Config:
    """A copy of `cfg` with every path made absolute (against cfg.base_dir)."""
    from dataclasses import replace

    def ab(p: str | None) -> str | None:
        return None if p is None or p == "" else str(cfg.resolve(p))

    return replace(
        cfg,
        pool=replace(cfg.pool, root=ab(cfg.pool.root), list_file=ab(cfg.pool.list_file)),
        target=replace(cfg.target, path=absolute_spec(cfg.target.path, cfg.base_dir)),
        competitors=[replace(c, path=absolute_spec(c.path, cfg.base_dir)) for c in cfg.competitors],
        data=replace(cfg.data, train=ab(cfg.data.train) or "", val=ab(cfg.data.val) or ""),
        simulate=replace(cfg.simulate, ground_truth=ab(cfg.simulate.ground_truth) or ""),
    )

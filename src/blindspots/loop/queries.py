"""What the project's tables mean: the journal (rounds, steps, events) and the model registry and
metrics (the answers are `blindspots.loop.answers`, the web app's own tables `blindspots.app.tables`).
A `blindspots.loop.project.Project` holds one of each over its `Store` (`project.journal`,
`project.registry`); the loop reads and writes the store only through these methods (no SQL elsewhere).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from blindspots.loop.models import is_path_spec
from blindspots.loop.store import StorePart, check_round, now

__all__ = ["ModelRecord", "Journal", "Registry"]


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



class Journal(StorePart):
    """Rounds, steps (the audit log of Algorithm 1) and events."""

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
                       "VALUES (?, 'running', ?, ?)", (check_round(round), int(model_version), now()))

    def finish_round(self, round: int) -> None:
        with self.transaction() as db:
            db.execute("UPDATE rounds SET status='done', finished_at=? WHERE round=?",
                       (now(), check_round(round)))

    def rounds(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT * FROM rounds ORDER BY round", self.db)

    def step(self, round: int, step: str) -> dict | None:
        """The recorded state of one step: status, settings, model_version, seed, result."""
        row = self.db.execute("SELECT status, settings, model_version, seed, result, started_at, "
                              "finished_at FROM steps WHERE round=? AND step=?",
                              (check_round(round), step)).fetchone()
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
                       (check_round(round), step, json.dumps(settings, default=str), model_version, seed, now()))
            db.execute("INSERT INTO events (time, round, step, kind, details) VALUES (?,?,?,?,?)",
                       (now(), round, step, "step-start", json.dumps({"settings": settings,
                        "model_version": model_version, "seed": seed}, default=str)))

    def end_step(self, round: int, step: str, result: dict | None = None) -> None:
        with self.transaction() as db:
            db.execute("UPDATE steps SET status='done', result=?, finished_at=? WHERE round=? AND step=?",
                       (json.dumps(result or {}, default=str), now(), check_round(round), step))
            db.execute("INSERT INTO events (time, round, step, kind, details) VALUES (?,?,?,?,?)",
                       (now(), round, step, "step-done", json.dumps(result or {}, default=str)))

    def fail_step(self, round: int, step: str, message: str) -> None:
        """Record that a started step raised (a "step-failed" event with the message). The step's row
        stays "running" (not done), so the next `advance` runs it again; `step_failure` reads it."""
        self.log_event("step-failed", {"error": str(message)}, round=check_round(round), step=step)

    def step_failure(self, round: int, step: str) -> str | None:
        """The error message if the last attempt of a step failed (and it has not been started or
        finished since), else None."""
        row = self.db.execute("SELECT kind, details FROM events WHERE round=? AND step=? AND kind IN "
                              "('step-start', 'step-done', 'step-failed') ORDER BY id DESC LIMIT 1",
                              (check_round(round), step)).fetchone()
        if row is None or row[0] != "step-failed":
            return None
        return str(json.loads(row[1]).get("error", ""))

    def steps(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT * FROM steps ORDER BY round, started_at", self.db)



class Registry(StorePart):
    """Models (name, version, spec) and their metrics."""

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


    def is_registered(self, name: str) -> bool:
        """True if some version of model `name` is registered."""
        return self.db.execute("SELECT 1 FROM models WHERE name=?", (name,)).fetchone() is not None

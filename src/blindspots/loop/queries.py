"""What the project's tables mean: the journal (rounds, steps, events), the answers (candidates,
annotators, ratings, masks, votes, reviews), the model registry and metrics, and the web app's
own tables. `blindspots.loop.project.Project` combines these mixins with `Store`; the loop and
the web app read and write the store only through these methods (no SQL elsewhere).

Every human answer (`add_rating`, `add_mask`, `add_vote`, `add_review`) is committed before the
call returns; the tables have UNIQUE keys per annotator and item, so a repeated submission
replaces the earlier answer instead of adding a second one (idempotent).
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.loop.models import is_path_spec
from blindspots.loop.store import (OUT_OF_DOMAIN, ROLES, VERDICTS, ProjectError, _check_id, _check_round,
                                   hash_token, now)

__all__ = ["ModelRecord", "Journal", "Answers", "Registry", "AppTables"]


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



class Journal:
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



class Answers:
    """Selections (M, S, T), annotators and their answers, and what the web app reads of them."""

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

    # ---- what the web app reads (it runs no SQL of its own) --------------------------------
    def rating_round(self) -> int | None:
        """The round whose candidates M take ratings now: mined, and S not formed yet."""
        for (rnd,) in self.db.execute("SELECT round FROM steps WHERE step='mine' AND status='done' "
                                      "ORDER BY round DESC"):
            row = self.db.execute("SELECT status FROM steps WHERE round=? AND step='select'", (rnd,)).fetchone()
            if row is None or row[0] != "done":
                return int(rnd)
            return None
        return None

    def mask_round(self) -> int | None:
        """The latest round with S or T formed whose masks step is not done."""
        row = self.db.execute("SELECT round FROM steps WHERE step='select' AND status='done' "
                              "ORDER BY round DESC").fetchone()
        if row is None:
            return None
        st = self.db.execute("SELECT status FROM steps WHERE round=? AND step='masks'", (row[0],)).fetchone()
        return None if st is not None and st[0] == "done" else int(row[0])

    def last_mined_round(self) -> int | None:
        """The latest round with candidates M, or None."""
        row = self.db.execute("SELECT MAX(round) FROM candidates WHERE kind='M'").fetchone()
        return None if row[0] is None else int(row[0])

    def is_candidate(self, round: int, image_id: str, kind: str = "M") -> bool:
        return self.db.execute("SELECT 1 FROM candidates WHERE round=? AND kind=? AND image_id=?",
                               (_check_round(round), kind, image_id)).fetchone() is not None

    def candidate_ids(self, round: int, kind: str = "M") -> list[str]:
        """Ids of one selection in rank order."""
        return [r[0] for r in self.db.execute("SELECT image_id FROM candidates WHERE round=? AND kind=? "
                                              "ORDER BY rank", (_check_round(round), kind))]

    def ratings_of(self, round: int, annotator: str) -> dict[str, int | str]:
        """{image_id: score 1..5 or "ood"} of one annotator in one round."""
        return {i: ("ood" if o else s) for i, s, o in self.db.execute(
            "SELECT image_id, score, out_of_domain FROM ratings WHERE round=? AND annotator=?",
            (_check_round(round), annotator))}

    def rating_count(self, round: int, annotator: str) -> int:
        """How many ratings one annotator gave in one round."""
        return int(self.db.execute("SELECT COUNT(*) FROM ratings WHERE round=? AND annotator=?",
                                   (_check_round(round), annotator)).fetchone()[0])

    def delete_rating(self, round: int, image_id: str, annotator: str) -> bool:
        """Withdraw one annotator's rating (the rate page's undo). True if there was one."""
        with self.transaction() as db:
            return db.execute("DELETE FROM ratings WHERE round=? AND image_id=? AND annotator=?",
                              (int(round), image_id, annotator)).rowcount > 0

    def stored_mask_path(self, round: int, image_id: str) -> Path | None:
        """The file of a stored mask (absolute), or None if none was stored."""
        row = self.db.execute("SELECT path FROM masks WHERE round=? AND image_id=?",
                              (_check_round(round), image_id)).fetchone()
        return None if row is None else self.path / row[0]

    def votes_of(self, annotator: str) -> dict[str, str | None]:
        """{item_id: label} of one annotator's scenario votes."""
        return dict(self.db.execute("SELECT item_id, label FROM votes WHERE annotator=?", (annotator,)))

    def verdicts_of(self, annotator: str) -> dict[tuple[str, str], str]:
        """{(image_id, region_id): verdict} of one annotator's label-issue reviews."""
        return {(i, r): v for i, r, v in self.db.execute(
            "SELECT image_id, region_id, verdict FROM reviews WHERE annotator=?", (annotator,))}

    def error_image_ids(self) -> list[str]:
        """Review image ids ('<set>/<id>') with at least one region confirmed as an error, sorted."""
        return [r[0] for r in self.db.execute(
            "SELECT DISTINCT image_id FROM reviews WHERE verdict='error' ORDER BY image_id")]


    def mask_files(self) -> list[tuple[int, str, str]]:
        """(round, image_id, path relative to the project) of every stored mask."""
        return [tuple(r) for r in self.db.execute("SELECT round, image_id, path FROM masks")]


class Registry:
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


    def is_registered(self, name: str) -> bool:
        """True if some version of model `name` is registered."""
        return self.db.execute("SELECT 1 FROM models WHERE name=?", (name,)).fetchone() is not None


class AppTables:
    """The web app's own tables (`store.APP_SCHEMA`): cookie sessions, attached sets, fixed masks."""

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

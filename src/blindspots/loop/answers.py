"""The answers in a project's store: the selections M, S and T, annotators, ratings, masks, votes
and reviews, and what the web app reads of them: `project.answers` of a
`blindspots.loop.project.Project`, over its `Store` (schema, transactions).

Every human answer (`add_rating`, `add_mask`, `add_vote`, `add_review`) is committed before the
call returns; the tables have UNIQUE keys per annotator and item, so a repeated submission
replaces the earlier answer instead of adding a second one (idempotent).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.atomic import write_atomic
from blindspots.human.scores import rating_answer
from blindspots.ids import check_image_id
from blindspots.loop.store import (OUT_OF_DOMAIN, ROLES, VERDICTS, ProjectError, StorePart, check_round, hash_token,
                                   mask_file, now)

__all__ = ["Answers"]


class Answers(StorePart):
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
        rows = [(check_round(round), kind, check_image_id(str(i), "table.id"), r,
                 None if s is None or pd.isna(s) else float(s), str(why))
                for r, (i, s, why) in enumerate(zip(table["id"], scores, reasons))]
        with self.transaction() as db:
            db.execute("DELETE FROM candidates WHERE round=? AND kind=?", (round, kind))
            db.executemany("INSERT INTO candidates VALUES (?,?,?,?,?,?)", rows)

    def candidates(self, round: int, kind: str = "M") -> pd.DataFrame:
        """columns: id, rank, score, reason (priority order)."""
        return pd.read_sql_query("SELECT image_id AS id, rank, score, reason FROM candidates "
                                 "WHERE round=? AND kind=? ORDER BY rank", self.db,
                                 params=(check_round(round), kind))

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
            answer = rating_answer(score, where=f"score (row {k})")
            ood = answer == OUT_OF_DOMAIN
            if not isinstance(who, str) or not who:
                raise ValueError(f"annotator (row {k}): expected a non-empty name, got {who!r}")
            clean.append((check_round(rnd), check_image_id(iid), who, None if ood else answer, int(ood), now()))
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
                               "WHERE round=? ORDER BY id, annotator", self.db, params=(check_round(round),))
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
        path = mask_file(self.path, round, image_id)
        image = Image.fromarray(mask.astype(np.uint8), mode="L")
        write_atomic(path, lambda tmp: image.save(tmp, format="PNG"), fsync=True)
        rel = path.relative_to(self.path).as_posix()
        with self.transaction() as db:
            db.execute("INSERT INTO masks VALUES (?,?,?,?,?,?) ON CONFLICT (round, image_id) DO UPDATE SET "
                       "path=excluded.path, source=excluded.source, annotator=excluded.annotator, "
                       "time=excluded.time", (round, image_id, rel, source, annotator, now()))
        return path

    def masks_for_round(self, round: int) -> pd.DataFrame:
        """columns: id, path (absolute), source, annotator, time."""
        df = pd.read_sql_query("SELECT image_id AS id, path, source, annotator, time FROM masks "
                               "WHERE round=? ORDER BY id", self.db, params=(check_round(round),))
        df["path"] = [str(self.path / p) for p in df["path"]]
        return df

    def load_mask(self, round: int, image_id: str) -> np.ndarray:
        """uint8 [H, W] pixel label of `image_id` in `round`; ValueError if none was stored."""
        row = self.db.execute("SELECT path FROM masks WHERE round=? AND image_id=?",
                              (check_round(round), image_id)).fetchone()
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
                       "time=excluded.time", (check_image_id(image_id), str(region_id), verdict, annotator, now()))

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
                               (check_round(round), kind, image_id)).fetchone() is not None

    def candidate_ids(self, round: int, kind: str = "M") -> list[str]:
        """Ids of one selection in rank order."""
        return [r[0] for r in self.db.execute("SELECT image_id FROM candidates WHERE round=? AND kind=? "
                                              "ORDER BY rank", (check_round(round), kind))]

    def ratings_of(self, round: int, annotator: str) -> dict[str, int | str]:
        """{image_id: score 1..5 or "ood"} of one annotator in one round."""
        return {i: ("ood" if o else s) for i, s, o in self.db.execute(
            "SELECT image_id, score, out_of_domain FROM ratings WHERE round=? AND annotator=?",
            (check_round(round), annotator))}

    def rating_count(self, round: int, annotator: str) -> int:
        """How many ratings one annotator gave in one round."""
        return int(self.db.execute("SELECT COUNT(*) FROM ratings WHERE round=? AND annotator=?",
                                   (check_round(round), annotator)).fetchone()[0])

    def delete_rating(self, round: int, image_id: str, annotator: str) -> bool:
        """Withdraw one annotator's rating (the rate page's undo). True if there was one."""
        with self.transaction() as db:
            return db.execute("DELETE FROM ratings WHERE round=? AND image_id=? AND annotator=?",
                              (int(round), image_id, annotator)).rowcount > 0

    def stored_mask_path(self, round: int, image_id: str) -> Path | None:
        """The file of a stored mask (absolute), or None if none was stored."""
        row = self.db.execute("SELECT path FROM masks WHERE round=? AND image_id=?",
                              (check_round(round), image_id)).fetchone()
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

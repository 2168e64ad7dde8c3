"""Region labels in a project: the queries of each image of S (its superpixels, the regions to ask about,
the target's guesses), people's answers, and the partial masks made from them.

Files and tables (made on first use, so projects made before them open unchanged)::

    PROJECT/regions/r<i>/<id>.png        the image's regions (16-bit index PNG, ids 0..n-1)
    PROJECT/regions/r<i>/base/<id>.png   "confident" fill: labels where every model agrees (255 elsewhere)
    region_queries (round, image_id, region, rank, guess, score, disagreement, uncertainty, pixels)
    region_answers (round, image_id, region, annotator, label, time): label a class id or NULL for
                   "mixed / unsure"; one row per annotator and region (a repeated answer replaces it)

Every answer is committed before `add_region_answer` returns. Once every query of an image has an
answer, `finish_image` writes its partial mask as the image's mask of the round (source "regions"):
fine-tuning reads it like any mask, the unlabelled pixels holding the ignore value.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from blindspots.atomic import write_atomic
from blindspots.config import CONFIG_FILE, LABEL_KINDS, save_config
from blindspots.human.regions import partial_mask
from blindspots.ids import artifact_name, check_image_id
from blindspots.loop.project import Project, ProjectError
from blindspots.loop.store import check_round, now
from blindspots.mine.regions import RegionQuery

__all__ = ["REGION_SOURCE", "set_labels", "save_queries", "queries", "has_queries", "segments", "add_region_answer",
           "answers", "answers_of", "answer_count", "unanswered", "finish_image", "query_images"]

#: the `source` of a mask made from region answers
REGION_SOURCE = "regions"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS region_queries (
    round INTEGER NOT NULL, image_id TEXT NOT NULL, region INTEGER NOT NULL, rank INTEGER NOT NULL,
    guess INTEGER NOT NULL, score REAL NOT NULL, disagreement REAL NOT NULL, uncertainty REAL NOT NULL,
    pixels INTEGER NOT NULL, PRIMARY KEY (round, image_id, region));
CREATE TABLE IF NOT EXISTS region_answers (
    round INTEGER NOT NULL, image_id TEXT NOT NULL, region INTEGER NOT NULL, annotator TEXT NOT NULL,
    label INTEGER, time TEXT NOT NULL, PRIMARY KEY (round, image_id, region, annotator));
"""


def _tables(p: Project) -> None:
    """Make the two tables once per open project (a read then never waits for the write lock)."""
    if getattr(p, "_region_tables", False):
        return
    p.store.db.executescript(_SCHEMA)  # idempotent; executescript commits on its own
    p._region_tables = True  # type: ignore[attr-defined]


def _folder(p: Project, round: int) -> Path:
    return p.path / "regions" / f"r{check_round(round)}"


def _write_png(path: Path, array: np.ndarray) -> None:
    image = Image.fromarray(array)  # uint16 -> a 16-bit PNG, uint8 -> 8-bit gray
    write_atomic(path, lambda tmp: image.save(tmp, format="PNG"), fsync=True)


def save_queries(p: Project, round: int, image_id: str, segments_map: np.ndarray, chosen: Sequence[RegionQuery],
                 base: np.ndarray | None = None) -> None:
    """Store the regions of one image (int [H, W], ids < 65536), the queries in rank order and the
    confident-fill labels (uint8 [H, W] or None); replaces earlier queries of that image and round."""
    check_image_id(image_id)
    seg = np.asarray(segments_map)
    if seg.ndim != 2 or seg.min() < 0 or seg.max() > 65535:
        raise ValueError(f"segments_map: expected region ids 0..65535 [H, W], got {seg.dtype} {seg.shape}")
    folder = _folder(p, round)
    _write_png(folder / artifact_name(image_id), seg.astype(np.uint16))
    if base is not None:
        _write_png(folder / "base" / artifact_name(image_id), np.asarray(base, dtype=np.uint8))
    _tables(p)
    rows = [(round, image_id, q.region, k, q.guess, q.score, q.disagreement, q.uncertainty, q.pixels)
            for k, q in enumerate(chosen)]
    with p.store.transaction() as db:
        db.execute("DELETE FROM region_queries WHERE round=? AND image_id=?", (round, image_id))
        db.executemany("INSERT INTO region_queries VALUES (?,?,?,?,?,?,?,?,?)", rows)


def queries(p: Project, round: int, image_id: str) -> list[RegionQuery]:
    """The stored queries of one image in rank order ([] if none)."""
    _tables(p)
    return [RegionQuery(int(r), int(g), float(s), float(d), float(u), int(n)) for r, g, s, d, u, n in p.store.db.execute(
        "SELECT region, guess, score, disagreement, uncertainty, pixels FROM region_queries "
        "WHERE round=? AND image_id=? ORDER BY rank", (check_round(round), image_id))]


def has_queries(p: Project, round: int, image_id: str) -> bool:
    _tables(p)
    return p.store.db.execute("SELECT 1 FROM region_queries WHERE round=? AND image_id=? LIMIT 1",
                        (check_round(round), image_id)).fetchone() is not None


def query_images(p: Project, round: int) -> list[str]:
    """Ids of the images of `round` with region queries, in the order S lists them."""
    _tables(p)
    have = {r[0] for r in p.store.db.execute("SELECT DISTINCT image_id FROM region_queries WHERE round=?",
                                       (check_round(round),))}
    return [i for i in p.answers.candidate_ids(round, "S") if i in have]


def segments(p: Project, round: int, image_id: str) -> np.ndarray:
    """int32 [H, W] region ids of one image; ProjectError if its queries were never made."""
    path = _folder(p, round) / artifact_name(check_image_id(image_id))
    if not path.is_file():
        raise ProjectError(f"regions: expected the regions file {str(path)!r} of image {image_id!r} "
                           f"(round {round}), got none")
    with Image.open(path) as im:
        return np.asarray(im).astype(np.int32)


def _base(p: Project, round: int, image_id: str) -> np.ndarray | None:
    path = _folder(p, round) / "base" / artifact_name(image_id)
    if not path.is_file():
        return None
    with Image.open(path) as im:
        return np.asarray(im)


def add_region_answer(p: Project, round: int, image_id: str, region: int, annotator: str,
                      label: int | None) -> None:
    """One answer: the class id of `region` or None ("mixed / unsure"); committed before returning.
    ValueError unless the region is one of the image's queries and the class in the label space."""
    if not isinstance(annotator, str) or not annotator:
        raise ValueError(f"annotator: expected a non-empty name, got {annotator!r}")
    asked = {q.region for q in queries(p, round, image_id)}
    if region not in asked:
        raise ValueError(f"region: expected one of the regions asked about in image {image_id!r} "
                         f"(round {round}): {sorted(asked)}, got {region!r}")
    if label is not None and (not isinstance(label, (int, np.integer)) or isinstance(label, bool)
                              or not 0 <= int(label) < 255):
        raise ValueError(f"label: expected a class id 0..254 or None (mixed / unsure), got {label!r}")
    with p.store.transaction() as db:
        db.execute("INSERT INTO region_answers VALUES (?,?,?,?,?,?) ON CONFLICT (round, image_id, region, annotator) "
                   "DO UPDATE SET label=excluded.label, time=excluded.time",
                   (round, image_id, int(region), annotator, None if label is None else int(label), now()))


def answers(p: Project, round: int, image_id: str) -> dict[int, int | None]:
    """region -> its latest answer (class id, or None for "mixed / unsure"), over all annotators."""
    _tables(p)
    out: dict[int, int | None] = {}
    for region, label in p.store.db.execute("SELECT region, label FROM region_answers WHERE round=? AND image_id=? "
                                      "ORDER BY time", (check_round(round), image_id)):
        out[int(region)] = None if label is None else int(label)
    return out


def answers_of(p: Project, round: int, annotator: str) -> dict[tuple[str, int], int | None]:
    """{(image_id, region): class id or None (mixed / unsure)} of one annotator's answers in one round."""
    _tables(p)
    return {(i, int(r)): (None if label is None else int(label)) for i, r, label in p.store.db.execute(
        "SELECT image_id, region, label FROM region_answers WHERE round=? AND annotator=?",
        (check_round(round), annotator))}


def answer_count(p: Project, round: int) -> tuple[int, int]:
    """(queries answered, queries) over every image of the round."""
    _tables(p)
    total = p.store.db.execute("SELECT COUNT(*) FROM region_queries WHERE round=?", (check_round(round),)).fetchone()[0]
    done = p.store.db.execute("SELECT COUNT(*) FROM region_queries q WHERE round=? AND EXISTS (SELECT 1 FROM "
                        "region_answers a WHERE a.round=q.round AND a.image_id=q.image_id AND a.region=q.region)",
                        (round,)).fetchone()[0]
    return int(done), int(total)


def unanswered(p: Project, round: int, image_id: str) -> list[RegionQuery]:
    """The image's queries without an answer yet, in rank order."""
    have = answers(p, round, image_id)
    return [q for q in queries(p, round, image_id) if q.region not in have]


def finish_image(p: Project, round: int, image_id: str, *, ignore_index: int = 255,
                 annotator: str | None = None) -> bool:
    """Write the image's partial mask (its answers over its fill) as its mask of the round once every
    query has an answer; True if it did."""
    asked = queries(p, round, image_id)
    have = answers(p, round, image_id)
    if not asked or any(q.region not in have for q in asked):
        return False
    mask = partial_mask(segments(p, round, image_id), have, base=_base(p, round, image_id),
                        ignore_index=ignore_index)
    p.answers.add_mask(round, image_id, mask, source=REGION_SOURCE, annotator=annotator)
    return True


def set_labels(p: Project, kind: str | None = None, regions_per_image: int | None = None) -> dict[str, tuple]:
    """Change `labels.kind` ("masks" | "regions") and `labels.regions_per_image` in blindspots.toml; returns
    {key: (old, new)} of what changed. Takes effect for every round whose masks step has not made its
    queries yet."""
    if kind is not None and kind not in LABEL_KINDS:
        raise ValueError(f"--labels: expected one of {list(LABEL_KINDS)}, got {kind!r}")
    if regions_per_image is not None and (isinstance(regions_per_image, bool) or not isinstance(regions_per_image, int)
                                          or regions_per_image < 1):
        raise ValueError(f"--regions-per-image: expected an integer >= 1, got {regions_per_image!r}")
    old = p.config.labels
    new = replace(old, kind=old.kind if kind is None else kind,
                  regions_per_image=old.regions_per_image if regions_per_image is None else regions_per_image)
    changed = {f"labels.{k}": (getattr(old, k), getattr(new, k)) for k in ("kind", "regions_per_image")
               if getattr(old, k) != getattr(new, k)}
    if changed:
        cfg = replace(p.config, labels=new)
        save_config(cfg, p.path / CONFIG_FILE)
        p.config = cfg
        p.journal.log_event("config", {k: {"old": a, "new": b} for k, (a, b) in changed.items()})
    return changed

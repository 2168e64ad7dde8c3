"""What the pages show, read from the project by id only.

`ProjectView` turns ids into pixels and work queues: pool images (through the project's pool
source, `Config.open_pool`: it only reads ids it listed; a folder pool refuses links that leave
its root; an object-store pool fetches the bytes from the store), the target's argmax
maps saved by the scan, stored masks, attached vote sets and label-issue review sets. No
request value is ever joined into a file path before it has been found in one of these id
lists, and every resolved path is checked to stay inside its root (symlinks included).
"""
from __future__ import annotations

import io
import json
import logging
import threading
from collections import OrderedDict
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.app.quote import quote
from blindspots.app.tables import AppStore
from blindspots.data.classes import Classes
from blindspots.data.formats.masks import read_mask
from blindspots.data.sources.decode import decode_image
from blindspots.ids import artifact_name, find_artifact, legacy_artifact_name
from blindspots.loop import masks_needed, project_classes, status, target_column
from blindspots.loop.models import load_spec
from blindspots.loop.regions import query_images as region_images
from blindspots.loop.project import Project

log = logging.getLogger(__name__)


class NotFound(LookupError):
    """An id, round or set that is not known (the API answers 404)."""


def inside(path: Path, root: Path) -> bool:
    """True if `path` resolves (links followed) to `root` or below it."""
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except (ValueError, OSError):
        return False


def png_bytes(array: np.ndarray, mode: str | None = None) -> bytes:
    """Encode uint8 [H, W] or [H, W, 3|4] as PNG (fast zlib level: small images, sent once)."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array), mode=mode).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


#: Pool files re-encoded as JPEG for the browser (their source is lossy already).
JPEG_SUFFIXES = frozenset({".jpg", ".jpeg", ".jpe", ".jfif"})


def jpeg_bytes(rgb: np.ndarray, quality: int = 92) -> bytes:
    """Encode uint8 [H, W, 3] as a baseline JPEG (4:4:4 at this quality: class edges stay crisp)."""
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(rgb)).save(buf, format="JPEG", quality=quality, subsampling=0)
    return buf.getvalue()


def overlay_rgba(mask: np.ndarray, classes: Classes) -> np.ndarray:
    """Index mask uint8 [H, W] -> uint8 [H, W, 4] in the class palette; ignored pixels transparent."""
    rgba = np.zeros(mask.shape + (4,), dtype=np.uint8)
    valid = mask < classes.num_classes
    rgba[valid, :3] = classes.palette[mask[valid]]
    rgba[valid, 3] = 255
    return rgba


def read_index_png(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im).astype(np.uint8)


class _LRU:
    """A small thread-safe LRU of encoded images (a person flips back and forth)."""

    def __init__(self, size: int = 256) -> None:
        self.size, self._d, self._lock = size, OrderedDict(), threading.Lock()

    def get(self, key: Any, make: Any) -> Any:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        value = make()
        with self._lock:
            self._d[key] = value
            while len(self._d) > self.size:
                self._d.popitem(last=False)
        return value


class ProjectView:
    """Read access for the app (one per app, shared by request threads)."""

    def __init__(self, project: Project, store: AppStore) -> None:
        self.project = project
        self.store = store
        self._pool: Any = None
        self._classes: Classes | None = None
        self._lock = threading.Lock()
        self._cache = _LRU()
        self._tables: dict[tuple[str, float], pd.DataFrame] = {}

    # ---- project basics -----------------------------------------------------------------------
    @property
    def pool(self) -> Any:
        with self._lock:
            if self._pool is None:  # any pool source: a folder, an object store, shards (`data.sources`)
                self._pool = self.project.config.open_pool()
            return self._pool

    @property
    def classes(self) -> Classes:
        """The target's label space: from the scan manifest, else from its checkpoint."""
        with self._lock:
            if self._classes is None:
                def load_target() -> Any:  # no scan yet: the target from its spec, whatever its kind
                    rec = self.project.registry.model(self.project.config.target.name, 0)
                    return load_spec(rec.spec, import_dir=rec.meta.get("import_dir"))

                self._classes = project_classes(self.project, load_target)
            return self._classes

    def classes_json(self) -> dict:
        c = self.classes
        return {"names": list(c.names), "ignore_index": c.ignore_index,
                "palette": ["#%02x%02x%02x" % tuple(int(v) for v in p) for p in c.palette]}

    def status(self) -> Any:
        return status(self.project)

    # ---- rounds and queues ----------------------------------------------------------------------
    def rating_round(self) -> int | None:
        """The round whose candidates M take ratings now: mined, and S not formed yet."""
        return self.project.answers.rating_round()

    def is_candidate(self, round: int, image_id: str) -> bool:
        return self.project.answers.is_candidate(round, image_id, "M")

    def rate_queue(self, annotator: str) -> dict:
        """{round, total, done, items: [{id, score}]}: every candidate of M, in rank order, with this
        annotator's answer (1..5, "ood" or None)."""
        rnd = self.rating_round()
        if rnd is None:
            return {"round": None, "total": 0, "done": 0, "items": []}
        mine = self.project.answers.ratings_of(rnd, annotator)
        ids = self.project.answers.candidate_ids(rnd, "M")
        items = [{"id": i, "score": mine.get(i)} for i in ids]
        return {"round": rnd, "total": len(ids), "done": sum(1 for i in ids if i in mine), "items": items}

    def rating_count(self, round: int, annotator: str) -> int:
        # Only candidates of M can be rated through the app, so no join with candidates is needed.
        return self.project.answers.rating_count(round, annotator)

    def mask_round(self) -> int | None:
        """The latest round with S or T formed whose masks step is not done."""
        return self.project.answers.mask_round()

    def masks_needed(self, round: int) -> list[str]:
        return masks_needed(self.project, round)

    def label_queue(self) -> dict:
        """Round masks (S ∪ T) and confirmed label errors to fix, each with whether it is done."""
        rnd = self.mask_round()
        items: list[dict] = []
        if rnd is not None:
            have = set(self.project.answers.masks_for_round(rnd)["id"])
            by_region = set(region_images(self.project, rnd))  # answered on the region page instead
            items = [{"kind": "round", "ref": str(rnd), "id": i, "done": i in have} for i in self.masks_needed(rnd)
                     if i not in by_region]
        fixed = {(f["set"], f["id"]) for f in self.store.fixes()}
        for s, i in self.confirmed_errors():
            items.append({"kind": "fix", "ref": s, "id": i, "done": (s, i) in fixed})
        return {"round": rnd, "items": items, "done": sum(x["done"] for x in items), "total": len(items)}

    # ---- pool images and maps --------------------------------------------------------------------
    def pool_image(self, image_id: str) -> np.ndarray:
        """uint8 [H, W, 3] of a pool image; NotFound for an id the pool does not list."""
        pool = self.pool
        if not isinstance(image_id, str) or image_id not in pool:
            raise NotFound(f"id: expected an image id of the pool, got {quote(image_id)}")
        try:
            return pool.load(image_id)
        except ValueError as e:  # includes ImageDecodeError and links that now leave the root
            raise NotFound(f"id: image {quote(image_id)} cannot be read ({e})") from None

    def pool_encoded(self, image_id: str) -> tuple[bytes, str]:
        """(bytes, media type) of a pool image for the browser: JPEG when the file is a JPEG (already lossy:
        3-5x smaller than PNG on opencv-doc's photos), else lossless PNG. Decoded and EXIF-rotated
        as the models saw it, so its pixels line up with the maps."""
        def make() -> tuple[bytes, str]:
            rgb = self.pool_image(image_id)
            if PurePosixPath(image_id).suffix.lower() in JPEG_SUFFIXES:  # ids keep the file's extension
                return jpeg_bytes(rgb), "image/jpeg"
            return png_bytes(rgb), "image/png"
        return self._cache.get(("pool", image_id), make)

    def prediction(self, round: int, image_id: str) -> np.ndarray | None:
        """The target f_t^(round)'s argmax map uint8 [H, W] saved by the scan, or None."""
        if image_id not in self.pool:
            raise NotFound(f"id: expected an image id of the pool, got {quote(image_id)}")
        root = self.project.scan_dir / "maps" / target_column(self.project, round)
        path = find_artifact(root, image_id)  # the id -> file-name rule (legacy id + ".png" too)
        if path is None or not inside(path, self.project.scan_dir):
            return None
        return read_index_png(path)

    def prediction_png(self, round: int, image_id: str) -> bytes:
        def make() -> bytes:
            m = self.prediction(round, image_id)
            if m is None:
                raise NotFound(f"id: no saved prediction of round {round} for {quote(image_id)} (scan with save_maps)")
            return png_bytes(overlay_rgba(m, self.classes))
        return self._cache.get(("pred", round, image_id), make)

    def stored_mask(self, round: int, image_id: str) -> np.ndarray | None:
        path = self.project.answers.stored_mask_path(round, image_id)
        if path is None:
            return None
        return read_index_png(path) if path.is_file() and inside(path, self.project.path) else None

    # ---- vote sets (Defuse scenario review folders) -----------------------------------------------
    def _csv(self, path: Path) -> pd.DataFrame:
        key = (str(path), path.stat().st_mtime)
        if key not in self._tables:
            self._tables[key] = pd.read_csv(path, dtype={"item_id": str, "id": str})
        return self._tables[key]

    def _attached(self, kind: str, name: str) -> dict:
        """The attached set `name` of `kind` ("vote" or "review"); NotFound otherwise."""
        for s in self.store.sets(kind):
            if s["name"] == name:
                return s
        raise NotFound(f"set: expected an attached {kind} set, got {quote(name)}")

    def vote_set(self, name: str) -> dict:
        return self._attached("vote", name)

    def vote_items(self, name: str) -> pd.DataFrame:
        """items.csv of a vote set: item_id, scenario, prediction (hidden from annotators)."""
        return self._csv(self.vote_set(name)["path"] / "items.csv")

    def vote_class_names(self, name: str) -> list[str]:
        return list(json.loads((self.vote_set(name)["path"] / "classes.json").read_text())["class_names"])

    def vote_prompt(self, name: str) -> str | None:
        """The set's own question (classes.json "prompt", e.g. segmentation scenarios), else None."""
        prompt = json.loads((self.vote_set(name)["path"] / "classes.json").read_text()).get("prompt")
        return str(prompt) if prompt else None

    def vote_queue(self, annotator: str) -> dict:
        mine = self.project.answers.votes_of(annotator)
        sets = []
        for s in self.store.sets("vote"):
            ids = list(self.vote_items(s["name"])["item_id"])
            sets.append({"set": s["name"], "classes": self.vote_class_names(s["name"]), "prompt": self.vote_prompt(s["name"]),
                         "items": [{"id": i, "done": i in mine, "label": mine.get(i)} for i in ids]})
        total = sum(len(s["items"]) for s in sets)
        done = sum(x["done"] for s in sets for x in s["items"])
        return {"sets": sets, "total": total, "done": done}

    def vote_png(self, name: str, item_id: str) -> bytes:
        s = self.vote_set(name)
        if item_id not in set(self.vote_items(name)["item_id"]):
            raise NotFound(f"id: expected an item of vote set {quote(name)}, got {quote(item_id)}")
        path = s["path"] / "images" / f"{item_id}.png"
        if not path.is_file() or not inside(path, s["path"]):
            raise NotFound(f"id: the image of item {quote(item_id)} is missing or leaves its set folder")

        def make() -> bytes:
            return png_bytes(decode_image(path))
        return self._cache.get(("vote", name, item_id), make)

    # ---- label-issue review sets -----------------------------------------------------------------
    def review_set(self, name: str) -> dict:
        return self._attached("review", name)

    def review_regions(self, name: str) -> pd.DataFrame:
        """regions.csv of a `blindspots label-issues` output (id, region, kind, bbox, score...)."""
        return self._csv(self.review_set(name)["path"] / "regions.csv")

    def review_images(self, name: str) -> list[str]:
        """Image ids with at least one region, worst first (images.csv order)."""
        s = self.review_set(name)
        regs = self.review_regions(name)
        with_regions = set(regs["id"].astype(str))
        order = list(self._csv(s["path"] / "images.csv")["id"].astype(str)) if (s["path"] / "images.csv").is_file() \
            else sorted(with_regions)
        return [i for i in order if i in with_regions]

    def review_file(self, name: str, image_id: str, layer: str) -> Path:
        """The file of one layer ("image", "given", "pred") of a review image, checked by id."""
        s = self.review_set(name)
        if image_id not in set(self.review_images(name)):
            raise NotFound(f"id: expected an image of review set {quote(name)}, got {quote(image_id)}")
        meta = s["meta"]
        key = {"image": "images", "given": "masks", "pred": "predictions"}.get(layer)
        if key is None:
            raise ValueError(f"layer: expected 'image', 'given' or 'pred', got {layer!r}")
        root = Path(meta[key])
        # Masks and predictions follow the id -> file-name rule (blindspots.ids); legacy id + ".png" too.
        cands = [root / image_id] if layer == "image" else \
            [root / artifact_name(image_id), root / legacy_artifact_name(image_id)]
        if layer == "image" and not cands[0].is_file():
            cands = sorted(root.glob(f"{image_id}.*"))
        for p in cands:
            if p.is_file() and inside(p, root):
                return p
        raise NotFound(f"id: no {layer} file for {quote(image_id)} in review set {quote(name)}")

    def review_layer(self, name: str, image_id: str, layer: str) -> np.ndarray:
        p = self.review_file(name, image_id, layer)
        return decode_image(p) if layer == "image" else read_mask(p, classes=self.classes)

    def review_png(self, name: str, image_id: str, layer: str) -> bytes:
        def make() -> bytes:
            arr = self.review_layer(name, image_id, layer)
            return png_bytes(arr if layer == "image" else overlay_rgba(arr, self.classes))
        return self._cache.get(("review", name, image_id, layer), make)

    def review_queue(self, annotator: str) -> dict:
        mine = self.project.answers.verdicts_of(annotator)
        sets = []
        for s in self.store.sets("review"):
            regs = self.review_regions(s["name"])
            by_image = {str(k): g for k, g in regs.groupby(regs["id"].astype(str), sort=False)}
            images = []
            for i in self.review_images(s["name"]):
                regions = [{"region": str(int(r.region)), "kind": r.kind, "given": int(r.given_label),
                            "predicted": int(r.predicted_label), "area": int(r.area),
                            "box": [int(r.x0), int(r.y0), int(r.x1), int(r.y1)], "score": float(r.score),
                            "verdict": mine.get((f"{s['name']}/{i}", str(int(r.region))))}
                           for r in by_image[i].itertuples()]
                images.append({"id": i, "regions": regions, "done": all(x["verdict"] for x in regions)})
            sets.append({"set": s["name"], "images": images})
        total = sum(len(s["images"]) for s in sets)
        return {"sets": sets, "total": total, "done": sum(x["done"] for s in sets for x in s["images"])}

    def has_region(self, name: str, image_id: str, region: str) -> bool:
        regs = self.review_regions(name)
        rr = regs[(regs["id"].astype(str) == image_id)]
        return region in {str(int(r)) for r in rr["region"]}

    def confirmed_errors(self) -> list[tuple[str, str]]:
        """(set, image id) of review images with at least one region confirmed as an error."""
        out = []
        for key in self.project.answers.error_image_ids():
            s, _, i = key.partition("/")
            if s in {x["name"] for x in self.store.sets("review")}:
                out.append((s, i))
        return out

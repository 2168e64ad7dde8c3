"""Per-pixel statistics streamed chunk by chunk: given label, its probability, argmax and max.

`ArrayStats` recomputes them from re-iterable arrays on every pass (no extra memory);
`CachedStats` computes them once from a one-shot source (an iterable of batches or a model over a
dataset) and keeps them in flat files on disk, read back with plain file reads, so resident memory
stays flat in N. A cache directory that is given explicitly makes the model pass resumable.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from blindspots.atomic import write_atomic
from blindspots.labels._internal.inputs import (PROB_ATOL, ArrayBatches, IterableBatches, ModelBatches, chunk_images,
                                                warn_unnormalised)
from blindspots.labels._internal.pixels import block_majority, block_mean_probs, scan_chunk

log = logging.getLogger(__name__)


@dataclass
class PixelStats:
    """Statistics of images start..start+b at one resolution.

    labels: int [b, h, w] (ignore_index kept); valid: bool [b, h, w]; score: float [b, h, w] (probability of
    the given label, 1.0 where ignored); pred: uint8|uint16 [b, h, w] argmax or None; maxprob: float
    [b, h, w] or None.
    """

    start: int
    labels: np.ndarray
    valid: np.ndarray
    score: np.ndarray
    pred: np.ndarray | None = None
    maxprob: np.ndarray | None = None
    note: str | None = None  # set by checked chunks whose probabilities do not sum to 1

    def __len__(self) -> int:
        return self.labels.shape[0]


def _valid(labels: np.ndarray, ignore_index: int | None) -> np.ndarray:
    if ignore_index is None:
        return np.ones(labels.shape, dtype=bool)
    return labels != ignore_index


def compute_stats(start: int, labels: np.ndarray, probs: np.ndarray, ignore_index: int | None,
                  need_pred: bool, check: bool = False, atol: float = PROB_ATOL, describe: bool = True) -> PixelStats:
    """labels int [b,H,W], probs float [b,K,H,W] -> PixelStats at that resolution, in one read of probs.

    check: validate the values (invalid input raises; `note` tells where rows do not sum to 1, in
    detail when `describe`: callers that already warned skip locating it)."""
    r = scan_chunk(labels, probs, ignore_index, need_pred=need_pred, check=check, start=start, atol=atol,
                   describe=describe)
    return PixelStats(start, labels, r.valid, r.score, r.pred, r.maxprob, r.note)


def downsampled(labels: np.ndarray, probs: np.ndarray, factor: int, ignore_index: int | None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Block-majority labels and block-mean renormalised probabilities (identity for factor 1)."""
    if factor == 1:
        return labels, probs
    return (block_majority(labels, factor, probs.shape[1], ignore_index),
            block_mean_probs(probs, factor))


class ArrayStats:
    """Stats recomputed from arrays on each pass. `full=True` passes also give full-resolution stats."""

    def __init__(self, source: ArrayBatches, *, ignore_index: int | None, downsample: int,
                 batch_size: int | None, verbose: bool, atol: float) -> None:
        self.source, self.ignore_index, self.downsample = source, ignore_index, downsample
        self.verbose, self.atol = verbose, atol
        self.n, self.num_classes, self.h, self.w = source.n, source.num_classes, source.h, source.w
        self.dtype = source.dtype
        self.chunk = chunk_images(self.num_classes, self.h, self.w, batch_size)
        self.shapes = np.tile(np.array([self.h, self.w], dtype=np.int64), (self.n, 1))  # int64 [N, 2]
        self._validated = False
        self._warned = False

    def passes(self, desc: str, *, need_pred: bool, full: bool = False
               ) -> Iterator[tuple[PixelStats, PixelStats | None]]:
        """Yields (stats at the analysis resolution, full-resolution stats with pred or None)."""
        validate = not self._validated
        f = self.downsample
        with tqdm(total=self.n, desc=desc, unit="img", disable=not self.verbose, leave=False) as bar:
            for start, lab, pp in self.source.iter(self.chunk):
                fs = None
                if f == 1:
                    st = compute_stats(start, lab, pp, self.ignore_index, need_pred or full, validate, self.atol,
                                       not self._warned)
                    self._note(st)
                    fs = st if full else None
                else:
                    if full or validate:
                        fs = compute_stats(start, lab, pp, self.ignore_index, full, validate, self.atol,
                                           not self._warned)
                        self._note(fs)
                    st = compute_stats(start, *downsampled(lab, pp, f, self.ignore_index), self.ignore_index,
                                       need_pred)
                    fs = fs if full else None
                yield st, fs
                bar.update(len(lab))
        self._validated = True

    def _note(self, st: PixelStats) -> None:
        """Warn once per fit when probabilities do not sum to 1."""
        if st.note is not None and not self._warned:
            warn_unnormalised(st.note, self.atol)
            self._warned = True

    def close(self) -> None:
        """Nothing to release."""


_FIELDS = ("labels", "score", "pred", "maxprob")
#: cache layout version (2: per-image sizes in shapes.bin); other versions are rebuilt, never resumed
_VERSION = 2


def _model_source_key(source: ModelBatches) -> dict[str, str]:
    """What a resumable cache was built from: the model's spec (`load_model`'s `info["spec"]`; "" for a
    model object without one, which cannot be told apart across processes) and the dataset's ids (sha1),
    so a cache_dir reused with another model spec or dataset is rebuilt, not resumed."""
    info = getattr(source.model, "info", None)
    spec = (info.get("spec") if isinstance(info, dict) else None) or ""
    ids = getattr(source.dataset, "ids", None)
    digest = hashlib.sha1("\n".join(map(str, ids)).encode()).hexdigest() if ids is not None else ""
    return {"model": str(spec), "ids": digest}


class CachedStats:
    """Stats of a one-shot source, computed once and kept in flat files (analysis and full resolution).

    Images may differ in size: `shapes.bin` keeps each image's (H, W) (int64 [N, 2] as `shapes`), the
    pixel files are the images' pixels one after the other, and passes yield chunks of consecutive
    images of one size. `h`, `w` are the size of every image, or None when sizes are mixed.
    cache_dir: where the files go; None makes a temporary directory removed by `close()`. With an
    explicit cache_dir and a `ModelBatches` source, an interrupted build resumes where it stopped.
    """

    def __init__(self, source: IterableBatches, *, ignore_index: int | None, downsample: int,
                 batch_size: int | None, verbose: bool, atol: float, cache_dir: str | os.PathLike | None = None
                 ) -> None:
        self.source, self.ignore_index, self.downsample = source, ignore_index, downsample
        self.verbose, self.atol, self.batch_size = verbose, atol, batch_size
        self._tmp = cache_dir is None
        self.dir = Path(tempfile.mkdtemp(prefix="blindspots-labels-")) if cache_dir is None else Path(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.n = 0
        self._build()

    # --- building -------------------------------------------------------------------------------
    def _manifest(self) -> dict:
        p = self.dir / "manifest.json"
        return json.loads(p.read_text()) if p.is_file() else {}

    def _build(self) -> None:
        man = self._manifest()
        settings = {"ignore_index": self.ignore_index, "downsample": self.downsample}
        if isinstance(self.source, ModelBatches):
            settings["source"] = _model_source_key(self.source)
        start = 0
        if man and man.get("settings") == settings and isinstance(self.source, ModelBatches) \
                and man.get("total") == len(self.source.dataset) and man.get("version") == _VERSION:
            start = int(man.get("done", 0))
            self._set_layout(man)
            self._truncate(start)
            log.info("resuming label-issue cache in %s at image %d", self.dir, start)
        elif man:
            if man.get("settings", {}).get("source") != settings.get("source"):
                log.info("label-issue cache in %s was built from another model or dataset: rebuilding", self.dir)
            for f in self.dir.glob("*.bin"):
                f.unlink()
        total = self.source.n
        files: dict[str, object] = {}
        warned = False
        try:
            with tqdm(total=total, initial=start, desc="computing pixel statistics", unit="img",
                      disable=not self.verbose, leave=False) as bar:
                for s, lab, pp in self.source.iter(None, start):
                    full = compute_stats(s, lab, pp, self.ignore_index, True, True, self.atol, not warned)
                    if full.note is not None and not warned:
                        warn_unnormalised(full.note, self.atol)
                        warned = True
                    if not files:
                        if not hasattr(self, "_layout"):
                            self._set_layout({"num_classes": int(pp.shape[1]), "dtype": np.dtype(pp.dtype).str,
                                              "label_dtype": self._label_dtype(pp.shape[1]).str})
                        files = {name: open(self.dir / f"{name}.bin", "ab") for name in self._names()}
                    self._write(files, "", full)
                    if self.downsample > 1:
                        small = compute_stats(s, *downsampled(lab, pp, self.downsample, self.ignore_index),
                                              self.ignore_index, True)
                        self._write(files, "small_", small)
                    sizes = np.tile(np.array(lab.shape[1:], dtype=np.int64), (len(lab), 1))
                    files["shapes"].write(sizes.tobytes())  # type: ignore[attr-defined]
                    for f in files.values():
                        f.flush()  # type: ignore[attr-defined]
                    done = s + len(lab)
                    self._save_manifest(settings, done, total, complete=False)
                    bar.update(len(lab))
        finally:
            for f in files.values():
                f.close()  # type: ignore[attr-defined]
        if not hasattr(self, "num_classes"):
            raise ValueError("labels: expected at least one batch of (labels, pred_probs), got none")
        self._load_shapes()
        self._save_manifest(settings, self.n, self.n, complete=True)

    def _label_dtype(self, k: int) -> np.dtype:
        small = k <= 255 and (self.ignore_index is None or 0 <= self.ignore_index <= 255)
        return np.dtype(np.uint8 if small else np.int32)

    def _set_layout(self, man: dict) -> None:
        self.num_classes = int(man["num_classes"])
        self.dtype = np.dtype(man["dtype"])
        self.label_dtype = np.dtype(man["label_dtype"])
        self.pred_dtype = np.dtype(np.uint8 if self.num_classes <= 256 else np.uint16)
        self._layout = {k: man[k] for k in ("num_classes", "dtype", "label_dtype")}

    def _names(self) -> list[str]:
        names = list(_FIELDS)
        if self.downsample > 1:
            names += [f"small_{f}" for f in _FIELDS]
        return names + ["shapes"]

    def _dtype_of(self, field: str) -> np.dtype:
        base = field.removeprefix("small_")
        return {"labels": self.label_dtype, "score": self.dtype, "pred": self.pred_dtype,
                "maxprob": self.dtype, "shapes": np.dtype(np.int64)}[base]

    def _write(self, files: dict, prefix: str, st: PixelStats) -> None:
        for name in _FIELDS:
            arr = getattr(st, name)
            files[prefix + name].write(np.ascontiguousarray(arr, dtype=self._dtype_of(prefix + name)).tobytes())

    def _save_manifest(self, settings: dict, done: int, total: int | None, complete: bool) -> None:
        man = dict(self._layout, settings=settings, done=done, total=total, complete=complete, version=_VERSION)
        write_atomic(self.dir / "manifest.json", lambda t: t.write_text(json.dumps(man)))

    def _read_shapes(self, n_images: int | None = None) -> np.ndarray:
        """int64 [n, 2]: (H, W) of the first n_images cached images (all when None)."""
        p = self.dir / "shapes.bin"
        if not p.is_file():
            return np.zeros((0, 2), dtype=np.int64)
        arr = np.fromfile(p, dtype=np.int64)
        arr = arr[: (arr.size // 2) * 2].reshape(-1, 2)
        return arr if n_images is None else arr[:n_images]

    def _offsets(self, shapes: np.ndarray, factor: int) -> np.ndarray:
        """int64 [n + 1]: pixel offset of each image in a file at resolution 1/factor."""
        px = (shapes[:, 0] // factor) * (shapes[:, 1] // factor)
        return np.concatenate([[0], np.cumsum(px, dtype=np.int64)])

    def _truncate(self, n_images: int) -> None:
        shapes = self._read_shapes(n_images)
        n_images = len(shapes)
        for name in self._names():
            p = self.dir / f"{name}.bin"
            if not p.is_file():
                continue
            if name == "shapes":
                size = n_images * 2
            else:
                size = int(self._offsets(shapes, self.downsample if name.startswith("small_") else 1)[-1])
            with open(p, "r+b") as f:
                f.truncate(size * self._dtype_of(name).itemsize)

    def _load_shapes(self) -> None:
        """Read the per-image sizes; set n, shapes, h/w (None when mixed), offsets and chunk groups."""
        self.shapes = self._read_shapes()
        self.n = len(self.shapes)
        uniform = self.n > 0 and bool((self.shapes == self.shapes[0]).all())
        self.h, self.w = (int(self.shapes[0, 0]), int(self.shapes[0, 1])) if uniform else (None, None)
        self._off = {1: self._offsets(self.shapes, 1)}
        if self.downsample > 1:
            self._off[self.downsample] = self._offsets(self.shapes, self.downsample)
        self._groups = self._chunks()

    def _chunks(self) -> list[tuple[int, int]]:
        """(start, stop) of each chunk: consecutive images of one size, at most chunk_images of them."""
        out: list[tuple[int, int]] = []
        s = 0
        while s < self.n:
            e = s + 1
            while e < self.n and (self.shapes[e] == self.shapes[s]).all():
                e += 1
            h, w = (int(v) for v in self.shapes[s])
            step = chunk_images(self.num_classes, h, w, self.batch_size)
            out += [(a, min(a + step, e)) for a in range(s, e, step)]
            s = e
        return out

    # --- reading --------------------------------------------------------------------------------
    def _read(self, field: str, start: int, stop: int) -> np.ndarray:
        dt = self._dtype_of(field)
        f = self.downsample if field.startswith("small_") else 1
        off = self._off[f]
        with open(self.dir / f"{field}.bin", "rb") as fh:
            fh.seek(int(off[start]) * dt.itemsize)
            arr = np.fromfile(fh, dtype=dt, count=int(off[stop] - off[start]))
        h, w = (int(v) for v in self.shapes[start])  # a chunk holds images of one size
        return arr.reshape(stop - start, h // f, w // f)

    def _stats(self, prefix: str, s: int, e: int, need_pred: bool) -> PixelStats:
        lab = self._read(prefix + "labels", s, e)
        st = PixelStats(s, lab, _valid(lab, self.ignore_index), self._read(prefix + "score", s, e))
        if need_pred:
            st.pred, st.maxprob = self._read(prefix + "pred", s, e), self._read(prefix + "maxprob", s, e)
        return st

    def passes(self, desc: str, *, need_pred: bool, full: bool = False
               ) -> Iterator[tuple[PixelStats, PixelStats | None]]:
        """Same contract as `ArrayStats.passes`, read from the cache files (chunks of one image size)."""
        prefix = "small_" if self.downsample > 1 else ""
        with tqdm(total=self.n, desc=desc, unit="img", disable=not self.verbose, leave=False) as bar:
            for s, e in self._groups:
                st = self._stats(prefix, s, e, need_pred)
                fs = None
                if full:
                    fs = st if (not prefix and need_pred) else self._stats("", s, e, True)
                yield st, fs
                bar.update(e - s)

    def close(self) -> None:
        """Remove a temporary cache (an explicit cache_dir is kept for resuming)."""
        if self._tmp and self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

"""Image-level surprise (paper Section 5.1): fitting traces, class SA, group SA and pixel heatmaps.

- ``collect_fit_traces``: pixel sampler + trace extractor over a labelled set -> traces per label class.
- ``class_surprise``: class SA of an image = mean SA of its sampled pixels of that *predicted* class.
- ``group_surprise``: group SA = mean of the z-scored class SAs present (z-score statistics from the
  fitting set: ``estimator.sa_mean_`` / ``sa_std_``).
- ``surprise_heatmaps``: SA of every pixel; MDSA is fused into the forward pass by whitening the
  low-resolution feature map before upsampling (exact: upsampling weights sum to 1, so it commutes
  with the affine whitening); for a model on a GPU in torch ops there (``surprise.device``).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from blindspots.atomic import write_atomic
from blindspots.models.adapters import as_image_batch
from blindspots.surprise.device import device_mdsa_map, on_device
from blindspots.surprise.estimators import MDSA, SurpriseEstimator
from blindspots.surprise.fused import FUSED_MODES, fused_argmax_mdsa_map, fused_mdsa_map
from blindspots.surprise.pixel_sampling import (FIT_CAP_PER_CLASS, FIT_MAX_IMAGES, FIT_PIXELS_PER_CLASS,
                                         SCORE_PIXELS_PER_CLASS, cap_per_class, choose_images, sample_pixels)
from blindspots.surprise.traces import TraceExtractor, classes_from_scores
from blindspots.data.classes import DEFAULT_IGNORE_INDEX

logger = logging.getLogger(__name__)


def _item(dataset: Any, i: int) -> tuple[np.ndarray, Any]:
    image, target = dataset[int(i)]
    return np.asarray(image), target


def collect_fit_traces(extractor: TraceExtractor, dataset: Any, *, max_images: int | None = FIT_MAX_IMAGES,
                       per_class: int | None = FIT_PIXELS_PER_CLASS, cap: int | None = FIT_CAP_PER_CLASS,
                       seed: int = 0, ignore_index: int | None = DEFAULT_IGNORE_INDEX,
                       checkpoint: str | Path | None = None, checkpoint_key: Mapping[str, Any] | None = None,
                       progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Traces of the fitting set grouped by label class (defaults: the paper's 100 / 10,000 / 10,000).

    dataset: ``len()`` and ``dataset[i] -> (image uint8 [H, W, 3], target)`` — target a mask int [H, W]
        for segmentation (e.g. ``SegmentationSet``) or an int class id for classification; its ``ids``
        (when it has them) are passed on for features or predictions read by image id.
    checkpoint: optional ``.npz`` path; partial traces are saved after every batch and a rerun with the
        same arguments resumes after the last saved image (interrupt-safe). A checkpoint of other settings
        (per_class, seed, ignore_index, layer, interpolation, classes, or `checkpoint_key`, e.g. the model
        spec) is started over, not resumed.
    Returns (traces float32 [n, d], labels int64 [n]); for classification one trace per image.
    """
    n = len(dataset)
    rng = np.random.default_rng(seed)
    chosen = choose_images(n, max_images, rng)
    pixel_rngs = np.random.SeedSequence(seed).spawn(chosen.size)  # one stream per image: resumable
    traces: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    done = 0
    ckpt = Path(checkpoint) if checkpoint is not None else None
    settings = json.dumps({"per_class": per_class, "seed": seed, "ignore_index": ignore_index,
                           "layer": None if extractor.layer is None else str(extractor.layer),
                           "interpolation": extractor.interpolation, "align_corners": extractor.align_corners,
                           "num_classes": extractor.num_classes, "task": extractor.task,
                           **{str(k): str(v) for k, v in (checkpoint_key or {}).items()}}, sort_keys=True)
    if ckpt is not None and ckpt.is_file():
        with np.load(ckpt) as data:
            same = "settings" in data.files and str(data["settings"]) == settings
            if not same:
                logger.warning("%s: a checkpoint of other settings (model, layer, per_class, seed, ...); "
                               "collecting the traces again", ckpt)
            elif data["chosen"].shape == chosen.shape and np.array_equal(data["chosen"], chosen):
                traces, labels, done = [data["traces"]], [data["labels"]], int(data["done"])
                logger.info("resuming trace collection after %d of %d images", done, chosen.size)
    bs = extractor.batch_size
    all_ids = getattr(dataset, "ids", None)
    bar = tqdm(total=chosen.size, initial=done, desc="fit traces", disable=not progress)
    pos = done
    outside: set[int] = set()  # mask ids >= the model's num_classes (never sampled)
    while pos < chosen.size:
        items = [_item(dataset, i) for i in chosen[pos:pos + bs]]
        shape0 = items[0][0].shape  # equal-size chunk (the model batches one size at a time)
        items = items[:next((j for j, it in enumerate(items) if it[0].shape != shape0), len(items))]
        batch = as_image_batch([im for im, _ in items])
        ids = None if all_ids is None else [all_ids[int(i)] for i in chosen[pos:pos + len(items)]]
        feat, _ = extractor.forward(batch, ids)
        for j, (_, target) in enumerate(items):
            if extractor.task == "classification":
                traces.append(feat[j:j + 1].cpu().numpy())
                labels.append(np.array([int(target)], dtype=np.int64))
                continue
            mask = np.asarray(target)
            if mask.shape != batch.shape[1:3]:
                raise ValueError(f"dataset: expected a mask of shape {batch.shape[1:3]} for item "
                                 f"{int(chosen[pos + j])}, got {mask.shape}")
            if extractor.num_classes:
                top = int(mask.max(initial=0))
                if top >= extractor.num_classes:
                    vals = np.unique(mask[mask >= extractor.num_classes])
                    outside.update(int(v) for v in vals if v != ignore_index)
            r = np.random.default_rng(pixel_rngs[pos + j])
            idx, cls = sample_pixels(mask, per_class, r, ignore_index=ignore_index,
                                     num_classes=extractor.num_classes)
            if idx.size:
                traces.append(extractor.pixel_traces(feat[j], batch.shape[1:3], idx))
                labels.append(cls)
        pos += len(items)
        bar.update(len(items))
        if ckpt is not None:
            _save_partial(ckpt, chosen, traces, labels, pos, settings)
    bar.close()
    if outside:
        logger.warning("masks: label ids %s are outside the model's classes 0..%d and were not sampled "
                       "(masks of another label set, or a missing ignore_index?)", sorted(outside),
                       extractor.num_classes - 1)
    if not traces:
        raise ValueError("dataset: expected labelled pixels to sample, got none (all ignore_index?)")
    x = np.concatenate(traces).astype(np.float32, copy=False)
    y = np.concatenate(labels)
    keep = cap_per_class(y, cap, np.random.default_rng([seed, 1]))
    return x[keep], y[keep]


def _save_partial(path: Path, chosen: np.ndarray, traces: list[np.ndarray], labels: list[np.ndarray],
                  done: int, settings: str = "") -> None:
    x = np.concatenate(traces) if traces else np.zeros((0, 0), np.float32)
    y = np.concatenate(labels) if labels else np.zeros(0, np.int64)
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:  # a file object: np.savez adds no ".npz" to the temporary name
            np.savez(fh, chosen=chosen, traces=x, labels=y, done=done, settings=np.array(settings))

    write_atomic(path, write)  # an interrupt never leaves a half-written checkpoint
    traces[:] = [x]
    labels[:] = [y]


def _check_ids(ids: Sequence[str] | None, n: int) -> list[str] | None:
    """None, or the ids as a list of n (one per image)."""
    if ids is None:
        return None
    ids = list(ids)
    if len(ids) != n:
        raise ValueError(f"ids: expected {n} image ids (one per image), got {len(ids)}")
    return ids


@dataclass
class ImageSurprise:
    """Image-level surprise of N images under one estimator.

    class_sa: float64 [N, C] mean SA of the sampled pixels predicted as each class; NaN where the
        class is not predicted in the image or has no model (``estimator.skipped_classes_``).
    pixel_counts: int64 [N, C] predicted pixels of each class.
    pred: int64 [N, H, W] argmax maps (classification: [N]); for images of different sizes a list of
        N int64 [H_i, W_i] maps.
    """

    class_sa: np.ndarray
    pixel_counts: np.ndarray
    pred: np.ndarray

    def image_sa(self, estimator: SurpriseEstimator, groups: Mapping[str, Sequence[int]] | None = None
                 ) -> np.ndarray:
        """One value per image float64 [N]: mean z-scored class SA over the modelled classes present (the
        group SA of all classes, or of the union of ``groups``); NaN only where the image shows none."""
        if groups:
            members = sorted({int(c) for g in groups.values() for c in g})
        else:
            members = [int(c) for c in estimator.classes_ if c < self.class_sa.shape[1]]
        return group_surprise(self.class_sa, estimator, {"all": members})[:, 0]


def size_groups(images: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray] | None:
    """Indices int64 [k] of the images of each size, in order of first appearance; None when every
    image has one size (then the callers run one batch, exactly as for an [N, H, W, 3] array)."""
    if isinstance(images, np.ndarray):
        return None
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, im in enumerate(images):
        groups.setdefault(np.shape(im), []).append(i)
    if len(groups) <= 1:
        return None
    return [np.asarray(ix, dtype=np.int64) for ix in groups.values()]


def class_surprise(extractor: TraceExtractor, estimator: SurpriseEstimator,
                   images: np.ndarray | Sequence[np.ndarray], *, per_class: int | None = SCORE_PIXELS_PER_CLASS,
                   seed: int = 0, progress: bool = False, ids: Sequence[str] | None = None) -> ImageSurprise:
    """Class SA per image: up to `per_class` (paper: 1,000) pixels of each predicted class are scored.

    images: uint8 [N, H, W, 3], or a sequence of uint8 [H_i, W_i, 3] images of different sizes (run one
    size at a time; each image's pixel sample depends on (seed, its index) only, not on the grouping).
    Classification: class_sa holds each image's SA in its predicted class.
    ids: one image id per image, for features or predictions read by id (precomputed); else None.
    """
    images = images if isinstance(images, np.ndarray) else list(images)
    ids = _check_ids(ids, len(images))
    rngs = np.random.SeedSequence(seed).spawn(len(images))
    groups = size_groups(images)
    if groups is None:
        return _class_surprise(extractor, estimator, as_image_batch(images), rngs, per_class, progress, ids)
    n, c = len(images), extractor.num_classes
    out = ImageSurprise(np.full((n, c), np.nan), np.zeros((n, c), dtype=np.int64), [None] * n)  # type: ignore[arg-type]
    for ix in groups:
        part = _class_surprise(extractor, estimator, as_image_batch([images[i] for i in ix]),
                               [rngs[i] for i in ix], per_class, progress,
                               None if ids is None else [ids[i] for i in ix])
        out.class_sa[ix], out.pixel_counts[ix] = part.class_sa, part.pixel_counts
        for k, i in enumerate(ix):
            out.pred[i] = part.pred[k]
    if extractor.task == "classification":
        out.pred = np.asarray(out.pred, dtype=np.int64)
    return out


def _class_surprise(extractor: TraceExtractor, estimator: SurpriseEstimator, batch: np.ndarray,
                    rngs: Sequence[np.random.SeedSequence], per_class: int | None, progress: bool,
                    ids: Sequence[str] | None = None) -> ImageSurprise:
    """`class_surprise` of one batch uint8 [N, H, W, 3] of one size; rngs: one seed sequence per image."""
    n, c = batch.shape[0], extractor.num_classes
    class_sa = np.full((n, c), np.nan)
    counts = np.zeros((n, c), dtype=np.int64)
    preds = []
    modelled = set(estimator.classes_.tolist())
    for start, feat, proba in tqdm(extractor.iter_batches(batch, ids), total=-(-n // extractor.batch_size),
                                   desc="class SA", disable=not progress):
        pred = proba.argmax(axis=1)
        preds.append(pred)
        if extractor.task == "classification":
            ok = np.isin(pred, list(modelled))
            if ok.any():
                sa = estimator.score(feat.cpu().numpy()[ok], pred[ok])
                rows = start + np.flatnonzero(ok)
                class_sa[rows, pred[ok]] = sa
            counts[start + np.arange(pred.size), pred] = 1
            continue
        for j in range(pred.shape[0]):
            i = start + j
            counts[i] = np.bincount(pred[j].ravel(), minlength=c)[:c]
            idx, cls = sample_pixels(pred[j], per_class, np.random.default_rng(rngs[i]), ignore_index=None)
            ok = np.isin(cls, list(modelled))
            if not ok.any():
                continue
            idx, cls = idx[ok], cls[ok]
            sa = estimator.score(extractor.pixel_traces(feat[j], pred.shape[1:], idx), cls)
            sums = np.bincount(cls, weights=sa, minlength=c)
            k = np.bincount(cls, minlength=c)
            present = k > 0
            class_sa[i, present] = sums[present] / k[present]
    return ImageSurprise(class_sa=class_sa, pixel_counts=counts, pred=np.concatenate(preds).astype(np.int64))


def group_surprise(class_sa: np.ndarray, estimator: SurpriseEstimator,
                   groups: Mapping[str, Sequence[int]] | None = None) -> np.ndarray:
    """Group SA float64 [N, G]: mean of the z-scored class SAs of the group's classes present in each image.

    class_sa: float64 [N, C] (NaN = class absent). groups: name -> class ids (e.g. {"lanes": [1, 2, 3]});
    None = one group per modelled class (z-scored class SA). Column order follows `groups`. NaN where
    none of a group's classes is present.
    """
    class_sa = np.asarray(class_sa, dtype=np.float64)
    if class_sa.ndim != 2:
        raise ValueError(f"class_sa: expected float [N, C], got shape {class_sa.shape}")
    if groups is None:
        groups = {str(int(c)): [int(c)] for c in estimator.classes_}
    z = np.full_like(class_sa, np.nan)
    for i, cls in enumerate(estimator.classes_):
        if cls < class_sa.shape[1]:
            z[:, cls] = (class_sa[:, cls] - estimator.sa_mean_[i]) / estimator.sa_std_[i]
    out = np.full((class_sa.shape[0], len(groups)), np.nan)
    for g, (name, members) in enumerate(groups.items()):
        members = [int(m) for m in members]
        bad = [m for m in members if not 0 <= m < class_sa.shape[1]]
        if bad or not members:
            raise ValueError(f"groups: expected class ids in 0..{class_sa.shape[1] - 1} for group {name!r}, "
                             f"got {members}")
        block = z[:, members]
        present = np.isfinite(block)
        k = present.sum(axis=1)
        total = np.where(present, block, 0.0).sum(axis=1)
        out[k > 0, g] = total[k > 0] / k[k > 0]
    return out


def mdsa_map(extractor: TraceExtractor, estimator: MDSA, features: torch.Tensor, pred: np.ndarray | torch.Tensor
             ) -> np.ndarray:
    """Per-pixel MDSA float32 [n, H, W] from low-resolution features float32 [n, d, h0, w0] and argmax
    maps int [n, H, W] (numpy or torch); NaN where the predicted class has no model.

    Bilinear / nearest models use the O(1)-per-pixel fused path (``surprise.fused``); other modes whiten
    at h0 x w0, upsample the whitened d' channels and take the norm (also exact: upsampling weights sum
    to 1, so they commute with the affine whitening)."""
    if extractor.interpolation in FUSED_MODES:
        return fused_mdsa_map(estimator, features, pred, mode=extractor.interpolation,
                              align_corners=extractor.align_corners, num_classes=extractor.num_classes)
    pred = pred.numpy() if isinstance(pred, torch.Tensor) else np.asarray(pred)
    n, (h, w) = pred.shape[0], pred.shape[1:]
    kept = torch.from_numpy(estimator.kept_features_)
    f = features.index_select(1, kept).permute(0, 2, 3, 1)  # [n, h0, w0, d']
    out = torch.full((n, h, w), float("nan"))
    pred_t = torch.from_numpy(np.asarray(pred))
    for cls in np.unique(pred):
        if cls not in estimator.classes_:
            continue
        mu, wt = estimator.whitening(int(cls))
        sel = pred_t == int(cls)
        imgs = torch.nonzero(sel.flatten(1).any(dim=1)).flatten()
        z = (f[imgs] - torch.from_numpy(mu).float()) @ torch.from_numpy(wt)  # [k, h0, w0, d']
        up = extractor.upsample(z.permute(0, 3, 1, 2), (h, w))
        sa = torch.linalg.vector_norm(up, dim=1)
        out[imgs] = torch.where(sel[imgs], sa, out[imgs])
    return out.numpy()


def surprise_heatmaps(extractor: TraceExtractor, estimator: SurpriseEstimator,
                      images: np.ndarray | Sequence[np.ndarray], *, progress: bool = False,
                      ids: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """SA of every pixel under its predicted class: (sa float32 [N, H, W], pred int64 [N, H, W]).

    Pixels whose predicted class has no model are NaN (listed in ``estimator.skipped_classes_``).
    Images of different sizes (a sequence): run one size at a time; returns two lists of N maps
    (float32 [H_i, W_i] and int64 [H_i, W_i]) in the input order. ids: as in ``class_surprise``.
    """
    if extractor.task != "segmentation":
        raise ValueError("extractor: expected a segmentation model for pixel heatmaps, got a classifier")
    images = images if isinstance(images, np.ndarray) else list(images)
    ids = _check_ids(ids, len(images))
    groups = size_groups(images)
    if groups is not None:
        sa_maps: list = [None] * len(images)
        pred_maps: list = [None] * len(images)
        for ix in groups:
            sa, pred = surprise_heatmaps(extractor, estimator, as_image_batch([images[i] for i in ix]),
                                         progress=progress, ids=None if ids is None else [ids[i] for i in ix])
            for k, i in enumerate(ix):
                sa_maps[i], pred_maps[i] = sa[k], pred[k]
        return sa_maps, pred_maps  # type: ignore[return-value]
    batch = as_image_batch(images)
    n, (h, w) = batch.shape[0], batch.shape[1:3]
    sa_all = np.empty((n, h, w), dtype=np.float32)
    pred_all = np.empty((n, h, w), dtype=np.int64)
    bs = extractor.batch_size
    fused = isinstance(estimator, MDSA) and extractor.interpolation in FUSED_MODES
    for start in tqdm(range(0, n, bs), desc="SA heatmaps", disable=not progress, total=-(-n // bs)):
        # argmax on the model output: no softmax, no probability array (the bare forward's extra work)
        feat, y, kind = extractor.forward_scores(batch[start:start + bs], None if ids is None else ids[start:start + bs])
        stop = start + y.shape[0]
        if fused and y.shape[1] > 1 and y.dtype == torch.float32 and y.device.type == "cpu":
            # the argmax taken in the fused path's marking pass, both maps written in place
            fused_argmax_mdsa_map(estimator, feat, y, mode=extractor.interpolation,
                                  align_corners=extractor.align_corners, num_classes=extractor.num_classes,
                                  out=sa_all[start:stop], pred_out=pred_all[start:stop])
            continue
        if fused and on_device(feat, estimator, extractor.interpolation):
            # on the forward's GPU: the features never leave it, only the two maps come back
            pred_d = classes_from_scores(y, kind, keep_device=True)
            sa_all[start:stop] = device_mdsa_map(estimator, feat, pred_d, mode=extractor.interpolation,
                                                 align_corners=extractor.align_corners).cpu().numpy()
            small = torch.uint8 if extractor.num_classes <= 256 else torch.int32  # 8x fewer bytes to copy back
            pred_all[start:stop] = pred_d.to(small).cpu().numpy()
            continue
        feat = feat.cpu()  # the host paths below (other estimators and modes) read the features as numpy
        pred_t = classes_from_scores(y, kind)
        pred = pred_t.numpy()
        pred_all[start:stop] = pred
        if isinstance(estimator, MDSA):
            sa_all[start:stop] = mdsa_map(extractor, estimator, feat, pred_t)
            continue
        up = extractor.upsample(feat, pred.shape[1:])
        for j in range(pred.shape[0]):
            flat = up[j].reshape(up.shape[1], -1).T.numpy()
            cls = pred[j].ravel()
            sa = np.full(cls.size, np.nan, dtype=np.float32)
            ok = np.isin(cls, estimator.classes_)
            if ok.any():
                sa[ok] = estimator.score(flat[ok], cls[ok])
            sa_all[start + j] = sa.reshape(pred.shape[1:])
    return sa_all, pred_all


def surprise_columns(extractor: TraceExtractor, estimator: SurpriseEstimator,
                     images: np.ndarray | Sequence[np.ndarray], model_name: str, *,
                     per_class: int | None = SCORE_PIXELS_PER_CLASS, seed: int = 0,
                     ids: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Score-table columns for a scan: ``surprise_{kind}__{M}`` (image SA: mean z-scored class SA, float32
    [N]) and ``surprise_{kind}__{M}__{k}`` (class SA of class k, float32 [N], NaN where k not predicted).
    ids: as in ``class_surprise``."""
    res = class_surprise(extractor, estimator, images, per_class=per_class, seed=seed, ids=ids)
    prefix = f"surprise_{estimator.name}__{model_name}"
    cols = {prefix: res.image_sa(estimator).astype(np.float32)}
    for k in range(res.class_sa.shape[1]):
        cols[f"{prefix}__{k}"] = res.class_sa[:, k].astype(np.float32)
    return cols

"""How well the label-issue engine finds realistic annotation errors, against simple baselines.

Two labelled sets: procedural street scenes (`blindspots.data.scenes`, 8 classes) and real brain
MRI slices (`blindspots.data.mri`, Debian `mricron-data`, 8 coarse AAL classes). In 15% of the
images the masks are corrupted the way annotators err: an object dropped (relabelled as its
surroundings), an object given another class, or a class boundary eroded/dilated by 2-4 pixels.
A model is trained on the *corrupted* masks and predicts out of fold (2-fold cross-validation by
image; per-pixel gradient boosting on multi-scale colour/intensity, gradient and position features),
so no prediction comes from a model that saw that image's labels.

Printed per set:
- image level: area under the precision-recall curve (average precision) for finding corrupted
  images, for softmin (ours = cleanlab's default, T = 0.1), cleanlab's "num_pixel_issues", and the
  paper's baselines "prediction error" (fraction of pixels whose argmax differs from the label) and
  "label likelihood" (mean predicted probability of the given label); plus the share of corrupted
  images (the AUPRC of a random ranking);
- pixel level: precision and recall of `find_label_issues` against the pixels whose label changed;
- region level: precision (a region counts as correct when at least half of its pixels changed)
  and recall (a corrupted connected component is found when regions cover >= 30% of it) of the
  typed regions of `find_issue_regions` (a region's pixels are approximated by the flagged pixels
  of its given/predicted pair inside its box), the precision of the top-M regions ranked by
  area x (1 - score) with M = the number of corrupted components, and how often the region type
  matches the corruption (dropped object -> "missing", swapped class -> "wrong_class").
  Scenes: vehicles, people and poles are the objects (dropped into their surroundings); MRI: the
  six AAL lobe groups (a dropped one becomes "brain_other").

Run: ``.venv/bin/python benchmarks/label_noise.py [--n 120] [--size 64] [--seed 0]``.
Deterministic per seed; asserts nothing.
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass

import numpy as np
from scipy import ndimage
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import average_precision_score

from threadpoolctl import threadpool_limits

from blindspots.labels import find_label_issues, get_label_quality_scores
from blindspots.labels.review import find_issue_regions

log = logging.getLogger("label_noise")


@dataclass
class LabelledSet:
    name: str
    images: np.ndarray  # uint8 [N, H, W, 3]
    masks: np.ndarray  # uint8 [N, H, W] clean
    num_classes: int
    objects: tuple[int, ...]  # classes whose components can be dropped / swapped
    background: tuple[int, ...]  # "background" classes for region types
    drop_to: int | None = None  # label of a dropped object (None: its surroundings)


def scenes_set(n: int, size: int, seed: int) -> LabelledSet:
    from blindspots.data.scenes import SCENE_CLASSES, render_scene

    sc = [render_scene(seed * 100_000 + i, size=size, distribution="train") for i in range(n)]
    return LabelledSet("scenes", np.stack([s.image for s in sc]), np.stack([s.mask for s in sc]),
                       SCENE_CLASSES.num_classes, objects=(5, 6, 7), background=(0, 1, 2, 3, 4))


def mri_set(size: int) -> LabelledSet:
    from blindspots.data.mri import MRI_CLASSES, load_mri_slices

    images, masks, _ = load_mri_slices(size=size)
    # a dropped region becomes "brain_other", as when an annotator skips a structure
    return LabelledSet("mri", images, masks, MRI_CLASSES.num_classes, objects=(2, 3, 4, 5, 6, 7), background=(0, 1),
                       drop_to=1)


# --- corruption ---------------------------------------------------------------------------------
def _components(mask: np.ndarray, classes: tuple[int, ...], min_area: int) -> list[tuple[int, np.ndarray]]:
    out = []
    for c in classes:
        comp, n = ndimage.label(mask == c)
        for j in range(1, n + 1):
            m = comp == j
            if m.sum() >= min_area:
                out.append((c, m))
    return out


def _surrounding(mask: np.ndarray, region: np.ndarray) -> int:
    ring = ndimage.binary_dilation(region, iterations=2) & ~region
    vals = mask[ring]
    return int(np.bincount(vals).argmax()) if vals.size else 0


def corrupt(ds: LabelledSet, frac: float, rng: np.random.Generator
            ) -> tuple[np.ndarray, np.ndarray, list[list[tuple[str, np.ndarray]]]]:
    """Corrupted masks, bool [N] corrupted images, and per image the (kind, changed-pixels) events."""
    noisy = ds.masks.copy()
    n = len(noisy)
    chosen = rng.choice(n, size=max(1, int(round(frac * n))), replace=False)
    flags = np.zeros(n, bool)
    events: list[list[tuple[str, np.ndarray]]] = [[] for _ in range(n)]
    min_area = max(12, ds.masks.shape[1] * ds.masks.shape[2] // 400)
    for i in chosen:
        for _ in range(int(rng.integers(1, 3))):
            m = noisy[i]
            kinds = ["drop", "swap", "boundary"]
            kind = kinds[int(rng.integers(0, 3))]
            before = m.copy()
            comps = _components(m, ds.objects, min_area)
            if kind in ("drop", "swap") and comps:
                c, region = comps[int(rng.integers(0, len(comps)))]
                if kind == "drop":
                    m[region] = _surrounding(m, region) if ds.drop_to is None else ds.drop_to
                else:
                    others = [k for k in ds.objects if k != c]
                    m[region] = others[int(rng.integers(0, len(others)))]
            else:
                kind = "boundary"
                present = [c for c in np.unique(m) if (m == c).sum() >= min_area]
                c = present[int(rng.integers(0, len(present)))]
                it = int(rng.integers(2, 5))
                cm = m == c
                if rng.random() < 0.5:
                    grown = ndimage.binary_dilation(cm, iterations=it)
                    m[grown & ~cm] = c
                else:
                    shrunk = ndimage.binary_erosion(cm, iterations=it)
                    ring = cm & ~shrunk
                    m[ring] = _surrounding_map(before, cm, ring)
            changed = m != before
            if changed.any():
                events[i].append(("missing" if kind == "drop" else "wrong_class" if kind == "swap" else "boundary",
                                  changed))
        flags[i] = (noisy[i] != ds.masks[i]).any()
    return noisy, flags, events


def _surrounding_map(mask: np.ndarray, cm: np.ndarray, ring: np.ndarray) -> np.ndarray:
    """For eroded pixels: the nearest label outside the class (a nearest-neighbour fill)."""
    outside = ~cm
    if not outside.any():
        return mask[ring]
    _, (iy, ix) = ndimage.distance_transform_edt(~outside, return_indices=True)
    return mask[iy, ix][ring]


# --- model: out-of-fold per-pixel gradient boosting ----------------------------------------------
def features(images: np.ndarray) -> np.ndarray:
    """uint8 [N, H, W, 3] -> float32 [N, H, W, F]: colour at 3 scales, gradient magnitude, position."""
    x = images.astype(np.float32) / 255.0
    n, h, w, _ = x.shape
    feats = [x]
    for s in (1.5, 4.0):
        feats.append(ndimage.gaussian_filter(x, sigma=(0, s, s, 0)))
    grey = x.mean(-1)
    feats.append(ndimage.gaussian_gradient_magnitude(grey, sigma=(0, 1, 1))[..., None])
    yy, xx = np.mgrid[:h, :w].astype(np.float32)
    feats.append(np.broadcast_to(np.stack([yy / h, xx / w], -1), (n, h, w, 2)))
    return np.concatenate(feats, axis=-1).astype(np.float32)


def out_of_fold_probs(images: np.ndarray, labels: np.ndarray, k: int, seed: int, folds: int = 2,
                      train_pixels: int = 60_000) -> np.ndarray:
    """float32 [N, K, H, W] predicted by models that never saw the image's labels."""
    rng = np.random.default_rng(seed)
    f = features(images)
    n, h, w, nf = f.shape
    order = rng.permutation(n)
    probs = np.zeros((n, k, h, w), np.float32)
    for fold in range(folds):
        test = order[fold::folds]
        train = np.setdiff1d(order, test)
        X = f[train].reshape(-1, nf)
        y = labels[train].reshape(-1)
        pick = rng.choice(len(y), size=min(train_pixels, len(y)), replace=False)
        clf = HistGradientBoostingClassifier(max_iter=80, learning_rate=0.15, random_state=seed)
        clf.fit(X[pick], y[pick])
        p = clf.predict_proba(f[test].reshape(-1, nf))
        full = np.full((p.shape[0], k), 1e-4, np.float32)
        full[:, clf.classes_] += p
        full /= full.sum(1, keepdims=True)
        probs[test] = np.moveaxis(full.reshape(len(test), h, w, k), -1, 1)
    return probs


# --- evaluation -----------------------------------------------------------------------------------
def evaluate(ds: LabelledSet, frac: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    noisy, flags, events = corrupt(ds, frac, rng)
    log.info("%s: corrupted in %.1f s; training out-of-fold models", ds.name, time.perf_counter() - t0)
    with threadpool_limits(1):  # OpenMP threads spin badly on shared machines; one thread is predictable
        probs = out_of_fold_probs(ds.images, noisy, ds.num_classes, seed)
    log.info("%s: predictions ready after %.1f s", ds.name, time.perf_counter() - t0)
    t_model = time.perf_counter() - t0
    pred = probs.argmax(1)
    n = len(noisy)
    acc_clean = float((pred == ds.masks).mean())
    print(f"\n== {ds.name}: {n} images {ds.masks.shape[1]}x{ds.masks.shape[2]}, K={ds.num_classes}, "
          f"{flags.sum()} corrupted ({flags.mean():.0%}), {int(sum(len(e) for e in events))} corruptions; "
          f"out-of-fold model pixel accuracy vs clean masks {acc_clean:.3f} ({t_model:.0f} s)")
    img_soft, _ = get_label_quality_scores(noisy, probs, verbose=False)
    img_npi, _ = get_label_quality_scores(noisy, probs, verbose=False, method="num_pixel_issues")
    self_conf = np.take_along_axis(probs, noisy[:, None].astype(np.int64), 1)[:, 0]
    pred_err = (pred != noisy).reshape(n, -1).mean(1)  # higher = worse
    likelihood = self_conf.reshape(n, -1).mean(1)  # lower = worse
    print(f"  image AUPRC (random ranking = {flags.mean():.3f}):")
    for name, s in [("softmin (ours, T=0.1)", -img_soft), ("num_pixel_issues", -img_npi),
                    ("prediction error", pred_err), ("label likelihood", -likelihood)]:
        print(f"    {name:24s} {average_precision_score(flags, s):.3f}")
    issues = find_label_issues(noisy, probs, verbose=False)
    changed = noisy != ds.masks
    tp = int((issues & changed).sum())
    print(f"  pixels: flagged {int(issues.sum())}, changed {int(changed.sum())}, precision "
          f"{tp / max(issues.sum(), 1):.3f}, recall {tp / max(changed.sum(), 1):.3f}")
    regions = find_issue_regions(issues, noisy, probs, background=ds.background, min_area=4)
    if len(regions) == 0:
        print("  regions: none")
        return
    correct = 0
    ok_flags: list[bool] = []
    region_masks = np.zeros_like(issues)
    for r in regions.itertuples():
        box = issues[r.image, r.y0:r.y1, r.x0:r.x1] & (noisy[r.image, r.y0:r.y1, r.x0:r.x1] == r.given_label) \
            & (pred[r.image, r.y0:r.y1, r.x0:r.x1] == r.predicted_label)
        region_masks[r.image, r.y0:r.y1, r.x0:r.x1] |= box
        ok = bool(changed[r.image, r.y0:r.y1, r.x0:r.x1][box].mean() >= 0.5)
        ok_flags.append(ok)
        correct += int(ok)
    found = total = typed_ok = typed_total = 0
    for i, evs in enumerate(events):
        for kind, ch in evs:
            comp, m = ndimage.label(ch & changed[i])
            for j in range(1, m + 1):
                c = comp == j
                if c.sum() < 4:
                    continue
                total += 1
                hit = (region_masks[i] & c).sum() >= 0.3 * c.sum()
                found += int(hit)
                if hit and kind in ("missing", "wrong_class"):
                    typed_total += 1
                    over = regions[(regions.image == i)]
                    kinds = [r.kind for r in over.itertuples()
                             if (c[r.y0:r.y1, r.x0:r.x1]).any()]
                    typed_ok += int(kind in kinds)
    # what a reviewer sees first: regions ranked by expected mislabelled mass, area x (1 - score)
    is_ok = np.array(ok_flags)
    order = np.argsort(-(regions.area.to_numpy() * (1 - regions.score.to_numpy())), kind="stable")
    m = max(total, 1)
    print(f"  regions ranked by area x (1 - score): precision of the top {m} (= number of corrupted "
          f"components) {is_ok[order[:m]].mean():.3f}")
    print(f"  regions: {len(regions)} (min area 4), precision {correct / len(regions):.3f}, recall "
          f"{found / max(total, 1):.3f} of {total} corrupted components; type matches for "
          f"{typed_ok}/{typed_total} found dropped/swapped objects; kinds "
          f"{regions.kind.value_counts().to_dict()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=120, help="number of procedural scenes")
    ap.add_argument("--size", type=int, default=64, help="image side in pixels")
    ap.add_argument("--frac", type=float, default=0.15, help="share of images with corrupted masks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sets", default="scenes,mri", help="comma list of: scenes, mri")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(asctime)s %(message)s")
    for name in a.sets.split(","):
        if name == "scenes":
            ds = scenes_set(a.n, a.size, a.seed)
        else:
            try:
                ds = mri_set(a.size)
            except FileNotFoundError as e:
                print(f"\n== mri: skipped ({e})")
                continue
        evaluate(ds, a.frac, a.seed)


if __name__ == "__main__":
    main()

"""The brain-MRI world of `label_efficiency.py --dataset mri`: slices, conditions, a biased target, competitors.

Real labels: the Colin27 T1 head of Debian's `mricron-data` with the AAL atlas grouped into 8 coarse classes
(`blindspots.data.mri`). One head, so images are slices of it, split by slice index (mod 4: 0 and 1 train,
2 test, 3 pool) along each of the axial, coronal and sagittal axes; neighbouring slices are 1 mm apart, so
a pool slice resembles a test slice of the same condition (what is measured is finding and fixing
*conditions*, not generalising to new heads). Every image lies in the scanner a little differently (in-plane
rotation within +-5 degrees, shift within +-2 pixels).

Conditions (`CONDITIONS`, labels "factor:value" as the scenes' are):
- in slice: axial, central slices (the middle 60% of the labelled axial range), the plain T1 scan;
- position:low / position:high: axial slices below / above that range (cerebellum and temporal poles; vertex);
- orientation:coronal / orientation:sagittal: the other two cuts, any position;
- scan:skullstrip / scan:sharp: other reconstructions of the same head (`ch2bet`: skull stripped;
  `ch2better`: the sharper 0.5 mm scan, skull stripped, resampled), each min-max normalised, central axial;
- contrast:gamma: the grey-level curve raised to gamma 0.5 or 2 (another T1 weighting), central axial;
- noise:rician: Rician noise, sigma 0.05-0.08 of full scale (the brain's median is about 0.35), central axial;
- bias:field: a smooth multiplicative field of strength 0.4-0.6 (coil inhomogeneity), central axial;
- fov:large: the same matrix over a 1.33-1.54 times wider field of view (the head shrunk by 0.65-0.75 about
  the centre), central axial.

The target (the zoo's tiny U-Net) is trained on "in slice" images only. Both competitors (a plain dilated
FCN and PSPNet with a ResNet-18 encoder: three designs in all) are trained on a broad set: all three cuts,
every position, the T1 and skull-stripped scans, half of the images with a gamma in [0.5, 2]. No model sees
noise, a bias field, the sharp scan or another field of view. Of these, the wider field of view is the one
where all three fail (each loses 0.3-0.4 mIoU) while the target's map disagrees with the competitors' no more
than on low slices (`model_table`; the others split the models): it is the MRI counterpart of the scenes'
planted shared blind spot, and the hard set's mIoU on it is the "shared" column.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

TARGET = "tiny_unet"
COMPETITORS = ("small_fcn", "pspnet_r18")
CONDITIONS = ("position:low", "position:high", "orientation:coronal", "orientation:sagittal", "scan:skullstrip",
              "scan:sharp", "contrast:gamma", "noise:rician", "bias:field", "fov:large")
SHARED = ("fov:large",)  # where all three models fail together (the MRI shared blind spot)
HARD_SHARE = 1 / 3  # share of the pool outside the target's slice, spread evenly over CONDITIONS
CENTRAL = (0.2, 0.8)  # the target's axial range, as fractions of the labelled axial slices
SPLIT = {0: "train", 1: "train", 2: "test", 3: "pool"}  # slice index mod 4


class SliceMaker:
    """Images of the head: (condition, split, rng) -> (image uint8 [S, S, 3], mask uint8 [S, S])."""

    def __init__(self, size: int, root: Path | None = None) -> None:
        from blindspots.data.mri import DEFAULT_ROOT, ORIENTATIONS, MriVolumes

        self.vols, self.size = MriVolumes.load(root or DEFAULT_ROOT), size
        self.side = max(self.vols.labels.shape)
        idx = {o: self.vols.indices(o) for o in ORIENTATIONS}
        ax = idx["axial"]
        lo, hi = ax[int(CENTRAL[0] * (len(ax) - 1))], ax[int(CENTRAL[1] * (len(ax) - 1))]
        ranges = {"central": ("axial", ax[(ax >= lo) & (ax <= hi)]), "low": ("axial", ax[ax < lo]),
                  "high": ("axial", ax[ax > hi]), "coronal": ("coronal", idx["coronal"]),
                  "sagittal": ("sagittal", idx["sagittal"])}
        # (range, split) -> (orientation, slice indices)
        self.slices = {(r, s): (o, ix[np.array([SPLIT[i % 4] == s for i in ix], bool)])
                       for r, (o, ix) in ranges.items() for s in set(SPLIT.values())}

    def _slice(self, where: str, split: str, scan: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        from blindspots.data.mri import square_resize
        from blindspots.data.mri_conditions import head_pose

        orientation, ix = self.slices[(where, split)]
        img, lab = self.vols.slice(orientation, int(rng.choice(ix)), scan)
        img = square_resize(img.astype(np.float32), self.size, Image.BILINEAR, self.side)
        lab = square_resize(lab, self.size, Image.NEAREST, self.side)
        return head_pose(img, lab, rng.uniform(-5, 5), tuple(rng.uniform(-2, 2, 2)))

    def make(self, condition: str, split: str, rng: np.random.Generator, jitter: bool = False
             ) -> tuple[np.ndarray, np.ndarray]:
        """One image of `condition` ("in slice", a CONDITIONS label, or "broad": the competitors' mix) from
        the slices of `split`; jitter: a gamma in [0.5, 2] on half of the images (competitors' training)."""
        from blindspots.data.mri_conditions import bias_field, field_of_view, gamma_contrast, rician_noise

        factor, _, value = condition.partition(":")
        if condition == "broad":
            where = str(rng.choice(["central", "low", "high", "coronal", "sagittal"], p=[.4, .1, .1, .2, .2]))
            img, lab = self._slice(where, split, str(rng.choice(["t1", "skullstrip"])), rng)
            if jitter and rng.random() < 0.5:
                img = gamma_contrast(img, float(np.exp(rng.uniform(np.log(0.5), np.log(2.0)))))
        else:
            where = value if factor in ("position", "orientation") else "central"
            img, lab = self._slice(where, split, value if factor == "scan" else "t1", rng)
            if factor == "contrast":
                img = gamma_contrast(img, float(rng.choice([0.5, 2.0])))
            elif factor == "noise":
                img = rician_noise(img, rng.uniform(0.05, 0.08), rng)
            elif factor == "bias":
                img = np.clip(img * bias_field(img.shape, rng.uniform(0.4, 0.6), rng), 0, 1)
            elif factor == "fov":
                img, lab = field_of_view(img, lab, rng.uniform(0.65, 0.75))
        g = (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
        return np.repeat(g[:, :, None], 3, axis=2), lab

    def batch(self, conditions: list[str], split: str, seed: int, jitter: bool = False
              ) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([seed, 17])
        pairs = [self.make(c, split, rng, jitter) for c in conditions]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def train_models(maker: SliceMaker, s0: tuple[np.ndarray, np.ndarray], out: Path, args: argparse.Namespace,
                 classes: "Classes | None" = None, tag: str = "mri") -> dict[str, Path]:
    """Train (or resume from `out`) the target and its dropout variant (BALD's target) on S0 (in-slice images)
    and the competitors on as many images of the broad mix (`maker.batch(["broad"], ...)`; another world's
    maker serves too, with its `classes` and `tag`); returns {architecture: checkpoint}."""
    from blindspots.data.mri import MRI_CLASSES
    from blindspots.models.zoo import build_model
    from blindspots.training.loop import torch_seeded
    from blindspots.training.segmentation import fit_segmenter

    out.mkdir(parents=True, exist_ok=True)
    sets = {"target": s0,
            "broad": maker.batch(["broad"] * args.n_train, "train", 1, jitter=True)}
    paths = {}
    # BALD's target: the target's dropout variant on the same S0, with the same initial weights (dropout has none)
    models = [(args.target_arch, "target", 0), *[(c, "broad", 1 + i) for i, c in enumerate(args.competitor_list)],
              (f"{args.target_arch}_dropout", "target", 0)]
    for name, data, i in models:
        with torch_seeded(1000 + i):
            model = build_model(name, (classes or MRI_CLASSES).num_classes)
        paths[name] = out / f"{name}.pt"
        fit_segmenter(model, sets[data], epochs=args.epochs, batch_size=16, seed=0, checkpoint_path=paths[name],
                      arch=name, classes=classes or MRI_CLASSES, meta={"data": f"{tag} {data}", "n": args.n_train},
                      progress=True, class_weights="balanced")
    return paths


def make_world(args: argparse.Namespace) -> dict:
    """The label-efficiency world (see `label_efficiency.make_world`): models, S0, T0, the hard test set."""
    from blindspots.data.mri import MRI_CLASSES

    maker = SliceMaker(args.size, args.mri_root)
    s0 = maker.batch(["in slice"] * args.n_train, "train", 0)
    paths = train_models(maker, s0, args.work / f"zoo_mri_{args.size}", args)
    per = max(1, args.n_hard // len(CONDITIONS))
    hard_labels = [c for c in CONDITIONS for _ in range(per)]
    hi, hm = maker.batch(hard_labels, "test", 8)
    return {"classes": MRI_CLASSES, "target": paths[args.target_arch], "hard_labels": hard_labels,
            "target_dropout": paths[f"{args.target_arch}_dropout"],
            "describe": model_table,
            "competitors": {c: paths[c] for c in args.competitor_list}, "focus": "shared",
            "focus_labels": SHARED, "S0": s0,
            "T0": maker.batch(["in slice"] * args.n_t0, "test", 7),
            "hard": (hi, hm, np.isin(hard_labels, SHARED)), "maker": maker}


def make_pool(args: argparse.Namespace, seed: int, world: dict) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    """(ids, images uint8 [N, S, S, 3], masks uint8 [N, S, S], condition labels) of the pool of `seed`; the
    conditions are `world["conditions"]` when it names them (the microscopy world does)."""
    conditions = world.get("conditions", CONDITIONS)
    n_hard = int(round(args.pool * HARD_SHARE))
    labels = ["in slice"] * (args.pool - n_hard) + [conditions[i % len(conditions)] for i in range(n_hard)]
    labels = [labels[i] for i in np.random.default_rng([seed, 3]).permutation(args.pool)]
    imgs, masks = world["maker"].batch(labels, "pool", 5000 + seed)
    return [f"{world.get('tag', 'mri')}_{i:05d}.png" for i in range(args.pool)], imgs, masks, labels


def model_table(world: dict) -> "pd.DataFrame":
    """Per condition of the hard set (and T0): each model's mean per-image mIoU before any fine-tuning (the
    target, the competitors, the target's dropout variant), and d = 1 - pixel agreement between the target's
    map and each competitor's (the distance MAD ranks by)."""
    import pandas as pd

    from blindspots.human.simulate import image_miou
    from blindspots.models.zoo import load_segmenter
    from blindspots.scan import pair_distances

    k = world["classes"].num_classes
    hi, hm, _ = world["hard"]
    labels = np.asarray(world["hard_labels"])
    conditions = world.get("conditions", CONDITIONS)  # the microscopy world passes its own
    sets = {"T0 (in slice)": world["T0"], **{c: (hi[labels == c], hm[labels == c]) for c in conditions}}
    models = {"target": world["target"], **world["competitors"]}
    if "target_dropout" in world:  # BALD's target, trained with dropout on the same S0
        models["target (dropout)"] = world["target_dropout"]
    maps = {}
    for n, path in models.items():
        seg = load_segmenter(path, batch_size=64)
        maps[n] = {s: seg.predict_proba(x).argmax(1) for s, (x, _) in sets.items()}
    rows = []
    for s, (_, y) in sets.items():
        row: dict = {"condition": s, **{n: float(np.nanmean(image_miou(maps[n][s], y, k))) for n in models}}
        for g in world["competitors"]:
            row[f"d {g}"] = float(np.mean(pair_distances(maps["target"][s], maps[g][s], k)[0]))
        rows.append(row)
    return pd.DataFrame(rows)

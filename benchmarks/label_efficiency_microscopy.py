"""The fluorescence-microscopy world of `label_efficiency.py --dataset microscopy`: tiles, conditions, a biased
target, competitors.

Real labels: the scratch assay of the PyPI wheel `ndev-sampledata==0.0.3` (`blindspots.data.microscopy`): 10
time points of one field, 210 x 576 pixels at 0.619 um, a Hoechst nuclear stain and an oblique-illumination
transmitted-light image, with nuclei and cell instance labels from an automatic pipeline, read as background
/ nucleus / cytoplasm. One field, so images are tiles of it, split by place: the frame is cut into 2 x 4
blocks of 105 x 144 pixels and block (row r, column c) goes to a split by (c + 2 r) mod 4 (0 and 1 train, 2
test, 3 pool) at every time point, so train, test and pool never share a pixel of the field. The scratch
runs down the middle two block columns: every split gets blocks of both the cell sheet and the scratch. Each image is a
64-pixel crop at a random place in a block of its split, turned by a random flip and quarter turn (a slide
has no up), resized to --size.

Conditions (`CONDITIONS`, labels "factor:value" as the scenes' are):
- in slice: the fluorescence channel at time points 0-5 (the scratch still open), as acquired;
- time:late: time points 6-9 (the wound closing: denser cells), fluorescence;
- channel:brightfield: the transmitted-light channel instead of the stain, time points 0-5;
- contrast:gamma: the grey-level curve raised to gamma 0.5 or 2 (another display window or camera curve);
- exposure:low: a shorter exposure, the signal times 0.3-0.5 (`microscopy_conditions.exposure`);
- noise:shot: Poisson photon noise at 8-16 photons for full scale plus read noise (`shot_noise`);
- focus:blur: the focal plane off the cells, a Gaussian PSF of sigma 2.5-3.5 pixels (`defocus`);
- scale:small: a lower magnification, a 90-100 pixel crop shown at 64 (cells 1.4-1.6 times smaller);
- scale:large: a higher magnification, a 40-46 pixel crop shown at 64 (cells 1.4-1.6 times larger).

The pool (`make_pool`, the MRI world's rule): two thirds in the slice, a third spread evenly over the
conditions; the hard test set: as many images of each condition.

The target (the zoo's tiny U-Net) is trained on "in slice" images only. Both competitors (a plain dilated
FCN and PSPNet with a ResNet-18 encoder: three designs in all) are trained on a broad set: both channels,
every time point, half of the images with a gamma in [0.5, 2]. No model sees a changed exposure, noise,
blur or magnification. `SHARED` names the condition where all three fail together while the target's map
agrees with the competitors' (read off `model_table`, which the benchmark prints first; docs/mine.md holds
the measured table).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

TARGET = "tiny_unet"
COMPETITORS = ("small_fcn", "pspnet_r18")
CONDITIONS = ("time:late", "channel:brightfield", "contrast:gamma", "exposure:low", "noise:shot", "focus:blur",
              "scale:small", "scale:large")
SHARED = ("focus:blur",)  # where all three models fail together (the microscopy shared blind spot)
EARLY, LATE = tuple(range(0, 6)), tuple(range(6, 10))  # time points
BLOCKS = (2, 4)  # block rows, block columns of a frame
SPLIT = {0: "train", 1: "train", 2: "test", 3: "pool"}  # (block column + 2 block row) mod 4
CROP = 64  # native pixels of a crop at the target's magnification


class TileMaker:
    """Images of the assay: (condition, split, rng) -> (image uint8 [S, S, 3], mask uint8 [S, S])."""

    def __init__(self, size: int, source: Path | None = None) -> None:
        from blindspots.data.microscopy import SHAPE, ScratchAssay

        self.assay, self.size = ScratchAssay.load(source), size
        bh, bw = SHAPE[2] // BLOCKS[0], SHAPE[3] // BLOCKS[1]
        # split -> top-left corners of its blocks, and the block's (height, width)
        self.block = (bh, bw)
        self.blocks = {s: [(r * bh, c * bw) for r in range(BLOCKS[0]) for c in range(BLOCKS[1])
                           if SPLIT[(c + 2 * r) % 4] == s] for s in set(SPLIT.values())}

    def _crop(self, channel: str, times: tuple[int, ...], split: str, side: int, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray]:
        """A side x side crop (float32 image, uint8 mask) inside one block of `split`, flipped and turned."""
        if side > min(self.block):
            raise ValueError(f"side: expected a crop within a {self.block} block, got {side}")
        by, bx = self.blocks[split][int(rng.integers(len(self.blocks[split])))]
        y = by + int(rng.integers(self.block[0] - side + 1))
        x = bx + int(rng.integers(self.block[1] - side + 1))
        t = int(rng.choice(times))
        img = self.assay.image(channel, t)[y:y + side, x:x + side]
        lab = self.assay.masks[t, y:y + side, x:x + side]
        k, flip = int(rng.integers(4)), bool(rng.integers(2))
        img, lab = np.rot90(img, k), np.rot90(lab, k)
        if flip:
            img, lab = img[:, ::-1], lab[:, ::-1]
        return np.ascontiguousarray(img), np.ascontiguousarray(lab)

    def _resize(self, img: np.ndarray, lab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if img.shape[0] == self.size:
            return img, lab
        s = (self.size, self.size)
        return (np.asarray(Image.fromarray(img).resize(s, Image.BILINEAR)),
                np.asarray(Image.fromarray(lab).resize(s, Image.NEAREST)))

    def make(self, condition: str, split: str, rng: np.random.Generator, jitter: bool = False
             ) -> tuple[np.ndarray, np.ndarray]:
        """One image of `condition` ("in slice", a CONDITIONS label, or "broad": the competitors' mix) from
        the blocks of `split`; jitter: a gamma in [0.5, 2] on half of the images (competitors' training)."""
        from blindspots.data.mri_conditions import gamma_contrast
        from blindspots.data.microscopy_conditions import defocus, exposure, shot_noise

        factor, _, value = condition.partition(":")
        if condition == "broad":
            channel = str(rng.choice(["fluorescence", "brightfield"], p=[0.6, 0.4]))
            img, lab = self._crop(channel, EARLY + LATE, split, CROP, rng)
            if jitter and rng.random() < 0.5:
                img = gamma_contrast(img, float(np.exp(rng.uniform(np.log(0.5), np.log(2.0)))))
        elif factor == "scale":
            side = int(rng.integers(90, 101)) if value == "small" else int(rng.integers(40, 47))
            img, lab = self._crop("fluorescence", EARLY, split, side, rng)
        else:
            channel = "brightfield" if factor == "channel" else "fluorescence"
            img, lab = self._crop(channel, LATE if factor == "time" else EARLY, split, CROP, rng)
            if factor == "contrast":
                img = gamma_contrast(img, float(rng.choice([0.5, 2.0])))
            elif factor == "exposure":
                img = exposure(img, rng.uniform(0.3, 0.5))
            elif factor == "noise":
                img = shot_noise(img, rng.uniform(8, 16), rng)
            elif factor == "focus":
                img = defocus(img, rng.uniform(2.5, 3.5))
        img, lab = self._resize(img.astype(np.float32), lab)
        g = (np.clip(img, 0, 1) * 255).round().astype(np.uint8)
        return np.repeat(g[:, :, None], 3, axis=2), lab

    def batch(self, conditions: list[str], split: str, seed: int, jitter: bool = False
              ) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([seed, 23])
        pairs = [self.make(c, split, rng, jitter) for c in conditions]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def make_world(args: argparse.Namespace) -> dict:
    """The label-efficiency world (see `label_efficiency.make_world`): models, S0, T0, the hard test set."""
    from blindspots.data.microscopy import MICROSCOPY_CLASSES
    from label_efficiency_mri import model_table, train_models

    maker = TileMaker(args.size, args.micro_source)
    s0 = maker.batch(["in slice"] * args.n_train, "train", 0)
    paths = train_models(maker, s0, args.work / f"zoo_microscopy_{args.size}", args, MICROSCOPY_CLASSES,
                         "microscopy")
    per = max(1, args.n_hard // len(CONDITIONS))
    hard_labels = [c for c in CONDITIONS for _ in range(per)]
    hi, hm = maker.batch(hard_labels, "test", 8)
    return {"classes": MICROSCOPY_CLASSES, "target": paths[args.target_arch], "hard_labels": hard_labels,
            "target_dropout": paths[f"{args.target_arch}_dropout"],
            "conditions": CONDITIONS, "tag": "cells", "describe": model_table,
            "competitors": {c: paths[c] for c in args.competitor_list}, "focus": "shared",
            "focus_labels": SHARED, "S0": s0,
            "T0": maker.batch(["in slice"] * args.n_t0, "test", 7),
            "hard": (hi, hm, np.isin(hard_labels, SHARED)), "maker": maker}


def make_pool(args: argparse.Namespace, seed: int, world: dict) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    """(ids, images uint8 [N, S, S, 3], masks uint8 [N, S, S], condition labels) of the pool of `seed`: the MRI
    world's rule (a third of the pool spread evenly over the conditions) with this world's conditions."""
    from label_efficiency_mri import make_pool as mri_pool

    return mri_pool(args, seed, world)

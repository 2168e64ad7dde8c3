"""Brain MRI slices with per-pixel region labels, from the Debian package `mricron-data`.

The Colin27 T1 template (`ch2.nii.gz`, 181 x 217 x 181, 1 mm) and the AAL atlas (`aal.nii.gz`, 116
regions on the same grid) give a real multi-class segmentation set: each slice is an image and its AAL
regions, grouped into a few coarse classes, are its mask. Axial, coronal and sagittal slices are cut from
the same volumes (`MriVolumes.slice`). Two other reconstructions of the same head are real acquisition
differences: `ch2bet.nii.gz` (skull stripped) and `ch2better.nii.gz` (a sharper 0.5 mm scan, skull
stripped, resampled here onto the 1 mm grid). Install with `apt-get install -y mricron-data`; read with
nibabel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from scipy.ndimage import map_coordinates

from blindspots.data.classes import Classes
from blindspots.extras import require

# Lazy imports: nibabel (optional: only the call that uses it needs it).

DEFAULT_ROOT = Path("/usr/share/mricron/templates")

#: coarse classes: AAL region ids (1..116) per class; 0 = outside the brain, 1 = brain without an AAL
#: region (mostly white matter and ventricles)
COARSE_GROUPS: dict[str, list[int]] = {
    "frontal": list(range(1, 29)),
    "deep": list(range(29, 43)) + list(range(71, 79)),  # insula, cingulum, hippocampus, amygdala, basal ganglia, thalamus
    "occipital": list(range(43, 57)),
    "parietal": list(range(57, 71)),
    "temporal": list(range(79, 91)),
    "cerebellum": list(range(91, 117)),
}
MRI_CLASSES = Classes(("background", "brain_other") + tuple(COARSE_GROUPS))
#: orientation -> the volume axis it cuts (the grid is x: left-right, y: posterior-anterior, z: inferior-superior)
ORIENTATIONS: dict[str, int] = {"sagittal": 0, "coronal": 1, "axial": 2}
#: the scans of the same head: file name per scan
SCANS: dict[str, str] = {"t1": "ch2", "skullstrip": "ch2bet", "sharp": "ch2better"}


def _lut() -> np.ndarray:
    """AAL id (0..255) -> coarse class id, uint8 [256]."""
    lut = np.ones(256, dtype=np.uint8)  # unknown ids inside the brain: brain_other
    for c, ids in enumerate(COARSE_GROUPS.values(), start=2):
        lut[ids] = c
    return lut


def _load(path: Path) -> np.ndarray:
    nib = require("nibabel", "reading a NIfTI volume")

    return np.asarray(nib.load(str(path)).dataobj)


def _check_root(root: Path, names: tuple[str, ...]) -> dict[str, Path]:
    files = {n: root / f"{n}.nii.gz" for n in names}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"root: expected the mricron templates {missing} (install the Debian package with "
                                f"`apt-get install -y mricron-data`), got a folder without them: {root}")
    return files


def _resample_to(path: Path, like: Path) -> np.ndarray:
    """The volume at `path` sampled (trilinear) on the voxel grid of `like`, through both files' affines:
    float32 [X, Y, Z] of `like`'s shape, 0 outside the source."""
    nib = require("nibabel", "reading a NIfTI volume")

    src, ref = nib.load(str(path)), nib.load(str(like))
    to_src = np.linalg.inv(src.affine) @ ref.affine
    grid = np.indices(ref.shape[:3], dtype=np.float32).reshape(3, -1)
    coords = to_src[:3, :3].astype(np.float32) @ grid + to_src[:3, 3:4].astype(np.float32)
    vol = np.asarray(src.dataobj, dtype=np.float32)
    return map_coordinates(vol, coords, order=1, mode="constant", cval=0.0).reshape(ref.shape[:3])


@dataclass
class MriVolumes:
    """The scans of the Colin27 head and its coarse labels on one 1 mm grid [181, 217, 181].

    labels: uint8 [X, Y, Z] with MRI_CLASSES ids. Scans are read on first use and kept as float32 in [0, 1],
    each divided by its own maximum (as a min-max normalising pipeline does: the skull-stripped scans come
    out brighter, since their maximum is white matter, not scalp fat).
    """

    root: Path
    labels: np.ndarray
    _scans: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, root: str | Path = DEFAULT_ROOT) -> "MriVolumes":
        root = Path(root)
        files = _check_root(root, ("ch2", "ch2bet", "aal"))
        aal, brain = _load(files["aal"]), _load(files["ch2bet"])
        labels = np.where(aal > 0, _lut()[aal], (brain > 0).astype(np.uint8)).astype(np.uint8)
        return cls(root, labels)

    def scan(self, name: str = "t1") -> np.ndarray:
        """float32 [X, Y, Z] in [0, 1]; name one of SCANS ("sharp" is resampled from 0.5 mm, a few seconds)."""
        if name not in SCANS:
            raise ValueError(f"name: expected one of {sorted(SCANS)}, got {name!r}")
        if name not in self._scans:
            path = _check_root(self.root, (SCANS[name],))[SCANS[name]]
            vol = (_resample_to(path, self.root / "ch2.nii.gz") if name == "sharp"
                   else _load(path).astype(np.float32))
            self._scans[name] = vol / max(float(vol.max()), 1.0)
        return self._scans[name]

    def indices(self, orientation: str, min_labelled: float = 0.02) -> np.ndarray:
        """Slice indices along `orientation` where at least `min_labelled` of the slice lies in an AAL region."""
        axis = _axis(orientation)
        other = tuple(a for a in range(3) if a != axis)
        return np.flatnonzero((self.labels >= 2).mean(axis=other) >= min_labelled)

    def slice(self, orientation: str, index: int, scan: str = "t1") -> tuple[np.ndarray, np.ndarray]:
        """One slice, superior (axial: anterior) up: (image float32 [H, W] in [0, 1], mask uint8 [H, W])."""
        at = (slice(None),) * _axis(orientation) + (int(index),)  # a view: np.take would copy along the way
        return np.ascontiguousarray(np.rot90(self.scan(scan)[at])), np.ascontiguousarray(np.rot90(self.labels[at]))


def _axis(orientation: str) -> int:
    if orientation not in ORIENTATIONS:
        raise ValueError(f"orientation: expected one of {list(ORIENTATIONS)}, got {orientation!r}")
    return ORIENTATIONS[orientation]


def square_resize(a: np.ndarray, size: int, resample: int, side: int | None = None) -> np.ndarray:
    """Pad [H, W] to a centred square of `side` (default max(H, W)) with zeros, then resize to size x size.
    One `side` for every orientation keeps 1 pixel = the same millimetres in all of them."""
    h, w = a.shape
    s = max(h, w, side or 0)
    sq = np.zeros((s, s), dtype=a.dtype)
    sq[(s - h) // 2:(s - h) // 2 + h, (s - w) // 2:(s - w) // 2 + w] = a
    if s == size:
        return sq
    return np.asarray(Image.fromarray(sq).resize((size, size), resample=resample))


def load_mri_slices(root: str | Path = DEFAULT_ROOT, *, size: int = 128, min_labelled: float = 0.02,
                    step: int = 1, orientation: str = "axial") -> tuple[np.ndarray, np.ndarray, Classes]:
    """Slices of the Colin27 T1 template with coarse AAL labels.

    root: folder holding ch2.nii.gz, ch2bet.nii.gz and aal.nii.gz (Debian: /usr/share/mricron/templates).
    size: output side in pixels (slices are padded to a square, images resized bilinearly, masks by
        nearest neighbour). min_labelled: keep slices where at least this fraction of the slice lies in an
        AAL region (~140 axial slices at 0.02). step: keep every step-th such slice. orientation: "axial",
        "coronal" or "sagittal".
    Returns (images uint8 [N, size, size, 3] grey as RGB, masks uint8 [N, size, size] with
    MRI_CLASSES ids, MRI_CLASSES); no ignore pixels.
    Raises FileNotFoundError naming the package when the files are missing.
    """
    _check_root(Path(root), ("ch2", "ch2bet", "aal"))
    if isinstance(size, bool) or not isinstance(size, int) or size < 8:
        raise ValueError(f"size: expected an int >= 8, got {size!r}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step: expected an int >= 1, got {step!r}")
    if not 0 <= min_labelled < 1:
        raise ValueError(f"min_labelled: expected a fraction in [0, 1), got {min_labelled!r}")
    _axis(orientation)
    vols = MriVolumes.load(root)
    side = max(vols.labels.shape)
    images, masks = [], []
    for i in vols.indices(orientation, min_labelled)[::step]:
        img, lab = vols.slice(orientation, int(i))
        g = square_resize((img * 255.0).clip(0, 255).astype(np.uint8), size, Image.BILINEAR, side)
        images.append(np.repeat(g[:, :, None], 3, axis=2))
        masks.append(square_resize(lab, size, Image.NEAREST, side))
    return np.stack(images), np.stack(masks), MRI_CLASSES

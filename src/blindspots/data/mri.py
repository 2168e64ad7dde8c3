"""Brain MRI slices with per-pixel region labels, from the Debian package `mricron-data`.

The Colin27 T1 template (`ch2.nii.gz`, 181 x 217 x 181, 1 mm) and the AAL atlas (`aal.nii.gz`, 116
regions on the same grid) give a real multi-class segmentation set: each axial slice is an image and
its AAL regions, grouped into a few coarse classes, are its mask. Install with
`apt-get install -y mricron-data`; read with nibabel.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from blindspots.data.classes import Classes

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


def _lut() -> np.ndarray:
    """AAL id (0..255) -> coarse class id, uint8 [256]."""
    lut = np.ones(256, dtype=np.uint8)  # unknown ids inside the brain: brain_other
    for c, ids in enumerate(COARSE_GROUPS.values(), start=2):
        lut[ids] = c
    return lut


def _load(path: Path) -> np.ndarray:
    import nibabel as nib

    return np.asarray(nib.load(str(path)).dataobj)


def _square_resize(a: np.ndarray, size: int, resample: int) -> np.ndarray:
    """Pad [H, W] to a centred square with zeros, then resize to size x size."""
    h, w = a.shape
    s = max(h, w)
    sq = np.zeros((s, s), dtype=a.dtype)
    sq[(s - h) // 2:(s - h) // 2 + h, (s - w) // 2:(s - w) // 2 + w] = a
    if s == size:
        return sq
    return np.asarray(Image.fromarray(sq).resize((size, size), resample=resample))


def load_mri_slices(root: str | Path = DEFAULT_ROOT, *, size: int = 128, min_labelled: float = 0.02,
                    step: int = 1) -> tuple[np.ndarray, np.ndarray, Classes]:
    """Axial slices of the Colin27 T1 template with coarse AAL labels.

    root: folder holding ch2.nii.gz, ch2bet.nii.gz and aal.nii.gz (Debian: /usr/share/mricron/templates).
    size: output side in pixels (slices are padded to a square, images resized bilinearly, masks by
        nearest neighbour). min_labelled: keep slices where at least this fraction of the 181 x 217 grid
        lies in an AAL region (~140 slices at 0.02). step: keep every step-th such slice.
    Returns (images uint8 [N, size, size, 3] grey as RGB, masks uint8 [N, size, size] with
    MRI_CLASSES ids, MRI_CLASSES); no ignore pixels.
    Raises FileNotFoundError naming the package when the files are missing.
    """
    root = Path(root)
    files = {n: root / f"{n}.nii.gz" for n in ("ch2", "ch2bet", "aal")}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"root: expected the mricron templates {missing} (install the Debian package with "
                                f"`apt-get install -y mricron-data`), got a folder without them: {root}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 8:
        raise ValueError(f"size: expected an int >= 8, got {size!r}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step: expected an int >= 1, got {step!r}")
    if not 0 <= min_labelled < 1:
        raise ValueError(f"min_labelled: expected a fraction in [0, 1), got {min_labelled!r}")
    t1, brain, aal = (_load(files[n]) for n in ("ch2", "ch2bet", "aal"))
    lut = _lut()
    frac = (aal > 0).reshape(-1, aal.shape[2]).mean(axis=0)
    keep = np.flatnonzero(frac >= min_labelled)[::step]
    images, masks = [], []
    for z in keep:
        # rotate so that anterior is up, as radiologists view axial slices
        img = np.rot90(t1[:, :, z]).astype(np.float32)
        lab = np.rot90(np.where(aal[:, :, z] > 0, lut[aal[:, :, z]], (brain[:, :, z] > 0).astype(np.uint8)))
        img8 = np.clip(img / max(float(t1.max()), 1.0) * 255.0, 0, 255).astype(np.uint8)
        g = _square_resize(img8, size, Image.BILINEAR)
        images.append(np.repeat(g[:, :, None], 3, axis=2))
        masks.append(_square_resize(np.ascontiguousarray(lab, dtype=np.uint8), size, Image.NEAREST))
    return np.stack(images), np.stack(masks), MRI_CLASSES

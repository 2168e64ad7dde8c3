"""Class definitions shared by every engine: names, ignore index, colour palette."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DEFAULT_IGNORE_INDEX = 255


def voc_palette(n: int = 256) -> np.ndarray:
    """PASCAL VOC colour map (bit-interleaved), uint8 [n, 3]; index 255 is the VOC 'void' colour."""
    palette = np.zeros((n, 3), dtype=np.uint8)
    for i in range(n):
        c, r, g, b = i, 0, 0, 0
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        palette[i] = (r, g, b)
    return palette


@dataclass(frozen=True)
class Classes:
    """The label space of a model or dataset.

    names: one name per class id 0..K-1.
    ignore_index: mask value for unlabeled pixels (never a class id); None if masks have none.
    palette: uint8 [K, 3] display colours; defaults to the VOC colour map.
    """

    names: tuple[str, ...]
    ignore_index: int | None = DEFAULT_IGNORE_INDEX
    palette: np.ndarray = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        names = tuple(str(n) for n in self.names)
        if len(names) == 0:
            raise ValueError("names: expected at least one class name, got an empty sequence")
        if len(set(names)) != len(names):
            raise ValueError(f"names: expected unique class names, got duplicates in {list(names)}")
        object.__setattr__(self, "names", names)
        if self.ignore_index is not None and 0 <= self.ignore_index < len(names):
            raise ValueError(
                f"ignore_index: expected a value outside the class ids 0..{len(names) - 1} (or None), "
                f"got {self.ignore_index}"
            )
        pal = voc_palette(len(names)) if self.palette is None else np.asarray(self.palette)
        if pal.shape != (len(names), 3):
            raise ValueError(f"palette: expected shape ({len(names)}, 3), got {pal.shape}")
        object.__setattr__(self, "palette", pal.astype(np.uint8))

    @property
    def num_classes(self) -> int:
        return len(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Class id of `name`; ValueError naming the known classes otherwise."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"name: expected one of {list(self.names)}, got {name!r}") from None

    def colorize(self, mask: np.ndarray) -> np.ndarray:
        """Index mask int [H, W] -> uint8 RGB [H, W, 3]; ignored pixels are drawn white."""
        mask = np.asarray(mask)
        out = np.full(mask.shape + (3,), 255, dtype=np.uint8)
        valid = (mask >= 0) & (mask < self.num_classes)
        out[valid] = self.palette[mask[valid]]
        return out

    def to_dict(self) -> dict:
        return {"names": list(self.names), "ignore_index": self.ignore_index,
                "palette": self.palette.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> "Classes":
        pal = d.get("palette")
        return cls(tuple(d["names"]), d.get("ignore_index", DEFAULT_IGNORE_INDEX),
                   None if pal is None else np.asarray(pal, dtype=np.uint8))

"""Feature maps for surprise adequacy from models that expose no torch layers.

Two sources that give features but no predictions (the predictions come from any model spec):
- `CallableFeatures`: a Python function f(uint8 [N, H, W, 3]) -> [N, D, h, w] or [N, D]
  (numpy or torch), called as f(images) or, when a layer is named, f(images, layer);
- `PrecomputedFeatures`: one `<folder>/<artifact name of the id>.npy` per image id (the id's
  extension replaced by ".npy", see `blindspots.ids`), float [D, h, w] or [D]; read by id with
  `features_ids(ids)` (its `features(images)` cannot know which files to read and says so).

Adapters that run a graph (torch, ONNX) give features themselves (`features(images, layer)`).
Every source returns float32 [N, D, h, w]; a flat [N, D] is [N, D, 1, 1] (one vector per image).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from blindspots.ids import artifact_name, check_image_id, legacy_artifact_name
from blindspots.models.adapters.outputs import to_tensor
from blindspots.models.protocol import as_image_batch, short_reason

NPY = ".npy"


def check_features(y: Any, n: int, name: str) -> torch.Tensor:
    """Features of n images (array / tensor [n, D, h, w] or [n, D]) -> float32 tensor [n, D, h, w], finite."""
    t = to_tensor(y, name)
    if t.ndim == 2:
        t = t[:, :, None, None]
    if t.ndim != 4 or t.shape[0] != n or t.shape[1] < 1:
        raise ValueError(f"{name}: expected features [{n}, D, h, w] or [{n}, D], got shape {tuple(t.shape)}")
    if not (t.is_floating_point() or t.dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)):
        raise ValueError(f"{name}: expected numeric features, got dtype {t.dtype}")
    t = t.float()
    finite = torch.isfinite(t)
    if not bool(finite.all()):
        raise ValueError(f"{name}: expected finite features, got {int((~finite).sum())} NaN/inf entries")
    return t


class CallableFeatures:
    """Features from a Python function: fn(uint8 [N, H, W, 3]) -> [N, D, h, w] or [N, D].

    With a `layer` the function is called as fn(images, layer) (one function, several layers).
    info: where it came from (e.g. {"spec": "mynets:features"}).
    """

    def __init__(self, fn: Callable[..., Any], *, info: dict[str, Any] | None = None) -> None:
        if not callable(fn):
            raise ValueError(f"fn: expected a callable f(uint8 [N, H, W, 3]) -> [N, D, h, w], got {type(fn).__name__}")
        self.fn = fn
        self.info = dict(info or {})

    def features(self, images: np.ndarray | Sequence[np.ndarray], layer: str | None = None) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, D, h, w]."""
        batch = as_image_batch(images)
        try:
            out = self.fn(batch) if layer is None else self.fn(batch, layer)
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001 - user code raises anything; one line naming the input
            raise ValueError(f"features callable: failed on input of shape {list(batch.shape)}: "
                             f"{type(e).__name__}: {short_reason(e)}") from e
        return check_features(out, len(batch), "features callable output").numpy()


class PrecomputedFeatures:
    """Feature maps on disk: `<folder>/<artifact_name(id, ".npy")>`, float [D, h, w] or [D] per image id.

    The legacy name `<id>.npy` is read too (as `blindspots.ids.find_artifact`). `layer` is ignored:
    the folder holds one layer.
    """

    def __init__(self, folder: str | Path, *, info: dict[str, Any] | None = None) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise ValueError(f"features: expected an existing folder of <image id>.npy feature maps, "
                             f"got {str(self.folder)!r}")
        self.info = dict(info or {})

    def path(self, image_id: str) -> Path:
        """The file of `image_id` (the rule's name, else the legacy `<id>.npy`); ValueError if neither exists."""
        check_image_id(image_id, "ids")
        for name in (artifact_name(image_id, NPY), legacy_artifact_name(image_id, NPY)):
            if (self.folder / name).is_file():
                return self.folder / name
        raise ValueError(f"ids: expected a feature file {str(self.folder / artifact_name(image_id, NPY))!r} "
                         f"for id {image_id!r}, got none")

    def features_ids(self, ids: Sequence[str], layer: str | None = None) -> np.ndarray:
        """N image ids -> float32 [N, D, h, w] (every file of one shape)."""
        ids = list(ids)
        if not ids:
            raise ValueError("ids: expected at least one image id, got an empty sequence")
        arrays = [np.load(self.path(i)) for i in ids]
        shapes = {a.shape for a in arrays}
        if len(shapes) != 1:
            raise ValueError(f"features: expected feature maps of one shape per batch in {str(self.folder)!r}, "
                             f"got shapes {sorted(shapes)}")
        return check_features(np.stack(arrays), len(ids), f"features in {str(self.folder)!r}").numpy()

    def features(self, images: np.ndarray, layer: str | None = None) -> np.ndarray:
        """Not available from pixels: raises ValueError; use `features_ids(ids)`."""
        raise ValueError("images: precomputed features are keyed by image id, not pixels; "
                         "call features_ids(ids) (the surprise functions take ids=...)")


"""What a model returns, turned into probabilities: one rule for every adapter.

output kinds:
- "logits": softmax over C; a one-channel output is a binary model: sigmoid -> [1 - p, p];
- "probabilities": validated (in [0, 1], summing to 1); one channel is p of the positive
  class -> [1 - p, p]; values outside [0, 1] raise a ValueError suggesting output='logits';
- "labels": integer class ids [N, h, w] (or [N, 1, h, w]) -> one-hot.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from blindspots.models.protocol import (
    PROBA_TOLERANCE,
    check_in_unit_range,
    check_probabilities,
    fmt_shape,
    one_hot_labels,
)


def select_output(out: Any, output_key: str | None) -> torch.Tensor:
    """Pick the tensor from a module's output: a tensor, a dict (torchvision's "out"), or a tuple."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        key = output_key or ("out" if "out" in out else None)
        if key is None or key not in out:
            raise ValueError(f"output_key: expected one of {sorted(out)}, got {output_key!r}")
        return out[key]
    if hasattr(out, "logits") and isinstance(out.logits, torch.Tensor):  # transformers' ModelOutput
        return out.logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise ValueError(f"model output: expected a tensor, a dict of tensors or a tuple, got {type(out).__name__}")


def to_tensor(out: Any, name: str) -> torch.Tensor:
    """A numpy array / torch tensor / array-like -> torch tensor on the CPU (no copy for numpy)."""
    if isinstance(out, torch.Tensor):
        return out.detach()
    try:
        arr = np.asarray(out)
    except Exception as e:  # noqa: BLE001 - anything that is not array-like
        raise ValueError(f"{name}: expected an array, got {type(out).__name__}: {e}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ValueError(f"{name}: expected a numeric array, got dtype {arr.dtype}")
    if arr.dtype.byteorder not in ("=", "|") or not arr.flags.writeable:
        arr = arr.astype(arr.dtype.newbyteorder("="), copy=True)
    return torch.from_numpy(arr)


def _dtype_name(y: torch.Tensor) -> str:
    return str(y.dtype).replace("torch.", "")


def check_raw(y: torch.Tensor, n: int, num_classes: int, size: tuple[int, int] | None, name: str,
              output: str = "logits") -> None:
    """Scores [n, C, h, w] (any h, w; C = num_classes, or 1 for a binary model) or [n, C] when size is None.

    Finite values are checked here unless output="probabilities" with C channels: `to_probabilities`
    checks those (its per-pixel sums are non-finite wherever a value is), so one pass less."""
    want = (n, num_classes) + (tuple(size) if size is not None else ())
    if y.ndim != len(want):
        raise ValueError(f"{name}: expected {len(want)} dimensions {fmt_shape(want)}, "
                         f"got {y.ndim} with shape {tuple(y.shape)}")
    channels_ok = y.shape[1] == num_classes or (num_classes == 2 and y.shape[1] == 1)
    if y.shape[0] != n or not channels_ok:
        axis = 0 if y.shape[0] != n else 1
        raise ValueError(f"{name}: expected shape {fmt_shape(want)}, got {tuple(y.shape)} (axis {axis})")
    if not y.is_floating_point():
        raise ValueError(f"{name}: expected floating-point values, got dtype {_dtype_name(y)}")
    # A NaN or inf anywhere makes the sum of all values non-finite: one read pass and no temporary
    # (measured, 1 thread: torch.isfinite(y).all() cost 1.7-3.4x a softmax of the same output, the
    # sum 0.1x). The full count only then (or when huge finite scores overflow the sum).
    if output == "probabilities" and y.shape[1] == num_classes:
        return
    if y.numel() and bool(torch.isfinite(y.sum())):
        return
    finite = torch.isfinite(y)
    if not bool(finite.all()):
        raise ValueError(f"{name}: expected finite values, got {int((~finite).sum())} NaN/inf entries")


def check_labels(y: torch.Tensor, n: int, name: str) -> torch.Tensor:
    """Class ids [n, h, w] or [n, 1, h, w] -> [n, 1, h, w] (integers)."""
    if y.ndim == 3:
        y = y[:, None]
    if y.ndim != 4 or y.shape[0] != n or y.shape[1] != 1:
        raise ValueError(f"{name}: expected class ids of shape [{n}, h, w], got {tuple(y.shape)}")
    if y.dtype == torch.bool:
        return y.long()  # a binary mask: False / True are classes 0 / 1
    if y.is_floating_point() or y.is_complex():
        raise ValueError(f"{name}: expected integer class ids, got dtype {_dtype_name(y)}")
    return y


def to_probabilities(y: torch.Tensor, output: str, num_classes: int, name: str,
                     on_device: bool = False) -> np.ndarray | torch.Tensor:
    """Checked scores [n, C or 1, ...] -> float32 probabilities [n, num_classes, ...] (numpy).

    on_device: a float32 tensor where the scores are (a GPU's statistics then stay on the GPU: the
    probabilities of a 150-class 512x512 image are 157 MB, their statistics a few KB)."""
    if on_device and output == "logits" and not (y.shape[1] == 1 and num_classes == 2):
        return torch.softmax(y.float(), dim=1)
    if output == "labels":
        return one_hot_labels(y[:, 0].cpu().numpy(), num_classes, name)
    if y.shape[1] == 1 and num_classes == 2:
        return _binary(y, output, name)
    if output == "logits":
        return torch.softmax(y.float(), dim=1).cpu().numpy()
    arr = y.float().cpu().numpy()
    return check_probabilities(arr, expected_shape=tuple(arr.shape), output="probabilities", name=name)


def _binary(y: torch.Tensor, output: str, name: str) -> np.ndarray:
    """One-channel scores [n, 1, ...] (logits or p of the positive class) -> float32 [n, 2, ...] = [1 - p, p].

    Written into the one output array: `torch.cat([1 - p, p])` held p, a clamped copy, 1 - p and
    the result at once, 2.5x the result (a 13 MP photo: 270 MB where 110 MB remain). Same bits."""
    p = y.float().cpu()
    if output == "logits":
        p = torch.sigmoid(p)
    else:
        check_in_unit_range(p.numpy(), name, PROBA_TOLERANCE,
                            what="one-channel probabilities (p of the positive class)")
    out = np.empty((p.shape[0], 2) + tuple(p.shape[2:]), dtype=np.float32)
    positive = torch.from_numpy(out[:, 1:])
    positive.copy_(p)
    del p
    if output != "logits":
        positive.clamp_(0, 1)
    np.subtract(np.float32(1), out[:, 1:], out=out[:, :1])
    return out


def to_logits(y: torch.Tensor, num_classes: int, on_device: bool = False) -> np.ndarray | torch.Tensor:
    """Checked logits [n, C or 1, ...] -> float32 logits [n, num_classes, ...] whose softmax over C is what
    `to_probabilities` gives: a one-channel binary logit z becomes [0, z] (softmax [1 - sigmoid(z),
    sigmoid(z)]). A numpy array, or a tensor where the scores are when `on_device`."""
    y = y.float()
    if y.shape[1] == 1 and num_classes == 2:
        y = torch.cat([torch.zeros_like(y), y], dim=1)
    return y if on_device else y.cpu().numpy()

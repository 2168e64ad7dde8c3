"""Where a model runs and at what precision: the device rule (`auto`: CUDA when present, else CPU),
autocast for `precision=fp16|bf16`, and pinned-memory host -> GPU transfers.

One rule for every torch path (the adapters' inference, fine-tuning in `blindspots.training`, the
ONNX Runtime provider choice): a spec without `device` runs on the GPU of a machine that has one
and on the CPU otherwise, exactly as before on a CPU machine.

Precision: `fp32` (default) runs the model as it is. `fp16` / `bf16` run its forward under
`torch.autocast` (matrix products and convolutions in half precision, reductions and softmax
inputs kept in float32 by autocast's own op lists); the model's output is cast back to float32
before anything else, so probabilities, entropies and every statistic of the scan are float32.
"""
from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import numpy as np
import torch

from blindspots.models.spec_syntax import check_precision

AUTO = "auto"
_AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def cuda_available() -> bool:
    """True when torch sees a CUDA device (False on a machine without a driver)."""
    return bool(torch.cuda.is_available())


def resolve_device(device: str | torch.device | None = AUTO) -> torch.device:
    """'auto' (or None) -> cuda when available, else cpu; anything else as a torch.device.

    ValueError naming the argument for a malformed device, and for 'cuda' on a machine without one
    (torch would only fail at the first forward, with a message about drivers)."""
    if device is None or (isinstance(device, str) and device.strip().lower() == AUTO):
        return torch.device("cuda" if cuda_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r} ({e})") from None
    if dev.type == "cuda" and not cuda_available():
        raise ValueError(f"device: expected a device this machine has, got {device!r} and torch sees no CUDA device "
                         f"(use device=auto or device=cpu)")
    return dev


def autocast(device: torch.device, precision: str) -> ContextManager[Any]:
    """The forward's context: nothing for fp32, `torch.autocast(device.type, dtype)` otherwise."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=_AMP_DTYPES[precision])


def training_precision(precision: str, device: torch.device) -> str:
    """Fine-tuning's precision: 'auto' -> bf16 on a CUDA device that supports it, fp16 on other CUDA
    devices, fp32 on the CPU (so CPU training is unchanged); any other value checked as given."""
    if precision == AUTO:
        if device.type != "cuda":
            return "fp32"
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return check_precision(precision)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """A loss scaler, enabled for fp16 only (bf16 has float32's range: no scaling needed)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def pin(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor in page-locked (pinned) host memory, so a copy to the GPU can run asynchronously;
    the tensor unchanged where pinning is not available (no CUDA driver: the CPU fallback)."""
    if tensor.device.type != "cpu" or tensor.is_pinned():
        return tensor
    try:
        return tensor.pin_memory()
    except RuntimeError:  # no driver / no accelerator: pageable memory, a plain copy later
        return tensor


def pin_array(array: np.ndarray) -> np.ndarray:
    """A numpy array backed by pinned memory (a copy of `array`), or `array` itself where pinning is
    not available. The scan's reader thread pins each decoded batch, so that the main thread's
    transfer to the GPU (`to_device`) is a DMA copy that does not wait for the host."""
    pinned = pin(torch.from_numpy(np.ascontiguousarray(array)))
    return pinned.numpy() if pinned.is_pinned() else array


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Host tensor -> `device`. To a GPU: from pinned memory and without blocking the host (the copy
    is queued on the current stream, before the forward that reads it); to the CPU: unchanged."""
    if device.type == "cpu":
        return tensor.to(device)
    src = pin(tensor)
    return src.to(device, non_blocking=src.is_pinned())

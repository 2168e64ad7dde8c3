"""Mixed precision for fine-tuning: the forward under autocast, the backward through a loss scaler.

`MixedPrecision(device, precision)`: device "auto" (CUDA when present, else CPU), "cpu", "cuda",
"cuda:N"; precision "auto" (bf16 on a CUDA device that supports it, else fp16 on CUDA; fp32 on the
CPU, so CPU training is bit for bit what it was), "fp32", "fp16" or "bf16". fp16 scales the loss
(`torch.amp.GradScaler`: skips steps whose gradients overflowed); bf16 has float32's exponent range
and needs no scaling. The loss itself is computed in float32 on the float32-cast logits.
"""
from __future__ import annotations

from typing import Any, ContextManager

import torch

from blindspots.models.devices import autocast, grad_scaler, resolve_device, training_precision


class MixedPrecision:
    """The device and precision of one training run; `autocast()` around the forward, `step(loss, opt)`
    for backward + optimizer step. Attributes: device (torch.device), precision ('fp32'|'fp16'|'bf16')."""

    def __init__(self, device: str | torch.device = "cpu", precision: str = "auto") -> None:
        self.device = resolve_device(device)
        self.precision = training_precision(precision, self.device)
        self.scaler = grad_scaler(self.device, self.precision)

    def autocast(self) -> ContextManager[Any]:
        """The forward's context (nothing for fp32)."""
        return autocast(self.device, self.precision)

    def step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """Backward and optimizer step (through the scaler for fp16; plain otherwise)."""
        if self.scaler.is_enabled():
            self.scaler.scale(loss).backward()
            self.scaler.step(optimizer)
            self.scaler.update()
        else:
            loss.backward()
            optimizer.step()

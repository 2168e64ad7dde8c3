"""The scan's statistics straight from a model's (upsampled) logits, without the softmax probabilities.

For logits z [C] of one pixel, m = max z, S = sum exp(z - m) and T = sum exp(z - m)(z - m):
the softmax's largest probability is 1 / S, its entropy log S - T / S (nats; = logsumexp(z) - sum
softmax(z) z), and its argmax the argmax of z (the softmax is monotone). So one exp per class and
pixel replaces the softmax (exp, sum, divide: a full-size float32 copy of the logits) and the
statistics' log per class and pixel; the log is taken once a pixel. The numbers agree with
`scan.stats.model_stats` of the softmax to float32 rounding (its p log(p + 1e-30) and the softmax's
own rounding), not to the bit; like it, each image is computed alone, so a batch split over threads
gives the same bits as one call.

Host: compiled passes (`_stats_kernels`) and numpy's SIMD exp, block by block of pixels in the
cache; two classes (binary models) take one exp a pixel, of -|z1 - z0| (the larger class's is 1).
Device: torch ops over chunks of at most `DEVICE_CHUNK_VALUES` values (two scratch buffers),
never a second full-size copy of [N, C, H, W].
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from blindspots.scan.stats import DEVICE_CHUNK_VALUES, ModelStats, PendingStats, block_buffer

# Lazy imports: numba (its JIT kernels are compiled or loaded by their first call) and torch (only for
# logits that are already a tensor on a device).

#: logits a block of pixels holds (C x pixels; at least one row). Measured on 256x256 images, C = 2, 19, 150:
#: blocks of 2^15 to 2^19 values within 6% of each other, 2^13 up to 1.6x slower (more calls a image)
BLOCK_VALUES = 1 << 16


@dataclass
class Logits:
    """A model's logits at the image size, float [N, C, H, W] (numpy, or a torch tensor on the model's
    device), handed to the statistics instead of probabilities (`stats.model_stats` dispatches on
    `from_logits`, so that module need not import this one)."""

    values: Any
    from_logits = True

    def stats(self) -> ModelStats:
        """The statistics of their softmax, on the host (`logit_stats`)."""
        return logit_stats(self.values)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    def __getitem__(self, key: slice) -> "Logits":
        return Logits(self.values[key])


def _check(z: Any) -> None:
    if z.ndim != 4:
        raise ValueError(f"logits: expected shape [N, C, H, W], got {tuple(z.shape)}")


def logit_stats(logits: Any) -> ModelStats:
    """logits float [N, C, H, W] (numpy, or a CPU torch tensor; finite, validated upstream) -> the
    `ModelStats` of their softmax over C (see the module docstring), computed on the host."""
    from blindspots.scan import _stats_kernels as kern  # numba: imported (and compiled) on first use

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(logits, torch.Tensor):
        if logits.device.type != "cpu":
            return begin_device_logit_stats(logits).result()
        logits = logits.detach().float().numpy()
    z = np.asarray(logits)
    _check(z)
    z = np.ascontiguousarray(z, dtype=np.float32)
    n, c, h, w = z.shape
    hw = h * w
    idx = np.empty((n, h, w), dtype=np.uint8 if c <= 256 else np.int32)
    counts = np.zeros((n, c), dtype=np.int64)
    ent = np.empty(hw, dtype=np.float32)  # per-pixel entropy of one image
    maxp = np.empty(hw, dtype=np.float32)  # per-pixel largest probability of one image
    entropy = np.empty(n, dtype=np.float32)
    maxprob = np.empty(n, dtype=np.float32)
    block = max(1, min(h, max(1, BLOCK_VALUES // c) // max(1, w))) * w  # whole rows, C x block values
    scratch = block_buffer((c + 4) * block)  # C planes of exp(z - max), then max, S, T, log S
    for i in range(n):
        zi, ii = z[i].reshape(c, hw), idx[i].reshape(-1)
        for s in range(0, hw, block):
            e = min(hw, s + block)
            m = e - s
            buf = scratch[:c * m].reshape(c, m)
            maxz, total, weighted, log_total = (scratch[(c + j) * block:(c + j) * block + m] for j in range(4))
            if c == 2:  # one exp a pixel, of -|z1 - z0| (binary models: a one-channel logit z is [0, z])
                shift, exps = buf[0], buf[1]
                kern.two_class_shift(zi, s, e, ii, shift, counts[i])
                np.exp(shift, out=exps)
                kern.two_class_sums(shift, exps, total, weighted)
            else:
                kern.logit_max_shift(zi, s, e, maxz, ii, buf, counts[i])
                np.exp(buf, out=buf)
                kern.exp_sums(zi, s, e, maxz, buf, total, weighted)
            np.log(total, out=log_total)
            kern.entropy_maxprob(log_total, total, weighted, ent[s:e], maxp[s:e])
        entropy[i] = ent.mean(dtype=np.float32)
        maxprob[i] = maxp.mean(dtype=np.float32)
    return ModelStats(argmax=idx, frac=(counts / float(hw)).astype(np.float32), entropy=entropy, maxprob=maxprob)


def begin_device_logit_stats(logits: Any, chunk_values: int = DEVICE_CHUNK_VALUES) -> PendingStats:
    """The statistics of logits [N, C, H, W] (a torch tensor of any float dtype) queued on their device, by
    the formulas of the module docstring in torch ops: one max/argmax read, then per chunk (whole images,
    or rows of one image, at most `chunk_values` values) z - max and its exp into two scratch buffers,
    summed over C. Returns at once (`stats.PendingStats`; see `stats.begin_device_stats`)."""
    import torch  # present: the tensor came from it

    _check(logits)
    z = logits.detach()
    n, c, h, w = z.shape
    maxz, idx = z.max(dim=1)  # in z's dtype; the first maximal index on ties
    offsets = torch.arange(n, device=z.device).view(n, 1, 1) * c
    counts = torch.bincount((idx + offsets).reshape(-1), minlength=n * c).view(n, c)
    maxz = maxz.float()
    total = torch.empty((n, h, w), dtype=torch.float32, device=z.device)  # S per pixel
    weighted = torch.empty_like(total)  # T per pixel
    per_image = c * h * w
    if per_image <= chunk_values:  # whole images a chunk
        k = min(n, chunk_values // per_image)
        shift = torch.empty(z[:k].shape, dtype=torch.float32, device=z.device)
        chunks = [(slice(i, min(n, i + k)), slice(None)) for i in range(0, n, k)]
    else:  # rows of one image a chunk
        rows = max(1, min(h, chunk_values // max(1, c * w)))
        shift = torch.empty((1, c, rows, w), dtype=torch.float32, device=z.device)
        chunks = [(slice(i, i + 1), slice(s, min(h, s + rows))) for i in range(n) for s in range(0, h, rows)]
    exps = torch.empty_like(shift)
    for im, rs in chunks:
        zc, mc = z[im, :, rs], maxz[im, rs]
        d, ex = shift[:zc.shape[0], :, :zc.shape[2]], exps[:zc.shape[0], :, :zc.shape[2]]
        torch.sub(zc, mc.unsqueeze(1), out=d)  # z - max in float32 (a half-precision z is promoted)
        torch.exp(d, out=ex)
        torch.sum(ex, dim=1, out=total[im, rs])
        ex.mul_(d)
        torch.sum(ex, dim=1, out=weighted[im, rs])
    entropy = (torch.log(total) - weighted / total).mean(dim=(1, 2))
    maxprob = total.reciprocal().mean(dim=(1, 2))
    small = torch.uint8 if c <= 256 else torch.int32
    outs = (idx.to(small), (counts.double() / float(h * w)).float(), entropy, maxprob)
    return PendingStats.of(outs, z.device)

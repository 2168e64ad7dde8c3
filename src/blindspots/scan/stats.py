"""Per-batch statistics of a model's probabilities and distances between two argmax maps.

The statistics are compiled passes over the class axis (`_stats_kernels`) and numpy's log, block
by block in the cache, so that the scan costs little beyond the models' own forward passes.
"""
from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from blindspots.metrics import map_distances

# Lazy imports: numba (its JIT kernels are compiled or loaded by their first call).


@dataclass
class ModelStats:
    """Statistics of one model on a batch of N images of one size H x W.

    argmax: uint8 (C <= 256, else int32) [N, H, W] — the predicted map.
    frac: float32 [N, C] — pixel fraction of each class in the map.
    entropy: float32 [N] — mean per-pixel entropy of the probabilities, in nats.
    maxprob: float32 [N] — mean per-pixel maximum probability.
    """

    argmax: np.ndarray
    frac: np.ndarray
    entropy: np.ndarray
    maxprob: np.ndarray


ENTROPY_EPS = np.float32(1e-30)  # p log(p + eps) is 0 at p = 0 and equal to p log p (float32) elsewhere
BLOCK_PIXELS = 1 << 14  # pixels per block: the C planes of a block and its scratch stay in the L2 cache

_scratch = threading.local()  # per thread: a float32 buffer of C x BLOCK_PIXELS, reused across batches


def block_buffer(size: int) -> np.ndarray:
    """This thread's float32 scratch of at least `size` values (one allocation, grown when needed:
    a fresh large buffer per batch is page-faulted in again on every call)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.size < size:
        buf = _scratch.buf = np.empty(size, dtype=np.float32)
    return buf


#: float32 values of one chunk of `device_stats`' entropy pass (whole images, or rows of one image): its
#: one scratch stays at 256 MB whatever the classes and image size, never a second copy of [N, C, H, W]
DEVICE_CHUNK_VALUES = 1 << 26


@dataclass
class PendingStats:
    """`device_stats` queued on the device: its results copied (without waiting) into host memory, and
    the CUDA event recorded after the copies (None for CPU tensors: already done). `result()` waits for
    that event only, not for work queued later (e.g. the next batch's forward)."""

    argmax: Any  # host tensors: uint8 / int32 [N, H, W], float32 [N, C], [N], [N]
    frac: Any
    entropy: Any
    maxprob: Any
    event: Any = None

    @classmethod
    def of(cls, outs: tuple[Any, Any, Any, Any], device: Any) -> "PendingStats":
        """argmax, frac, entropy, maxprob (tensors on `device`, their kernels queued) -> their copies into
        pinned host memory queued behind them, and the event after the copies (CPU tensors: as they are)."""
        import torch  # present: the tensors came from it

        if device.type != "cuda":
            return cls(*(t.cpu() for t in outs))
        host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in outs]
        for dst, src in zip(host, outs):
            dst.copy_(src, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))  # the stream that ran the kernels
        return cls(*host, event=event)

    def result(self) -> ModelStats:
        if self.event is not None:
            self.event.synchronize()
        return ModelStats(self.argmax.numpy(), self.frac.numpy(), self.entropy.numpy(), self.maxprob.numpy())


def begin_device_stats(proba: Any, chunk_values: int = DEVICE_CHUNK_VALUES) -> PendingStats:
    """Queue `device_stats` of a float32 tensor [N, C, H, W] on its device and return at once (see
    `PendingStats`): the scan's main thread queues them right behind the forward, so the GPU runs them
    in order while the host goes on, and the probabilities may be freed as soon as this returns."""
    import torch  # present: the tensor came from it

    if proba.ndim != 4:
        raise ValueError(f"proba: expected shape [N, C, H, W], got {tuple(proba.shape)}")
    p = proba.detach().float()
    n, c, h, w = p.shape
    maxp, idx = p.max(dim=1)  # the first maximal index on ties, as np.argmax
    offsets = torch.arange(n, device=p.device).view(n, 1, 1) * c  # one bincount for the whole batch
    counts = torch.bincount((idx + offsets).reshape(-1), minlength=n * c).view(n, c)
    ent = torch.empty((n, h, w), dtype=torch.float32, device=p.device)  # per-pixel sum of -p log p
    per_image = c * h * w
    # the scratch takes the probabilities' layout (empty_like keeps channels-last strides, which the scan's
    # upsampled logits have): entr then reads and writes both in memory order, no transposing pass
    if per_image <= chunk_values:  # whole images a chunk: two kernels each
        k = min(n, chunk_values // per_image)
        buf = torch.empty_like(p[:k])
        for i in range(0, n, k):
            e = min(n, i + k)
            torch.special.entr(p[i:e], out=buf[:e - i])
            torch.sum(buf[:e - i], dim=1, out=ent[i:e])
    else:  # rows of one image a chunk
        rows = max(1, min(h, chunk_values // max(1, c * w)))
        buf = torch.empty_like(p[0, :, :rows])
        for i in range(n):
            for s in range(0, h, rows):
                e = min(h, s + rows)
                torch.special.entr(p[i, :, s:e], out=buf[:, :e - s])
                torch.sum(buf[:, :e - s], dim=0, out=ent[i, s:e])
    small = torch.uint8 if c <= 256 else torch.int32
    outs = (idx.to(small), (counts.double() / float(h * w)).float(), ent.mean(dim=(1, 2)), maxp.mean(dim=(1, 2)))
    return PendingStats.of(outs, p.device)


def device_stats(proba: Any, chunk_values: int = DEVICE_CHUNK_VALUES) -> ModelStats:
    """`model_stats` of a float32 tensor [N, C, H, W] on an accelerator, computed there with torch ops:
    only the argmax maps (1 byte a pixel) and 2 + C numbers an image travel back to host memory, not
    the C float32 planes (a 150-class 512x512 image: 0.26 MB instead of 157 MB). Same definitions as
    the host pass (first maximum on ties, the entropy -sum p log p, in float32); the sums' order
    differs, so values agree to float32 rounding, not to the bit.

    Two reads of the probabilities: one max/argmax over the classes (outputs [N, H, W]), then the
    entropy over chunks of at most `chunk_values` values (torch.special.entr into one scratch, summed
    over C: two kernels a chunk). The host pass's p log(p + eps) equals p log p in float32 for every p
    above 1e-23 (p + 1e-30 rounds to p) and at 0; below, both terms are under 1e-21. The unfused version
    (`p * log(p + eps)` on the whole tensor) held three full-size temporaries: 2.4 GB above a batch of
    8 150-class 512x512 images, measured on an H200, against 163 MB."""
    return begin_device_stats(proba, chunk_values).result()


def device_stats_unfused(proba: Any) -> ModelStats:
    """The whole-tensor torch version `device_stats` replaced (three full-size temporaries): kept as the
    reference its fused passes are measured and tested against (benchmarks/gpu_all.py, tests/test_gpu.py)."""
    import torch

    p = proba.detach().float()
    n, c, h, w = p.shape
    maxp, idx = p.max(dim=1)
    counts = torch.zeros((n, c), dtype=torch.int64, device=p.device)
    counts.scatter_add_(1, idx.reshape(n, -1), torch.ones_like(idx.reshape(n, -1)))
    entropy = -(p * torch.log(p + float(ENTROPY_EPS))).sum(dim=1).mean(dim=(1, 2))
    small = torch.uint8 if c <= 256 else torch.int32
    return ModelStats(idx.to(small).cpu().numpy(), (counts.double() / float(h * w)).float().cpu().numpy(),
                      entropy.cpu().numpy().astype(np.float32), maxp.mean(dim=(1, 2)).cpu().numpy().astype(np.float32))


def model_stats(proba: Any) -> ModelStats:
    """proba: float32 [N, C, H, W] probabilities (validated upstream; numpy or torch) -> ModelStats.

    One pass over the probabilities, block by block of pixels (BLOCK_PIXELS): each block is read from
    memory once and every statistic is taken while it sits in the cache. A compiled pass
    (`_stats_kernels`) takes max, argmax (the first maximum on ties, as np.argmax) and the class counts
    in one read of the C planes; numpy's SIMD log gives log(p + eps); a second compiled pass sums
    p log(p + eps) per pixel in channel order. The numbers are the same bits as numpy's reductions
    (a batch of 16 x 8 classes x 128^2, interleaved, load ~1: 2.5 ms against 3.4-3.5 ms for numpy passes only;
    numpy's log is 0.8 ms of it). A one-pixel block keeps numpy's pairwise sum (its bits).
    """
    from blindspots.scan import _stats_kernels as kern  # numba: imported (and compiled) on first use

    if isinstance(proba, PendingStats):  # queued on the device by `begin_device_stats`
        return proba.result()
    if getattr(proba, "from_logits", False):  # `logit_stats.Logits`: the statistics of their softmax, without it
        return proba.stats()
    torch = sys.modules.get("torch")  # a tensor implies torch is imported; the scan itself does not import it
    if torch is not None and isinstance(proba, torch.Tensor) and proba.device.type != "cpu":
        return device_stats(proba)
    p = proba.detach().cpu().numpy() if torch is not None and isinstance(proba, torch.Tensor) else np.asarray(proba)
    if p.ndim != 4:
        raise ValueError(f"proba: expected shape [N, C, H, W], got {p.shape}")
    p = np.ascontiguousarray(p, dtype=np.float32)
    n, c, h, w = p.shape
    hw = h * w
    maxp = np.empty((n, h, w), dtype=np.float32)
    idx = np.empty((n, h, w), dtype=np.uint8 if c <= 256 else np.int32)
    ent = np.empty((h, w), dtype=np.float32)  # per-pixel sum of p log(p + eps) of one image
    counts = np.zeros((n, c), dtype=np.int64)  # pixels per argmax class, per image
    entropy = np.empty(n, dtype=np.float32)
    block = max(1, min(h, BLOCK_PIXELS // max(1, w))) * w  # whole rows, as before (same block sizes)
    scratch = block_buffer(c * block)
    flat_ent = ent.reshape(-1)
    for i in range(n):
        pi, mi, ii = p[i].reshape(c, hw), maxp[i].reshape(-1), idx[i].reshape(-1)
        for s in range(0, hw, block):
            e = min(hw, s + block)
            buf = scratch[:c * (e - s)].reshape(c, e - s)  # contiguous for the log
            kern.max_argmax_eps(pi, s, e, ENTROPY_EPS, mi, ii, buf, counts[i])
            np.log(buf, out=buf)
            if e - s > 1:
                kern.plogp_sum(pi, s, e, buf, flat_ent)
            else:  # one pixel: numpy sums a single column pairwise, not in channel order; keep its bits
                buf *= pi[:, s:e]
                np.sum(buf, axis=0, out=flat_ent[s:e])
        entropy[i] = -ent.mean()
    return ModelStats(
        argmax=idx,
        frac=(counts / float(hw)).astype(np.float32),
        entropy=entropy,
        maxprob=maxp.mean(axis=(1, 2), dtype=np.float32),
    )


def model_stats_on(proba: Any, executor: Any = None, parts: int = 1) -> ModelStats:
    """`model_stats`, host probabilities (or host `logit_stats.Logits`) split by image over `parts` threads:
    this one and parts - 1 tasks of `executor` (a concurrent.futures executor). Each image's statistics
    are computed alone (its own blocks, its own sums), so the numbers are the same bits as one call; the
    compiled passes release the GIL. Anything else (one image, no executor, probabilities queued on a
    device) is one `model_stats`."""
    host = proba.values if getattr(proba, "from_logits", False) else proba  # host `Logits` split as probabilities do
    n = proba.shape[0] if isinstance(host, np.ndarray) and host.ndim == 4 else 0
    parts = min(parts, n)
    if executor is None or parts < 2:
        return model_stats(proba)
    cuts = np.linspace(0, n, parts + 1).astype(int)
    futures = [executor.submit(model_stats, proba[a:b]) for a, b in zip(cuts[1:-1], cuts[2:])]
    got = [model_stats(proba[cuts[0]:cuts[1]])] + [f.result() for f in futures]
    return ModelStats(*(np.concatenate([getattr(g, k) for g in got]) for k in ("argmax", "frac", "entropy", "maxprob")))


def pair_distances(a: np.ndarray, b: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Distances between two argmax maps, per image (the paper's d(f_t(x), g_j(x)), Eq. 1).

    a, b: int [N, H, W] class ids in [0, C).
    Returns (dpa, dmiou), float64 [N] each: 1 - pixel agreement, and 1 - mIoU where the mean
    runs over the classes present in either map. Computed by `metrics.map_distances` (the one copy;
    measured 1.2-1.7x faster than the bincount this module had, with identical numbers).
    """
    return map_distances(a, b, num_classes)

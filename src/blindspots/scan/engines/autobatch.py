"""`batch_size="auto"`: the scan's batch chosen from the GPU's free memory, and logged.

On a GPU a forward of a few images is bound by launching its kernels, not by the GPU's arithmetic
(a MiT-b2-like SegFormer at 512x512: the scan ran 3 images a batch under the default 1-megapixel
budget); a larger batch spreads that cost. How large fits is measured, not guessed: each model on a
CUDA device runs the scan's own device path (`predict_proba_device`, then the
statistics) on PROBE_IMAGES blank images of the pool's first image size; its peak allocation above what
was held before, per image, divides AUTO_MEMORY_SHARE of the device's free memory. The pixel budget follows
(images x pixels of the probed size), so larger photos later in a pool get proportionally fewer a batch.

Models on the CPU keep the usual default (AUTO_CPU_IMAGES images, the default pixel budget).
"""
from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from blindspots.batches import DEFAULT_MAX_PIXELS, BatchLimits
from blindspots.scan.engines.job import on_gpu
from blindspots.scan.stats import model_stats

log = logging.getLogger(__name__)

AUTO = "auto"
AUTO_MEMORY_SHARE = 0.5  # of the free device memory: room for the batch in flight and the next one's transfer
AUTO_MAX_IMAGES = 64  # beyond this the launch cost per image is already small; larger only costs latency
AUTO_CPU_IMAGES = 16  # the scan's default count where no model is on a GPU
PROBE_IMAGES = 2
# torch's CUDA upsampling refuses an output of INT_MAX elements or more: the probabilities [n, C, H, W] of a
# batch stay below it (on an H200, 64 images of 512x512 at 150 classes would be 2.5e9 elements)
MAX_BATCH_ELEMENTS = 2**31 - 1


def check_batch_size(batch_size: Any) -> int | str:
    """A positive int, or "auto"; ValueError naming the argument otherwise."""
    if isinstance(batch_size, str) and batch_size.strip().lower() == AUTO:
        return AUTO
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or int(batch_size) < 1:
        raise ValueError(f"batch_size: expected a positive integer or 'auto', got {batch_size!r}")
    return int(batch_size)


def probe_size(pool: Any, ids: Sequence[str], resize: tuple[int, int] | None) -> tuple[int, int]:
    """(H, W) the probe runs at: `resize`, else the first readable image among the first ids."""
    if resize is not None:
        return int(resize[0]), int(resize[1])
    for item in pool.iter_items(list(ids[:8])):
        if item.image is not None:
            return int(item.image.shape[0]), int(item.image.shape[1])
    raise ValueError(f"batch_size: 'auto' needs a readable image among the pool's first ids to size the batch, "
                     f"got none in {list(ids[:8])}")


def bytes_per_image(model: Any, size: tuple[int, int]) -> int:
    """Device memory a scan needs per image of `size`: the peak of its device path (forward, probabilities,
    statistics) above what the device held before (PROBE_IMAGES blank images; at least 1 byte). The
    probabilities are freed once their statistics are queued (`forward.begin_stats`): no batch waiting for
    the writer thread holds them."""
    torch = sys.modules["torch"]  # a model on a GPU: torch is imported
    device = model.device
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    blank = np.zeros((PROBE_IMAGES, size[0], size[1], 3), np.uint8)
    # the path the scan takes on a GPU (`forward.predict`): probabilities, then their statistics
    model_stats(model.predict_proba_device(blank))
    torch.cuda.synchronize(device)
    return max(1, (torch.cuda.max_memory_allocated(device) - base) // PROBE_IMAGES)


def auto_limits(models: Mapping[str, Any], size_of: Callable[[], tuple[int, int]],
                max_images: int = AUTO_MAX_IMAGES, share: float = AUTO_MEMORY_SHARE) -> BatchLimits:
    """The scan's batch limits for `batch_size="auto"` (see the module docstring); logs the choice.
    size_of: the probe's (H, W), asked only when some model is on a GPU (e.g. `probe_size`)."""
    gpu = {name: m for name, m in models.items() if on_gpu(m) and hasattr(m, "predict_proba_device")}
    if not gpu:
        log.info("batch_size=auto: no model on a GPU, %d images a batch (pixel budget %d)", AUTO_CPU_IMAGES,
                 DEFAULT_MAX_PIXELS)
        return BatchLimits(AUTO_CPU_IMAGES, DEFAULT_MAX_PIXELS)
    torch = sys.modules["torch"]
    size = size_of()
    images = max_images
    for name, m in gpu.items():  # the models run one after the other on a batch: the tightest one decides
        need = bytes_per_image(m, size)
        free = int(torch.cuda.mem_get_info(m.device)[0])
        fit = max(1, min(max_images, int(free * share) // need))
        classes = int(getattr(m, "num_classes", 1) or 1)
        fit = max(1, min(fit, MAX_BATCH_ELEMENTS // (classes * size[0] * size[1])))
        log.info("batch_size=auto: model %r on %s needs %.1f MiB an image of %dx%d, %.1f GiB free: %d images",
                 name, m.device, need / 2**20, size[0], size[1], free / 2**30, fit)
        chunk = getattr(m, "batch_size", None)
        if chunk is not None and chunk < fit:
            log.info("batch_size=auto: model %r runs each batch in forwards of its own batch_size=%d", name, chunk)
        images = min(images, fit)
    log.info("batch_size=auto: %d images a batch (pixel budget %d)", images, images * size[0] * size[1])
    return BatchLimits(images, images * size[0] * size[1])

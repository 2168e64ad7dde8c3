"""`ScanJob`: what every engine needs to run the shards of one scan, in one frozen value.

`scan_pool` checks its arguments and builds one; the engines (`local.run_local`, `ray.run_ray`),
the shard collector (`collect.ShardCollector`) and the writers (`rows.add_batch`,
`rows.finish_shard`) all take it instead of the same ten positional arguments each.
"""
from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Mapping

from blindspots.batches import BatchLimits
from blindspots.scan.engines.stages import NO_STAGES
from blindspots.scan.layout import ScanLayout


@dataclass(frozen=True)
class ScanJob:
    """One scan's fixed settings.

    pool: the ImagePool (or any pool source: `.ids`, `.iter_items(ids)`); models: name ->
    Segmenter; layout: the scan folder; target: the model under test; num_classes: C of every
    model; batch_size: images per forward (a `blindspots.batches.BatchLimits`: images and pixels, or an
    image count with the default pixel budget); resize: (H, W) every image is resized to, or None;
    save_maps: write each model's argmax maps as index PNGs. pin_memory: decoded batches are copied
    into pinned host memory on the reader side (a model runs on a GPU: its transfer then overlaps
    the decoding of the next batch, `models.devices.to_device`). decode_workers: threads that decode
    the images (`engines.decoding`; 1: the reader thread alone). map_pool: the threads that encode and
    write argmax PNGs off the writer thread (`rows.add_batch`; None: the writer thread writes them).
    stages: the local engine's per-stage clock (`engines.stages`; a no-op by default).
    """

    pool: Any
    models: Mapping[str, Any]
    layout: ScanLayout
    target: str
    num_classes: int
    batch_size: int | BatchLimits
    resize: tuple[int, int] | None
    save_maps: bool
    pin_memory: bool = False
    decode_workers: int = 1
    map_pool: Executor | None = None
    stages: Any = NO_STAGES  # a `stages.StageTimes` when the local engine logs where its threads wait


def on_gpu(model: Any) -> bool:
    """True for a model whose `device` is a CUDA device (read without importing torch)."""
    return str(getattr(model, "device", "")).startswith("cuda")

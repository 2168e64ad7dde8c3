"""Keep freed memory in the process, so that a model's large tensors are reused, not mapped afresh.

glibc hands every allocation above its mmap threshold (128 KiB, rising to at most 32 MiB) to a
fresh `mmap` and unmaps it on free. A CPU forward allocates tens of such tensors per batch, and
each new mapping is filled page by page, a page fault at a time, on every batch
(`benchmarks/allocator.py` counts them and times both; figures in docs/benchmarks.md). Raising the mmap and trim thresholds keeps freed blocks on the heap
for the next batch. It is what PyTorch's CPU performance guides get from jemalloc or tcmalloc,
with the allocator already loaded.

The setting is process-wide and cannot be undone, so only the calls that run models apply it, the
same from the command line as from Python: the `blindspots` commands in `blindspots.cli.MODEL_COMMANDS`
(not the long-running web server), the front door's model-running workflows (`blindspots.scan`,
`Scan.add_surprise`, `Project.advance`) and the Ray engine's model actors (processes of ours). Lower
level functions (`blindspots.scan.scan_pool`, ...) leave it to their caller: a script that uses them
calls `keep_freed_memory()` once at its start. BLINDSPOTS_MALLOC=system turns it off everywhere.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from typing import Callable

log = logging.getLogger(__name__)

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 1 << 30  # allocations below 1 GiB come from the heap (a 1.5 MP forward's tensors: ~200 MB)
TRIM_THRESHOLD = 1 << 30  # freed memory up to 1 GiB stays in the process for the next batch
TOP_PAD = 64 << 20  # grow the heap in 64 MiB steps (fewer brk calls)
ENV_SWITCH = "BLINDSPOTS_MALLOC"  # "system": leave the allocator alone

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True when they are set.

    False, and nothing changed, on a C library other than glibc (macOS, musl, Windows) or with
    BLINDSPOTS_MALLOC=system. Idempotent: the first call decides."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get(ENV_SWITCH, "").strip().lower() == "system":
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = apply_settings(mallopt)
    return _applied


#: (name, mallopt parameter, value), tried in this order
SETTINGS: tuple[tuple[str, int, int], ...] = (
    ("M_MMAP_THRESHOLD", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    ("M_TRIM_THRESHOLD", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    ("M_TOP_PAD", _M_TOP_PAD, TOP_PAD),
)


def apply_settings(mallopt: Callable[[int, int], int]) -> bool:
    """Try every setting with `mallopt` (glibc returns 1 on success); True when all were taken.

    Each setting is tried even when an earlier one is refused (a refused mmap threshold must not
    leave the trim threshold at its default), and each refusal is logged by name."""
    refused = [name for name, param, value in SETTINGS if mallopt(param, value) != 1]
    if refused:
        log.debug("mallopt refused %s; those keep glibc's defaults, the others are set", ", ".join(refused))
    return not refused

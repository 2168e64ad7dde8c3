"""`blindspots.allocator.keep_freed_memory`: glibc keeps freed blocks, so repeated large allocations
stop faulting in fresh pages; BLINDSPOTS_MALLOC=system leaves the allocator alone. Each case runs in
its own interpreter (the setting is process-wide and permanent)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")

PROBE = """
import resource, numpy as np
from blindspots.allocator import keep_freed_memory
def faults_per_alloc():
    a = np.ones(12_500_000, dtype=np.float32)  # warm-up: the first block may fault in (kept: once)
    del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(8):
        a = np.ones(12_500_000, dtype=np.float32)  # 50 MB: above glibc's default mmap threshold
        del a
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 8
default = faults_per_alloc()
applied = keep_freed_memory()
again = keep_freed_memory()
kept = faults_per_alloc()
print(applied, again, default, kept)
"""


def _probe(env_extra: dict[str, str]) -> tuple[bool, bool, float, float]:
    env = {**os.environ, **env_extra}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    applied, again, default, kept = out.stdout.split()
    return applied == "True", again == "True", float(default), float(kept)


def test_keeps_freed_memory_on_glibc():
    applied, again, default, kept = _probe({"BLINDSPOTS_MALLOC": ""})
    assert applied and again  # idempotent: the second call reports the first call's outcome
    assert default > 50  # each fresh 50 MB mapping is faulted in (4 KiB or 2 MiB pages)
    assert kept < default / 4  # the heap block is reused (faulted in once, by the warm-up)


def test_system_switch_leaves_the_allocator_alone():
    applied, again, default, kept = _probe({"BLINDSPOTS_MALLOC": "system"})
    assert not applied and not again
    assert kept > default / 4


def test_every_setting_is_tried_when_one_is_refused(caplog):
    """A refused first setting must not stop the others (the trim threshold and top pad were never
    tried after a refused mmap threshold, though the log said they were)."""
    from blindspots.allocator import SETTINGS, apply_settings

    calls: list[int] = []

    def refusing_first(param: int, value: int) -> int:
        calls.append(param)
        return 0 if param == SETTINGS[0][1] else 1

    with caplog.at_level("DEBUG", logger="blindspots.allocator"):
        assert apply_settings(refusing_first) is False
    assert calls == [param for _, param, _ in SETTINGS]
    assert SETTINGS[0][0] in caplog.text and SETTINGS[1][0] not in caplog.text
    assert apply_settings(lambda p, v: 1) is True


def test_only_model_commands_keep_freed_memory():
    """`serve` (a long-running server) keeps glibc's defaults; `scan` applies the setting."""
    probe = ("import sys; from typer.testing import CliRunner; import blindspots.allocator as a; "
             "from blindspots.cli import app; CliRunner().invoke(app, [sys.argv[1], '--help']); print(a._applied)")
    for command, expected in (("serve", "None"), ("scan", "True")):
        out = subprocess.run([sys.executable, "-c", probe, command], capture_output=True, text=True,
                             env={**os.environ, "BLINDSPOTS_MALLOC": ""}, check=True)
        assert out.stdout.strip().splitlines()[-1] == expected, (command, out.stdout, out.stderr)

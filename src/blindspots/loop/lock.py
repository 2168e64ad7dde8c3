"""One loop run at a time per project: `advance` holds an exclusive lock on the project's lock file, so a
second `advance` (another `blindspots round`, a notebook, the demo) started meanwhile waits briefly and
then refuses with `ProjectBusy` instead of running the same steps twice.

The lock is the kernel's (`fcntl.flock`): it goes with the process, so a crashed run never leaves a stale
lock behind."""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from blindspots.loop.store import ProjectError

LOCK_FILE = ".advance.lock"
#: how long a second run waits for the first before it gives up (seconds)
DEFAULT_WAIT_S = 3.0


class ProjectBusy(ProjectError):
    """Another run of the loop holds the project's lock."""


@contextmanager
def advance_lock(project_path: str | Path, *, wait_s: float | None = None) -> Iterator[None]:
    """Hold the project's loop lock for the `with` body; ProjectBusy after `wait_s` seconds of waiting
    (None: `DEFAULT_WAIT_S`)."""
    wait_s = DEFAULT_WAIT_S if wait_s is None else wait_s
    if wait_s < 0:
        raise ValueError(f"wait_s: expected seconds >= 0, got {wait_s!r}")
    path = Path(project_path) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ProjectBusy(f"project: expected no other run of the loop on {str(project_path)!r}, got "
                                      f"one still running after waiting {wait_s:g} s; let it finish "
                                      "(or stop it) and try again") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

"""Scan engines: run the planned shards of a scan (`local`: threads on this machine; `ray`: Ray Data
tasks and actors, imported only when used)."""
from blindspots.scan.engines.local import run_local

__all__ = ["run_local"]

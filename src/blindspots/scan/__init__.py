"""The pool pass: stream unlabeled images through a target and competitors once, write the score table.

`scan_pool` writes Parquet shards, resumably (`scan.plan` says what is left, `scan.engines.local`
runs it); `read_score_table` reads them back as one DataFrame whose columns are named in
`blindspots.scan.schema`.

The package is also callable: `blindspots.scan(pool, target=..., out=...)` is the front door's
`blindspots.workflows.scan`, which returns a `Scan` handle (the package's name and the function's are one).
"""
from blindspots._lazy import make_callable
from blindspots.scan.api import scan_pool
from blindspots.scan import schema
from blindspots.scan.layout import find_map
from blindspots.scan.manifest import load_manifest
from blindspots.scan.stats import ModelStats, model_stats, pair_distances
from blindspots.scan.table import read_score_table

__all__ = ["ModelStats", "find_map", "load_manifest", "model_stats", "pair_distances", "read_score_table", "scan_pool", "schema"]
make_callable(__name__, "blindspots.workflows.scan:scan")  # `blindspots.scan(pool, ...)`: the front door

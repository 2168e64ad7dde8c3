"""The pool pass: stream unlabeled images through a target and competitors once, write the score table.

`scan_pool` writes Parquet shards, resumably (`scan.plan` says what is left, `scan.engines.local`
runs it); `read_score_table` reads them back as one DataFrame whose columns are named in
`blindspots.scan.schema`.
"""
from blindspots.scan.api import scan_pool
from blindspots.scan import schema
from blindspots.scan.layout import find_map
from blindspots.scan.stats import ModelStats, model_stats, pair_distances
from blindspots.scan.table import read_score_table

__all__ = ["ModelStats", "find_map", "model_stats", "pair_distances", "read_score_table", "scan_pool", "schema"]

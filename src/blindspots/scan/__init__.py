"""The pool pass: stream unlabeled images through a target and competitors once, write the score table.

`scan_pool` (local engine) writes Parquet shards, resumably; `read_score_table` reads them back
as one DataFrame with the scan contract's columns (see `blindspots.scan.table`).
"""
from blindspots.scan.local import scan_pool
from blindspots.scan.stats import ModelStats, model_stats, pair_distances
from blindspots.scan.table import read_score_table

__all__ = ["ModelStats", "model_stats", "pair_distances", "read_score_table", "scan_pool"]

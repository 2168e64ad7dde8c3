"""Label issues in segmentation data: confident learning for segmentation, cleanlab-2.x compatible.

`rank.get_label_quality_scores`, `rank.issues_from_scores`, `filter.find_label_issues` and the
`summary` functions keep cleanlab's names and meanings; `regions` groups flagged pixels into typed
objects for review. Inputs may be arrays, memory-mapped `.npy` files, iterables of batches or a
`Segmenter` plus a dataset.
"""
from blindspots.labels.filter import LabelIssueFinder, find_label_issues
from blindspots.labels.rank import get_label_quality_scores, issues_from_scores

__all__ = ["LabelIssueFinder", "find_label_issues", "get_label_quality_scores", "issues_from_scores"]

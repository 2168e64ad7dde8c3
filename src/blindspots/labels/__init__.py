"""Label issues in segmentation data: confident learning for segmentation, cleanlab-2.x compatible.

`rank.get_label_quality_scores`, `rank.issues_from_scores`, `filter.find_label_issues` and the
`summary` functions keep cleanlab's names and meanings (switch with one import:
`from blindspots.labels import filter, rank, summary`); `regions` groups flagged pixels into typed
objects for review and `review.review_label_issues` does everything in one streaming pass;
`folder.write_label_issues` also writes the folder the `label-issues` command writes. Inputs may
be arrays, memory-mapped `.npy` files, iterables of (labels, pred_probs) batches or a `Segmenter`
plus a dataset. Pixels labelled `ignore_index` (255) are never flagged and never counted.
What cleanlab accepts gives cleanlab's answers (unnormalised pred_probs with one warning, absent
class ids, verbose lines on stdout); docs/labels.md lists the remaining differences.
"""
from blindspots.labels.filter import LabelIssueFinder, find_label_issues
from blindspots.labels.folder import MIN_AREA, write_label_issues
from blindspots.labels.rank import get_label_quality_scores, issues_from_scores
from blindspots.labels.review import (LabelReview, find_issue_regions, mask_png_writer, review_label_issues,
                                      save_review, worst_images_figure)
from blindspots.labels.summary import common_label_issues, display_issues, filter_by_class

__all__ = ["LabelIssueFinder", "LabelReview", "MIN_AREA", "common_label_issues", "display_issues", "filter_by_class", "find_issue_regions",
           "find_label_issues", "get_label_quality_scores", "issues_from_scores", "mask_png_writer", "review_label_issues",
           "save_review", "worst_images_figure", "write_label_issues"]

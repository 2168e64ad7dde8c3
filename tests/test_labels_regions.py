"""Typed issue regions: missing, wrong class and spurious objects, scores and boxes."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots.labels import LabelIssueFinder, find_label_issues
from blindspots.labels._internal.regions import COLUMNS, region_kind
from blindspots.labels.review import find_issue_regions


def _probs_from_map(pred: np.ndarray, k: int, conf: float = 0.9) -> np.ndarray:
    """One-hot-ish probabilities: `conf` on the class of `pred`, the rest spread evenly."""
    p = np.full((pred.shape[0], k) + pred.shape[1:], (1 - conf) / (k - 1))
    np.put_along_axis(p, pred[:, None], conf, axis=1)
    return p


def _scene():
    """Background 0, objects 1..3. Truth: a square of 1, a square of 2, a disc of 3 per image."""
    n, h, w, k = 6, 40, 48, 4
    truth = np.zeros((n, h, w), np.int64)
    truth[:, 5:15, 5:15] = 1
    truth[:, 20:32, 25:40] = 2
    yy, xx = np.mgrid[:h, :w]
    truth[:, (yy - 30) ** 2 + (xx - 10) ** 2 < 25] = 3
    labels = truth.copy()
    labels[0][truth[0] == 1] = 0           # dropped object -> missing
    labels[1][truth[1] == 2] = 3           # swapped class -> wrong_class
    labels[2, 30:38, 30:46] = 1            # annotated object where there is background -> spurious
    labels[2][truth[2] == 2] = 2
    labels[3][truth[3] == 1] = 255         # unannotated object in an ignored area -> missing (ignored)
    return labels, _probs_from_map(truth, k), truth


def test_region_types_boxes_and_scores():
    labels, p, truth = _scene()
    finder = LabelIssueFinder(verbose=False).fit(labels, p)
    issues = finder.transform()
    df = find_issue_regions(issues, labels, p, ignored_thresholds=finder.confident_thresholds_)
    assert list(df.columns) == COLUMNS
    by = {i: df[df.image == i] for i in range(6)}
    (r0,) = by[0].itertuples()
    assert (r0.kind, r0.given_label, r0.predicted_label, r0.area) == ("missing", 0, 1, 100)
    assert (r0.x0, r0.y0, r0.x1, r0.y1) == (5, 5, 15, 15)
    assert r0.score == pytest.approx(0.1 / 3) and r0.confidence == pytest.approx(0.9)
    (r1,) = by[1].itertuples()
    assert (r1.kind, r1.given_label, r1.predicted_label, r1.area) == ("wrong_class", 3, 2, 180)
    spur = by[2][by[2].kind == "spurious"]
    assert len(spur) == 1 and spur.iloc[0].given_label == 1 and spur.iloc[0].predicted_label == 0
    # rows 30-31 overlap the true class-2 box in columns 30-39 only
    assert (spur.iloc[0].x0, spur.iloc[0].y0, spur.iloc[0].x1, spur.iloc[0].y1) == (30, 30, 46, 38)
    assert spur.iloc[0].area == 8 * 16 - 2 * 10
    (r3,) = by[3].itertuples()
    assert (r3.kind, r3.given_label, r3.predicted_label, r3.area) == ("missing", 255, 1, 100)
    assert len(by[4]) == 0 and len(by[5]) == 0
    # without ignored_thresholds the ignored object is not reported (never flagged)
    df2 = find_issue_regions(issues, labels, p)
    assert (df2.image == 3).sum() == 0


def test_min_area_connectivity_and_empty():
    issues = np.zeros((1, 8, 8), bool)
    issues[0, 1, 1] = issues[0, 2, 2] = True  # diagonal neighbours
    labels = np.zeros((1, 8, 8), np.int64)
    p = _probs_from_map(np.ones((1, 8, 8), np.int64), 3)
    assert len(find_issue_regions(issues, labels, p, connectivity=2)) == 1
    assert len(find_issue_regions(issues, labels, p, connectivity=1)) == 2
    assert len(find_issue_regions(issues, labels, p, min_area=3)) == 0
    assert list(find_issue_regions(np.zeros_like(issues), labels, p).columns) == COLUMNS
    with pytest.raises(ValueError, match="issues"):
        find_issue_regions(issues.astype(np.uint8), labels, p)
    with pytest.raises(ValueError, match="pred_probs"):
        find_issue_regions(issues, labels, p[:, :, :4])
    with pytest.raises(ValueError, match="connectivity"):
        find_issue_regions(issues, labels, p, connectivity=3)


def test_region_kind_rules():
    bg = frozenset({0})
    assert region_kind(0, 2, bg, 255) == "missing"
    assert region_kind(255, 2, bg, 255) == "missing"
    assert region_kind(2, 0, bg, 255) == "spurious"
    assert region_kind(1, 2, bg, 255) == "wrong_class"
    assert region_kind(1, 2, frozenset(), None) == "wrong_class"


def test_regions_cover_every_flagged_pixel():
    rng = np.random.default_rng(0)
    labels, p, _ = _scene()
    p = p + rng.random(p.shape) * 0.05
    p /= p.sum(1, keepdims=True)
    issues = find_label_issues(labels, p, verbose=False)
    df = find_issue_regions(issues, labels, p)
    assert df.area.sum() == issues.sum()

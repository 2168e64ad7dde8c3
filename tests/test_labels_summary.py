"""display_issues draws a figure; summaries skip ignored pixels."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from blindspots.labels import find_label_issues  # noqa: E402
from blindspots.labels.summary import common_label_issues, display_issues, filter_by_class  # noqa: E402
from test_labels_helpers import structured_inputs  # noqa: E402


def test_display_issues_draws_top_images(tmp_path):
    labels, p = structured_inputs(np.random.default_rng(0), 5, 4, 24, 32)
    issues = find_label_issues(labels, p, verbose=False)
    fig = display_issues(issues, labels=labels, pred_probs=p, class_names=list("abcd"), top=3, show=False)
    assert len(fig.axes) == 9
    fig.savefig(tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
    fig = display_issues(issues, top=2, show=False)
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="exclude"):
        display_issues(issues, exclude=[1], show=False)
    with pytest.raises(ValueError, match="labels"):
        display_issues(issues, labels=labels[:2], show=False)


def test_summaries_skip_ignored_and_check_inputs():
    labels, p = structured_inputs(np.random.default_rng(1), 3, 4, 16, 16)
    issues = np.ones(labels.shape, bool)
    lab = labels.copy()
    lab[:, :8] = 255
    df = common_label_issues(issues, lab, p, verbose=False, top=100)
    pred = p.argmax(1)
    expect = ((pred != -1) & (lab != 255)).sum()
    assert df.num_pixel_issues.sum() == expect
    assert not filter_by_class(4, issues, labels, p).any()  # an absent class: empty mask, as cleanlab
    with pytest.raises(ValueError, match="class_index"):
        filter_by_class("a", issues, labels, p)
    with pytest.raises(ValueError, match="issues"):
        common_label_issues(issues.astype(int), labels, p)

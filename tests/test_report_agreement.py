"""Rater agreement: per-image span and mean pairwise |difference|; out-of-domain flags are not scores."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from blindspots.report.viewmodels.agreement import agreement_summary, per_image_agreement


def test_agreement_is_defined_on_finite_scores_only():
    r = pd.DataFrame({"id": ["a", "a", "a", "b", "b", "c", "c"],
                      "score": [1, 2, 4, 3, 3, 5, np.inf]})
    per = per_image_agreement(r)
    assert per.loc["a", "span"] == 3 and per.loc["a", "mean_abs_diff"] == pytest.approx((1 + 3 + 2) / 3)
    assert per.loc["b", "span"] == 0 and per.loc["c", "n_scores"] == 1 and np.isnan(per.loc["c", "span"])
    s = agreement_summary(per)
    assert s == {"n_images": 2, "share_span_le_1": 0.5, "mean_abs_diff": pytest.approx(1.0)}
    assert agreement_summary(per.loc[["c"]])["share_span_le_1"] is None
    with pytest.raises(ValueError, match="ratings"):
        per_image_agreement(pd.DataFrame({"id": ["a"]}))

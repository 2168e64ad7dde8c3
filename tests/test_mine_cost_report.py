"""The labelling-cost axis, and the round report's sampler comparison drawn from a benchmark's results."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from blindspots.human.cost import C_MASK_EDITOR, C_MASK_SECONDS, C_RATE, C_RATE_SECONDS, LabelCost
from blindspots.report.pages.label_efficiency import RESULTS, sampler_comparison_section


def test_cost_is_ratings_times_c_rate_plus_masks_times_c_mask():
    c = LabelCost()
    assert (c.c_rate, c.c_mask, c.unit) == (C_RATE, C_MASK_EDITOR, "actions")
    assert c.of(90, 10) == pytest.approx(90 * 1.0 + 10 * 31.6)
    # a baseline's masks at the cost of MAD's round (3 raters x 30 candidates, 10 masks): 12
    assert c.masks_for(c.of(90, 10)) == 12 and c.masks_for(100, ratings=200) == 0
    assert LabelCost(c_rate=2, c_mask=10).of(3, 4) == 46
    with pytest.raises(ValueError, match="c_mask"):
        LabelCost(c_mask=-1)
    with pytest.raises(ValueError, match="ratings"):
        c.of(-1, 0)


def test_cost_in_seconds_uses_the_measured_seconds():
    s = LabelCost.in_seconds()
    assert (s.c_rate, s.c_mask, s.unit) == (C_RATE_SECONDS, C_MASK_SECONDS, "seconds")
    assert s.of(24, 10) == pytest.approx(24 * C_RATE_SECONDS + 10 * C_MASK_SECONDS)
    assert C_MASK_SECONDS / C_RATE_SECONDS > 10  # a mask costs far more than a rating in seconds too


def test_sampler_comparison_section(tmp_path: Path):
    reports, out = tmp_path / "reports", tmp_path / "out"
    reports.mkdir()
    parts = "".join(sampler_comparison_section(reports, out, "mad"))
    assert "Not run: this project mines with one sampler (mad)" in parts and "label_efficiency.py" in parts
    rows = [{"strategy": s, "round": r, "cost": 406.0 * r, "hard_mean": 0.3 + 0.01 * r + d, "hard_sd": 0.01,
             "T0_mean": 0.8, "T0_sd": 0.0} for s, d in (("mad", 0.02), ("random", 0.0)) for r in range(3)]
    (reports / RESULTS).write_text(json.dumps({"table": rows}))
    parts = "".join(sampler_comparison_section(reports, out, "mad"))
    assert (out / "figures" / "label_efficiency.png").stat().st_size > 1000
    assert 'src="figures/label_efficiency.png"' in parts and "0.3400 ± 0.0100" in parts
    (reports / RESULTS).write_text(json.dumps({"table": [{"strategy": "mad"}]}))
    assert "could not be read" in "".join(sampler_comparison_section(reports, out, "mad"))

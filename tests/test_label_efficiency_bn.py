"""The BatchNorm drift table of benchmarks/label_efficiency_bn.py, on hand-made results."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import label_efficiency_bn as bn  # noqa: E402


def _run(seed: int, hard_after: float, frozen_shift: float = 0.0) -> dict:
    point = {"hard": 0.4, "T0": 0.8}
    after = {"hard": hard_after + frozen_shift, "T0": 0.7}
    probe = {name: {"hard": hard_after + d, "T0": 0.75, "conditions": {"fov": 0.3 + d}}
             for name, d in (("start_stats", -0.1), ("s0_stats", 0.01))}
    return {"strategy": "mad", "seed": seed, "lrs": [0.01], "points": [point, after],
            "conditions": [{"fov": 0.4}, {"fov": 0.3 + frozen_shift}], "bn_probe": [probe]}


def test_paired_differences_against_the_default() -> None:
    default = {"runs": [_run(s, 0.35 + 0.01 * s) for s in range(3)]}
    frozen = {"runs": [_run(s, 0.35 + 0.01 * s, frozen_shift=0.02 * (s + 1)) for s in range(3)]}
    t = bn.table(default, frozen, "mad", 1).set_index("metric")
    assert t.loc["hard", "before"] == pytest.approx(0.4)
    assert t.loc["hard", "default"] == pytest.approx(0.36)
    assert t.loc["hard", "frozen"] == pytest.approx(0.40)
    assert t.loc["hard", "start stats - default"].startswith("-0.1000 [-0.1000, -0.1000]")
    # frozen - default: 0.02, 0.04, 0.06 -> mean 0.04, sd 0.02, t(0.975, 2) = 4.303 -> half width 0.0497
    assert t.loc["fov", "frozen - default"] == "+0.0400 [-0.0097, +0.0897]"
    with pytest.raises(SystemExit, match="entropy"):
        bn.table(default, frozen, "entropy", 1)


def test_batchnorm_probe_swaps_statistics_only_in_copies() -> None:
    import label_efficiency
    import numpy as np
    import torch
    from torch import nn

    def net(mean: float) -> nn.Module:
        torch.manual_seed(0)
        m = nn.Sequential(nn.Conv2d(3, 2, 1), nn.BatchNorm2d(2))
        m[1].running_mean.fill_(mean)
        return m

    tuned, before = net(1.0), net(-2.0)
    images = np.random.default_rng(0).integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)
    out = label_efficiency.batchnorm_probe(tuned, before, images, lambda m: {"mean": float(m[1].running_mean[0])},
                                           lambda m: {"training": m.training})
    assert out["start_stats"]["mean"] == -2.0
    assert out["s0_stats"]["mean"] not in (1.0, -2.0) and out["s0_stats"]["conditions"] == {"training": False}
    assert float(tuned[1].running_mean[0]) == 1.0  # the fine-tuned model itself is left as it was

"""`benchmarks/label_efficiency.py --labels regions`, run tiny (--quick): picked images are labelled by
region answers (partial masks), the same budget buys more of them, and `label_efficiency_regions.py
--compare` puts a masks run beside a regions run."""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    bench = runpy.run_path(str(BENCHMARKS / "label_efficiency.py"), run_name="label_efficiency")
    out = {}
    for labels in ("masks", "regions"):
        work = tmp_path_factory.mktemp(labels)
        out[labels] = bench["main"](["--quick", "--work", str(work), "--samplers", "random,mad", "--labels", labels,
                                     "--regions-per-image", "4"])
    return out


def test_regions_buy_more_images_for_the_same_budget(runs: dict) -> None:
    from blindspots.human.cost import C_MASK_EDITOR, C_REGION

    for m, r in zip(runs["masks"]["runs"], runs["regions"]["runs"]):
        assert m["strategy"] == r["strategy"]
        last_m, last_r = m["points"][-1], r["points"][-1]
        assert last_r["cost"] == pytest.approx(last_r["ratings"] * 1.0 + last_r["masks"] * 4 * C_REGION)
        if m["strategy"] == "random":  # a baseline gets what a rated round costs at 1:3, in masks: ceil(n4 + n_m / 3)
            masks = int(np.ceil(2 + 1 * 6 / 3))  # --quick: n4 2, one rater, n_m 6
            # regions: the same cost in region answers (4 an image), at most the 24-image pool
            assert last_m["masks"] == masks and last_r["masks"] == min(int(masks * C_MASK_EDITOR // (4 * C_REGION)), 24)
        else:  # MAD labels more of its rated candidates M (6 in --quick) by regions
            assert last_m["masks"] == 2 and last_r["masks"] == 6
        assert all(0 <= last_r[k] <= 1 for k in ("hard", "T0", "planted"))


def test_region_labeller_asks_k_regions_once_per_image() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from label_efficiency_regions import RegionLabeller

    rng = np.random.default_rng(0)
    y, x = np.mgrid[:32, :32]
    images = np.stack([np.stack([(x * 8) % 256, (y * 8) % 256, ((x // 8 + y // 8) % 2) * 200], -1)] * 2).astype(np.uint8)
    proba = rng.dirichlet(np.ones(3), size=(2, 32, 32)).transpose(0, 3, 1, 2).astype(np.float32)
    comp = rng.integers(0, 3, (2, 32, 32))
    lab = RegionLabeller(images, [comp], [], k=3, fill="ignore", agree=0.9)
    truth = np.zeros((32, 32), np.uint8)
    ask = lab.annotator(proba, {"a": 0, "b": 1})
    m = ask("a", truth)
    assert ((m == 0) | (m == 255)).all() and (m == 0).any() and (m == 255).any()
    assert lab.stats["answers"] == 3 and lab.stats["images"] == 1
    assert ask("a", truth) is m and lab.stats["answers"] == 3  # asked once, kept for later rounds
    assert lab.images_for(2) == int(2 * 31.6 // 3)


def test_compare_prints_both_and_draws_one_figure(runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from label_efficiency_regions import compare, cost_to_reach

    import pandas as pd

    table = compare(runs["masks"], runs["regions"], tmp_path / "both.png")
    assert list(table["sampler"]) == ["random", "mad"] and (tmp_path / "both.png").stat().st_size > 1000
    assert "best sampler with masks" in capsys.readouterr().out
    pts = pd.DataFrame({"cost": [0.0, 10.0, 20.0], "hard": [0.2, 0.4, 0.6]})
    assert cost_to_reach(pts, 0.5) == pytest.approx(15.0) and np.isnan(cost_to_reach(pts, 0.7))
    assert cost_to_reach(pts, 0.1) == 0.0

"""Table 3 (Spearman), Figure 9 (label-saving trade-off), RQ3 subsets, the surprise mining sampler."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st
from scipy.stats import spearmanr

from blindspots.metrics import per_image_class_iou
from blindspots.mine.samplers.surprise import SurpriseSampler
from blindspots.surprise.analysis import (group_iou, label_saving_tradeoff, plot_label_saving, retraining_subsets,
                                          spearman_table)

matplotlib.use("Agg")


def test_group_iou_merges_classes():
    rng = np.random.default_rng(0)
    pred = rng.integers(0, 4, (3, 16, 16))
    target = rng.integers(0, 4, (3, 16, 16))
    target[0, 0] = 255
    iou, in_label = group_iou(pred, target, 4, {"ab": [0, 1], "c": [2]})
    merged_p, merged_t = np.where(pred <= 1, 0, np.where(pred == 2, 1, 2)), np.where(target <= 1, 0, np.where(target == 2, 1, 2))
    merged_t[target == 255] = 255
    ref = per_image_class_iou(merged_p, merged_t, 3)[:, :2]
    np.testing.assert_allclose(iou, ref)
    assert in_label.all()
    per_class, _ = group_iou(pred, target, 4)
    np.testing.assert_allclose(per_class, per_image_class_iou(pred, target, 4))


def test_spearman_table_matches_scipy():
    rng = np.random.default_rng(1)
    iou = rng.random((50, 2))
    lsa = -iou + rng.normal(0, 0.2, (50, 2))
    mdsa = lsa.copy()
    mdsa[:5, 1] = np.nan
    present = np.ones((50, 2), bool)
    present[10:20, 0] = False
    t = spearman_table({"LSA": lsa, "MDSA": mdsa}, iou, ["a", "b"], present)
    assert t["n_images"].tolist() == [40, 45]
    use = present[:, 0]
    ref = spearmanr(lsa[use, 0], iou[use, 0])
    assert t.loc[0, "rho_LSA"] == pytest.approx(ref.statistic) and t.loc[0, "p_LSA"] == pytest.approx(ref.pvalue)
    assert (t["rho_MDSA"] < 0).all()
    with pytest.raises(ValueError, match="iou"):
        spearman_table({"LSA": lsa}, iou, ["a"])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 500), n=st.integers(1, 60))
def test_tradeoff_matches_brute_force(seed, n):
    rng = np.random.default_rng(seed)
    sa, iou = rng.random(n), rng.random(n)
    t = label_saving_tradeoff(sa, iou, savings=(0.0, 0.3, 1.0))
    order = np.argsort(sa, kind="stable")
    for _, row in t.iterrows():
        k = int(np.floor(row["saving"] * n + 1e-9))
        skipped = iou[order[:k]]
        assert row["n_skipped"] == k
        assert row["inacc@0.5"] == pytest.approx((skipped < 0.5).mean() if k else 0.0)
        assert row["iou_inacc"] == pytest.approx((1 - skipped).mean() if k else 0.0)
    assert (np.diff(t["inacc@0.5"].to_numpy()) >= -1).all()


def test_plot_label_saving_draws_six_panels(tmp_path):
    rng = np.random.default_rng(0)
    curves = {"road": label_saving_tradeoff(rng.random(30), rng.random(30)),
              "car": label_saving_tradeoff(rng.random(20), rng.random(20))}
    fig = plot_label_saving(curves)
    assert len([a for a in fig.axes if a.lines]) == 6
    fig.savefig(tmp_path / "f9.png")
    assert (tmp_path / "f9.png").stat().st_size > 1000


def test_retraining_subsets_levels_and_sizes():
    sa = np.arange(100, dtype=float)
    sa[0] = np.nan
    subsets = retraining_subsets(sa, 60, seed=0)
    assert {k: v.size for k, v in subsets.items()}[("H", "L")] == 18
    assert subsets[("H", "S")].min() >= 70 and subsets[("L", "M")].max() <= 30
    assert 0 not in np.concatenate(list(subsets.values()))
    again = retraining_subsets(sa, 60, seed=0)
    assert all(np.array_equal(subsets[k], again[k]) for k in subsets)
    with pytest.raises(ValueError, match="needs"):
        retraining_subsets(sa, 1000)


def test_surprise_sampler():
    table = pd.DataFrame({"id": ["a", "b", "c", "d"], "status": ["ok", "ok", "error", "ok"],
                          "surprise_mdsa__unet": [0.1, 3.0, 9.0, np.nan],
                          "surprise_mdsa__unet__2": [5.0, np.nan, 1.0, 2.0]})
    top = SurpriseSampler().select(table)
    assert top["id"].tolist() == ["b", "a"] and top["score"].tolist() == [3.0, 0.1]
    low = SurpriseSampler(order="low").select(table, 1)
    assert low["id"].tolist() == ["a"]
    cls = SurpriseSampler("unet", class_id=2).select(table)
    assert cls["id"].tolist() == ["a", "d"]
    assert '"kind":"mdsa"' in cls["reason"][0]
    with pytest.raises(ValueError, match="kind"):
        SurpriseSampler(kind="xx").select(table)
    with pytest.raises(ValueError, match="surprise_lsa"):
        SurpriseSampler(kind="lsa").select(table)


def test_surprise_sampler_target_errors_name_the_models_and_the_cli_option():
    table = pd.DataFrame({"id": ["a", "b"], "status": ["ok", "ok"], "surprise_mdsa__unet": [0.1, 3.0],
                          "surprise_mdsa__onnx": [1.0, 2.0], "frac__other__0": [0.5, 0.5]})
    with pytest.raises(ValueError, match=r"--target") as err:
        SurpriseSampler().select(table)
    assert "onnx" in str(err.value) and "unet" in str(err.value)
    # a scanned model without surprise columns: say which models have them and how to add them
    with pytest.raises(ValueError, match=r"\['unet', 'onnx'\].*--name other"):
        SurpriseSampler("other").select(table)


def test_run_retraining_through_the_finetuner_and_resumes(tmp_path):
    import torch

    from blindspots.training.replay import ReplayFinetuner
    from blindspots.surprise.analysis import run_retraining
    from test_surprise_models import TinySeg

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)

    def pairs(n, seed):
        r = np.random.default_rng(seed)
        imgs = r.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8)
        return [(im, (im[..., 0] // 128).astype(np.uint8)) for im in imgs]

    base, cands, val, test = pairs(10, 1), pairs(12, 2), pairs(3, 3), pairs(4, 4)
    sa = rng.random(12)
    make = lambda: ReplayFinetuner(lrs=[1e-3], epochs=1, batch_size=4, flip=False, progress=False)  # noqa: E731
    table = run_retraining(TinySeg(num_classes=2, d=4), base, cands, sa, val, test, num_classes=2, class_id=1,
                           finetuner=make, work_dir=tmp_path, sizes={"S": 0.1, "L": 0.3})
    assert table["dataset"].tolist()[0] == "T'r[B]" and len(table) == 1 + 3 * 2
    assert table.loc[table["size"] == "L", "n_added"].tolist() == [3, 3, 3]
    assert table["class_iou"].between(0, 1).all()
    # a rerun reads the finished runs instead of training again
    again = run_retraining(None, base, cands, sa, val, test, num_classes=2, class_id=1, finetuner=make,
                           work_dir=tmp_path, sizes={"S": 0.1, "L": 0.3})
    pd.testing.assert_frame_equal(table, again)


def test_group_iou_names_the_label_ids_outside_the_model():
    """`surprise analyze` of a binary model on 3-class masks said only "target: expected class ids in 0..1
    or 255" (which ids? whose classes?)."""
    pred = np.zeros((2, 8, 8), dtype=np.int64)
    target = np.zeros((2, 8, 8), dtype=np.int64)
    target[1, :2] = 2
    target[0, 0, 0] = 255
    with pytest.raises(ValueError, match=r"target: expected label ids in 0\.\.1 \(the model's 2 classes\) or 255, "
                                         r"got ids \[2\]"):
        group_iou(pred, target, 2)

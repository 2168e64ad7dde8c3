"""Simulated raters and annotators."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from blindspots.human.simulate import SimulatedAnnotator, SimulatedRaters, image_miou


def test_image_miou() -> None:
    gt = np.zeros((2, 4, 4), np.uint8)
    gt[:, :, 2:] = 1
    pred = gt.copy()
    pred[1, :, 2] = 0  # class 1: IoU 4/8, class 0: 8/12
    assert image_miou(pred, gt, 2) == pytest.approx([1.0, (4 / 8 + 8 / 12) / 2])
    gt2 = gt.copy()
    gt2[1] = 255
    assert math.isnan(image_miou(pred, gt2, 2)[1])
    with pytest.raises(ValueError, match="pred, gt"):
        image_miou(pred, gt[:1], 2)


def test_raters_track_iou_and_are_deterministic() -> None:
    rng = np.random.default_rng(0)
    iou = rng.random(200)
    ids = [f"img{i}" for i in range(200)]
    sim = SimulatedRaters(3, noise=0.5, bias_sd=0.3, seed=1)
    r = sim.rate(ids, iou)
    mos = r.mos().reindex(ids).to_numpy()
    assert spearmanr(mos, iou).statistic > 0.85
    assert set(r.frame["score"].unique()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    # same seed: same answers, whatever the batch order
    r2 = SimulatedRaters(3, noise=0.5, bias_sd=0.3, seed=1).rate(ids[::-1], iou[::-1])
    assert r2.mos().reindex(ids).equals(r.mos().reindex(ids))
    r3 = SimulatedRaters(3, noise=0.5, bias_sd=0.3, seed=2).rate(ids, iou)
    assert not r3.frame["score"].equals(r.frame["score"])


def test_noise_free_rater_maps_iou_to_acr() -> None:
    r = SimulatedRaters(1, noise=0.0, bias_sd=0.0).rate(["a", "b", "c"], np.array([0.0, 0.5, 1.0]))
    assert list(r.mos().to_numpy()) == [1.0, 3.0, 5.0]


def test_out_of_domain() -> None:
    ids = [f"i{i}" for i in range(400)]
    r = SimulatedRaters(3, ood_share=0.1, seed=3).rate(ids, np.full(400, 0.2))
    flagged = r.out_of_domain()
    assert 15 <= len(flagged) <= 70
    assert not set(r.select_worst(400)["image_id"]) & flagged
    given = np.zeros(4, bool)
    given[2] = True
    r2 = SimulatedRaters(2, ood_sensitivity=1.0).rate(["a", "b", "c", "d"], np.full(4, 0.5), out_of_domain=given)
    assert r2.out_of_domain() == {"c"}


@pytest.mark.parametrize("kwargs, match", [({"n_raters": 0}, "n_raters"), ({"noise": -1}, "noise"),
                                           ({"ood_share": 2}, "ood_share"), ({"names": ["a"]}, "names")])
def test_bad_rater_settings(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SimulatedRaters(**kwargs)


def test_bad_rate_inputs() -> None:
    with pytest.raises(ValueError, match="true_iou"):
        SimulatedRaters().rate(["a"], np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="true_iou"):
        SimulatedRaters().rate(["a"], np.array([1.5]))


def _scene() -> np.ndarray:
    m = np.zeros((64, 64), np.uint8)
    m[10:40, 10:40] = 1
    m[45:60, 5:60] = 2
    m[2:4, 50:52] = 3  # a 4-pixel object
    m[0, :] = 255
    return m


def test_annotator_exact_by_default() -> None:
    m = _scene()
    out = SimulatedAnnotator().annotate("x", m)
    assert out.dtype == np.uint8 and np.array_equal(out, m)


def test_annotator_noise() -> None:
    m = _scene()
    ann = SimulatedAnnotator(boundary_px=2, drop_below=10, seed=4)
    out = ann.annotate("x", m)
    assert np.array_equal(out, ann.annotate("x", m))  # deterministic per (seed, id)
    assert not (out == 3).any()  # the small object was missed
    assert (out[0] == 255).all() and ((out == 255) == (m == 255)).all()  # ignore stays ignore
    changed = (out != m).mean()
    assert 0.0 < changed < 0.25
    assert image_miou(out, m, 4)[0] > 0.5
    assert set(np.unique(out)) <= {0, 1, 2, 255}


def test_bad_annotator() -> None:
    with pytest.raises(ValueError, match="boundary_px"):
        SimulatedAnnotator(boundary_px=-1)
    with pytest.raises(ValueError, match="mask"):
        SimulatedAnnotator().annotate("x", np.zeros((2, 2, 3)))

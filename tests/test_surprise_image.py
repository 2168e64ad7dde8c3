"""Fitting traces, class / group SA, heatmaps (fused MDSA == direct) and score-table columns."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from blindspots.surprise import LSA, MDSA, TraceExtractor, class_surprise, collect_fit_traces, group_surprise
from blindspots.surprise.image import surprise_columns, surprise_heatmaps
from test_surprise_models import images, seg_model

torch.set_num_threads(1)


def labelled(n=6, size=32, seed=0):
    imgs = images(n, size, seed)
    masks = (imgs[..., 0] // 86).astype(np.uint8)  # 3 classes from the red channel
    masks[:, :2, :2] = 255
    return list(zip(imgs, masks))


@pytest.fixture(scope="module")
def fitted():
    ex = TraceExtractor(seg_model(d=8))
    x, y = collect_fit_traces(ex, labelled(), per_class=40, cap=100, seed=0, progress=False)
    return ex, x, y


def test_collect_fit_traces_caps_and_is_seeded(fitted):
    ex, x, y = fitted
    assert x.shape[1] == 8 and x.dtype == np.float32
    assert set(y.tolist()) <= {0, 1, 2} and np.bincount(y).max() <= 100
    x2, y2 = collect_fit_traces(ex, labelled(), per_class=40, cap=100, seed=0, progress=False)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_collect_fit_traces_resumes_from_checkpoint(tmp_path, fitted):
    ex, x, y = fitted
    data = labelled()

    class Boom(Exception):
        pass

    class Flaky(list):
        def __getitem__(self, i):
            if i >= 4:
                raise Boom
            return list.__getitem__(self, i)

    ckpt = tmp_path / "traces.npz"
    with pytest.raises(Boom):
        collect_fit_traces(ex, Flaky(data), per_class=40, cap=100, seed=0, checkpoint=ckpt, progress=False)
    assert ckpt.is_file()
    x2, y2 = collect_fit_traces(ex, data, per_class=40, cap=100, seed=0, checkpoint=ckpt, progress=False)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_class_surprise_is_mean_of_pixel_sa(fitted):
    ex, x, y = fitted
    est = MDSA().fit(x, y)
    imgs = images(3, seed=5)
    res = class_surprise(ex, est, imgs, per_class=None)
    traces, proba = ex.extract(imgs)
    pred = proba.argmax(1)
    assert np.array_equal(res.pred, pred)
    for i in range(3):
        for c in range(3):
            sel = pred[i] == c
            if not sel.any():
                assert np.isnan(res.class_sa[i, c])
                continue
            sa = est.score(traces[i][:, sel].T, c)
            assert res.class_sa[i, c] == pytest.approx(sa.mean(), rel=1e-5)
            assert res.pixel_counts[i, c] == sel.sum()
    sampled = class_surprise(ex, est, imgs, per_class=5, seed=3)
    again = class_surprise(ex, est, imgs, per_class=5, seed=3)
    np.testing.assert_array_equal(sampled.class_sa, again.class_sa)


def test_group_surprise_z_scores_with_fitting_statistics(fitted):
    _, x, y = fitted
    est = MDSA().fit(x, y)
    class_sa = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    g = group_surprise(class_sa, est, {"a": [0, 2], "b": [1]})
    z0 = (1.0 - est.sa_mean_[0]) / est.sa_std_[0]
    z2 = (3.0 - est.sa_mean_[2]) / est.sa_std_[2]
    assert g[0, 0] == pytest.approx((z0 + z2) / 2)
    assert np.isnan(g[0, 1]) and np.isnan(g[1]).all()
    with pytest.raises(ValueError, match="groups"):
        group_surprise(class_sa, est, {"bad": [5]})


def test_fused_mdsa_heatmap_equals_direct_scoring(fitted):
    ex, x, y = fitted
    est = MDSA().fit(x, y)
    imgs = images(2, seed=7)
    sa, pred = surprise_heatmaps(ex, est, imgs)
    traces, _ = ex.extract(imgs)
    for i in range(2):
        flat = traces[i].reshape(8, -1).T
        ref = est.score(flat, pred[i].ravel()).reshape(32, 32)
        np.testing.assert_allclose(sa[i], ref, rtol=1e-3, atol=1e-3)


def test_lsa_heatmap_and_unmodelled_class_is_nan(fitted):
    ex, x, y = fitted
    keep = y != 2
    est = LSA().fit(x[keep], y[keep])
    sa, pred = surprise_heatmaps(ex, est, images(2, seed=9))
    assert sa.shape == (2, 32, 32)
    assert np.isnan(sa[pred == 2]).all() and np.isfinite(sa[pred != 2]).all()


def test_surprise_columns(fitted):
    ex, x, y = fitted
    est = MDSA().fit(x, y)
    cols = surprise_columns(ex, est, images(3, seed=2), "tiny", per_class=50)
    assert set(cols) == {"surprise_mdsa__tiny", "surprise_mdsa__tiny__0", "surprise_mdsa__tiny__1",
                         "surprise_mdsa__tiny__2"}
    assert all(v.shape == (3,) and v.dtype == np.float32 for v in cols.values())
    assert np.isfinite(cols["surprise_mdsa__tiny"]).all()


@pytest.mark.parametrize("interp,align", [("bilinear", False), ("bilinear", True), ("nearest", False),
                                          ("bicubic", False)])
def test_every_interpolation_heatmap_equals_direct(fitted, interp, align):
    _, x, y = fitted
    ex = TraceExtractor(seg_model(d=8), interpolation=interp, align_corners=align)
    est = MDSA().fit(x, y)
    imgs = images(2, size=36, seed=11)  # 36 -> 9: a non-integer-friendly scale at the borders
    sa, pred = surprise_heatmaps(ex, est, imgs)
    traces, _ = ex.extract(imgs)
    for i in range(2):
        ref = est.score(traces[i].reshape(8, -1).T, pred[i].ravel()).reshape(36, 36)
        np.testing.assert_allclose(sa[i], ref, rtol=1e-3, atol=1e-3)


def test_classification_traces_dsa_and_class_sa():
    from blindspots.models.adapters import TorchClassifier
    from blindspots.surprise import DSA
    from test_surprise_models import TinyCls

    clf = TorchClassifier(TinyCls(), 3, batch_size=4)
    ex = TraceExtractor(clf)
    imgs = images(9, size=16, seed=4)
    labels = np.arange(9) % 3
    x, y = collect_fit_traces(ex, list(zip(imgs, labels)), progress=False)
    assert x.shape == (9, 6) and np.array_equal(np.sort(y), np.sort(labels))
    est = DSA().fit(x, y)
    res = class_surprise(ex, est, imgs[:4])
    traces, proba = ex.extract(imgs[:4])
    pred = proba.argmax(1)
    np.testing.assert_allclose(res.class_sa[np.arange(4), pred], est.score(traces, pred), rtol=1e-6)
    assert np.isnan(res.class_sa).sum() == 4 * 2  # one class per image


def test_image_sa_is_mean_z_over_present_classes(fitted):
    _, x, y = fitted
    from blindspots.surprise.image import ImageSurprise

    est = MDSA().fit(x, y)
    class_sa = np.array([[np.nan, 2.0, 4.0], [1.0, np.nan, np.nan]])
    res = ImageSurprise(class_sa=class_sa, pixel_counts=np.ones((2, 3), int), pred=np.zeros(2, int))
    z = (class_sa - est.sa_mean_) / est.sa_std_
    np.testing.assert_allclose(res.image_sa(est), [np.mean(z[0, 1:]), z[1, 0]])
    np.testing.assert_allclose(res.image_sa(est, {"g": [2]}), [z[0, 2], np.nan])


def test_mixed_image_sizes_are_grouped_by_size(fitted):
    """Images of different sizes run one size at a time; each image's numbers are those
    it gets in a batch of its own size (pixel samples keyed by its index, not by the grouping)."""
    from blindspots.surprise.analysis import sa_and_iou

    ex, x, y = fitted
    est = MDSA().fit(x, y)
    small, big = labelled(3, 32, seed=1), labelled(3, 48, seed=2)
    mixed = [small[0], big[0], small[1], big[1], small[2], big[2]]
    imgs = [im for im, _ in mixed]
    res = class_surprise(ex, est, imgs, per_class=50, seed=3)
    assert res.class_sa.shape == (6, ex.num_classes) and len(res.pred) == 6
    assert [p.shape for p in res.pred] == [im.shape[:2] for im in imgs]
    alone = [class_surprise(ex, est, [imgs[i]], per_class=None, seed=0) for i in range(6)]
    full = class_surprise(ex, est, imgs, per_class=None, seed=0)  # every pixel: no sampling differences
    for i in range(6):
        np.testing.assert_allclose(full.class_sa[i], alone[i].class_sa[0], rtol=1e-6, equal_nan=True)
        assert np.array_equal(full.pred[i], alone[i].pred[0])
    sa, pred = surprise_heatmaps(ex, est, imgs)
    assert [m.shape for m in sa] == [im.shape[:2] for im in imgs]
    sa0, _ = surprise_heatmaps(ex, est, imgs[1:2])
    np.testing.assert_allclose(sa[1], sa0[0], rtol=1e-5, equal_nan=True)
    cols = surprise_columns(ex, est, imgs, "m", per_class=50, seed=3)
    assert all(len(v) == 6 for v in cols.values())
    out_sa, iou, in_label, p = sa_and_iou(ex, {"MDSA": est}, mixed, per_class=50, seed=0)
    assert out_sa["MDSA"].shape[0] == 6 and iou.shape[0] == 6 and p.size == 0


def test_collect_fit_traces_warns_about_mask_ids_outside_the_model(fitted, caplog):
    """Masks of 3 classes fitted on a 2-class (e.g. binary) model: class 2's pixels were dropped without a
    word (a third of the labels); now a warning names the ids. ignore_index (255) is not reported."""
    ex, _, _ = fitted
    data = [(im, np.where(m == 255, 255, m + 1).astype(np.uint8)) for im, m in labelled()]  # ids 1..3 + 255
    with caplog.at_level("WARNING", logger="blindspots.surprise.image"):
        _, y = collect_fit_traces(ex, data, per_class=10, cap=100, seed=0, progress=False)
    assert set(y.tolist()) <= {1, 2}
    msgs = [r.getMessage() for r in caplog.records if "outside the model's classes" in r.getMessage()]
    assert msgs == ["masks: label ids [3] are outside the model's classes 0..2 and were not sampled (masks of "
                    "another label set, or a missing ignore_index?)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="blindspots.surprise.image"):
        collect_fit_traces(ex, labelled(), per_class=10, cap=100, seed=0, progress=False)
    assert not [r for r in caplog.records if "outside" in r.getMessage()]


def test_checkpoint_of_other_settings_is_started_over(tmp_path, fitted):
    """A checkpoint was resumed whenever the same images were chosen: re-fitting to the same --out with
    another layer, model or per_class silently reused the old traces (another width, other settings)."""
    ex, _, _ = fitted
    ckpt = tmp_path / "traces.npz"
    x1, y1 = collect_fit_traces(ex, labelled(), per_class=10, cap=100, seed=0, checkpoint=ckpt, progress=False)
    x2, y2 = collect_fit_traces(ex, labelled(), per_class=30, cap=100, seed=0, checkpoint=ckpt, progress=False)
    fresh = collect_fit_traces(ex, labelled(), per_class=30, cap=100, seed=0, progress=False)
    assert len(y2) > len(y1) and np.array_equal(x2, fresh[0]) and np.array_equal(y2, fresh[1])
    x3, _ = collect_fit_traces(ex, labelled(), per_class=30, cap=100, seed=0, checkpoint=ckpt, progress=False,
                               checkpoint_key={"model": "other.onnx"})
    assert np.array_equal(x3, fresh[0])  # recomputed (same extractor here), not an error
    # the same settings still resume
    x4, y4 = collect_fit_traces(ex, labelled(), per_class=30, cap=100, seed=0, checkpoint=ckpt, progress=False,
                                checkpoint_key={"model": "other.onnx"})
    assert np.array_equal(x4, fresh[0]) and np.array_equal(y4, fresh[1])

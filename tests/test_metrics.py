"""Metrics against brute-force reference implementations (explicit loops, sets, counters)."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blindspots.metrics import (
    ConfusionMatrix,
    confusion_matrix,
    evaluate,
    iou_per_class,
    map_distances,
    mean_iou,
    per_image_class_iou,
    per_image_confusion,
    per_image_miou,
    pixel_accuracy,
)

IGNORE = 255


# --- brute-force references --------------------------------------------------------------------

def ref_confusion(pred, target, c, ignore):
    counts = Counter()
    for p, t in zip(np.asarray(pred).ravel().tolist(), np.asarray(target).ravel().tolist()):
        if ignore is not None and t == ignore:
            continue
        counts[(t, p)] += 1
    return [[counts[(i, j)] for j in range(c)] for i in range(c)]


def ref_class_iou(pred, target, c, ignore):
    """IoU per class via explicit pixel-coordinate sets."""
    pred, target = np.asarray(pred), np.asarray(target)
    coords = [tuple(ix) for ix in np.ndindex(pred.shape)]
    out = []
    for k in range(c):
        p_set = {x for x in coords if pred[x] == k and not (ignore is not None and target[x] == ignore)}
        t_set = {x for x in coords if target[x] == k}
        union = p_set | t_set
        out.append(float("nan") if not union else len(p_set & t_set) / len(union))
    return out


def ref_miou(ious):
    present = [v for v in ious if not math.isnan(v)]
    return float("nan") if not present else sum(present) / len(present)


def same(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and np.allclose(a, b, equal_nan=True, rtol=0, atol=1e-12)


# --- strategies --------------------------------------------------------------------------------

@st.composite
def label_pair(draw, batch: bool = False, ignore: bool = True):
    c = draw(st.integers(1, 5))
    n = draw(st.integers(1, 3)) if batch else draw(st.integers(1, 2))
    h, w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    shape = (n, h, w)
    size = n * h * w
    t_vals = list(range(c)) + ([IGNORE] if ignore else [])
    # Draw from a random subset of classes so that "absent in both" happens often.
    p_classes = draw(st.lists(st.integers(0, c - 1), min_size=1, max_size=c, unique=True))
    t_classes = draw(st.lists(st.sampled_from(t_vals), min_size=1, max_size=len(t_vals), unique=True))
    pred = np.array(draw(st.lists(st.sampled_from(p_classes), min_size=size, max_size=size)), dtype=np.int64)
    target = np.array(draw(st.lists(st.sampled_from(t_classes), min_size=size, max_size=size)), dtype=np.int64)
    dtype = draw(st.sampled_from([np.uint8, np.int32, np.int64]))
    return pred.reshape(shape).astype(dtype), target.reshape(shape).astype(dtype), c


# --- confusion matrix and scores ---------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(label_pair())
def test_confusion_matrix_matches_brute_force(case):
    pred, target, c = case
    cm = confusion_matrix(pred, target, c, IGNORE)
    assert cm.dtype == np.int64 and cm.shape == (c, c)
    assert cm.tolist() == ref_confusion(pred, target, c, IGNORE)


@settings(max_examples=150, deadline=None)
@given(label_pair())
def test_iou_miou_accuracy_match_brute_force(case):
    pred, target, c = case
    cm = confusion_matrix(pred, target, c, IGNORE)
    ref = ref_class_iou(pred, target, c, IGNORE)
    assert same(iou_per_class(cm), ref)
    m = mean_iou(cm)
    assert same(m, ref_miou(ref))
    counted = [(p, t) for p, t in zip(pred.ravel().tolist(), target.ravel().tolist()) if t != IGNORE]
    acc = pixel_accuracy(cm)
    if counted:
        assert acc == pytest.approx(sum(p == t for p, t in counted) / len(counted))
    else:
        assert math.isnan(acc) and math.isnan(m)


@settings(max_examples=60, deadline=None)
@given(st.lists(label_pair(), min_size=1, max_size=4))
def test_streaming_equals_one_shot(cases):
    c = max(case[2] for case in cases)
    cm = ConfusionMatrix(c)
    total = np.zeros((c, c), dtype=np.int64)
    for pred, target, _ in cases:
        cm.update(pred, target)
        total += np.array(ref_confusion(pred, target, c, IGNORE), dtype=np.int64)
    assert np.array_equal(cm.compute(), total)
    assert cm.compute() is not cm.compute()  # a copy, not the live state
    cm.reset()
    assert cm.compute().sum() == 0


@settings(max_examples=100, deadline=None)
@given(label_pair(batch=True), st.sampled_from([255, -1, 7, None]), st.integers(-300, 300), st.booleans())
def test_any_ignore_index_and_garbage_under_ignored_pixels(case, ignore, garbage, per_image):
    """Other ignore values and out-of-range predictions under ignored pixels (the masked path)."""
    pred, target, c = case
    pred, target = pred.astype(np.int64), target.astype(np.int64)
    if ignore is None:
        target[target == IGNORE] = 0
    else:
        target[target == IGNORE] = ignore
        pred[target == ignore] = garbage
    if per_image:
        out = per_image_class_iou(pred, target, c, ignore)
        for i in range(pred.shape[0]):
            assert same(out[i], ref_class_iou(pred[i], target[i], c, ignore))
    else:
        assert confusion_matrix(pred, target, c, ignore).tolist() == ref_confusion(pred, target, c, ignore)


def test_no_ignore_index_counts_everything():
    pred = np.array([[0, 1], [1, 1]])
    target = np.array([[0, 1], [0, 1]])
    cm = confusion_matrix(pred, target, 2, ignore_index=None)
    assert cm.tolist() == [[1, 1], [0, 2]]
    with pytest.raises(ValueError, match="target"):
        confusion_matrix(pred, np.array([[0, 255], [0, 1]]), 2, ignore_index=None)


def test_known_values_and_absent_class():
    # class 2 absent from both -> NaN, excluded from the mean
    pred = np.array([[0, 0, 1, 1]])
    target = np.array([[0, 1, 1, 255]])
    cm = confusion_matrix(pred, target, 3)
    iou = iou_per_class(cm)
    assert iou[0] == pytest.approx(1 / 2) and iou[1] == pytest.approx(1 / 2) and math.isnan(iou[2])
    assert mean_iou(cm) == pytest.approx(0.5)
    assert pixel_accuracy(cm) == pytest.approx(2 / 3)


def test_single_pixel():
    cm = ConfusionMatrix(4).update(np.array([[2]]), np.array([[2]])).compute()
    assert cm.sum() == 1 and cm[2, 2] == 1
    assert mean_iou(cm) == 1.0 and pixel_accuracy(cm) == 1.0
    assert same(per_image_class_iou(np.array([[[2]]]), np.array([[[3]]]), 4), [[np.nan, np.nan, 0.0, 0.0]])


def test_pred_under_ignored_pixels_is_not_checked():
    # a map may hold any value where the label is void (e.g. a model's own 255)
    cm = confusion_matrix(np.array([[0, 255]]), np.array([[0, 255]]), 2)
    assert cm.tolist() == [[1, 0], [0, 0]]


# --- per-image ---------------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(label_pair(batch=True))
def test_per_image_class_iou_matches_brute_force(case):
    pred, target, c = case
    out = per_image_class_iou(pred, target, c, IGNORE)
    assert out.dtype == np.float64 and out.shape == (pred.shape[0], c)
    for i in range(pred.shape[0]):
        assert same(out[i], ref_class_iou(pred[i], target[i], c, IGNORE))


@settings(max_examples=150, deadline=None)
@given(label_pair(batch=True, ignore=False))
def test_map_distances_match_brute_force(case):
    a, b, c = case
    d_pixel, d_miou = map_distances(a, b, c)
    assert d_pixel.dtype == np.float64 and d_miou.shape == (a.shape[0],)
    for i in range(a.shape[0]):
        agree = sum(x == y for x, y in zip(a[i].ravel().tolist(), b[i].ravel().tolist()))
        assert d_pixel[i] == pytest.approx(1 - agree / a[i].size)
        assert d_miou[i] == pytest.approx(1 - ref_miou(ref_class_iou(a[i], b[i], c, None)))
    # symmetric, zero on identical maps, within [0, 1]
    d2_pixel, d2_miou = map_distances(b, a, c)
    assert np.allclose(d_pixel, d2_pixel) and np.allclose(d_miou, d2_miou)
    assert np.all((d_miou >= 0) & (d_miou <= 1)) and np.all((d_pixel >= 0) & (d_pixel <= 1))
    z_pixel, z_miou = map_distances(a, a, c)
    assert np.all(z_pixel == 0) and np.all(z_miou == 0)


def test_per_image_n1_and_consistency_with_confusion_matrix():
    rng = np.random.default_rng(0)
    pred = rng.integers(0, 4, size=(1, 32, 32))
    target = rng.integers(0, 4, size=(1, 32, 32))
    target[0, :4] = IGNORE
    cm = confusion_matrix(pred, target, 4)
    assert same(per_image_class_iou(pred, target, 4)[0], iou_per_class(cm))


# --- validation --------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: confusion_matrix(np.zeros((2, 2)), np.zeros((2, 2), int), 2), "pred: .*integer"),
        (lambda: confusion_matrix(np.zeros((2, 2), int), np.zeros((2, 3), int), 2), "pred: .*shape"),
        (lambda: confusion_matrix(np.zeros(4, int), np.zeros(4, int), 2), "pred: .*dimensions"),
        (lambda: confusion_matrix(np.full((2, 2), 2), np.zeros((2, 2), int), 2), r"pred: .*0\.\.1.*\[2\]"),
        (lambda: confusion_matrix(np.zeros((2, 2), int), np.full((2, 2), -1), 2), r"target: .*\[-1\]"),
        (lambda: confusion_matrix(np.zeros((2, 2), bool), np.zeros((2, 2), int), 2), "pred: .*integer"),
        (lambda: ConfusionMatrix(0), "num_classes"),
        (lambda: ConfusionMatrix(3, ignore_index=1), "ignore_index"),
        (lambda: iou_per_class(np.zeros((2, 3))), "cm: .*square"),
        (lambda: iou_per_class(-np.ones((2, 2))), "cm: .*non-negative"),
        (lambda: per_image_class_iou(np.zeros((2, 2), int), np.zeros((2, 2), int), 2), r"pred: .*\[N, H, W\]"),
        (lambda: per_image_class_iou(np.zeros((0, 2, 2), int), np.zeros((0, 2, 2), int), 2), "at least one"),
        (lambda: map_distances(np.zeros((1, 2, 2), int), np.full((1, 2, 2), 255), 2), "b: "),
        (lambda: map_distances(np.zeros((1, 2, 2), int), np.zeros((1, 2, 3), int), 2), "a: .*shape"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- merge, per-image confusion / mIoU, evaluate (one copy of each) -------------------

@settings(max_examples=60, deadline=None)
@given(label_pair(batch=True), st.integers(0, 3))
def test_merge_of_shards_equals_one_pass(case, cut):
    """torchmetrics-style state merge: shards (ConfusionMatrix or per-image counts) add up exactly."""
    pred, target, c = case
    cut = min(cut, len(pred))
    one = ConfusionMatrix(c).update(pred, target)
    a = ConfusionMatrix(c)
    if cut:
        a.update(pred[:cut], target[:cut])
    b = ConfusionMatrix(c)
    if cut < len(pred):
        b.update(pred[cut:], target[cut:])
    assert np.array_equal(ConfusionMatrix(c).merge(a, b).compute(), one.compute())
    per = per_image_confusion(pred, target, c)
    assert per.shape == (len(pred), c, c) and per.dtype == np.int64
    assert np.array_equal(ConfusionMatrix(c).merge(per).compute(), one.compute())
    assert np.array_equal(ConfusionMatrix(c).merge(*per).compute(), one.compute())
    with pytest.raises(ValueError, match="other"):
        ConfusionMatrix(c).merge(ConfusionMatrix(c + 1))
    with pytest.raises(ValueError, match="other"):
        ConfusionMatrix(c).merge(np.zeros((c + 1, c + 1), np.int64))


@settings(max_examples=100, deadline=None)
@given(label_pair(batch=True))
def test_per_image_miou_matches_brute_force(case):
    pred, target, c = case
    out = per_image_miou(pred, target, c)
    assert out.dtype == np.float64 and out.shape == (len(pred),)
    for i in range(len(pred)):
        assert same(out[i], ref_miou(ref_class_iou(pred[i], target[i], c, IGNORE)))


def test_evaluate_pools_pixels_over_sizes_and_batches():
    rng = np.random.default_rng(0)
    data = [(rng.integers(0, 255, (h, 8, 3), dtype=np.uint8), rng.integers(0, 3, (h, 8))) for h in (4, 6, 4, 6, 4)]

    def predict(images):  # a "model": class = first channel mod 3
        return images[..., 0].astype(np.int64) % 3

    cm = evaluate(predict, data, 3, batch_size=2)
    ref = ConfusionMatrix(3)
    for im, mk in data:
        ref.update(predict(im[None]), mk[None])
    assert np.array_equal(cm.compute(), ref.compute())

    class Seg:
        def predict_proba(self, images):
            return np.eye(3, dtype=np.float32)[predict(images)].transpose(0, 3, 1, 2)

    assert np.array_equal(evaluate(Seg(), data, 3).compute(), ref.compute())

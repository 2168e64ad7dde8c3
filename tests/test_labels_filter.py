"""find_label_issues / LabelIssueFinder: streaming inputs, invariances, ignore index, downsampling."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blindspots.labels import LabelIssueFinder, find_label_issues
from blindspots.labels._internal.pixels import block_majority
from test_labels_helpers import random_inputs, structured_inputs


class PixelModel:
    """A deterministic Segmenter: per-pixel softmax of a fixed linear map of the RGB values."""

    def __init__(self, k: int, seed: int = 0) -> None:
        self.num_classes = k
        self.w = np.random.default_rng(seed).normal(size=(3, k)) / 40.0
        self.calls = 0

    def predict_proba(self, images: np.ndarray) -> np.ndarray:
        self.calls += 1
        z = np.asarray(images, np.float64) @ self.w  # [b, H, W, K]
        z = np.exp(z - z.max(-1, keepdims=True))
        return np.moveaxis(z / z.sum(-1, keepdims=True), -1, 1).astype(np.float32)


def _model_set(n=7, k=4, h=12, w=20, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
    model = PixelModel(k, seed)
    labels = model.predict_proba(images).argmax(1).astype(np.uint8)
    flip = rng.random(labels.shape) < 0.15
    labels[flip] = rng.integers(0, k, flip.sum())
    labels[:, 0, :3] = 255  # some ignored pixels
    return model, [(images[i], labels[i]) for i in range(n)], images, labels


def test_all_input_kinds_agree(tmp_path):
    labels, p = structured_inputs(np.random.default_rng(1), 6, 5, 16, 24)
    expect = find_label_issues(labels, p, verbose=False)
    assert expect.any()
    np.save(tmp_path / "l.npy", labels)
    np.save(tmp_path / "p.npy", p)
    mm_l, mm_p = np.load(tmp_path / "l.npy", mmap_mode="r"), np.load(tmp_path / "p.npy", mmap_mode="r")
    np.testing.assert_array_equal(find_label_issues(mm_l, mm_p, verbose=False), expect)
    np.testing.assert_array_equal(find_label_issues(str(tmp_path / "l.npy"), tmp_path / "p.npy", verbose=False), expect)
    batches = [(labels[i:i + 4], p[i:i + 4]) for i in range(0, 6, 4)]
    np.testing.assert_array_equal(find_label_issues(batches, verbose=False), expect)
    np.testing.assert_array_equal(find_label_issues(iter(batches), verbose=False), expect)
    gen = ((labels[i], p[i]) for i in range(6))  # single images are batches of one
    np.testing.assert_array_equal(find_label_issues(gen, verbose=False), expect)
    out = find_label_issues(labels, p, verbose=False, out=tmp_path / "issues.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "issues.npy"), expect)
    assert isinstance(out, np.memmap)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), split=st.lists(st.integers(1, 4), min_size=1, max_size=6),
       batch_size=st.sampled_from([None, 1, 300, 5000]), ignore=st.booleans())
def test_streaming_batch_size_invariance(seed, split, batch_size, ignore):
    rng = np.random.default_rng(seed)
    n = sum(split)
    labels, p = random_inputs(rng, n, 3, 6, 5, np.float32)
    if ignore:
        labels[rng.random(labels.shape) < 0.2] = 255
    expect = find_label_issues(labels, p, verbose=False)
    bounds = np.cumsum([0] + split)
    batches = ((labels[a:b], p[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))
    np.testing.assert_array_equal(find_label_issues(batches, verbose=False, batch_size=batch_size), expect)
    np.testing.assert_array_equal(find_label_issues(labels, p, verbose=False, batch_size=batch_size), expect)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 6))
def test_permuting_images_permutes_issues(seed, n):
    rng = np.random.default_rng(seed)
    labels, p = random_inputs(rng, n, 4, 7, 9, np.float64)  # continuous: no exact ties
    perm = rng.permutation(n)
    a = find_label_issues(labels, p, verbose=False)
    b = find_label_issues(labels[perm], p[perm], verbose=False)
    np.testing.assert_array_equal(b, a[perm])


def test_model_and_dataset_path_matches_arrays_and_resumes(tmp_path):
    model, dataset, images, labels = _model_set()
    p = model.predict_proba(images)
    expect = find_label_issues(labels, p, verbose=False)
    assert expect.any()
    got = find_label_issues(model=model, dataset=dataset, model_batch_size=3, verbose=False)
    np.testing.assert_array_equal(got, expect)

    class Interrupt(Exception):
        pass

    class Flaky:
        """Raises on the third model batch, as a killed job would stop."""

        def __init__(self, inner):
            self.inner, self.n = inner, 0

        def predict_proba(self, x):
            self.n += 1
            if self.n == 3:
                raise Interrupt
            return self.inner.predict_proba(x)

    cache = tmp_path / "cache"
    with pytest.raises(Interrupt):
        LabelIssueFinder(verbose=False, cache_dir=cache).fit(model=Flaky(model), dataset=dataset, model_batch_size=2)
    counting = PixelModel(4, 0)
    finder = LabelIssueFinder(verbose=False, cache_dir=cache).fit(model=counting, dataset=dataset, model_batch_size=2)
    assert counting.calls == 2  # images 4..6 only: the first four were cached before the interruption
    np.testing.assert_array_equal(finder.transform(), expect)
    finder.close()
    assert cache.exists()  # an explicit cache_dir is kept


def test_ignore_index_never_flagged_and_excluded():
    rng = np.random.default_rng(2)
    labels, p = structured_inputs(rng, 4, 4, 16, 16, np.float64)
    ign = rng.random(labels.shape) < 0.3
    with_ign = labels.copy()
    with_ign[ign] = 255
    finder = LabelIssueFinder(verbose=False).fit(with_ign, p)
    issues = finder.transform()
    assert not issues[ign].any()
    # thresholds only from labelled pixels
    s = np.take_along_axis(p, labels[:, None], 1)[:, 0]
    for k in range(4):
        sel = (labels == k) & ~ign
        assert finder.confident_thresholds_[k] == pytest.approx(s[sel].mean(), rel=1e-12)
    # another ignore value, or None with every value a class id
    alt = labels.copy()
    alt[ign] = 9
    np.testing.assert_array_equal(find_label_issues(alt, p, verbose=False, ignore_index=9), issues)
    assert find_label_issues(labels, p, verbose=False, ignore_index=None).shape == labels.shape
    with pytest.raises(ValueError, match="labels"):
        find_label_issues(with_ign, p, verbose=False, ignore_index=None)


def test_all_pixels_ignored_gives_no_issues():
    labels, p = random_inputs(np.random.default_rng(0), 2, 3, 4, 4)
    labels[:] = 255
    assert not find_label_issues(labels, p, verbose=False).any()


def test_block_majority_does_not_invent_classes():
    lab = np.array([[[0, 2], [0, 2]]])  # half class 0, half class 2: cleanlab's rounded mean is 1
    assert block_majority(lab, 2, 3, 255)[0, 0, 0] == 0  # tie -> lowest class id
    lab = np.array([[[2, 2], [0, 255]]])
    assert block_majority(lab, 2, 3, 255)[0, 0, 0] == 2
    lab = np.full((1, 2, 2), 255)
    assert block_majority(lab, 2, 3, 255)[0, 0, 0] == 255


def test_downsample_flags_only_full_resolution_mismatches():
    labels, p = structured_inputs(np.random.default_rng(4), 3, 4, 32, 32, np.float64, noise=0.5)
    issues = find_label_issues(labels, p, verbose=False, downsample=2)
    assert issues.any()
    assert not (issues & (p.argmax(1) == labels)).any()
    # streaming with downsampling agrees with arrays
    np.testing.assert_array_equal(find_label_issues(iter([(labels, p)]), verbose=False, downsample=2), issues)

"""Identification (Algorithm 1): results, cap per source, determinism, resume, and input errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from blindspots.data.classsets import load_sklearn_digits
from blindspots.scenarios.clustering import Distiller
from blindspots.defuse.identify import Identified, IdentifySettings, _cap_per_source, draw_noise, identify
from blindspots.defuse.vae import BetaVAE
from blindspots.training.classification import train_classifier
from blindspots.models.classifier_zoo import as_classifier, build_classifier

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup():
    d = load_sklearn_digits()
    train = d.subset(np.arange(300))
    torch.manual_seed(0)
    net = build_classifier("defuse_cnn", 10, train.image_shape, width=8, hidden=32)
    train_classifier(net, train.images, train.labels, epochs=15, batch_size=32, optimizer="adam", lr=3e-3,
                     progress=False)
    vae = BetaVAE(latent_dim=4, beta=1.0, epochs=3, batch_size=64, anneal_steps=10, width=8, hidden=32,
                  progress=False).fit(train.images)
    return train.subset(np.arange(60)), vae, as_classifier(net, 10)


# recon_min_proba=0: the 3-epoch test VAE reconstructs poorly; the check has its own test below.
FAST = dict(q=12, a=2.0, b=2.0, max_per_source=3, shard_size=16, batch_size=100, recon_min_proba=0.0)


class ConstantClassifier:
    """Always predicts class 0 (probability 1)."""

    num_classes = 10

    def predict_proba(self, images):
        p = np.zeros((len(images), 10), np.float32)
        p[:, 0] = 1
        return p


def test_identify_keeps_misclassified_capped(setup):
    data, vae, clf = setup
    res = identify(vae, clf, data.images, data.labels, settings=IdentifySettings(**FAST), progress=False)
    assert len(res) > 0
    assert res.codes.shape == (len(res), 4) and res.codes.dtype == np.float32
    assert (res.predicted != res.source_label).all()
    assert np.array_equal(res.source_label, data.labels[res.source])
    assert np.bincount(res.source).max() <= 3
    # Re-decoding the kept codes reproduces the classifier's (wrong) predictions.
    again = clf.predict_proba(res.images(vae)).argmax(1)
    assert (again == res.predicted).mean() > 0.95
    # Only correctly classified sources are perturbed (Algorithm 1).
    n_used = res.settings["n_sources_used"]
    assert n_used == 60 - res.settings["n_skipped_misclassified"] > 0
    assert res.settings["n_decoded"] == n_used * 12 and res.settings["n_kept"] == len(res)


def test_sources_are_correctly_classified_and_reconstructable(setup):
    data, vae, clf = setup
    pred = clf.predict_proba(data.images).argmax(1)
    res = identify(vae, clf, data.images, data.labels, settings=IdentifySettings(**FAST), progress=False)
    assert (pred[res.source] == data.labels[res.source]).all()
    assert res.settings["n_skipped_misclassified"] == int((pred != data.labels).sum())
    # The reconstruction check: kept sources' reconstructions get p(y) >= the threshold; the count is reported.
    s = IdentifySettings(**{**FAST, "recon_min_proba": 0.3})
    res2 = identify(vae, clf, data.images, data.labels, settings=s, progress=False)
    p_rec = clf.predict_proba(vae.reconstruct(data.images))[np.arange(len(data)), data.labels]
    ok = (pred == data.labels) & (p_rec >= 0.3)
    assert res2.settings["n_skipped_reconstruction"] == int(((pred == data.labels) & ~ok).sum())
    assert res2.settings["n_sources_used"] == int(ok.sum())
    assert set(np.unique(res2.source)) <= set(np.flatnonzero(ok))
    with pytest.raises(ValueError, match="recon_min_proba"):
        IdentifySettings(recon_min_proba=2.0).validate()


def test_same_seed_same_result_and_seed_matters(setup):
    data, vae, clf = setup
    a = identify(vae, clf, data.images, data.labels, settings=IdentifySettings(seed=1, **FAST), progress=False)
    b = identify(vae, clf, data.images, data.labels, settings=IdentifySettings(seed=1, **FAST), progress=False)
    c = identify(vae, clf, data.images, data.labels, settings=IdentifySettings(seed=2, **FAST), progress=False)
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.source, b.source)
    assert not (len(a) == len(c) and np.array_equal(a.codes, c.codes))


def test_resume_after_interruption(setup, tmp_path):
    data, vae, clf = setup
    s = IdentifySettings(seed=5, **FAST)
    full = identify(vae, clf, data.images, data.labels, settings=s, out_dir=tmp_path / "run", progress=False)
    shards = sorted((tmp_path / "run" / "shards").glob("shard_*.npz"))
    assert len(shards) == -(-full.settings["n_sources_used"] // 16) >= 3  # correct sources / 16 per shard
    shards[-2].unlink()  # as if interrupted before the last two shards were written
    shards[-1].unlink()
    (tmp_path / "run" / "identified.npz").unlink()
    resumed = identify(vae, clf, data.images, data.labels, settings=s, out_dir=tmp_path / "run", progress=False)
    assert np.array_equal(full.codes, resumed.codes) and np.array_equal(full.predicted, resumed.predicted)
    loaded = Identified.load(tmp_path / "run")
    assert np.array_equal(loaded.source, full.source) and loaded.settings["q"] == 12
    with pytest.raises(ValueError, match="out_dir: expected a run with the same settings"):
        identify(vae, clf, data.images, data.labels, settings=IdentifySettings(seed=6, **FAST),
                 out_dir=tmp_path / "run", progress=False)
    other = data.images.copy()
    other[0, 0, 0, 0] ^= 1  # different images, same settings: resuming would mix runs
    with pytest.raises(ValueError, match="out_dir: expected a run with the same settings"):
        identify(vae, clf, other, data.labels, settings=s, out_dir=tmp_path / "run", progress=False)


def test_wrong_number_of_classes(setup):
    data, vae, clf = setup
    nine = as_classifier(clf.module, 9)
    with pytest.raises(ValueError, match="classifier: expected 10 classes"):
        identify(vae, nine, data.images, data.labels, num_classes=10, settings=IdentifySettings(**FAST),
                 progress=False)
    # A wrapper that claims 10 classes but whose module outputs 9 logits fails on the first batch.
    net9 = build_classifier("defuse_cnn", 9, (8, 8, 1), width=4, hidden=8)
    with pytest.raises(ValueError, match="expected shape"):
        identify(vae, as_classifier(net9, 10), data.images, data.labels, settings=IdentifySettings(**FAST),
                 progress=False)


def test_mismatched_image_sizes(setup):
    data, vae, clf = setup
    with pytest.raises(ValueError, match=r"images: expected images of shape \(H, W, C\) = \(8, 8, 1\)"):
        identify(vae, clf, np.zeros((3, 28, 28, 1), np.uint8), np.zeros(3, int), progress=False)
    big = build_classifier("defuse_cnn", 10, (28, 28, 1), width=4, hidden=8)
    with pytest.raises(ValueError, match="classifier: failed on (decoded )?images of shape"):
        identify(vae, as_classifier(big, 10), data.images, data.labels, settings=IdentifySettings(**FAST),
                 progress=False)
    with pytest.raises(ValueError, match="labels: expected integer labels of shape"):
        identify(vae, clf, data.images, data.labels[:5], progress=False)


def test_empty_identification_output_is_reported(setup):
    data, vae, _ = setup
    zeros = np.zeros(len(data), dtype=np.int64)  # the constant classifier is always "right"
    res = identify(vae, ConstantClassifier(), data.images, zeros, num_classes=10, settings=IdentifySettings(**FAST),
                   progress=False)
    assert len(res) == 0 and res.settings["n_decoded"] == 60 * 12
    with pytest.raises(ValueError, match="codes: expected at least 2 identified failures"):
        Distiller().fit(res)


def test_noise_variants():
    rng = np.random.default_rng(0)
    unc = draw_noise(rng, (20000, 3), 50.0, 50.0, "uncentred")
    cen = draw_noise(rng, (20000, 3), 50.0, 50.0, "centred")
    assert abs(unc.mean() - 0.5) < 0.005 and abs(cen.mean()) < 0.005
    assert abs(unc.std() - cen.std()) < 0.003
    with pytest.raises(ValueError, match="noise"):
        IdentifySettings(noise="gaussian").validate()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a, b"):
        IdentifySettings(a=0).validate()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(0, 10, allow_nan=False)), min_size=1, max_size=40),
       st.integers(1, 4))
def test_cap_per_source_keeps_smallest_norms(pairs, cap):
    source = np.array([p[0] for p in pairs])
    norm = np.array([p[1] for p in pairs])
    keep = _cap_per_source(source, norm, cap)
    for s in np.unique(source):
        mine = np.flatnonzero(source == s)
        kept = np.intersect1d(keep, mine)
        assert len(kept) == min(cap, len(mine))
        dropped = np.setdiff1d(mine, kept)
        if len(dropped):
            assert norm[kept].max() <= norm[dropped].min()

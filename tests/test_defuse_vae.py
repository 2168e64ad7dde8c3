"""β-VAE: shapes, sizing by image size, determinism, resume, persistence, grids, input errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from blindspots.data.classsets import load_sklearn_digits
from blindspots.defuse.vae import BetaVAE, ConvVAENet

torch.set_num_threads(1)

SMALL = dict(latent_dim=4, beta=1.0, batch_size=64, anneal_steps=10, width=8, hidden=32, progress=False)


@pytest.fixture(scope="module")
def digits():
    return load_sklearn_digits().images[:256]


def weights(vae: BetaVAE) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in vae.net_.parameters()]


@pytest.mark.parametrize("shape", [(8, 8, 1), (28, 28, 1), (32, 32, 3), (20, 12, 3)])
def test_net_sizes_follow_the_image(shape):
    net = ConvVAENet(shape, latent_dim=5, width=8, hidden=16)
    x = torch.rand(2, shape[2], shape[0], shape[1])
    mu, logvar = net.encode(x)
    assert mu.shape == (2, 5) and logvar.shape == (2, 5)
    out = net.decode(mu)
    assert out.shape == x.shape and float(out.min()) >= 0 and float(out.max()) <= 1
    n_conv = sum(isinstance(m, torch.nn.Conv2d) for m in net.encoder)
    assert 4 * 2 ** n_conv == net.size  # stride-2 blocks down to 4x4


def test_fit_encode_decode_and_loss_decreases(digits):
    vae = BetaVAE(epochs=4, seed=0, **SMALL).fit(digits)
    mu, logvar = vae.encode(digits[:10])
    assert mu.shape == (10, 4) and mu.dtype == np.float32
    rec = vae.decode(mu)
    assert rec.shape == (10, 8, 8, 1) and rec.dtype == np.uint8
    assert vae.history_[-1]["loss"] < vae.history_[0]["loss"]
    assert vae.sample(6, seed=1).shape == (6, 8, 8, 1)


def test_same_seed_same_model(digits):
    a = BetaVAE(epochs=2, seed=3, **SMALL).fit(digits)
    b = BetaVAE(epochs=2, seed=3, **SMALL).fit(digits)
    c = BetaVAE(epochs=2, seed=4, **SMALL).fit(digits)
    assert all(np.array_equal(x, y) for x, y in zip(weights(a), weights(b)))
    assert not all(np.array_equal(x, y) for x, y in zip(weights(a), weights(c)))


def test_resume_matches_uninterrupted_training(digits, tmp_path):
    full = BetaVAE(epochs=3, seed=1, **SMALL).fit(digits)
    ckpt = tmp_path / "vae.pt"
    BetaVAE(epochs=1, seed=1, checkpoint_path=ckpt, **SMALL).fit(digits)  # "interrupted" after epoch 1
    resumed = BetaVAE(epochs=3, seed=1, checkpoint_path=ckpt, **SMALL).fit(digits)
    assert len(resumed.history_) == 3
    for x, y in zip(weights(full), weights(resumed)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def test_save_load_and_grids(digits, tmp_path):
    vae = BetaVAE(epochs=1, seed=0, **SMALL).fit(digits)
    back = BetaVAE.load(vae.save(tmp_path / "m.pt"))
    np.testing.assert_array_equal(vae.encode(digits[:5])[0], back.encode(digits[:5])[0])
    paths = vae.save_grids(digits, tmp_path / "grids", n=20)
    assert paths["reconstructions"].is_file() and paths["samples"].is_file()


def test_input_errors(digits, tmp_path):
    vae = BetaVAE(epochs=1, seed=0, **SMALL).fit(digits)
    with pytest.raises(ValueError, match=r"images: expected images of shape \(H, W, C\) = \(8, 8, 1\)"):
        vae.encode(np.zeros((2, 28, 28, 1), np.uint8))
    with pytest.raises(ValueError, match="dtype uint8"):
        vae.encode(np.zeros((2, 8, 8, 1), np.float32))
    with pytest.raises(ValueError, match=r"z: expected latent codes float \[N, 4\]"):
        vae.decode(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="unfitted"):
        BetaVAE().encode(digits)
    ckpt = tmp_path / "v.pt"
    BetaVAE(epochs=1, seed=0, checkpoint_path=ckpt, **SMALL).fit(digits)
    with pytest.raises(ValueError, match="checkpoint_path"):
        BetaVAE(epochs=2, checkpoint_path=ckpt, **SMALL).fit(np.zeros((4, 16, 16, 1), np.uint8))

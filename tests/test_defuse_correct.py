"""Correction (λ sweep on L(D) + λ·CE(D_f)), scenario data, classifier zoo and fine-tuning helpers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from blindspots.data.classsets import load_sklearn_digits
from blindspots.defuse.correct import PAPER_LAMBDAS, correct, scenario_data
from blindspots.scenarios.clustering import Scenarios
from blindspots.defuse.vae import BetaVAE
from blindspots.training.classification import accuracy, train_classifier
from blindspots.models.classifier_zoo import (
    build_classifier, load_classifier, load_classifier_module, save_classifier,
)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def base():
    d = load_sklearn_digits()
    train, val = d.subset(np.arange(400)), d.subset(np.arange(400, 600))
    torch.manual_seed(0)
    net = build_classifier("defuse_cnn", 10, train.image_shape, width=8, hidden=32)
    train_classifier(net, train.images, train.labels, epochs=4, batch_size=32, optimizer="adam", lr=3e-3,
                     progress=False)
    # A synthetic "failure scenario": images of 1s that the annotators say are 7s.
    ones = d.images[600:][d.labels[600:] == 1][:48]
    return net, train, val, (ones, np.full(len(ones), 7))


def test_paper_lambdas():
    assert len(PAPER_LAMBDAS) == 17 and PAPER_LAMBDAS[0] == 1e-10 and PAPER_LAMBDAS[-1] == 1000


def test_large_lambda_fixes_the_scenario_and_selection_uses_validation(base, tmp_path):
    net, train, val, df = base
    before = [p.detach().clone() for p in net.parameters()]
    res = correct(net, (train.images, train.labels), (val.images, val.labels), df, lambdas=[1e-10, 10.0],
                  epochs=2, batch_size=64, seed=0, evaluate={"scenario": df}, out_dir=tmp_path / "sweep",
                  progress=False)
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters()))  # the input module is untouched
    sweep = res.sweep.set_index("lambda")
    assert sweep.loc[10.0, "scenario_acc"] > sweep.loc[1e-10, "scenario_acc"] + 0.3
    best = sweep["val_acc"].idxmax()
    assert res.best_lambda == best or sweep.loc[res.best_lambda, "val_acc"] == sweep["val_acc"].max()
    assert accuracy(res.module, val.images, val.labels) == pytest.approx(sweep.loc[res.best_lambda, "val_acc"])
    # Resume: a rerun reads the saved λ results instead of training again.
    again = correct(net, (train.images, train.labels), (val.images, val.labels), df, lambdas=[1e-10, 10.0],
                    epochs=2, batch_size=64, seed=0, evaluate={"scenario": df}, out_dir=tmp_path / "sweep",
                    progress=False)
    pd.testing.assert_frame_equal(again.sweep, res.sweep)
    with pytest.raises(ValueError, match="out_dir: expected λ="):
        correct(net, (train.images, train.labels), (val.images, val.labels), df, lambdas=[1.0, 10.0], epochs=1,
                out_dir=tmp_path / "sweep", progress=False)


def test_correct_errors(base):
    net, train, val, df = base
    with pytest.raises(ValueError, match="extra: expected at least one"):
        correct(net, (train.images, train.labels), (val.images, val.labels), (df[0][:0], df[1][:0]), progress=False)
    with pytest.raises(ValueError, match="lambdas"):
        correct(net, (train.images, train.labels), (val.images, val.labels), df, lambdas=[], progress=False)


def test_scenario_data_splits_and_labels():
    vae = BetaVAE(latent_dim=3, epochs=1, batch_size=64, width=4, hidden=8, progress=False).fit(
        load_sklearn_digits().images[:64])
    sc = Scenarios(np.zeros((3, 3)), np.stack([np.eye(3)] * 3), np.array([0.5, 0.3, 0.2]), np.arange(3))
    table = pd.DataFrame({"scenario": [0, 1, 2], "is_failure": [True, False, True], "label": [4, 5, 6]})
    sd = scenario_data(sc, table, vae, n_per=16, tau=0.5, seed=0)
    assert sd.finetune_images.shape == (32, 8, 8, 1) and sd.test_images.shape == (32, 8, 8, 1)
    assert set(sd.finetune_scenario) == {0, 2} and sd.finetune_labels[sd.finetune_scenario == 2].tolist() == [6] * 16
    with pytest.raises(ValueError, match="failures: expected at least one failure scenario"):
        scenario_data(sc, table.assign(is_failure=False), vae)


@pytest.mark.parametrize("arch,shape", [("defuse_cnn", (8, 8, 1)), ("defuse_cnn", (28, 28, 1)),
                                        ("defuse_cnn", (32, 32, 3)), ("pytorch_mnist", (28, 28, 1))])
def test_zoo_shapes_and_checkpoints(arch, shape, tmp_path):
    net = build_classifier(arch, 10, shape)
    assert net(torch.rand(2, shape[2], shape[0], shape[1])).shape == (2, 10)
    path = save_classifier(tmp_path / "c.pt", net, arch=arch, class_names=list("0123456789"), image_shape=shape)
    clf = load_classifier(path)
    x = np.random.default_rng(0).integers(0, 256, (3, *shape), dtype=np.uint8)
    p = clf.predict_proba(x)
    assert p.shape == (3, 10)
    module, info = load_classifier_module(path)
    assert info["arch"] == arch and info["image_shape"] == list(shape)
    with pytest.raises(ValueError, match="arch"):
        build_classifier("resnet9000", 10, shape)


def test_train_classifier_resume_and_determinism(base, tmp_path):
    _, train, val, _ = base

    def fresh():
        torch.manual_seed(1)
        return build_classifier("defuse_cnn", 10, (8, 8, 1), width=4, hidden=16)

    full = fresh()
    train_classifier(full, train.images, train.labels, epochs=2, optimizer="adam", lr=1e-3, seed=2, progress=False)
    part = fresh()
    ck = tmp_path / "t.pt"
    train_classifier(part, train.images, train.labels, epochs=1, optimizer="adam", lr=1e-3, seed=2,
                     checkpoint_path=ck, progress=False)
    resumed = fresh()
    r = train_classifier(resumed, train.images, train.labels, epochs=2, optimizer="adam", lr=1e-3, seed=2,
                         checkpoint_path=ck, progress=False)
    assert len(r.history) == 2
    for a, b in zip(full.parameters(), resumed.parameters()):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="labels: expected labels in 0..9"):
        train_classifier(fresh(), train.images[:4], np.array([0, 1, 2, 12]), epochs=1, progress=False)
    with pytest.raises(ValueError, match="select: 'val' needs"):
        train_classifier(fresh(), train.images, train.labels, epochs=1, select="val", progress=False)


class _CountingNet(torch.nn.Module):
    """A linear classifier that records the batch sizes it is trained on."""

    def __init__(self, shape: tuple[int, ...], k: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(int(np.prod(shape)), k)
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen.append(len(x))
        return self.fc(x.flatten(1))


@pytest.mark.parametrize("covers, train_batches", [("images", 2), ("both", 5)])
def test_epoch_covers_the_larger_set(covers, train_batches):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (30, 4, 4, 1), dtype=np.uint8)
    xe = rng.integers(0, 255, (70, 4, 4, 1), dtype=np.uint8)
    net = _CountingNet((1, 4, 4), 3)
    train_classifier(net, x, rng.integers(0, 3, 30), epochs=1, batch_size=16, lr=1e-3, optimizer="adam",
                     extra_images=xe, extra_labels=rng.integers(0, 3, 70), extra_weight=1.0,
                     epoch_covers=covers, progress=False)
    d_batches = net.seen[0::2]  # each step: a batch of D, then a batch of D_f
    assert len(d_batches) == train_batches
    assert sum(d_batches) == (30 if covers == "images" else 70)  # "both": D cycled up to |D_f|
    with pytest.raises(ValueError, match="epoch_covers"):
        train_classifier(net, x, rng.integers(0, 3, 30), epochs=1, epoch_covers="all", progress=False)

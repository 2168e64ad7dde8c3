"""Fine-tuning with replay: poly LR, LR grid on T0, checkpoints and resume, determinism."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from blindspots.training.loop import poly_lr
from blindspots.training.replay import ConcatPairs, PairList, ReplayFinetuner, collate, evaluate_module

torch.set_num_threads(1)


def _item(i: int, size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(i)
    im = r.integers(0, 256, (size, size, 3), dtype=np.uint8)
    mask = (im[..., 0] > 127).astype(np.uint8)
    mask[:2] = 255  # some ignored pixels
    return im, mask


def pairs(lo: int, hi: int, size: int = 32) -> PairList:
    return PairList([str(i) for i in range(lo, hi)], lambda i: _item(int(i), size))


def tiny_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))


def weights(m: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in m.state_dict().values()]


def test_poly_lr_matches_the_deeplab_policy() -> None:
    assert poly_lr(1e-4, 0, 100) == pytest.approx(1e-4)
    assert poly_lr(1e-4, 50, 100, 0.9) == pytest.approx(1e-4 * 0.5 ** 0.9)
    assert poly_lr(1e-4, 100, 100) == 0.0


def test_paper_defaults() -> None:
    ft = ReplayFinetuner()
    assert ft.lrs == [1e-5, 5e-5, 1e-4] and ft.epochs == 80 and ft.batch_size == 2
    assert ft.momentum == 0.9 and ft.weight_decay == 5e-4 and ft.power == 0.9


def test_grid_picks_the_lr_with_best_t0_miou_and_leaves_input_unchanged() -> None:
    net = tiny_net()
    before = weights(net)
    ft = ReplayFinetuner([1e-4, 0.2], epochs=3, seed=0, progress=False)
    ft.fit(net, pairs(0, 4), pairs(4, 12), pairs(20, 24), num_classes=2)
    assert [r.lr for r in ft.runs_] == [1e-4, 0.2]
    best = max(ft.runs_, key=lambda r: r.val_miou)
    assert ft.lr_ == best.lr and ft.val_miou_ == best.val_miou
    assert ft.runs_[1].val_miou > ft.runs_[0].val_miou  # a tiny LR cannot learn in 3 epochs
    assert ft.runs_[1].losses[-1] < ft.runs_[1].losses[0]
    assert evaluate_module(ft.model_, pairs(20, 24), 2) == pytest.approx(ft.val_miou_)
    for a, b in zip(before, weights(net)):
        assert torch.equal(a, b)


def test_same_seed_same_weights_and_resume_after_a_crash(tmp_path: Path) -> None:
    args = dict(epochs=3, seed=3, progress=False)
    ref = ReplayFinetuner([0.1], **args).fit(tiny_net(), pairs(0, 4), pairs(4, 10), pairs(20, 22), num_classes=2)
    again = ReplayFinetuner([0.1], **args).fit(tiny_net(), pairs(0, 4), pairs(4, 10), pairs(20, 22), num_classes=2)
    for a, b in zip(weights(ref.model_), weights(again.model_)):
        assert torch.equal(a, b)

    calls = {"n": 0}

    def crashing(i: str) -> tuple[np.ndarray, np.ndarray]:
        calls["n"] += 1
        if calls["n"] == 10:  # S items are 4 of the 10 read per epoch: this is in a later epoch
            raise KeyboardInterrupt
        return _item(int(i))

    crash_set = PairList([str(i) for i in range(0, 4)], crashing)
    work = tmp_path / "ft"
    with pytest.raises(KeyboardInterrupt):
        ReplayFinetuner([0.1], work_dir=work, **args).fit(tiny_net(), crash_set, pairs(4, 10), pairs(20, 22),
                                                           num_classes=2)
    state = torch.load(next(work.glob("lr-*/state.pt")), weights_only=False)
    assert 1 <= state["epoch"] < 3  # finished epochs were checkpointed, the crash stopped the run
    resumed = ReplayFinetuner([0.1], work_dir=work, **args).fit(tiny_net(), pairs(0, 4), pairs(4, 10),
                                                                 pairs(20, 22), num_classes=2)
    for a, b in zip(weights(ref.model_), weights(resumed.model_)):
        assert torch.allclose(a, b, atol=1e-6)
    assert not list(work.rglob("*.tmp"))
    # Checkpoints from other settings are refused rather than mixed in.
    with pytest.raises(ValueError, match="same settings"):
        ReplayFinetuner([0.1], work_dir=work, epochs=4, seed=3, progress=False).fit(
            tiny_net(), pairs(0, 4), pairs(4, 10), pairs(20, 22), num_classes=2)


def test_replay_subset_and_mixed_sizes() -> None:
    ft = ReplayFinetuner(max_replay=3, seed=1)
    train = ft.training_set(pairs(0, 2), pairs(10, 20))
    assert len(train) == 5
    assert isinstance(train, ConcatPairs)
    ims, mks = collate([_item(0, 32), _item(1, 40)], None, [False, True])
    assert ims.shape == (2, 32, 32, 3) and mks.shape == (2, 32, 32) and mks.dtype == np.int64
    ims, _ = collate([_item(0, 32), _item(1, 40)], 48, [False, False])
    assert ims.shape == (2, 48, 48, 3)
    # A training run on mixed sizes works.
    mixed = ConcatPairs([pairs(0, 3, 32), pairs(3, 6, 40)])
    ReplayFinetuner([0.05], epochs=1, progress=False).fit(tiny_net(), mixed, pairs(6, 8), pairs(20, 22),
                                                          num_classes=2)


def test_bad_arguments_raise_value_errors() -> None:
    net = tiny_net()
    with pytest.raises(ValueError, match="lrs"):
        ReplayFinetuner([]).fit(net, pairs(0, 2), pairs(2, 4), pairs(4, 6), num_classes=2)
    with pytest.raises(ValueError, match="epochs"):
        ReplayFinetuner(epochs=0).fit(net, pairs(0, 2), pairs(2, 4), pairs(4, 6), num_classes=2)
    with pytest.raises(ValueError, match="val"):
        ReplayFinetuner().fit(net, pairs(0, 2), pairs(2, 4), pairs(0, 0), num_classes=2)
    with pytest.raises(ValueError, match="model"):
        ReplayFinetuner().fit("net", pairs(0, 2), pairs(2, 4), pairs(4, 6), num_classes=2)
    bad = PairList(["x"], lambda i: (np.zeros((8, 8), np.uint8), np.zeros((8, 8), np.uint8)))
    with pytest.raises(ValueError, match="image uint8"):
        ReplayFinetuner([0.1], epochs=1, batch_size=1, progress=False).fit(net, bad, pairs(0, 0), pairs(4, 6),
                                                                           num_classes=2)


def test_mixed_aspect_ratios_in_s_s0_and_t0_train_with_every_batch_size() -> None:
    """Pool images come in many sizes: a batch is resized to its first image's size, T0 is run
    one size at a time (never "all input arrays must have the same shape")."""
    def item(i: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
        r = np.random.default_rng(i)
        im = r.integers(0, 256, (h, w, 3), dtype=np.uint8)
        return im, (im[..., 1] > 127).astype(np.uint8)

    shapes = [(32, 48), (40, 24), (32, 32), (24, 56), (36, 36)]
    s = PairList([str(k) for k in range(3)], lambda k: item(int(k), *shapes[int(k)]))
    s0 = PairList(["3", "4"], lambda k: item(int(k), *shapes[int(k)]))
    t0 = PairList(["0", "3", "4"], lambda k: item(int(k) + 9, *shapes[int(k)]))
    for batch_size in (1, 2, 3):
        ft = ReplayFinetuner([0.05], epochs=1, batch_size=batch_size, progress=False)
        ft.fit(tiny_net(), s, s0, t0, num_classes=2)
        assert np.isfinite(ft.val_miou_) and len(ft.runs_[0].losses) == 1

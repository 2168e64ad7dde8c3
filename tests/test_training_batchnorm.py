"""BatchNorm statistics during fine-tuning: held fixed on request, copied, re-estimated."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from blindspots.training.batchnorm import copy_batchnorm_stats, hold_batchnorm_stats, reestimate_batchnorm_stats
from blindspots.training.replay import PairList, ReplayFinetuner

torch.set_num_threads(1)


def _item(i: int, size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(i)
    im = r.integers(0, 256, (size, size, 3), dtype=np.uint8)
    return im, (im[..., 0] > 127).astype(np.uint8)


def pairs(lo: int, hi: int) -> PairList:
    return PairList([str(i) for i in range(lo, hi)], lambda i: _item(int(i)))


def net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))
    m[1].running_mean.fill_(3.0)  # far from what the random images give: any update shows
    m[1].running_var.fill_(9.0)
    return m


def stats(m: nn.Module) -> list[torch.Tensor]:
    bn = m[1]
    return [bn.running_mean.clone(), bn.running_var.clone(), bn.weight.detach().clone(), m[0].weight.detach().clone()]


@pytest.mark.parametrize("freeze", [False, True])
def test_freeze_batchnorm_stats_keeps_running_stats_and_trains_the_rest(freeze: bool) -> None:
    model = net()
    mean0, var0, gamma0, conv0 = stats(model)
    ft = ReplayFinetuner([0.05], epochs=2, batch_size=2, seed=0, progress=False, freeze_batchnorm_stats=freeze)
    ft.fit(model, pairs(0, 4), pairs(4, 10), pairs(20, 22), num_classes=2)
    mean, var, gamma, conv = stats(ft.model_)
    assert not torch.equal(conv, conv0) and not torch.equal(gamma, gamma0)  # weights and BN affine learn
    moved = not (torch.equal(mean, mean0) and torch.equal(var, var0))
    assert moved is not freeze  # held exactly when asked, re-estimated otherwise
    assert not ft.model_.training and not ft.model_[1].training


def test_freeze_batchnorm_stats_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="freeze_batchnorm_stats"):
        ReplayFinetuner([0.05], epochs=1, freeze_batchnorm_stats="yes").fit(  # type: ignore[arg-type]
            net(), pairs(0, 2), pairs(2, 4), pairs(4, 6), num_classes=2)


def test_hold_copy_and_reestimate() -> None:
    a, b = net(0), net(1)
    a.train()
    assert hold_batchnorm_stats(a) == 1 and not a[1].training and a[0].training
    b[1].running_mean.fill_(-1.0)
    copy_batchnorm_stats(b, a)
    assert torch.equal(a[1].running_mean, b[1].running_mean)
    images = np.stack([_item(i)[0] for i in range(6)])
    reestimate_batchnorm_stats(a, images, batch_size=4)
    # the plain average over the two batches (4 + 2 images) of the batch means, recomputed by hand
    from blindspots.models.adapters import TorchPreprocess

    with torch.no_grad():
        h = [a[0](TorchPreprocess()(images[s:s + 4], "cpu")).mean((0, 2, 3)) for s in (0, 4)]
    assert torch.allclose(a[1].running_mean, (h[0] + h[1]) / 2, atol=1e-5)
    assert a[1].momentum == 0.1 and not a.training
    with pytest.raises(ValueError, match="images"):
        reestimate_batchnorm_stats(a, images.astype(np.float32))

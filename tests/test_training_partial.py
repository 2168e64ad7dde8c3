"""Training from partial labels: ignored pixels carry no gradient; replay fine-tuning learns from region
answers alone and takes no step on a batch without a labelled pixel."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from blindspots.training.partial import masked_cross_entropy
from blindspots.training.replay import PairList, ReplayFinetuner

torch.set_num_threads(1)


def test_ignored_pixels_have_exactly_zero_gradient() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 6, 7, generator=g, requires_grad=True)
    masks = torch.randint(0, 4, (2, 6, 7), generator=g)
    ignored = torch.rand(2, 6, 7, generator=g) < 0.6
    masks[ignored] = 255
    loss = masked_cross_entropy(logits, masks)
    assert loss is not None
    loss.backward()
    grad = logits.grad.permute(0, 2, 3, 1)  # [B, H, W, C]
    assert torch.count_nonzero(grad[ignored]) == 0
    assert bool((grad[~ignored].abs().sum(-1) > 0).all())  # every labelled pixel pulls
    # The loss is the mean over labelled pixels only: the same as the loss of those pixels alone.
    flat = logits.detach().permute(0, 2, 3, 1)[~ignored]
    expect = nn.functional.cross_entropy(flat, masks[~ignored])
    assert float(loss.detach()) == pytest.approx(float(expect), rel=1e-6)


def test_changing_an_ignored_pixels_logits_does_not_change_the_loss() -> None:
    logits = torch.randn(1, 3, 4, 4)
    masks = torch.full((1, 4, 4), 255, dtype=torch.int64)
    masks[0, :2] = 1
    a = masked_cross_entropy(logits, masks)
    logits[0, :, 3, 3] += 100.0
    assert float(masked_cross_entropy(logits, masks)) == float(a)


def test_no_labelled_pixel_gives_none_and_bad_shapes_are_named() -> None:
    assert masked_cross_entropy(torch.zeros(1, 2, 3, 3), torch.full((1, 3, 3), 255)) is None
    with pytest.raises(ValueError, match="logits, masks"):
        masked_cross_entropy(torch.zeros(1, 2, 3, 3), torch.zeros(1, 3, 4, dtype=torch.int64))


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 1))


def _item(i: int, keep: float) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(i)
    im = r.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    mask = (im[..., 0] > 127).astype(np.uint8)
    mask[r.random((16, 16)) >= keep] = 255  # keep: share of labelled pixels
    return im, mask


def _set(lo: int, hi: int, keep: float) -> PairList:
    return PairList([str(i) for i in range(lo, hi)], lambda i: _item(int(i), keep))


def test_finetuning_on_partial_masks_learns_and_an_all_ignored_set_takes_no_step() -> None:
    net = _net()
    before = [t.detach().clone() for t in net.parameters()]
    ft = ReplayFinetuner([0.2], epochs=3, flip=False, progress=False)
    ft.fit(net, _set(0, 6, keep=0.2), _set(0, 0, keep=1.0), _set(20, 24, keep=1.0), num_classes=2)
    assert ft.runs_[0].losses[-1] < ft.runs_[0].losses[0]
    assert ft.val_miou_ > 0.6  # 20% of the pixels of six images teach the rule to every pixel
    empty = ReplayFinetuner([0.2], epochs=2, flip=False, progress=False)
    empty.fit(net, _set(0, 4, keep=0.0), _set(0, 0, keep=1.0), _set(20, 22, keep=1.0), num_classes=2)
    after = list(empty.model_.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after))  # no labelled pixel: no step at all

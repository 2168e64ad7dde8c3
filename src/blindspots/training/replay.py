"""Fine-tuning a segmentation model on its counterexamples S with replay of its training data S0.

Model rectification of the MAD paper (Section 3.2, Algorithm 1 line 19; settings from
Section 4.1): the target f_t^(i) is fine-tuned on S (the counterexamples accumulated over all
rounds) together with S0 (the data it was trained on, against catastrophic forgetting) by SGD
with momentum 0.9, weight decay 5e-4, a polynomial learning-rate decay (power 0.9), mini-batch
size 2 and at most 80 epochs; the initial learning rate is grid-searched over
{1, 5, 10} x 1e-5 and the run with the highest mIoU on the original validation set T0 wins.

Datasets are anything with `len()` and `[i] -> (image uint8 [H, W, 3], mask uint8 [H, W])`
(e.g. `blindspots.data.segsets.SegmentationSet`, or `PairList`). Masks hold class ids and
255 (ignore) for unlabeled pixels: partial labels (region answers) train only where they are labelled
(`training.partial.masked_cross_entropy`).

Each grid run checkpoints after every epoch (atomic: `atomic.write_atomic`) under
`work_dir/lr-<lr>/`; an interrupted `fit` started again with the same arguments continues
where it stopped and ends with the same weights as an uninterrupted run (shuffling and
flips are drawn from `seed` and the epoch number, not from a running generator).
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn
from tqdm.auto import tqdm

from blindspots._validation import check_int, check_number
from blindspots.atomic import write_atomic
from blindspots.config import FinetuneSettings
from blindspots.data.classes import DEFAULT_IGNORE_INDEX
from blindspots.metrics import evaluate
from blindspots.models.adapters import Segmenter, TorchPreprocess, select_output
from blindspots.models.checkpoints import TRAIN_STATE_FORMAT, save_checkpoint_dict
from blindspots.models.devices import resolve_device, to_device
from blindspots.training.batchnorm import hold_batchnorm_stats
from blindspots.training.loop import poly_lr, resume_state, run_epochs
from blindspots.training.partial import masked_cross_entropy
from blindspots.training.precision import MixedPrecision

log = logging.getLogger(__name__)

#: the paper's fine-tuning settings (Section 4.1), defined once in `config.FinetuneSettings`
_PAPER = FinetuneSettings()
PAPER_LRS = tuple(_PAPER.lrs)


class PairSet(Protocol):
    """A labelled set: len() and [i] -> (image uint8 [H, W, 3], mask uint8 [H, W])."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]: ...


class PairList:
    """A labelled set from loader functions: `PairList(ids, load)` with `load(id) -> (image, mask)`.

    ids: the item ids (kept as `.ids`); load: returns (uint8 [H, W, 3], int [H, W]).
    """

    def __init__(self, ids: Sequence[str], load: Callable[[str], tuple[np.ndarray, np.ndarray]]) -> None:
        self.ids = list(ids)
        self._load = load

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self._load(self.ids[i])


class ConcatPairs:
    """Several labelled sets as one (S ∪ S0)."""

    def __init__(self, sets: Sequence[PairSet]) -> None:
        self.sets = [s for s in sets if len(s) > 0]
        self._offsets = np.cumsum([0] + [len(s) for s in self.sets])

    def __len__(self) -> int:
        return int(self._offsets[-1])

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = int(np.searchsorted(self._offsets, i, side="right") - 1)
        return self.sets[k][i - int(self._offsets[k])]


class SubsetPairs:
    """Items `indices` of a labelled set."""

    def __init__(self, base: PairSet, indices: Sequence[int]) -> None:
        self.base, self.indices = base, [int(i) for i in indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.base[self.indices[i]]


def _check_pair(image: np.ndarray, mask: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    image, mask = np.asarray(image), np.asarray(mask)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"{where}: expected image uint8 [H, W, 3], got {image.dtype} {image.shape}")
    if mask.ndim != 2 or mask.shape != image.shape[:2]:
        raise ValueError(f"{where}: expected mask [H, W] = {image.shape[:2]}, got {mask.shape}")
    return image, mask


def _resize(image: np.ndarray, mask: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    if image.shape[:2] == size:
        return image, mask

    im = np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.BILINEAR))
    mk = np.asarray(Image.fromarray(mask.astype(np.uint8)).resize((size[1], size[0]), Image.NEAREST))
    return im, mk


def collate(pairs: Sequence[tuple[np.ndarray, np.ndarray]], image_size: int | None,
            flips: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """Stack (image, mask) pairs into uint8 [B, H, W, 3] and int64 [B, H, W].

    Mixed sizes are resized (image bilinear, mask nearest) to image_size x image_size, or to
    the first item's size if image_size is None; flips[b] mirrors item b horizontally.
    """
    size = (image_size, image_size) if image_size else pairs[0][0].shape[:2]
    ims, mks = [], []
    for (im, mk), flip in zip(pairs, flips):
        im, mk = _resize(im, mk, size)
        if flip:
            im, mk = im[:, ::-1], mk[:, ::-1]
        ims.append(im)
        mks.append(mk)
    return np.stack(ims), np.stack(mks).astype(np.int64)


def _lr_tag(lr: float) -> str:
    return f"lr-{lr:.3e}"


@torch.no_grad()
def evaluate_module(module: nn.Module, data: PairSet, num_classes: int, *, ignore_index: int = DEFAULT_IGNORE_INDEX,
                    batch_size: int = 8, device: str | torch.device = "cpu",
                    preprocess: Callable[..., torch.Tensor] | None = None,
                    output_key: str | None = None) -> float:
    """mIoU of a torch segmentation module on a labelled set (one confusion matrix over all
    pixels, as VOC's protocol). Images of different sizes are run one size group at a time."""
    preprocess = preprocess or TorchPreprocess()
    module.eval()
    items = [_check_pair(*data[i], where=f"data[{i}]") for i in range(len(data))]

    def predict(images: np.ndarray) -> np.ndarray:
        x = preprocess(images, device)
        y = select_output(module(x), output_key)
        if y.shape[-2:] != x.shape[-2:]:
            y = F.interpolate(y.float(), size=x.shape[-2:], mode="bilinear", align_corners=False)
        return y.argmax(1).cpu().numpy()

    return evaluate(predict, items, num_classes, ignore_index=ignore_index, batch_size=batch_size).mean_iou()


def evaluate_segmenter(segmenter: Segmenter, data: PairSet, num_classes: int, *,
                       ignore_index: int = DEFAULT_IGNORE_INDEX, batch_size: int = 8) -> float:
    """mIoU of any `Segmenter` on a labelled set (pixels pooled over the set); NaN if empty."""
    if len(data) == 0:
        return float("nan")
    items = [_check_pair(*data[i], where=f"data[{i}]") for i in range(len(data))]
    return evaluate(segmenter, items, num_classes, ignore_index=ignore_index, batch_size=batch_size).mean_iou()


@dataclass
class GridRun:
    """One learning rate of the grid: its T0 mIoU and per-epoch mean training loss."""

    lr: float
    val_miou: float
    losses: list[float]


@dataclass(eq=False)  # settings only (scikit-learn style); identity equality, hashable
class ReplayFinetuner:
    """Fine-tune a segmentation module on S ∪ S0 with an LR grid chosen on T0 (paper, Sec. 4.1).

    lrs: initial learning rates to try (paper: {1, 5, 10} x 1e-5).
    epochs: epochs per run (paper's cap: 80). batch_size: paper: 2.
    momentum, weight_decay: SGD settings (paper: 0.9, 5e-4).
    power: polynomial decay power per iteration (DeepLab: 0.9).
    max_replay: use at most this many S0 images, a fixed random subset per seed (None: all of
        S0, as the paper).
    image_size: resize every training image to this square side (None: native sizes; a batch
        of mixed sizes is resized to its first image's size).
    flip: random horizontal flips (standard DeepLab practice; the paper does not say).
    seed: shuffling, flips and the replay subset; same seed -> same weights.
    work_dir: where per-epoch checkpoints go (None: no checkpoints, no resume).
    device, preprocess, output_key, ignore_index: as `TorchSegmenter` ("auto": CUDA when present).
    precision: "auto" (bf16/fp16 autocast on CUDA, fp32 on the CPU: CPU runs unchanged), "fp32",
        "fp16" or "bf16" (`training.precision.MixedPrecision`).
    freeze_batchnorm_stats: keep every BatchNorm layer's running mean and variance as the model had them
        (BN layers in eval mode while the rest trains; their affine weight and bias still learn). Default
        False: they are re-estimated on the fine-tuning batches, as in plain training.

    After `fit`: `model_` (the best run's module, eval mode), `lr_`, `val_miou_`, `runs_`
    (a GridRun per LR, grid order).
    """

    lrs: Sequence[float] = PAPER_LRS
    _: KW_ONLY
    epochs: int = _PAPER.epochs
    batch_size: int = _PAPER.batch_size
    momentum: float = _PAPER.momentum
    weight_decay: float = _PAPER.weight_decay
    power: float = _PAPER.power
    max_replay: int | None = None
    image_size: int | None = None
    flip: bool = True
    seed: int = 0
    work_dir: str | Path | None = None
    device: str = "cpu"
    precision: str = "auto"
    preprocess: Callable[..., torch.Tensor] | None = None
    output_key: str | None = None
    ignore_index: int = DEFAULT_IGNORE_INDEX
    progress: bool = True
    freeze_batchnorm_stats: bool = False

    def __post_init__(self) -> None:
        self.lrs = list(self.lrs)

    def _validate(self) -> None:
        if not self.lrs or not all(isinstance(x, (int, float)) and x > 0 for x in self.lrs):
            raise ValueError(f"lrs: expected a non-empty list of positive learning rates, got {self.lrs!r}")
        for name in ("epochs", "batch_size"):  # plain ints: the resume state loads weights-only
            setattr(self, name, check_int(getattr(self, name), name))
        check_number(self.momentum, "momentum", low=0, high=1, high_open=True)
        check_number(self.weight_decay, "weight_decay", low=0)
        self.max_replay = check_int(self.max_replay, "max_replay", minimum=0, allow_none=True)
        if not isinstance(self.freeze_batchnorm_stats, bool):
            raise ValueError(f"freeze_batchnorm_stats: expected True or False, got {self.freeze_batchnorm_stats!r}")

    def training_set(self, counterexamples: PairSet, replay: PairSet) -> ConcatPairs:
        """S ∪ S0 (S0 cut to `max_replay` items, a fixed random subset for `seed`)."""
        if self.max_replay is not None and self.max_replay < len(replay):
            rng = np.random.default_rng([self.seed, 7])
            keep = np.sort(rng.choice(len(replay), size=self.max_replay, replace=False))
            replay = SubsetPairs(replay, keep)
        return ConcatPairs([counterexamples, replay])

    def fit(self, model: nn.Module, counterexamples: PairSet, replay: PairSet, val: PairSet, *,
            num_classes: int) -> "ReplayFinetuner":
        """Fine-tune copies of `model` (left unchanged) once per learning rate; keep the best on T0.

        counterexamples: S, labelled counterexamples accumulated over rounds.
        replay: S0, the model's original training data. val: T0, the original validation set.
        num_classes: C (predictions are argmax over C channels).
        """
        self._validate()
        if not isinstance(model, nn.Module):
            raise ValueError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        if len(val) == 0:
            raise ValueError("val: expected a non-empty validation set T0 (it picks the learning rate), got 0 items")
        train = self.training_set(counterexamples, replay)
        if len(train) == 0:
            raise ValueError("counterexamples, replay: expected at least one labelled image in S ∪ S0, got 0")
        work = Path(self.work_dir) if self.work_dir is not None else None
        self.runs_: list[GridRun] = []
        best: tuple[float, nn.Module, float] | None = None
        for lr in self.lrs:
            module, losses = self._train_one(model, train, float(lr), work)
            miou = self._val_miou(module, val, num_classes, work, float(lr))
            log.info("fine-tune lr=%.1e: T0 mIoU %.4f", lr, miou)
            self.runs_.append(GridRun(float(lr), miou, losses))
            # Ties (and NaN) keep the earlier, smaller learning rate.
            if best is None or (miou > best[0]):
                best = (miou, module, float(lr))
        assert best is not None
        self.val_miou_, self.model_, self.lr_ = best
        self.model_.eval()
        return self

    def _val_miou(self, module: nn.Module, val: PairSet, num_classes: int, work: Path | None, lr: float) -> float:
        done = work / _lr_tag(lr) / "result.json" if work is not None else None
        if done is not None and done.is_file():
            return float(json.loads(done.read_text())["val_miou"])
        miou = evaluate_module(module, val, num_classes, ignore_index=self.ignore_index,
                               device=resolve_device(self.device),
                               preprocess=self.preprocess, output_key=self.output_key)
        if done is not None:
            write_atomic(done, lambda t: t.write_text(json.dumps({"lr": lr, "val_miou": miou})))
        return miou

    def _train_one(self, model: nn.Module, train: PairSet, lr: float, work: Path | None) -> tuple[nn.Module, list[float]]:
        amp = MixedPrecision(self.device, self.precision)
        device = amp.device
        preprocess = self.preprocess or TorchPreprocess()
        module = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=self.momentum, weight_decay=self.weight_decay)
        n = len(train)
        # Drop a last batch of one: BatchNorm (and ASPP's pooled branch) needs >= 2 in train mode.
        per_epoch = n // self.batch_size if n >= self.batch_size else 1
        total = per_epoch * self.epochs
        state_path = work / _lr_tag(lr) / "state.pt" if work is not None else None
        start, losses = 0, []
        if state_path is not None:
            state_path.parent.mkdir(parents=True, exist_ok=True)
        st = resume_state(state_path, legacy_keys=("model", "optimizer"), argument="work_dir",
                          what="fine-tuning state", map_location=device)
        if st is not None:
            if st.get("settings") != self._settings(lr, n):
                raise ValueError(f"work_dir: expected a checkpoint made with the same settings, got one "
                                 f"from other settings at {state_path} ({st.get('settings')}); "
                                 "use a fresh work_dir")
            module.load_state_dict(st["model"])
            opt.load_state_dict(st["optimizer"])
            start, losses = st["epoch"], list(st["losses"])
            log.info("fine-tune lr=%.1e: resuming after epoch %d", lr, start)
        bar = tqdm(total=total, initial=start * per_epoch, desc=f"fine-tune lr={lr:.0e}", unit="step",
                   disable=not self.progress, leave=False)

        def one_epoch(epoch: int) -> float:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(n)
            flips = rng.random(n) < 0.5 if self.flip else np.zeros(n, dtype=bool)
            module.train()
            if self.freeze_batchnorm_stats:
                hold_batchnorm_stats(module)
            run = torch.zeros((), dtype=torch.float64, device=device)  # summed where the loss is: no sync a step
            for b in range(per_epoch):
                idx = order[b * self.batch_size:(b + 1) * self.batch_size]
                step = epoch * per_epoch + b
                for g in opt.param_groups:
                    g["lr"] = poly_lr(lr, step, total, self.power)
                items = [_check_pair(*train[int(i)], where=f"training item {int(i)}") for i in idx]
                ims, mks = collate(items, self.image_size, flips[idx])
                labelled = bool((mks != self.ignore_index).any())
                x = preprocess(ims, device)
                with amp.autocast():
                    y = select_output(module(x), self.output_key)
                y = y.float()  # the loss in float32 (a no-op at fp32)
                if y.shape[-2:] != x.shape[-2:]:
                    y = F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)
                # partial labels (region answers): only labelled pixels carry gradient. An all-ignore batch takes
                # no step; that is read from the mask on the host, so on a GPU the host queues the next batch
                # while the GPU runs this one (a check on the device would wait for it)
                loss = masked_cross_entropy(y, to_device(torch.from_numpy(mks), device), ignore_index=self.ignore_index,
                                            labelled=labelled)
                opt.zero_grad(set_to_none=True)
                if loss is not None and (bool(torch.isfinite(loss)) if device.type == "cpu" else True):
                    amp.step(loss, opt)
                    run += loss.detach()  # float64, in step order: the bits `run += float(loss)` gave
                bar.update(1)
            return float(run) / per_epoch

        def end_epoch(epoch: int, loss: float) -> None:
            losses.append(loss)
            if state_path is not None:
                save_checkpoint_dict(state_path, {"model": module.state_dict(), "optimizer": opt.state_dict(),
                                                  "epoch": epoch + 1, "losses": losses,
                                                  "settings": self._settings(lr, n)}, format=TRAIN_STATE_FORMAT)

        try:  # no torch_seed: this routine has never seeded torch's global RNG (same numbers as before)
            run_epochs(range(start, self.epochs), one_epoch, end_epoch=end_epoch)
        finally:
            bar.close()
        module.eval()
        return module, losses

    def _settings(self, lr: float, n: int) -> dict:
        out = {"lr": lr, "epochs": self.epochs, "batch_size": self.batch_size, "momentum": self.momentum,
               "weight_decay": self.weight_decay, "power": self.power, "seed": self.seed, "n_train": n,
               "image_size": self.image_size, "flip": self.flip, "max_replay": self.max_replay}
        if self.freeze_batchnorm_stats:  # only when set: checkpoints of the default keep resuming
            out["freeze_batchnorm_stats"] = True
        return out

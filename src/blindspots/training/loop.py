"""The one training loop: epochs, poly learning rate, per-epoch RNG, checkpoints and resume.

Every trainer (zoo segmentation training, replay fine-tuning, classifier training, Defuse's β-VAE)
runs its epochs through `run_epochs` and keeps its own body (batches, loss, optimizer step).

Determinism: an epoch's randomness is drawn from (seed, epoch), never from a generator that runs
across epochs, so a run resumed from its checkpoint after epoch k ends with the same weights as an
uninterrupted one. `torch_seed(epoch)` seeds torch's global RNG inside `torch.random.fork_rng`
(the caller's RNG is left untouched); each trainer keeps the seed formula it has always used, so the
same seed gives the same numbers as before this module existed.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

import torch

from blindspots.models.checkpoints import TRAIN_STATE_FORMAT, load_checkpoint_dict

R = TypeVar("R")


def poly_factor(step: int, total_steps: int, power: float = 0.9) -> float:
    """DeepLab's "poly" decay factor (1 - step / total_steps) ** power, 0 after the end."""
    return max(0.0, 1.0 - step / max(1, int(total_steps))) ** power


def poly_lr(base_lr: float, step: int, total_steps: int, power: float = 0.9) -> float:
    """Polynomial decay (DeepLab's "poly" policy): base_lr * (1 - step / total_steps) ** power."""
    return base_lr * poly_factor(step, total_steps, power)


def poly_lambda(total_steps: int, power: float = 0.9) -> Callable[[int], float]:
    """The poly factor as a function of the step, for torch.optim.lr_scheduler.LambdaLR."""
    return lambda step: poly_factor(step, total_steps, power)


@contextmanager
def torch_seeded(seed: int | None) -> Iterator[None]:
    """Seed torch's global CPU RNG for the block and restore it afterwards (None: leave it alone)."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def run_epochs(epochs: Iterable[int], train_epoch: Callable[[int], R], *,
               torch_seed: Callable[[int], int] | None = None,
               end_epoch: Callable[[int, R], None] | None = None) -> None:
    """Run `train_epoch(epoch)` for each epoch (e.g. `range(start, n)` after a resume, or a tqdm of it).

    torch_seed: epoch -> seed of torch's global RNG during that epoch's training (None: not seeded).
    end_epoch: called with (epoch, what train_epoch returned) outside the seeded block: evaluation,
        history, checkpoint — so that evaluating never moves the training's random stream.
    """
    for epoch in epochs:
        with torch_seeded(None if torch_seed is None else torch_seed(epoch)):
            out = train_epoch(epoch)
        if end_epoch is not None:
            end_epoch(epoch, out)


def resume_state(path: str | Path | None, *, format: str = TRAIN_STATE_FORMAT, legacy_keys: Iterable[str] | None = None,
                 argument: str = "checkpoint_path", what: str = "training state",
                 map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
    """The saved training state to resume from, or None when there is none yet (path None or no file)."""
    if path is None or not Path(path).is_file():
        return None
    return load_checkpoint_dict(path, format=format, legacy_keys=legacy_keys, argument=argument, what=what,
                                map_location=map_location)

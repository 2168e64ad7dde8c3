"""Training: one epoch loop (loop.py: epochs, poly LR, checkpoints, resume, RNG) shared by segmentation
training (segmentation.py), replay fine-tuning (replay.py), classifier training (classification.py),
the demo zoo (zoo.py) and Defuse's β-VAE.

The names below are loaded on first use (PEP 562): every module imports torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from blindspots._lazy import lazy_names

#: public name -> the module that defines it
_SOURCES = {
    **dict.fromkeys(["accuracy", "predict_labels", "train_classifier"], "blindspots.training.classification"),
    "torch_seeded": "blindspots.training.loop",
    **dict.fromkeys(["DEFAULT_COMPETITORS", "DEFAULT_TARGET", "train_zoo"], "blindspots.training.zoo"),
}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_names(__name__, _SOURCES, globals())  # PEP 562: a name loads on first use

if TYPE_CHECKING:  # what type checkers and the import-graph test see
    from blindspots.training.classification import accuracy, predict_labels, train_classifier
    from blindspots.training.loop import torch_seeded
    from blindspots.training.zoo import DEFAULT_COMPETITORS, DEFAULT_TARGET, train_zoo

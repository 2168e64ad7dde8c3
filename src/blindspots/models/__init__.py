"""Models: one Segmenter / Classifier protocol and adapters for everything a user can bring."""
from blindspots.models.adapters import (
    Classifier,
    Segmenter,
    TorchClassifier,
    TorchSegmenter,
    check_probabilities,
)

__all__ = ["Classifier", "Segmenter", "TorchClassifier", "TorchSegmenter", "check_probabilities"]

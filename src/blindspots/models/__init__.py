"""Models: one Segmenter / Classifier protocol and adapters for everything a user can bring."""
from blindspots.models.adapters import (
    CallableClassifier,
    CallableSegmenter,
    Classifier,
    Segmenter,
    TorchClassifier,
    TorchScriptClassifier,
    TorchScriptSegmenter,
    TorchSegmenter,
    check_probabilities,
    select_output,
)
from blindspots.models.load import load_model

__all__ = [
    "CallableClassifier", "CallableSegmenter", "Classifier", "Segmenter", "TorchClassifier",
    "TorchScriptClassifier", "TorchScriptSegmenter", "TorchSegmenter", "check_probabilities",
    "load_model", "select_output",
]

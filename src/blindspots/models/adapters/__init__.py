"""Adapters: every model a user can bring, wrapped into one Segmenter / Classifier protocol.

One module per source (torch, torchscript, onnx, hf, callable, precomputed); `base` holds the
one prediction pipeline, `inputs` the input policy and normalisation, `outputs` the rule that
turns raw scores into probabilities. The names importable from here before the split
(`blindspots.models.adapters.TorchSegmenter`, `as_image_batch`, ...) still are.
"""
from blindspots.models.adapters.base import PROBE_SIZE, BaseAdapter
from blindspots.models.adapters.callable import CallableClassifier, CallableSegmenter
from blindspots.models.adapters.features import CallableFeatures, PrecomputedFeatures
from blindspots.models.adapters.hf import HFSegmenter
from blindspots.models.adapters.inputs import IMAGENET_MEAN, IMAGENET_STD, InputPolicy, TorchPreprocess
from blindspots.models.adapters.onnx import OnnxClassifier, OnnxSegmenter, export_onnx
from blindspots.models.adapters.outputs import select_output
from blindspots.models.adapters.precomputed import PrecomputedSegmenter
from blindspots.models.adapters.torch import TorchClassifier, TorchSegmenter
from blindspots.models.adapters.torchscript import TorchScriptClassifier, TorchScriptSegmenter, load_torchscript
from blindspots.models.protocol import (
    PROBA_TOLERANCE,
    Classifier,
    FeatureModel,
    OutputKind,
    Segmenter,
    as_image_batch,
    check_probabilities,
    one_hot_labels,
    softmax,
)

__all__ = [
    "BaseAdapter", "CallableFeatures", "CallableClassifier", "FeatureModel", "PrecomputedFeatures",
 "CallableSegmenter", "Classifier", "HFSegmenter", "IMAGENET_MEAN",
    "IMAGENET_STD", "InputPolicy", "OnnxClassifier", "OnnxSegmenter", "OutputKind", "PROBA_TOLERANCE",
    "PROBE_SIZE", "PrecomputedSegmenter", "Segmenter", "TorchClassifier", "TorchPreprocess",
    "TorchScriptClassifier", "TorchScriptSegmenter", "TorchSegmenter", "as_image_batch", "check_probabilities",
    "export_onnx", "load_torchscript", "one_hot_labels", "select_output", "softmax",
]

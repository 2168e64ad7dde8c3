"""Models: one Segmenter / Classifier protocol, one spec grammar, adapters for everything a user can bring.

Entry points: `load_model(spec)` (see `blindspots.models.load` for the grammar),
`probe_model(seg, image, name)`, `predict_proba_each(seg, images)` for mixed sizes; feature maps for
surprise: `features(images, layer)` on torch / ONNX adapters, `CallableFeatures`, `PrecomputedFeatures`.
"""
from blindspots.models.adapters import (CallableClassifier, CallableFeatures, CallableSegmenter, HFSegmenter,
                                       InputPolicy, OnnxClassifier, OnnxSegmenter, PrecomputedFeatures,
                                       PrecomputedSegmenter, TorchClassifier, TorchPreprocess, TorchScriptClassifier,
                                       TorchScriptSegmenter, TorchSegmenter, select_output)
from blindspots.models.load import TRAINABLE_KINDS, absolute_spec, load_features, load_model, parse_spec, spec_kind
from blindspots.models.probe import probe_model
from blindspots.models.protocol import (Classifier, FeatureModel, ModelFailure, Segmenter, as_image_batch,
                                        check_probabilities, default_classes, model_classes, predict_proba_each)

__all__ = [
    "TRAINABLE_KINDS", "CallableClassifier", "CallableFeatures", "CallableSegmenter", "Classifier", "FeatureModel",
    "HFSegmenter", "InputPolicy", "PrecomputedFeatures", "load_features",
    "ModelFailure", "OnnxClassifier", "OnnxSegmenter", "PrecomputedSegmenter", "Segmenter", "TorchClassifier",
    "TorchPreprocess", "TorchScriptClassifier", "TorchScriptSegmenter", "TorchSegmenter", "absolute_spec",
    "as_image_batch", "check_probabilities", "default_classes", "load_model", "model_classes", "parse_spec",
    "predict_proba_each", "probe_model", "select_output", "spec_kind",
]

"""Models: one Segmenter / Classifier protocol, one spec grammar, adapters for everything a user can bring.

Entry points: `load_model(spec)` (see `blindspots.models.load` for the grammar),
`probe_model(seg, image, name)`, `predict_proba_each(seg, images)` for mixed sizes,
`predict_segmenter(seg, images, ids)` for any Segmenter (by pixels, or by id for precomputed
outputs); feature maps for surprise: `features(images, layer)` on torch / ONNX adapters,
`CallableFeatures`, `PrecomputedFeatures`.

The names below are loaded on first use (PEP 562): the adapters import torch, and the protocol
(`blindspots.models.protocol`) must stay importable by engines that run without it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from blindspots._lazy import lazy_names

#: public name -> the module that defines it
_SOURCES = {
    **dict.fromkeys(["CallableClassifier", "CallableFeatures", "CallableSegmenter", "HFSegmenter", "InputPolicy",
                     "OnnxClassifier", "OnnxSegmenter", "PrecomputedFeatures", "PrecomputedSegmenter",
                     "TorchClassifier", "TorchPreprocess", "TorchScriptClassifier", "TorchScriptSegmenter",
                     "TorchSegmenter", "select_output"], "blindspots.models.adapters"),
    **dict.fromkeys(["load_features", "load_model"], "blindspots.models.load"),
    **dict.fromkeys(["build_classifier", "load_classifier", "load_classifier_module", "save_classifier"],
                    "blindspots.models.classifier_zoo"),
    **dict.fromkeys(["ZOO", "ZOO_DESCRIPTIONS"], "blindspots.models.zoo"),
    **dict.fromkeys(["TRAINABLE_KINDS", "absolute_spec", "parse_spec", "spec_kind"], "blindspots.models.spec_syntax"),
    "probe_model": "blindspots.models.probe",
    **dict.fromkeys(["Classifier", "FeatureModel", "ModelFailure", "Segmenter", "as_image_batch",
                     "check_probabilities", "default_classes", "model_classes", "predict_proba_each",
                     "predict_segmenter", "reads_ids"], "blindspots.models.protocol"),
}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_names(__name__, _SOURCES, globals())  # PEP 562: a name loads on first use

if TYPE_CHECKING:  # what type checkers and the import-graph test see
    from blindspots.models.adapters import (CallableClassifier, CallableFeatures, CallableSegmenter, HFSegmenter,
                                           InputPolicy, OnnxClassifier, OnnxSegmenter, PrecomputedFeatures,
                                           PrecomputedSegmenter, TorchClassifier, TorchPreprocess,
                                           TorchScriptClassifier, TorchScriptSegmenter, TorchSegmenter, select_output)
    from blindspots.models.classifier_zoo import (build_classifier, load_classifier, load_classifier_module,
                                                  save_classifier)
    from blindspots.models.load import load_features, load_model
    from blindspots.models.zoo import ZOO, ZOO_DESCRIPTIONS
    from blindspots.models.spec_syntax import TRAINABLE_KINDS, absolute_spec, parse_spec, spec_kind
    from blindspots.models.probe import probe_model
    from blindspots.models.protocol import (Classifier, FeatureModel, ModelFailure, Segmenter, as_image_batch,
                                            check_probabilities, default_classes, model_classes, predict_proba_each,
                                            predict_segmenter, reads_ids)

"""Wrappers that turn models which are neither ONNX nor TorchScript files into blindspots callables.

Used by `examples/own_models.py`: a callable spec `own_models_lib.mediapipe_seg:selfie_general`
(run from `examples/`, or with `examples/` on PYTHONPATH).
"""

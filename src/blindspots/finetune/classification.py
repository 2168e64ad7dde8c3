"""Moved to `blindspots.training.classification` (issue 12); this name stays for existing imports."""
from blindspots.training.classification import TrainResult, accuracy, images_to_tensor, predict_labels, train_classifier

__all__ = ["TrainResult", "accuracy", "images_to_tensor", "predict_labels", "train_classifier"]

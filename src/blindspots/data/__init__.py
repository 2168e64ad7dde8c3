"""Data: class definitions, unlabeled pools, labelled segmentation and classification sets, scenes."""
from blindspots.data.classes import Classes

__all__ = ["Classes"]

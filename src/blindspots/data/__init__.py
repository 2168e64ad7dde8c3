"""Data: class definitions, unlabeled pools, labelled segmentation and classification sets, scenes."""
from blindspots.data.classes import DEFAULT_IGNORE_INDEX, Classes
from blindspots.data.classfile import read_classes
from blindspots.data.classsets import ClassificationSet, load_classification_set, split_indices
from blindspots.data.sources import ImageDecodeError, ImagePool, PoolItem, decode_image
from blindspots.data.segsets import SegmentationSet, open_segset

__all__ = ["Classes", "ClassificationSet", "DEFAULT_IGNORE_INDEX", "ImageDecodeError", "ImagePool", "PoolItem",
           "SegmentationSet", "decode_image", "load_classification_set", "open_segset", "read_classes", "split_indices"]

"""Data: class definitions, unlabeled pools, labelled segmentation and classification sets, scenes."""
from blindspots.data.classes import Classes
from blindspots.data.sources import ImageDecodeError, ImagePool, PoolItem, decode_image
from blindspots.data.segsets import SegmentationSet, open_segset

__all__ = ["Classes", "ImageDecodeError", "ImagePool", "PoolItem", "SegmentationSet", "decode_image", "open_segset"]

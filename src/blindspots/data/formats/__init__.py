"""Pixel-label exchange formats: index / VOC-palette PNG masks, CVAT "Segmentation Mask 1.1"
zips and Label Studio brush tasks (Label Studio's own bit-packed RLE).

Each module offers an export (S with the target's prediction as a pre-annotation, so
annotators correct rather than draw) and an import (human masks back as uint8 [H, W] index
masks with ignore_index for unlabeled pixels).
"""
from blindspots.data.formats.cvat import export_cvat, import_cvat
from blindspots.data.formats.labelstudio import (
    decode_rle, encode_rle, export_labelstudio, import_labelstudio, labeling_config,
)
from blindspots.data.formats.masks import read_mask, read_masks, write_color_mask, write_mask, write_masks

__all__ = [
    "read_mask", "write_mask", "write_color_mask", "read_masks", "write_masks",
    "export_cvat", "import_cvat",
    "encode_rle", "decode_rle", "export_labelstudio", "import_labelstudio", "labeling_config",
]

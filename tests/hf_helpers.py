"""A tiny Hugging Face SegFormer built from a config (no download), shared by the model, loop and app tests."""
from __future__ import annotations

from typing import Sequence

import pytest
import torch


def tiny_segformer(names: Sequence[str] = ("sky", "road", "car"), seed: int = 0) -> torch.nn.Module:
    """SegformerForSemanticSegmentation with two tiny encoder blocks, one label per name, in eval mode."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[7, 3],
        strides=[4, 2], num_attention_heads=[1, 1], mlp_ratios=[2, 2], decoder_hidden_size=16,
        num_labels=len(names), id2label=dict(enumerate(names)), label2id={n: k for k, n in enumerate(names)})
    torch.manual_seed(seed)
    return transformers.SegformerForSemanticSegmentation(cfg).eval()

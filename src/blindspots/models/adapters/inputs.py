"""What a model is fed: the input policy (size) and the normalisation (pixel values).

`InputPolicy` brings an image to a size the model accepts and brings the model's output back
to the image's own size; every adapter uses it, so a pad/resize rule exists once:
- native (default): the image as is; low-resolution outputs are bilinearly upsampled;
- `resize=(H, W)`: every image resized to H x W (a batch of mixed sizes becomes one size);
- `max_side=L`: downscale so that the longer side is <= L (never upscale);
- `pad=N`: pad bottom/right (edge pixels) to a multiple of N; the output is cropped back.
`max_side` and `pad` combine (shrink first, then pad); `resize` stands alone.
`channels="bgr"` reverses the channel order before the model sees the images (models trained on
OpenCV-read BGR images, e.g. PP-OCR); the output needs no change.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from blindspots.models.devices import to_device
from blindspots.models.spec_syntax import CHANNEL_ORDERS

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
UNIT_SCALE = 1.0 / 255.0


@dataclass(frozen=True)
class InputPolicy:
    """How images are sized for the model. resize: (H, W); pad: multiple N; max_side: L;
    channels: "rgb" (as read) or "bgr" (channel order reversed)."""

    resize: tuple[int, int] | None = None
    pad: int | None = None
    max_side: int | None = None
    channels: str = "rgb"

    def __post_init__(self) -> None:
        if self.channels not in CHANNEL_ORDERS:
            raise ValueError(f"channels: expected one of {'|'.join(CHANNEL_ORDERS)}, got {self.channels!r}")
        if self.resize is not None:
            r = tuple(self.resize)
            if len(r) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in r):
                raise ValueError(f"resize: expected (height, width) of positive integers, got {self.resize!r}")
            object.__setattr__(self, "resize", (int(r[0]), int(r[1])))
            if self.pad is not None or self.max_side is not None:
                raise ValueError(f"resize: expected alone (it fixes the size), got it with "
                                 f"pad={self.pad!r}, max_side={self.max_side!r}")
        for name in ("pad", "max_side"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"{name}: expected a positive integer, got {v!r}")

    @property
    def native(self) -> bool:
        """True when `prepare` returns the images unchanged."""
        return self.resize is None and self.pad is None and self.max_side is None and self.channels == "rgb"

    def content_size(self, h: int, w: int) -> tuple[int, int]:
        """The size the image is resized to before padding."""
        if self.resize is not None:
            return self.resize
        if self.max_side is not None and max(h, w) > self.max_side:
            s = self.max_side / max(h, w)
            return max(1, round(h * s)), max(1, round(w * s))
        return h, w

    def input_size(self, h: int, w: int) -> tuple[int, int]:
        """The size the model sees for an h x w image (after resize and padding)."""
        ch, cw = self.content_size(h, w)
        if self.pad is None:
            return ch, cw
        return ch + (-ch) % self.pad, cw + (-cw) % self.pad

    def prepare(self, batch: np.ndarray) -> np.ndarray:
        """uint8 [n, H, W, c] -> uint8 [n, H', W', c] at `input_size(H, W)`, in the policy's channel order."""
        h, w = batch.shape[1:3]
        ch, cw = self.content_size(h, w)
        if (ch, cw) != (h, w):
            batch = resize_images(batch, (ch, cw))
        if self.channels == "bgr":  # after the resize (each channel resizes alone: same bits), on fewer pixels
            batch = np.ascontiguousarray(batch[..., ::-1])  # contiguous: user callables may torch.from_numpy it
        if self.pad is not None:
            ph, pw = (-ch) % self.pad, (-cw) % self.pad
            if ph or pw:
                batch = np.pad(batch, ((0, 0), (0, ph), (0, pw), (0, 0)), mode="edge")
        return batch

    def restore(self, y: torch.Tensor, size: tuple[int, int], *, labels: bool = False) -> torch.Tensor:
        """Model output [n, C, h, w] -> [n, C, H, W] at the image size (H, W) = `size`.

        Scores are resized bilinearly, class ids (labels=True) by nearest neighbour.
        """
        h, w = size
        if self.pad is not None:
            ch, cw = self.content_size(h, w)
            y = resize_scores(y, self.input_size(h, w), labels=labels)[..., :ch, :cw]
        return resize_scores(y, (h, w), labels=labels)


NATIVE = InputPolicy()


def resize_scores(y: torch.Tensor, size: tuple[int, int], *, labels: bool = False) -> torch.Tensor:
    """[n, C, h, w] -> [n, C, H, W]; unchanged when already that size.

    Scores: bilinear, align_corners=False (torchvision's policy for segmentation logits).
    Labels: nearest neighbour, the class ids stay integers.
    """
    if tuple(y.shape[-2:]) == tuple(size):
        return y
    if labels:
        return F.interpolate(y.float(), size=size, mode="nearest").to(y.dtype)
    return F.interpolate(y.float(), size=size, mode="bilinear", align_corners=False)


def uint8_tensor(batch: np.ndarray) -> torch.Tensor:
    """uint8 [n, H, W, c] -> a tensor of the same shape, sharing memory when it can. A read-only
    array (a pool image decoded from a buffer, a broadcast view) is copied first, so torch does not
    warn that "the given NumPy array is not writable" in the middle of a user's scan."""
    a = np.ascontiguousarray(batch)
    return torch.from_numpy(a if a.flags.writeable else a.copy())


RESIZE_FLOAT_BYTES = 64 << 20  # a batch whose float copy is larger is resized one image and channel at a time


def resize_images(batch: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 [n, H, W, c] -> uint8 [n, h, w, c], bilinear (antialiased when shrinking).

    The resize runs on a float32 copy of its input. A shrink above RESIZE_FLOAT_BYTES (e.g. a 13 MP
    photo brought to `max_side`: 160 MB of floats for a 40 MB image) goes one image and one channel
    at a time, a quarter of that or less, with the same bits (torch's antialiased kernel resizes
    every plane alone; its plain bilinear one, used to enlarge, differs in the last bit between the
    two layouts, so an enlargement always goes in one call). Smaller batches go in one call (per
    plane was 1.5-3x slower on them)."""
    n, big_h, big_w, c = batch.shape
    shrink = size[0] < big_h or size[1] < big_w
    if not shrink or batch.size * 4 <= RESIZE_FLOAT_BYTES:
        x = uint8_tensor(batch).permute(0, 3, 1, 2).float()
        x = F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=shrink)
        return x.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
    out = np.empty((n, size[0], size[1], c), dtype=np.uint8)
    for i in range(n):
        for k in range(c):
            x = torch.from_numpy(np.ascontiguousarray(batch[i, :, :, k]))[None, None].float()
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=shrink)
            out[i, :, :, k] = x.round_().clamp_(0, 255).to(torch.uint8)[0, 0].numpy()
    return out


@functools.lru_cache(maxsize=64)
def _normalisation(mean: tuple[float, ...], std: tuple[float, ...], device: torch.device
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """mean and std as float32 [1, C, 1, 1] tensors on `device`, made once: `torch.tensor(..., device=cuda)`
    per batch was a blocking host-to-device copy per forward, which waits for the work queued before it."""
    return (torch.tensor(mean, device=device).view(1, -1, 1, 1), torch.tensor(std, device=device).view(1, -1, 1, 1))


class TorchPreprocess:
    """uint8 [N, H, W, C] -> float [N, C, H, W]: x * scale (default 1/255), then (x - mean) / std."""

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD,
                 scale: float = UNIT_SCALE):
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.scale = float(scale)
        if not self.mean or len(self.mean) != len(self.std):
            raise ValueError(f"mean: expected as many values as std ({len(self.std)}), got {len(self.mean)}")
        if min(self.std) <= 0:
            raise ValueError(f"std: expected positive values, got {self.std}")
        if not np.isfinite(self.scale) or self.scale <= 0:
            raise ValueError(f"scale: expected a positive number, got {scale!r}")

    def _stats(self, c: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
        if len(self.mean) == 1:
            return self.mean * c, self.std * c
        return (self.mean[:c], self.std[:c]) if c > 1 else (self.mean[:1], self.std[:1])

    def __call__(self, batch: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
        # to a GPU: from pinned memory, without blocking (models.devices); to the CPU: no copy
        x = to_device(uint8_tensor(batch), torch.device(device)).permute(0, 3, 1, 2).float()
        x = x.div_(255.0) if self.scale == UNIT_SCALE else x.mul_(self.scale)  # div: same bits as before
        mean, std = self._stats(x.shape[1])
        mean_t, std_t = _normalisation(mean, std, x.device)
        return (x - mean_t) / std_t

    def numpy(self, batch: np.ndarray) -> np.ndarray:
        """The same transform in numpy: uint8 [N, H, W, C] -> float32 [N, C, H, W] (for onnxruntime)."""
        x = batch.transpose(0, 3, 1, 2).astype(np.float32)
        x = x / 255.0 if self.scale == UNIT_SCALE else x * np.float32(self.scale)
        mean, std = self._stats(x.shape[1])
        shape = (1, -1, 1, 1)
        return (x - np.asarray(mean, np.float32).reshape(shape)) / np.asarray(std, np.float32).reshape(shape)

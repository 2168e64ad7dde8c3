"""Adapters: every model a user can bring, wrapped into one Segmenter / Classifier protocol.

Images enter as uint8 [N, H, W, 3] (or a sequence of equal-size uint8 [H, W, 3]).
`Segmenter.predict_proba` returns float32 [N, C, H, W] probabilities at the input (label)
resolution, summing to 1 over C; `Classifier.predict_proba` returns float32 [N, C].
Everything downstream sees only these protocols.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PROBA_TOLERANCE = 1e-3

OutputKind = Literal["probabilities", "logits"]


@runtime_checkable
class Segmenter(Protocol):
    """Per-pixel class probabilities. num_classes: C."""

    num_classes: int

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, C, H, W], summing to 1 over C."""
        ...


@runtime_checkable
class Classifier(Protocol):
    """Per-image class probabilities. num_classes: C."""

    num_classes: int

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """uint8 [N, H, W, 3] (or [N, H, W] grey) -> float32 [N, C], summing to 1 over C."""
        ...


def as_image_batch(images: np.ndarray | Sequence[np.ndarray], name: str = "images") -> np.ndarray:
    """Validate and stack images into uint8 [N, H, W, 3] (grey [N, H, W] gets a channel axis of 1)."""
    if isinstance(images, np.ndarray):
        batch = images
    else:
        seq = list(images)
        if not seq:
            raise ValueError(f"{name}: expected at least one image, got an empty sequence")
        shapes = {np.asarray(im).shape for im in seq}
        if len(shapes) != 1:
            raise ValueError(f"{name}: expected images of one size per batch, got shapes {sorted(shapes)}")
        batch = np.stack([np.asarray(im) for im in seq])
    if batch.dtype != np.uint8:
        raise ValueError(f"{name}: expected dtype uint8, got {batch.dtype}")
    if batch.ndim == 3:
        batch = batch[..., None]
    if batch.ndim != 4 or batch.shape[-1] not in (1, 3):
        raise ValueError(f"{name}: expected shape [N, H, W, 3] (or [N, H, W] grey), got {batch.shape}")
    if batch.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one image, got N=0")
    return batch


def softmax(logits: np.ndarray, axis: int = 1) -> np.ndarray:
    """Numerically stable softmax, float32."""
    z = logits.astype(np.float32, copy=True)
    z -= z.max(axis=axis, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=axis, keepdims=True)
    return z


def check_probabilities(
    proba: np.ndarray,
    *,
    expected_shape: tuple[int | None, ...],
    output: OutputKind = "probabilities",
    name: str = "model output",
    tolerance: float = PROBA_TOLERANCE,
) -> np.ndarray:
    """Validate a model's output and return float32 probabilities.

    expected_shape: the required shape, None for a free axis (e.g. (N, None, H, W)).
    output: "probabilities" (must already sum to 1 over axis 1) or "logits" (softmaxed here).
    Raises ValueError naming `name`, the expected and the actual value.
    """
    arr = np.asarray(proba)
    if arr.ndim != len(expected_shape):
        raise ValueError(
            f"{name}: expected {len(expected_shape)} dimensions {_fmt(expected_shape)}, "
            f"got {arr.ndim} with shape {arr.shape}"
        )
    for axis, (want, got) in enumerate(zip(expected_shape, arr.shape)):
        if want is not None and want != got:
            raise ValueError(f"{name}: expected shape {_fmt(expected_shape)}, got {arr.shape} (axis {axis})")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{name}: expected floating-point values, got dtype {arr.dtype}")
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name}: expected finite values, got {bad} NaN/inf entries")
    if output == "logits":
        return softmax(arr, axis=1)
    if output != "probabilities":
        raise ValueError(f"output: expected 'probabilities' or 'logits', got {output!r}")
    arr = arr.astype(np.float32, copy=False)
    lo, hi = float(arr.min()), float(arr.max())
    if lo < -tolerance or hi > 1 + tolerance:
        raise ValueError(
            f"{name}: expected probabilities in [0, 1], got values in [{lo:.4g}, {hi:.4g}]; "
            "if the model returns logits, pass output='logits'"
        )
    sums = arr.sum(axis=1)
    worst = float(np.abs(sums - 1).max())
    if worst > tolerance:
        raise ValueError(
            f"{name}: expected probabilities summing to 1 over the class axis (within {tolerance}), "
            f"got sums off by up to {worst:.4g}; if the model returns logits, pass output='logits'"
        )
    return arr


def _fmt(shape: tuple[int | None, ...]) -> str:
    return "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"


class TorchPreprocess:
    """uint8 [N, H, W, C] -> float tensor [N, C, H, W]: scale to [0, 1], then (x - mean) / std."""

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD):
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)

    def __call__(self, batch: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
        x = torch.from_numpy(np.ascontiguousarray(batch)).to(device).permute(0, 3, 1, 2).float().div_(255.0)
        c = x.shape[1]
        mean = torch.tensor(self.mean[:c] if c > 1 else self.mean[:1], device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(self.std[:c] if c > 1 else self.std[:1], device=x.device).view(1, -1, 1, 1)
        return (x - mean) / std


def select_output(out: Any, output_key: str | None) -> torch.Tensor:
    """Pick the tensor from a module's output: a tensor, a dict (torchvision's "out"), or a tuple."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        key = output_key or ("out" if "out" in out else None)
        if key is None or key not in out:
            raise ValueError(f"output_key: expected one of {sorted(out)}, got {output_key!r}")
        return out[key]
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise ValueError(f"model output: expected a tensor, a dict of tensors or a tuple, got {type(out).__name__}")


_select_output = select_output  # old private name, kept for callers not yet updated


class _TorchAdapter:
    """Shared batching / eval / no-grad logic for torch modules."""

    def __init__(
        self,
        module: torch.nn.Module | Callable[[torch.Tensor], Any],
        num_classes: int,
        *,
        output: OutputKind = "logits",
        output_key: str | None = None,
        preprocess: Callable[..., torch.Tensor] | None = None,
        batch_size: int = 16,
        device: str | torch.device = "cpu",
    ) -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes: expected a positive integer, got {num_classes}")
        if batch_size < 1:
            raise ValueError(f"batch_size: expected a positive integer, got {batch_size}")
        if output not in ("logits", "probabilities"):
            raise ValueError(f"output: expected 'logits' or 'probabilities', got {output!r}")
        self.module = module
        self.num_classes = int(num_classes)
        self.output = output
        self.output_key = output_key
        self.preprocess = preprocess or TorchPreprocess()
        self.batch_size = int(batch_size)
        self.device = torch.device(device)
        if isinstance(module, torch.nn.Module):
            module.to(self.device).eval()

    @torch.no_grad()
    def forward_tensor(self, batch: np.ndarray) -> torch.Tensor:
        """Raw selected model output for one uint8 [n, H, W, C] chunk (no validation)."""
        x = self.preprocess(batch, self.device)
        return select_output(self.module(x), self.output_key)

    def _predict(self, images: np.ndarray | Sequence[np.ndarray], spatial: bool) -> np.ndarray:
        batch = as_image_batch(images)
        outs = []
        for start in range(0, len(batch), self.batch_size):
            chunk = batch[start:start + self.batch_size]
            y = self.forward_tensor(chunk)
            if spatial:
                if y.ndim != 4:
                    raise ValueError(f"model output: expected 4 dimensions [N, C, h, w], got shape {tuple(y.shape)}")
                h, w = chunk.shape[1:3]
                if y.shape[-2:] != (h, w):
                    # Same policy as torchvision's heads: bilinear upsampling of the logits.
                    y = F.interpolate(y.float(), size=(h, w), mode="bilinear", align_corners=False)
            if self.output == "logits":
                y = torch.softmax(y.float(), dim=1)
            outs.append(y.float().cpu().numpy())
        proba = np.concatenate(outs)
        n, h, w = batch.shape[0], batch.shape[1], batch.shape[2]
        shape = (n, self.num_classes, h, w) if spatial else (n, self.num_classes)
        return check_probabilities(proba, expected_shape=shape)


class TorchSegmenter(_TorchAdapter):
    """A torch nn.Module (or any tensor -> tensor/dict callable) as a Segmenter.

    module: maps float [N, 3, H, W] to [N, C, h, w] logits (or a dict with `output_key`, e.g.
        torchvision's "out"); outputs at another resolution are bilinearly upsampled.
    output: "logits" (default; softmaxed) or "probabilities" (validated as is).
    """

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, C, H, W]."""
        return self._predict(images, spatial=True)


class TorchClassifier(_TorchAdapter):
    """A torch nn.Module as a Classifier: [N, C] logits (default) or probabilities."""

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """uint8 [N, H, W, C] -> float32 [N, C]."""
        return self._predict(images, spatial=False)


# --- adapters for other model sources -------------------------------------------------------

PROBE_SIZE = 64  # side of the blank image used to discover num_classes when the user gives none


def probe_num_classes(predict: Callable[[np.ndarray], Any], spatial: bool, name: str) -> int:
    """Run `predict` on one blank uint8 [1, 64, 64, 3] image and read C from its output shape."""
    out = predict(np.zeros((1, PROBE_SIZE, PROBE_SIZE, 3), dtype=np.uint8))
    shape = tuple(np.shape(out))
    want = 4 if spatial else 2
    if len(shape) != want:
        raise ValueError(f"{name}: expected {want} output dimensions when probing num_classes, got shape {shape}")
    return int(shape[1])


def load_torchscript(path: str | Path, device: str | torch.device = "cpu") -> torch.jit.ScriptModule:
    """Load a TorchScript file (torch.jit.save) onto `device`; ValueError if it is not one."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: expected an existing TorchScript file, got {str(path)!r}")
    try:
        return torch.jit.load(str(path), map_location=torch.device(device))
    except RuntimeError as e:  # torch raises RuntimeError for non-TorchScript archives
        raise ValueError(f"path: expected a TorchScript file (torch.jit.save), got {str(path)!r}: {e}") from None


class TorchScriptSegmenter(TorchSegmenter):
    """A TorchScript file (torch.jit.save) as a Segmenter.

    path: the .ts/.pt file; the scripted module maps float [N, 3, H, W] to [N, C, h, w] (or a
        dict with `output_key`). num_classes: C, or None to read it from one probe forward.
    Other arguments as TorchSegmenter (output="logits" by default, ImageNet preprocessing).
    """

    def __init__(self, path: str | Path, num_classes: int | None = None, **kwargs: Any) -> None:
        self.path = Path(path)
        module = load_torchscript(self.path, kwargs.get("device", "cpu"))
        super().__init__(module, num_classes or 1, **kwargs)
        if num_classes is None:
            self.num_classes = probe_num_classes(lambda b: self.forward_tensor(b), True, "TorchScript output")


class TorchScriptClassifier(TorchClassifier):
    """A TorchScript file as a Classifier: float [N, 3, H, W] -> [N, C] logits (default)."""

    def __init__(self, path: str | Path, num_classes: int | None = None, **kwargs: Any) -> None:
        self.path = Path(path)
        module = load_torchscript(self.path, kwargs.get("device", "cpu"))
        super().__init__(module, num_classes or 1, **kwargs)
        if num_classes is None:
            self.num_classes = probe_num_classes(lambda b: self.forward_tensor(b), False, "TorchScript output")


CallableOutput = Literal["probabilities", "logits", "labels"]


def _to_numpy(out: Any, name: str) -> np.ndarray:
    if isinstance(out, torch.Tensor):
        return out.detach().float().cpu().numpy()
    try:
        return np.asarray(out)
    except Exception as e:  # noqa: BLE001 - anything that is not array-like
        raise ValueError(f"{name}: expected an array, got {type(out).__name__}: {e}") from None


def one_hot_labels(labels: np.ndarray, num_classes: int, name: str = "labels") -> np.ndarray:
    """int [N, H, W] class ids -> float32 [N, C, H, W] one-hot probabilities."""
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{name}: expected integer class ids, got dtype {labels.dtype}")
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= num_classes:
        raise ValueError(f"{name}: expected class ids in [0, {num_classes - 1}], got values in [{lo}, {hi}]")
    out = np.zeros((labels.shape[0], num_classes) + labels.shape[1:], dtype=np.float32)
    np.put_along_axis(out, labels[:, None].astype(np.int64), 1.0, axis=1)
    return out


class _CallableAdapter:
    """Shared logic: any f(uint8 [N, H, W, 3]) -> array, output kind declared by the user."""

    _spatial = True

    def __init__(
        self,
        fn: Callable[[np.ndarray], Any],
        num_classes: int | None = None,
        *,
        output: CallableOutput = "probabilities",
        batch_size: int | None = None,
    ) -> None:
        if not callable(fn):
            raise ValueError(f"fn: expected a callable f(uint8 [N, H, W, 3]) -> array, got {type(fn).__name__}")
        kinds = ("probabilities", "logits", "labels") if self._spatial else ("probabilities", "logits")
        if output not in kinds:
            raise ValueError(f"output: expected one of {kinds}, got {output!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size: expected a positive integer or None, got {batch_size}")
        if output == "labels" and num_classes is None:
            raise ValueError("num_classes: expected an integer when output='labels' (it cannot be probed), got None")
        if num_classes is not None and num_classes < 1:
            raise ValueError(f"num_classes: expected a positive integer, got {num_classes}")
        self.fn = fn
        self.output = output
        self.batch_size = batch_size
        self.num_classes = int(num_classes) if num_classes is not None else probe_num_classes(
            lambda b: _to_numpy(fn(b), "callable output"), self._spatial, "callable output")

    def _predict(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        batch = as_image_batch(images)
        step = self.batch_size or len(batch)
        outs = []
        for start in range(0, len(batch), step):
            chunk = batch[start:start + step]
            n, h, w = chunk.shape[:3]
            out = _to_numpy(self.fn(chunk), "callable output")
            if self.output == "labels":
                if out.shape != (n, h, w):
                    raise ValueError(f"callable output: expected class ids of shape {(n, h, w)}, got {out.shape}")
                outs.append(one_hot_labels(out, self.num_classes, "callable output"))
                continue
            shape = (n, self.num_classes, h, w) if self._spatial else (n, self.num_classes)
            outs.append(check_probabilities(out, expected_shape=shape, output=self.output, name="callable output"))
        return outs[0] if len(outs) == 1 else np.concatenate(outs)


class CallableSegmenter(_CallableAdapter):
    """Any Python callable as a Segmenter.

    fn: f(uint8 [N, H, W, 3]) -> numpy array or torch tensor of shape [N, C, H, W] (probabilities
        or logits, as `output` says) or int [N, H, W] class ids (output="labels", one-hot here).
    num_classes: C, or None to read it from one probe call on a blank 64x64 image.
    batch_size: call fn on chunks of this many images (None: the whole batch at once).
    """

    _spatial = True

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, C, H, W]."""
        return self._predict(images)


class CallableClassifier(_CallableAdapter):
    """Any Python callable f(uint8 [N, H, W, C]) -> [N, K] probabilities or logits as a Classifier."""

    _spatial = False

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """uint8 [N, H, W, C] -> float32 [N, K]."""
        return self._predict(images)

"""The one prediction pipeline every adapter runs; a backend only supplies `_raw(chunk)`.

predict_proba: uint8 [N, H, W, 3] -> chunks of `batch_size` -> input policy (resize / pad /
max_side) -> backend forward -> raw scores checked -> back to (H, W) -> probabilities
float32 [N, C, H, W] (segmenters) or [N, C] (classifiers).
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np
import torch

from blindspots.data.classes import Classes
from blindspots.models.adapters.inputs import NATIVE, InputPolicy
from blindspots.models.adapters.outputs import check_labels, check_raw, to_logits, to_probabilities, to_tensor
from blindspots.models.protocol import ModelFailure, as_image_batch, default_classes, short_reason

log = logging.getLogger(__name__)

PROBE_SIZE = 64  # side of the blank image used to discover num_classes when the user gives none


class BaseAdapter:
    """Shared state and pipeline. Subclasses set `_spatial`, `_name` and implement `_raw`.

    Attributes: num_classes (C), classes (a Classes of C names), output (the raw kind),
    policy (an InputPolicy), batch_size (None: the whole batch at once), info (kind, spec, ...).
    """

    _spatial = True
    _name = "model output"
    reads_ids = False  # reads pixels (the protocol's flag; precomputed outputs read ids)
    _outputs: tuple[str, ...] = ("probabilities", "logits")

    num_classes: int
    classes: Classes
    output: str
    policy: InputPolicy
    batch_size: int | None
    info: dict[str, Any]

    def _setup(self, *, output: str, batch_size: int | None, policy: InputPolicy | None,
               info: dict[str, Any] | None) -> None:
        """Validate and store the settings every adapter has (before the backend is touched)."""
        kinds = self._outputs if self._spatial else tuple(k for k in self._outputs if k != "labels")
        if output not in kinds:
            raise ValueError(f"output: expected one of {kinds}, got {output!r}")
        if batch_size is not None and (isinstance(batch_size, bool) or int(batch_size) != batch_size
                                       or batch_size < 1):
            raise ValueError(f"batch_size: expected a positive integer, got {batch_size}")
        if policy is not None and not isinstance(policy, InputPolicy):
            raise ValueError(f"policy: expected an InputPolicy, got {type(policy).__name__}")
        if policy is not None and not policy.native and not self._spatial:
            raise ValueError(f"policy: expected the native input policy for a classifier, got {policy}")
        self.output = output
        self.batch_size = None if batch_size is None else int(batch_size)
        self.policy = policy or NATIVE
        self.info = dict(info or {})
        self._looked = False  # the first logits are checked once for "these look like probabilities"

    def _set_classes(self, num_classes: int | None, classes: Classes | None) -> None:
        """Settle C and the class names: given, read from `classes`, or probed with one forward."""
        if classes is not None and not isinstance(classes, Classes):
            raise ValueError(f"classes: expected a blindspots Classes, got {type(classes).__name__}")
        if num_classes is not None and (isinstance(num_classes, bool) or int(num_classes) != num_classes
                                        or num_classes < 1):
            raise ValueError(f"num_classes: expected a positive integer, got {num_classes}")
        if num_classes is None and classes is not None:
            num_classes = classes.num_classes
        if num_classes is None:
            if self.output == "labels":
                raise ValueError("num_classes: expected an integer when output='labels' (it cannot be probed), "
                                 "got None")
            num_classes = self._probe_num_classes()
        if num_classes == 1 and self._spatial:
            raise ValueError("num_classes: expected at least 2 (a one-channel output is a binary model with "
                             "classes [background, positive]), got 1")
        if classes is not None and classes.num_classes != num_classes:
            raise ValueError(f"classes: expected {num_classes} class names (the model's num_classes), "
                             f"got {classes.num_classes}")
        self.num_classes = int(num_classes)
        self.classes = classes if classes is not None else default_classes(self.num_classes)

    def _probe_num_classes(self) -> int:
        """C from one forward on a blank image (a one-channel output means a binary model: C = 2)."""
        blank = np.zeros((1, PROBE_SIZE, PROBE_SIZE, 3), dtype=np.uint8)
        chunk = self.policy.prepare(blank) if self._spatial else blank
        try:
            shape = tuple(to_tensor(self._run(chunk), self._name).shape)
        except ValueError as e:
            raise ValueError(f"num_classes: could not be read from one forward on a blank {PROBE_SIZE}x{PROBE_SIZE} "
                             f"image ({short_reason(e, 200)}); pass num_classes=C") from None
        want = 4 if self._spatial else 2
        if len(shape) != want:
            raise ValueError(f"{self._name}: expected {want} output dimensions when probing num_classes, "
                             f"got shape {shape}")
        return 2 if shape[1] == 1 else int(shape[1])

    def _raw(self, chunk: np.ndarray) -> Any:
        """Backend forward: uint8 [n, h, w, c] (already sized by the policy) -> raw scores or labels."""
        raise NotImplementedError

    def _convert(self, raw: Any, n: int, size: tuple[int, int] | None,
                 on_device: bool = False, logits: bool = False) -> np.ndarray | torch.Tensor:
        """Raw output of n images -> float32 probabilities at `size` (None for a classifier), or with
        `logits` the logits there (`predict_logits`); a tensor where the output is when `on_device`
        (see `predict_proba_device`)."""
        y = to_tensor(raw, self._name)
        if self.output == "labels":
            y = self.policy.restore(check_labels(y, n, self._name), size, labels=True)  # type: ignore[arg-type]
        else:
            check_raw(y, n, self.num_classes, size, self._name, self.output)
            if self.output == "logits" and not self._looked:
                self._looked = True
                _warn_if_probabilities(y, self._name, self.info.get("spec"))
            if size is not None:
                if on_device and y.is_cuda:
                    # NCHW before the upsampling: the adapter's input is NHWC memory, so the logits come out
                    # channels-last; the full-size probabilities and their statistics then read the class
                    # planes strided (on an H200 the statistics took 3.4 ms against 2.0 ms for [8, 150,
                    # 512, 512] channels-last); the copy is of the small low-resolution logits
                    y = y.contiguous()
                y = self.policy.restore(y, size)
        if logits:
            return to_logits(y, self.num_classes, on_device)
        return to_probabilities(y, self.output, self.num_classes, self._name, on_device=on_device)

    def _run(self, chunk: np.ndarray) -> Any:
        """`_raw` with any backend failure turned into a one-line ValueError naming the input shape."""
        try:
            return self._raw(chunk)
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001 - torch / user code raise anything; keep the chain for -v
            who = self._name.replace(" output", "")
            raise ModelFailure(f"{who}: failed on input of shape {list(chunk.shape)} (uint8 N, H, W, C): "
                             f"{type(e).__name__}: {short_reason(e)}") from e

    def _predict(self, images: np.ndarray | Sequence[np.ndarray], on_device: bool = False, logits: bool = False
                 ) -> np.ndarray | torch.Tensor:
        batch = as_image_batch(images)
        step = self.batch_size or len(batch)
        outs = []
        for start in range(0, len(batch), step):
            chunk = batch[start:start + step]
            n, h, w = chunk.shape[:3]
            if self._spatial:
                outs.append(self._convert(self._run(self.policy.prepare(chunk)), n, (h, w), on_device, logits))
            else:
                outs.append(self._convert(self._run(chunk), n, None, on_device, logits))
        if len(outs) == 1:
            return outs[0]
        return torch.cat([torch.as_tensor(o) for o in outs]) if on_device else np.concatenate(outs)

    def predict_proba_device(self, images: np.ndarray | Sequence[np.ndarray]) -> torch.Tensor | np.ndarray:
        """`predict_proba` left where the model computed it: float32 [N, C, H, W] as a torch tensor on the
        model's device for logits outputs (a numpy array otherwise). The scan takes its statistics there,
        so that a GPU sends back argmax maps and a few numbers instead of every probability."""
        return self._predict(images, on_device=True)

    def predict_logits(self, images: np.ndarray | Sequence[np.ndarray], on_device: bool = False
                       ) -> np.ndarray | torch.Tensor:
        """uint8 [N, H, W, 3] -> float32 logits [N, C, H, W] (segmenter) or [N, C] (classifier), checked and
        resized as `predict_proba` does, before its softmax (a one-channel binary logit z as [0, z]), for an
        adapter with output="logits". A numpy array; with `on_device` a tensor on the model's device. The
        scan takes its statistics from these (`scan.logit_stats`): no probability tensor is made."""
        if self.output != "logits":
            raise ValueError(f"output: predict_logits expected an adapter of output='logits', got {self.output!r}")
        return self._predict(images, on_device=on_device, logits=True)

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray],
                      ids: Sequence[str] | None = None) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, C, H, W] (segmenter) or [N, C] (classifier).

        ids: the images' ids (the protocol's); a model that reads pixels does not need them."""
        return self._predict(images)


def _warn_if_probabilities(y: torch.Tensor, name: str, spec: str | None) -> None:
    """Log a warning when scores read as logits look like probabilities (sigmoid/softmax inside the model).

    A sigmoid applied twice squeezes every p into [0.5, 0.73] without any error, so say it once.
    """
    lo, hi = float(y.min()), float(y.max())
    if lo < 0 or hi > 1:
        return
    if y.shape[1] == 1 or bool(torch.allclose(y.float().sum(1), torch.ones(()), atol=1e-3)):
        log.warning("%s%s: the scores read as logits all lie in [0, 1] and look like probabilities; if the model "
                    "applies a sigmoid/softmax itself, pass output=probabilities", name,
                    f" of {spec!r}" if spec else "")

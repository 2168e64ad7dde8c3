"""Any Python callable as a Segmenter / Classifier.

The callable takes uint8 images [N, h, w, 3] (as the input policy sized them, in its channel
order: RGB, or BGR with channels="bgr") and returns a numpy array or torch tensor: [N, C, h', w']
scores at ANY resolution (resized to each image's size here), or int [N, h', w'] class ids with
output="labels". A one-channel output is binary. A spec's keyword arguments
(`mod:fn?path=x.tflite`) are bound by the loader (`functools.partial(fn, path="x.tflite")`).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from blindspots.data.classes import Classes
from blindspots.models.adapters.base import BaseAdapter
from blindspots.models.adapters.inputs import InputPolicy


class _CallableAdapter(BaseAdapter):
    """Shared logic: any f(uint8 [N, H, W, 3]) -> array, output kind declared by the user."""

    _name = "callable output"
    _outputs = ("probabilities", "logits", "labels")

    def __init__(
        self,
        fn: Callable[[np.ndarray], Any],
        num_classes: int | None = None,
        *,
        output: str = "probabilities",
        batch_size: int | None = None,
        policy: InputPolicy | None = None,
        classes: Classes | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        if not callable(fn):
            raise ValueError(f"fn: expected a callable f(uint8 [N, H, W, 3]) -> array, got {type(fn).__name__}")
        self._setup(output=output, batch_size=batch_size, policy=policy, info=info)
        self.fn = fn
        self._set_classes(num_classes, classes)

    def _raw(self, chunk: np.ndarray) -> Any:
        return self.fn(chunk)


class CallableSegmenter(_CallableAdapter):
    """Any Python callable as a Segmenter.

    fn: f(uint8 [N, H, W, 3]) -> numpy array or torch tensor of shape [N, C, h, w] (probabilities
        or logits, as `output` says; any h, w) or int [N, h, w] class ids (output="labels").
    num_classes: C, or None to read it from one probe call on a blank 64x64 image.
    batch_size: call fn on chunks of this many images (None: the whole batch at once).
    policy: resize / pad / max_side the images before fn sees them (native by default).
    """

    _spatial = True


class CallableClassifier(_CallableAdapter):
    """Any Python callable f(uint8 [N, H, W, C]) -> [N, K] probabilities or logits as a Classifier."""

    _spatial = False

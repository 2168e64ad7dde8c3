"""Label-quality scoring from probabilities left on the model's GPU: only the pixel scores come back.

`get_label_quality_scores(model=..., dataset=...)` with a model on a GPU (`predict_proba_device`):
the K probability planes of a batch stay on the device, the label's probability ("self-confidence")
is gathered there, the values are checked there, and one float per pixel travels to host memory
(a 150-class 512x512 image: 1 MB instead of 157 MB). The pixel scores are the same float32 values
the host path gathers from the same probabilities (a gather, no arithmetic), so the softmin pooling
on the host gives the same image scores.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from blindspots.labels._internal.inputs import PROB_ATOL, ModelBatches, check_values
from blindspots.labels._internal.pixels import ChunkScan

# Lazy imports: torch (present: the probabilities are torch tensors on the model's device).


class DeviceModelBatches(ModelBatches):
    """`ModelBatches` whose probabilities stay on the model's device: batches (labels int [b, H, W] numpy,
    pred_probs float32 [b, K, H, W] torch tensor), one per run of equal sizes in dataset order."""

    def _probabilities(self, images: list[np.ndarray], ids: Sequence[str] | None) -> Any:
        return self.model.predict_proba_device(np.stack(images))

    def _stack(self, parts: list[Any]) -> Any:
        import torch

        return torch.stack(parts)

    def iter(self, images_per_chunk: int | None = None, start: int = 0) -> Iterator[tuple[int, np.ndarray, Any]]:
        pos = 0
        for lab, pp in self._generate(start):
            if self.num_classes is None:
                self.num_classes, self.h, self.w = int(pp.shape[1]), int(pp.shape[2]), int(pp.shape[3])
                self.dtype = np.dtype(np.float32)
            elif pp.shape[1] != self.num_classes:
                raise ValueError(f"pred_probs: expected every batch to have {self.num_classes} classes, got "
                                 f"{tuple(pp.shape)} at image {start + pos}")
            yield start + pos, lab, pp
            pos += lab.shape[0]
        self.n = len(self.dataset)


def device_scan_chunk(labels: np.ndarray, pred_probs: Any, ignore_index: int | None, *, start: int = 0,
                      atol: float = PROB_ATOL, score: np.ndarray | None = None, describe: bool = True) -> ChunkScan:
    """`pixels.scan_chunk`'s pixel scores, labelled mask and note (need_pred=False) for probabilities on a device.

    labels: int [b, H, W] (host); pred_probs: float32 tensor [b, K, H, W]. Every value is checked on the
    device (NaN, inf, negative, labels that are neither class ids nor ignore_index, class sums off 1 by
    more than atol), one small read on the host; an invalid chunk is copied back once so that the host
    check raises with its usual message. score: optional float32 output [b, H, W]."""
    import torch

    dev = pred_probs.device
    k = pred_probs.shape[1]
    lab = torch.from_numpy(np.ascontiguousarray(labels)).to(dev, torch.int64)
    valid_t = torch.ones_like(lab, dtype=torch.bool) if ignore_index is None else lab != ignore_index
    sums = pred_probs.sum(dim=1, dtype=torch.float32)
    finite = torch.isfinite(sums)
    flags = torch.stack([(((lab < 0) | (lab >= k)) & valid_t).any(), (~finite).any(),
                         (pred_probs.amin(dim=1) < -atol).any(), (finite & ((sums - 1.0).abs() > atol)).any()])
    bad_label, non_finite, negative, off = flags.tolist()
    note = None
    if bad_label or non_finite or negative or (off and describe):  # rare: the host's check words it
        note = check_values(labels, pred_probs.float().cpu().numpy(), ignore_index, start, atol)
    elif off:
        note = "rows off 1"  # the caller has warned already
    idx = torch.where(valid_t, lab, 0)
    got = torch.where(valid_t, pred_probs.gather(1, idx[:, None])[:, 0], 1.0).cpu().numpy()
    if score is not None:
        score[...] = got
        got = score
    valid = np.ones(labels.shape, dtype=bool) if ignore_index is None else labels != ignore_index
    return ChunkScan(got, valid, None, None, note)

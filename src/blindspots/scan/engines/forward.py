"""One batch through the models, and the statistics beside the forward: the part of a scan
that both engines run where the models live (the local engine's main + writer threads, the
Ray engine's actors).

`forward` runs each model a shard still needs on a batch; a model that raises on the batch is
retried image by image, and the images it still fails on get its one-line message (status
'error' in the score table). For a model on a GPU it also queues the statistics there
(`begin_stats`), so the writer thread waits for that batch's results only. `batch_result` turns the probabilities into what the score table
keeps (`scan.stats.model_stats`: argmax map, class fractions, entropy, max probability) and the
(target, competitor) distances between maps computed in this batch, so that only small arrays
leave the forward. A model whose output is logits, on the host, hands them over before its softmax
(`takes_logits`): its statistics are taken from them (`scan.logit_stats`), no probability tensor is made.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from blindspots.models.protocol import ModelFailure, predict_segmenter, reads_ids
from blindspots.scan.engines.pipeline import Batch
from blindspots.scan.logit_stats import Logits
from blindspots.scan.plan import ShardPlan
from blindspots.scan.stats import begin_device_stats, model_stats_on, pair_distances

log = logging.getLogger(__name__)

ALL_FAIL_MIN = 8  # a model that failed on this many images (or all it got) and on none ran: stop
MAX_ERROR_CHARS = 500


@dataclass
class Output:
    """One model's probabilities on part of a batch: positions into the batch's ids."""

    pos: list[int]
    proba: Any  # float32 [len(pos), C, H, W] numpy, its logits (Logits), or on a GPU queued statistics (PendingStats)


@dataclass
class ModelResult:
    """One model's statistics on the images of a batch it produced output for."""

    ids: list[str]
    argmax: np.ndarray  # uint8 (int32 for C > 256) [n, H, W]
    frac: np.ndarray  # float32 [n, C]
    entropy: np.ndarray  # float32 [n]
    maxprob: np.ndarray  # float32 [n]
    whole: bool  # the model ran on every image of the batch
    pngs: list[bytes] | None = None  # the maps encoded as index PNGs (Ray: encoded where they are made)


@dataclass
class BatchResult:
    """What a batch adds to its shard's rows: statistics per model, errors, pair distances."""

    k: int
    ids: list[str]
    sizes: list[tuple[int, int]]  # original (H, W) per image
    hashes: list[str | None]
    decoded: bool  # False for a map-only batch (no pixels: only pairs against saved maps)
    models: dict[str, ModelResult] = field(default_factory=dict)
    errors: dict[str, dict[str, str]] = field(default_factory=dict)  # model -> id -> message
    pairs: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)  # competitor -> id -> d


@dataclass
class Health:
    """Per model: images it produced output for, images it failed on, and the first failure."""

    ok: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    first: dict[str, tuple[str, str]] = field(default_factory=dict)

    def add(self, run: list[str], ok: Mapping[str, int], errors: Mapping[str, Mapping[str, str]]) -> None:
        """Count one batch: ok = model -> images it produced output for; errors = model -> id -> message."""
        for name in run:
            if ok.get(name):
                self.ok[name] = self.ok.get(name, 0) + ok[name]
            errs = errors.get(name, {})
            self.failed[name] = self.failed.get(name, 0) + len(errs)
            for image_id, text in errs.items():
                self.first.setdefault(name, (image_id, text))

    def undecided(self) -> list[str]:
        """Models that have failed and never succeeded yet."""
        return [m for m, f in self.failed.items() if f and not self.ok.get(m)]

    def check(self, planned: Mapping[str, int], final: bool) -> None:
        for m in self.undecided():
            if final or self.failed[m] >= min(ALL_FAIL_MIN, planned.get(m, 0)):
                image_id, msg = self.first[m]
                raise ValueError(f"models[{m!r}]: expected a model that runs on the pool's images, got one that "
                                 f"failed on every image it was given ({self.failed[m]}), e.g. on {image_id!r}: "
                                 f"{msg.split(': ', 1)[-1]}")


def on_accelerator(model: Any) -> bool:
    """True for an adapter whose model runs on a GPU (or another non-CPU torch device) and can leave its
    probabilities there (`predict_proba_device`): the statistics are then taken on that device."""
    device = getattr(model, "device", None)
    return hasattr(model, "predict_proba_device") and getattr(device, "type", "cpu") != "cpu"


def takes_logits(model: Any) -> bool:
    """True where the scan takes a model's statistics from its logits: a model of logits
    (`gives_logits`) on the host. On a GPU the scan keeps the softmax + `device_stats` path, the one
    measured on an H200 (docs/models.md); the device logits path (`logit_stats.begin_device_logit_stats`)
    makes more full-size reads and stays unused until `benchmarks/gpu_all.py` (section stats) shows it
    pays there."""
    return gives_logits(model) and not on_accelerator(model)


def gives_logits(model: Any) -> bool:
    """True for an adapter whose output is logits and that hands them over before its softmax
    (`predict_logits`): the scan then takes its statistics from them (`scan.logit_stats`). Not for a
    subclass that overrides `predict_proba` below where `predict_logits` is defined (its own
    probabilities, which the logits would bypass), nor for a model that reads outputs by id."""
    if getattr(model, "output", None) != "logits" or not callable(getattr(model, "predict_logits", None)) \
            or reads_ids(model):
        return False
    owner = {name: next((c for c in type(model).__mro__ if name in vars(c)), None)
             for name in ("predict_proba", "predict_logits")}
    return owner["predict_proba"] is None or owner["predict_logits"] is None \
        or issubclass(owner["predict_logits"], owner["predict_proba"])


def predict(model: Any, ids: list[str], images: np.ndarray, name: str, num_classes: int) -> Any:
    """float32 [n, C, H, W] of one model on images uint8 [n, H, W, 3]: probabilities (a numpy array, or a
    torch tensor on the model's GPU: see `on_accelerator`), or the `Logits` of a model that gives them
    (`gives_logits`); raises on a bad output."""
    n, h, w = images.shape[:3]
    if takes_logits(model):
        proba = Logits(model.predict_logits(images, on_device=False))
    elif on_accelerator(model):
        proba = model.predict_proba_device(images)
    else:
        proba = predict_segmenter(model, images, ids)  # by id for precomputed outputs
    if proba.shape != (n, num_classes, h, w):
        raise ValueError(f"models[{name!r}]: expected probabilities of shape {(n, num_classes, h, w)}, "
                         f"got {proba.shape}")
    return proba


def message(name: str, exc: Exception) -> str:
    """The error text of a model failure: one line, at most MAX_ERROR_CHARS."""
    # ModelFailure already names the model kind, the input shape and the original exception's type
    head = f"{name}: " if isinstance(exc, ModelFailure) else f"{name}: {type(exc).__name__}: "
    text = head + " ".join(str(exc).split())  # one line, whatever the model raised
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 3] + "..."


def forward(msg: Batch, run: list[str], models: Mapping[str, Any], num_classes: int
            ) -> tuple[dict[str, Output], dict[str, dict[str, str]]]:
    """Each model of `run` on this batch, and its failures (model -> id -> message).

    A model that raises on the batch is retried one image at a time to find the images it fails
    on; Exceptions only (KeyboardInterrupt and friends still stop the scan)."""
    if msg.images is None:
        return {}, {}
    outputs: dict[str, Output] = {}
    errors: dict[str, dict[str, str]] = {}
    for name in run:
        model = models[name]
        try:
            outputs[name] = Output(list(range(len(msg.ids))), predict(model, msg.ids, msg.images, name, num_classes))
        except Exception as exc:  # noqa: BLE001 - recorded per image below
            found = [(0, None, exc)] if len(msg.ids) == 1 else _one_by_one(model, msg, name, num_classes)
            good = [(i, p) for i, p, _ in found if p is not None]
            if good:
                outputs[name] = Output([i for i, _ in good], concat([p for _, p in good]))
            for i, _, err in found:
                if err is not None:
                    text = message(name, err)
                    log.warning("model %r failed on %s: %s", name, msg.ids[i], text)
                    errors.setdefault(name, {})[msg.ids[i]] = text
    for out in outputs.values():
        out.proba = begin_stats(out.proba)
    return outputs, errors


def begin_stats(proba: Any) -> Any:
    """Probabilities on an accelerator -> their statistics queued there at once
    (`scan.stats.PendingStats`): the GPU runs them right behind the forward, the caller's thread does not
    wait, and the probabilities are freed here rather than held until the writer thread takes the batch.
    Anything else (host probabilities, host `Logits`: `takes_logits`) unchanged."""
    if _on_device(proba):
        return begin_device_stats(proba)
    return proba


def _on_device(x: Any) -> bool:
    """A torch tensor on a non-CPU device (torch is imported when a tensor exists)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and x.device.type != "cpu"


def concat(parts: list[Any]) -> Any:
    """np.concatenate, or torch.cat for tensors left on a GPU (`predict`); Logits stay Logits."""
    if isinstance(parts[0], Logits):
        return Logits(concat([p.values for p in parts]))
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    return sys.modules["torch"].cat(parts)  # a tensor: torch is imported


def _one_by_one(model: Any, msg: Batch, name: str, num_classes: int
                ) -> list[tuple[int, np.ndarray | None, Exception | None]]:
    """(position, probabilities [1, C, H, W] or None, exception or None) per image of a batch that failed."""
    found: list[tuple[int, np.ndarray | None, Exception | None]] = []
    for i, image_id in enumerate(msg.ids):
        try:
            found.append((i, predict(model, [image_id], msg.images[i:i + 1], name, num_classes), None))
        except Exception as exc:  # noqa: BLE001 - this image's error row
            found.append((i, None, exc))
    return found


def batch_result(msg: Batch, plan: ShardPlan, outputs: dict[str, Output], errors: dict[str, dict[str, str]],
                 target: str, num_classes: int, executor: Any = None, parts: int = 1) -> BatchResult:
    """Statistics of each model's output on the batch, and the pair distances whose two maps were
    both computed here (pairs against maps saved by an earlier run are left to `rows.add_batch`).
    executor, parts: host statistics split by image over `parts` threads (`stats.model_stats_on`)."""
    ids = msg.ids
    res = BatchResult(msg.k, list(ids), [tuple(s) for s in msg.sizes], list(msg.hashes or [None] * len(ids)),
                      msg.images is not None, errors=errors)
    for name, out in outputs.items():
        st = model_stats_on(out.proba, executor, parts)
        res.models[name] = ModelResult([ids[i] for i in out.pos], st.argmax, st.frac, st.entropy, st.maxprob,
                                       len(out.pos) == len(ids))
    if target not in plan.run:
        return res
    for g in plan.pairs:
        if g not in plan.run:  # one map is on disk only: the writer side reads it back
            continue
        res.pairs[g] = pair_rows(res.models.get(target), res.models.get(g), ids, num_classes)
    return res


def pair_rows(a: ModelResult | None, b: ModelResult | None, ids: list[str],
              num_classes: int) -> dict[str, tuple[float, float]]:
    """id -> (dpa, dmiou) for the ids that have both maps."""
    if a is None or b is None:
        return {}
    if a.whole and b.whole:  # the common case: one vectorised call on the batch's maps
        dpa, dmiou = pair_distances(a.argmax, b.argmax, num_classes)
        return dict(zip(ids, zip(dpa.tolist(), dmiou.tolist())))
    ma, mb = dict(zip(a.ids, a.argmax)), dict(zip(b.ids, b.argmax))
    both = [i for i in ids if i in ma and i in mb]
    return dict(zip(both, distances([ma[i] for i in both], [mb[i] for i in both], num_classes)))


def distances(a: list[np.ndarray], b: list[np.ndarray], num_classes: int) -> list[tuple[float, float]]:
    """(dpa, dmiou) per image of two lists of maps; one vectorised call when all shapes agree."""
    if not a:
        return []
    if len({m.shape for m in a} | {m.shape for m in b}) == 1:
        dpa, dmiou = pair_distances(np.stack(a), np.stack(b), num_classes)
    else:  # varied sizes (a map-only batch of a pool of many sizes): one image at a time
        d = [pair_distances(x[None], y[None], num_classes) for x, y in zip(a, b)]
        dpa, dmiou = np.concatenate([x[0] for x in d]), np.concatenate([x[1] for x in d])
    return [(float(x), float(y)) for x, y in zip(dpa, dmiou)]

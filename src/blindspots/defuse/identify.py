"""Defuse identification (Algorithm 1): perturb latent codes, keep decodes the classifier gets wrong.

Sources: Algorithm 1 perturbs the codes of training images the classifier classifies *correctly*
(`only_correct`, default on) — a decode of an image the classifier already gets wrong is not a new
failure. A reconstruction check also drops sources the VAE cannot reconstruct into their class:
the classifier's probability of y on decode(μ) must be at least `recon_min_proba` (0 turns the
check off) — otherwise every perturbation of a collapsed reconstruction (e.g. a sandal decoded
to a sneaker-like blob) would count as a "failure" of the classifier. Both counts are recorded
in `Identified.settings` (n_skipped_misclassified, n_skipped_reconstruction, n_sources_used).

For every kept source x with label y: μ = encoder mean of x; Q times draw ε with each
coordinate ~ Beta(a, b), decode μ + ε and keep it if the classifier's prediction differs from y.
At most `max_per_source` kept codes per source image survive, those with the smallest ‖ε‖.

noise="uncentred" is the paper's ε ~ Beta(a, b) (mean a/(a+b), i.e. every code is also shifted by
0.5 when a = b); noise="centred" uses ε − a/(a+b), a zero-mean perturbation of the same shape.
The default ("uncentred", the paper's) was chosen by measurement on MNIST-5k
(the former examples/defuse_mnist.py, `--noise auto`, before the source filters; CPU-trained VAE, Q = 50, a = b = 50): on 300
stratified source images it kept 9,329 failures of which 3,181 were confirmed by an oracle
classifier (oracle ≠ classifier), against 8,545 kept / 2,801 confirmed for the centred variant
(confirmation rates 34% vs 33%). On 300 sources of classes 0-1 only: 1,039 vs 641 confirmed.

Sources are processed in shards of `shard_size` images, written to `out_dir` as they finish, so
an interrupted run resumes where it stopped; each shard's noise is seeded by (seed, shard), so
the result does not depend on interruptions. Decoding and classification run in large batches.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from blindspots.atomic import write_atomic
from blindspots.defuse.vae import BetaVAE, to_uint8
from blindspots.models.adapters import Classifier, TorchClassifier

logger = logging.getLogger(__name__)

Noise = Literal["centred", "uncentred"]


@dataclass
class Identified:
    """Identified failures (unrestricted adversarial examples) as latent codes.

    codes: float32 [M, D] perturbed codes μ + ε; eps_norm: float32 [M] ‖ε‖ (of the applied ε);
    source: int64 [M] index of the source image; source_label: int64 [M] its label y;
    predicted: int64 [M] the classifier's class on the decoded image (≠ y);
    settings: how they were made (q, a, b, noise, max_per_source, seed, n_sources, n_decoded, ...).
    """

    codes: np.ndarray
    eps_norm: np.ndarray
    source: np.ndarray
    source_label: np.ndarray
    predicted: np.ndarray
    settings: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.source)

    def images(self, vae: BetaVAE) -> np.ndarray:
        """Decode the codes: uint8 [M, H, W, C]."""
        return vae.decode(self.codes)

    def subset(self, index: np.ndarray) -> "Identified":
        return Identified(self.codes[index], self.eps_norm[index], self.source[index], self.source_label[index],
                          self.predicted[index], dict(self.settings))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, codes=self.codes, eps_norm=self.eps_norm, source=self.source,
                            source_label=self.source_label, predicted=self.predicted,
                            settings=np.array(json.dumps(self.settings)))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Identified":
        path = Path(path)
        if path.is_dir():
            path = path / "identified.npz"
        if not path.is_file():
            raise ValueError(f"path: expected an identification result (identified.npz), got {str(path)!r}")
        with np.load(path, allow_pickle=False) as z:
            return cls(z["codes"], z["eps_norm"], z["source"], z["source_label"], z["predicted"],
                       json.loads(str(z["settings"])))


@dataclass
class IdentifySettings:
    """Paper defaults (MNIST, appendix B.2): Q = 500, a = b = 50, at most 100 kept per source
    (SVHN / German signs: a = b = 75, Q = 100). only_correct / recon_min_proba: source filters
    (module docstring)."""

    q: int = 500
    a: float = 50.0
    b: float = 50.0
    noise: Noise = "uncentred"
    max_per_source: int = 100
    seed: int = 0
    shard_size: int = 256
    batch_size: int = 4096
    only_correct: bool = True
    recon_min_proba: float = 0.5

    def validate(self) -> None:
        if not 0 <= self.recon_min_proba <= 1:
            raise ValueError(f"recon_min_proba: expected a probability in [0, 1], got {self.recon_min_proba}")
        if self.q < 1:
            raise ValueError(f"q: expected a positive number of draws per image, got {self.q}")
        if self.a <= 0 or self.b <= 0:
            raise ValueError(f"a, b: expected positive Beta parameters, got a={self.a}, b={self.b}")
        if self.noise not in ("centred", "uncentred"):
            raise ValueError(f"noise: expected 'centred' or 'uncentred', got {self.noise!r}")
        if self.max_per_source < 1:
            raise ValueError(f"max_per_source: expected a positive integer, got {self.max_per_source}")
        if self.shard_size < 1 or self.batch_size < 1:
            raise ValueError(f"shard_size, batch_size: expected positive integers, got {self.shard_size}, "
                             f"{self.batch_size}")


def draw_noise(rng: np.random.Generator, shape: tuple[int, ...], a: float, b: float, noise: Noise) -> np.ndarray:
    """ε float32 of `shape`, each coordinate ~ Beta(a, b) (minus its mean a/(a+b) if centred)."""
    eps = rng.beta(a, b, size=shape).astype(np.float32)
    if noise == "centred":
        eps -= np.float32(a / (a + b))
    return eps


class DecodeClassify:
    """Decode latent codes and return the classifier's argmax, batched; checks the class count once.

    A `TorchClassifier` is called on the quantised decodes directly (no probability validation per
    batch); any other `Classifier` goes through `predict_proba` on uint8 images.
    """

    def __init__(self, vae: BetaVAE, classifier: Classifier, num_classes: int):
        if not hasattr(classifier, "predict_proba") or not hasattr(classifier, "num_classes"):
            raise ValueError(f"classifier: expected a Classifier with predict_proba and num_classes, "
                             f"got {type(classifier).__name__}")
        if int(classifier.num_classes) != int(num_classes):
            raise ValueError(f"classifier: expected {num_classes} classes (the data's), "
                             f"got a classifier with num_classes={classifier.num_classes}")
        self.vae, self.classifier, self.num_classes = vae, classifier, int(num_classes)
        self.net = vae._check_fitted()
        self._checked = False

    @torch.no_grad()
    def __call__(self, z: np.ndarray) -> np.ndarray:
        """float32 [n, D] -> int64 [n] predicted classes (in chunks of the classifier's batch size:
        activations of a few hundred images stay in cache, thousands do not)."""
        chunk = int(getattr(self.classifier, "batch_size", 256))
        z = np.ascontiguousarray(z, dtype=np.float32)
        return np.concatenate([self._chunk(z[i:i + chunk]) for i in range(0, len(z), chunk)]) if len(z) else \
            np.zeros(0, dtype=np.int64)

    def _chunk(self, z: np.ndarray) -> np.ndarray:
        images = to_uint8(self.net.decode(torch.from_numpy(z)))
        if isinstance(self.classifier, TorchClassifier) and self._checked:
            return self.classifier.forward_tensor(images).argmax(1).cpu().numpy().astype(np.int64)
        try:
            proba = self.classifier.predict_proba(images)
        except RuntimeError as err:  # torch shape errors: the classifier expects another image size
            raise ValueError(f"classifier: failed on decoded images of shape {images.shape[1:]} ({err})") from None
        proba = np.asarray(proba)
        if proba.ndim != 2 or proba.shape[1] != self.num_classes:
            raise ValueError(f"classifier: expected probabilities [N, {self.num_classes}], got shape {proba.shape}")
        self._checked = True
        return proba.argmax(1).astype(np.int64)


def _cap_per_source(source: np.ndarray, norm: np.ndarray, cap: int) -> np.ndarray:
    """Indices keeping at most `cap` entries per source, the smallest norms first (stable)."""
    order = np.lexsort((np.arange(len(norm)), norm, source))
    s = source[order]
    starts = np.r_[0, np.flatnonzero(np.diff(s)) + 1]
    rank = np.arange(len(s)) - np.repeat(starts, np.diff(np.r_[starts, len(s)]))
    return np.sort(order[rank < cap])


def identify(
    vae: BetaVAE,
    classifier: Classifier,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    num_classes: int | None = None,
    settings: IdentifySettings | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
) -> Identified:
    """Run Algorithm 1 over every image. images: uint8 [N, H, W, C] (the VAE's size); labels: int [N].

    num_classes: the data's class count (default: the classifier's); the classifier must match it.
    out_dir: where shards and the final `identified.npz` go (resumable); None keeps all in memory.
    """
    s = settings or IdentifySettings()
    s.validate()
    images = vae._check_images(images)
    labels = np.asarray(labels)
    if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels: expected integer labels of shape ({len(images)},), got {labels.dtype} {labels.shape}")
    if len(images) == 0:
        raise ValueError("images: expected at least one source image, got 0")
    k = int(num_classes) if num_classes is not None else int(getattr(classifier, "num_classes", labels.max() + 1))
    if labels.min() < 0 or labels.max() >= k:
        raise ValueError(f"labels: expected values in 0..{k - 1}, got [{labels.min()}, {labels.max()}]")
    run = DecodeClassify(vae, classifier, k)

    # The data's fingerprint guards resume: shards of other images must never be mixed in.
    digest = hashlib.sha1(np.ascontiguousarray(images).tobytes())
    digest.update(np.ascontiguousarray(labels, dtype=np.int64).tobytes())
    record = {**asdict(s), "n_sources": int(len(images)), "latent_dim": vae.latent_dim,
              "data_sha1": digest.hexdigest()}
    shard_dir = None
    if out_dir is not None:
        out = Path(out_dir)
        shard_dir = out / "shards"
        shard_dir.mkdir(parents=True, exist_ok=True)
        meta_path = out / "identify.json"
        if meta_path.is_file():
            old = json.loads(meta_path.read_text())
            keep = {k2: v for k2, v in old.items() if k2 in record}
            if keep != record:
                raise ValueError(f"out_dir: expected a run with the same settings to resume, got {keep} in "
                                 f"{meta_path} vs {record}; use a new out_dir")
        meta_path.write_text(json.dumps(record, indent=2))

    mu, _ = vae.encode(images)
    used, counts = select_sources(vae, classifier, images, labels, mu, k, s)
    n_shards = (len(used) + s.shard_size - 1) // s.shard_size
    parts: list[dict[str, np.ndarray]] = []
    n_decoded = n_wrong = 0
    for shard in tqdm(range(n_shards), desc="identify", disable=not progress):
        path = shard_dir / f"shard_{shard:06d}.npz" if shard_dir is not None else None
        if path is not None and path.is_file():
            with np.load(path) as z:
                part = {key: z[key] for key in z.files}
        else:
            part = _identify_shard(run, mu, labels, used, shard, s)
            if path is not None:
                write_atomic(path, lambda t: _savez(t, part))
        n_decoded += int(part["n_decoded"])
        n_wrong += int(part["n_wrong"])
        parts.append(part)

    cat = {key: np.concatenate([p[key] for p in parts]) if parts else np.zeros(0, np.int64) for key in
           ("codes", "eps_norm", "source", "predicted")}
    result = Identified(cat["codes"].reshape(-1, vae.latent_dim).astype(np.float32), cat["eps_norm"],
                        cat["source"].astype(np.int64), labels[cat["source"]].astype(np.int64),
                        cat["predicted"].astype(np.int64),
                        {**record, **counts, "n_decoded": n_decoded, "n_misclassified": n_wrong, "n_kept": int(len(cat["source"]))})
    if len(result) == 0:
        logger.warning("identification kept no failures over %d decodes; try a larger q or noise", n_decoded)
    if out_dir is not None:
        result.save(Path(out_dir) / "identified.npz")
    return result


def _class_proba(classifier: Classifier, images: np.ndarray, k: int) -> np.ndarray:
    """The classifier's probabilities on uint8 [N, H, W, C] images -> float [N, k] (shape checked)."""
    if len(images) == 0:
        return np.zeros((0, k))
    try:
        proba = np.asarray(classifier.predict_proba(images))
    except (RuntimeError, ValueError) as err:  # e.g. the classifier expects another image size
        raise ValueError(f"classifier: failed on images of shape {images.shape[1:]} ({err})") from None
    if proba.shape != (len(images), k):
        raise ValueError(f"classifier: expected probabilities of shape ({len(images)}, {k}), got {proba.shape}")
    return proba


def select_sources(vae: BetaVAE, classifier: Classifier, images: np.ndarray, labels: np.ndarray, mu: np.ndarray,
                   k: int, s: IdentifySettings) -> tuple[np.ndarray, dict[str, int]]:
    """Algorithm 1's sources: indices int64 [n_used] of images the classifier gets right (if
    `only_correct`) whose reconstruction decode(μ) it gives p(y) >= `recon_min_proba`; plus counts."""
    rows = np.arange(len(labels))
    correct = _class_proba(classifier, images, k).argmax(1) == labels if s.only_correct else np.ones(len(labels), bool)
    recon_ok = np.ones(len(labels), bool)
    if s.recon_min_proba > 0 and correct.any():
        idx = np.flatnonzero(correct)
        p = _class_proba(classifier, vae.decode(mu[idx]), k)
        recon_ok[idx] = p[np.arange(len(idx)), labels[idx]] >= s.recon_min_proba
    used = rows[correct & recon_ok]
    counts = {"n_skipped_misclassified": int((~correct).sum()),
              "n_skipped_reconstruction": int((correct & ~recon_ok).sum()), "n_sources_used": int(len(used))}
    logger.info("identify sources: %s of %d", counts, len(labels))
    return used, counts


def _savez(tmp: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(tmp, "wb") as fh:  # a file object: np.savez adds no ".npz" to the temporary name
        np.savez(fh, **arrays)


def _identify_shard(run: DecodeClassify, mu: np.ndarray, labels: np.ndarray, used: np.ndarray, shard: int,
                    s: IdentifySettings) -> dict[str, np.ndarray]:
    lo = shard * s.shard_size
    hi = min(len(used), lo + s.shard_size)
    d = mu.shape[1]
    rng = np.random.default_rng([s.seed, shard])
    eps = draw_noise(rng, (hi - lo, s.q, d), s.a, s.b, s.noise).reshape(-1, d)
    src = np.repeat(used[lo:hi], s.q)
    z = mu[src] + eps
    pred = np.concatenate([run(z[i:i + s.batch_size]) for i in range(0, len(z), s.batch_size)])
    wrong = np.flatnonzero(pred != labels[src])
    norm = np.linalg.norm(eps[wrong], axis=1).astype(np.float32)
    keep = wrong[_cap_per_source(src[wrong], norm, s.max_per_source)]
    return {"codes": z[keep], "eps_norm": np.linalg.norm(eps[keep], axis=1).astype(np.float32),
            "source": src[keep].astype(np.int64), "predicted": pred[keep],
            "n_decoded": np.array(len(z)), "n_wrong": np.array(len(wrong))}

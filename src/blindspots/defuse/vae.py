"""β-VAE with the Defuse appendix's convolutional encoder/decoder family.

Encoder (appendix Figures 8/10/12): 4x4 conv, `width` ReLU, stride 2 — repeated until the map is
4x4 — then FC 256 ReLU, FC 256 ReLU, FC 2·latent_dim (μ, log σ²). Decoder (Figures 9/11/13):
FC 256 ReLU ×2, FC width·4·4 ReLU, then 4x4 transposed conv stride 2 back to the image, the last
one to C channels with a sigmoid. Images whose side is not a power of two are padded (edge
replicate) to the next one, e.g. MNIST 28 -> 32 as in the paper, and cropped back after decoding.

Loss: Bernoulli reconstruction (sum over pixels) + β·w(t)·KL, with the KL weight w(t) annealed
linearly from 0 to 1 over `anneal_steps` optimisation steps. Paper defaults (MNIST, appendix B.2):
latent 10, β 4, Adam lr 1e-3, batch 2048, 800 epochs, 500 annealing steps.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from blindspots.defuse.grids import save_grid
from blindspots.models.checkpoints import VAE_FORMAT, load_checkpoint_dict, save_checkpoint_dict
from blindspots.training.loop import resume_state, run_epochs, torch_seeded

logger = logging.getLogger(__name__)


def _work_size(h: int, w: int) -> int:
    """Side of the square the networks see: the next power of two >= max(h, w), at least 8."""
    return max(8, 1 << math.ceil(math.log2(max(h, w))))


class ConvVAENet(nn.Module):
    """Encoder/decoder pair. image_shape: (H, W, C); input float [N, C, H, W] in [0, 1]."""

    def __init__(self, image_shape: tuple[int, int, int], latent_dim: int = 10, width: int = 32, hidden: int = 256):
        super().__init__()
        h, w, c = (int(v) for v in image_shape)
        self.image_shape = (h, w, c)
        self.latent_dim = latent_dim
        self.size = _work_size(h, w)
        n = int(math.log2(self.size)) - 2  # stride-2 blocks from size down to 4x4
        enc: list[nn.Module] = []
        ch = c
        for _ in range(n):
            enc += [nn.Conv2d(ch, width, 4, stride=2, padding=1), nn.ReLU(inplace=True)]
            ch = width
        enc += [nn.Flatten(), nn.Linear(width * 16, hidden), nn.ReLU(inplace=True),
                nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, 2 * latent_dim)]
        self.encoder = nn.Sequential(*enc)
        dec: list[nn.Module] = [nn.Linear(latent_dim, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, hidden),
                                nn.ReLU(inplace=True), nn.Linear(hidden, width * 16), nn.ReLU(inplace=True),
                                nn.Unflatten(1, (width, 4, 4))]
        for i in range(n):
            last = i == n - 1
            dec.append(nn.ConvTranspose2d(width, c if last else width, 4, stride=2, padding=1))
            if not last:
                dec.append(nn.ReLU(inplace=True))
        self.decoder = nn.Sequential(*dec)  # logits; sigmoid applied in decode

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        h, w, _ = self.image_shape
        if (h, w) == (self.size, self.size):
            return x
        top, left = (self.size - h) // 2, (self.size - w) // 2
        return F.pad(x, (left, self.size - w - left, top, self.size - h - top), mode="replicate")

    def _crop(self, x: torch.Tensor) -> torch.Tensor:
        h, w, _ = self.image_shape
        top, left = (self.size - h) // 2, (self.size - w) // 2
        return x[..., top:top + h, left:left + w]

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """float [N, C, H, W] in [0, 1] -> (μ, log σ²), each float [N, latent_dim]."""
        out = self.encoder(self._pad(x))
        return out[:, :self.latent_dim], out[:, self.latent_dim:]

    def decode_logits(self, z: torch.Tensor) -> torch.Tensor:
        """float [N, latent_dim] -> Bernoulli logits [N, C, H, W]."""
        return self._crop(self.decoder(z))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """float [N, latent_dim] -> float [N, C, H, W] in [0, 1]."""
        return torch.sigmoid(self.decode_logits(z))


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 [N, H, W, C] -> float32 [N, C, H, W] in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """float [N, C, H, W] in [0, 1] -> uint8 [N, H, W, C] (rounded)."""
    return x.mul(255.0).round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()


class BetaVAE:
    """β-VAE estimator (scikit-learn style; `fit` returns self).

    Defaults are the paper's MNIST settings: latent_dim 10, β 4, Adam lr 1e-3, batch 2048,
    800 epochs, KL annealing over 500 steps, conv width 32, FC 256. `checkpoint_path` makes
    training resumable: it is written after every epoch and picked up by the next `fit`.
    """

    def __init__(self, latent_dim: int = 10, beta: float = 4.0, epochs: int = 800, batch_size: int = 2048,
                 lr: float = 1e-3, anneal_steps: int = 500, width: int = 32, hidden: int = 256, seed: int = 0,
                 checkpoint_path: str | Path | None = None, progress: bool = True):
        self.latent_dim = latent_dim
        self.beta = beta
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.anneal_steps = anneal_steps
        self.width = width
        self.hidden = hidden
        self.seed = seed
        self.checkpoint_path = checkpoint_path
        self.progress = progress
        self.net_: ConvVAENet | None = None
        self.history_: list[dict] = []

    # ---- validation -------------------------------------------------------------------------
    def _check_images(self, images: np.ndarray, name: str = "images") -> np.ndarray:
        images = np.asarray(images)
        if images.dtype != np.uint8:
            raise ValueError(f"{name}: expected dtype uint8, got {images.dtype}")
        if images.ndim == 3:
            images = images[..., None]
        if images.ndim != 4 or images.shape[-1] not in (1, 3):
            raise ValueError(f"{name}: expected shape [N, H, W, C] with C in (1, 3), got {images.shape}")
        if self.net_ is not None and tuple(images.shape[1:]) != self.net_.image_shape:
            raise ValueError(
                f"{name}: expected images of shape (H, W, C) = {self.net_.image_shape} (the VAE's), "
                f"got {tuple(images.shape[1:])}")
        return images

    def _check_fitted(self) -> ConvVAENet:
        if self.net_ is None:
            raise ValueError("vae: expected a fitted BetaVAE (call fit or load), got an unfitted one")
        return self.net_

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self._check_fitted().image_shape

    # ---- training ----------------------------------------------------------------------------
    def _params(self) -> dict:
        return {k: getattr(self, k) for k in ("latent_dim", "beta", "epochs", "batch_size", "lr", "anneal_steps",
                                              "width", "hidden", "seed")}

    def loss(self, x: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(total, reconstruction, KL), each averaged over the batch, for float x [N, C, H, W]."""
        net = self._check_fitted()
        mu, logvar = net.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        rec = F.binary_cross_entropy_with_logits(net.decode_logits(z), x, reduction="sum") / len(x)
        kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / len(x)
        weight = min(1.0, (step + 1) / self.anneal_steps) if self.anneal_steps > 0 else 1.0
        return rec + self.beta * weight * kl, rec, kl

    def fit(self, images: np.ndarray) -> "BetaVAE":
        """Train on uint8 [N, H, W, C] images (resuming from `checkpoint_path` if it exists)."""
        images = np.asarray(images)
        if images.ndim == 3 and images.dtype == np.uint8:
            images = images[..., None]
        self.net_ = None
        images = self._check_images(images)
        if len(images) == 0:
            raise ValueError("images: expected at least one training image, got 0")
        with torch_seeded(self.seed):
            self.net_ = ConvVAENet(tuple(images.shape[1:]), self.latent_dim, self.width, self.hidden)
        opt = torch.optim.Adam(self.net_.parameters(), lr=self.lr)
        start, step = 0, 0
        ckpt = Path(self.checkpoint_path) if self.checkpoint_path else None
        state = resume_state(ckpt, format=VAE_FORMAT, legacy_keys=("net", "params"), what="blindspots β-VAE checkpoint")
        if state is not None:
            if state.get("params", {}).get("latent_dim") != self.latent_dim or \
                    tuple(state.get("image_shape", ())) != self.net_.image_shape:
                raise ValueError(
                    f"checkpoint_path: expected a checkpoint for images {self.net_.image_shape} and latent_dim "
                    f"{self.latent_dim}, got {tuple(state.get('image_shape', ()))} / "
                    f"{state.get('params', {}).get('latent_dim')} in {ckpt}")
            self.net_.load_state_dict(state["net"])
            if "optimizer" in state:
                opt.load_state_dict(state["optimizer"])
            start, step, self.history_ = state.get("epoch", -1) + 1, state.get("step", 0), state.get("history", [])
            logger.info("resuming β-VAE training at epoch %d (%s)", start, ckpt)
        x_all = to_tensor(images)
        n = len(x_all)
        n_steps = (n + self.batch_size - 1) // self.batch_size
        bar = tqdm(range(start, self.epochs), desc="β-VAE", disable=not self.progress, initial=start,
                   total=self.epochs)
        net = self.net_

        def one_epoch(epoch: int) -> tuple[float, float, float]:
            nonlocal step
            net.train()
            perm = torch.randperm(n)  # torch's RNG seeded per epoch (below): resume == uninterrupted run
            tot = rec_sum = kl_sum = 0.0
            for s in range(n_steps):
                xb = x_all[perm[s * self.batch_size:(s + 1) * self.batch_size]]
                loss, rec, kl = self.loss(xb, step)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                tot += float(loss.detach()) * len(xb)
                rec_sum += float(rec.detach()) * len(xb)
                kl_sum += float(kl.detach()) * len(xb)
            return tot, rec_sum, kl_sum

        def end_epoch(epoch: int, sums: tuple[float, float, float]) -> None:
            tot, rec_sum, kl_sum = sums
            self.history_.append({"epoch": epoch, "step": step, "loss": tot / n, "rec": rec_sum / n, "kl": kl_sum / n})
            bar.set_postfix(loss=f"{tot / n:.1f}", kl=f"{kl_sum / n:.2f}")
            if ckpt is not None:
                self._write(ckpt, {"optimizer": opt.state_dict(), "epoch": epoch, "step": step})

        run_epochs(bar, one_epoch, end_epoch=end_epoch, torch_seed=lambda epoch: self.seed * 1_000_003 + epoch)
        self.net_.eval()
        return self

    # ---- persistence -------------------------------------------------------------------------
    def _write(self, path: Path, extra: dict | None = None) -> None:
        net = self._check_fitted()
        save_checkpoint_dict(path, {"params": self._params(), "image_shape": list(net.image_shape),
                                    "net": net.state_dict(), "history": self.history_, **(extra or {})},
                             format=VAE_FORMAT)

    def save(self, path: str | Path) -> Path:
        """Write the fitted model (loadable with `BetaVAE.load`)."""
        path = Path(path)
        self._write(path, {"epoch": len(self.history_) - 1})
        return path

    @classmethod
    def load(cls, path: str | Path) -> "BetaVAE":
        """A fitted BetaVAE from `save` or from a training checkpoint."""
        # untagged files: written before the format tag, same plain data
        state = load_checkpoint_dict(path, format=VAE_FORMAT, legacy_keys=("net", "params"),
                                     what="blindspots β-VAE checkpoint")
        vae = cls(**state["params"], progress=False)
        vae.net_ = ConvVAENet(tuple(state["image_shape"]), vae.latent_dim, vae.width, vae.hidden)
        vae.net_.load_state_dict(state["net"])
        vae.net_.eval()
        vae.history_ = state.get("history", [])
        return vae

    # ---- inference ---------------------------------------------------------------------------
    @torch.no_grad()
    def encode(self, images: np.ndarray, batch_size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
        """uint8 [N, H, W, C] -> (μ float32 [N, D], log σ² float32 [N, D])."""
        net = self._check_fitted()
        images = self._check_images(images)
        mus, logvars = [], []
        for i in range(0, len(images), batch_size):
            mu, lv = net.encode(to_tensor(images[i:i + batch_size]))
            mus.append(mu)
            logvars.append(lv)
        if not mus:
            return np.zeros((0, self.latent_dim), np.float32), np.zeros((0, self.latent_dim), np.float32)
        return torch.cat(mus).numpy(), torch.cat(logvars).numpy()

    def _check_codes(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float32)
        if z.ndim != 2 or z.shape[1] != self.latent_dim:
            raise ValueError(f"z: expected latent codes float [N, {self.latent_dim}], got shape {z.shape}")
        return z

    @torch.no_grad()
    def decode(self, z: np.ndarray, batch_size: int = 1024) -> np.ndarray:
        """Latent codes float [N, D] -> uint8 images [N, H, W, C]."""
        net = self._check_fitted()
        z = self._check_codes(z)
        h, w, c = net.image_shape
        if len(z) == 0:
            return np.zeros((0, h, w, c), np.uint8)
        return np.concatenate([to_uint8(net.decode(torch.from_numpy(z[i:i + batch_size])))
                               for i in range(0, len(z), batch_size)])

    def reconstruct(self, images: np.ndarray) -> np.ndarray:
        """uint8 [N, H, W, C] -> uint8 [N, H, W, C] decoded from μ."""
        return self.decode(self.encode(images)[0])

    def sample(self, n: int, seed: int = 0) -> np.ndarray:
        """n images decoded from the N(0, I) prior: uint8 [n, H, W, C]."""
        z = np.random.default_rng(seed).standard_normal((n, self.latent_dim)).astype(np.float32)
        return self.decode(z)

    def save_grids(self, images: np.ndarray, out_dir: str | Path, n: int = 50, seed: int = 0, scale: int = 3
                   ) -> dict[str, Path]:
        """Write reconstructions.png (rows alternate originals / reconstructions) and samples.png."""
        images = self._check_images(images)[:n]
        out_dir = Path(out_dir)
        rec = self.reconstruct(images)
        pairs = []
        for i in range(0, len(images), 10):
            pairs += [images[i:i + 10], rec[i:i + 10]]
        return {"reconstructions": save_grid(np.concatenate(pairs), out_dir / "reconstructions.png", 10, scale),
                "samples": save_grid(self.sample(n, seed), out_dir / "samples.png", 10, scale)}

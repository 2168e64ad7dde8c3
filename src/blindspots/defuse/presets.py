"""CPU settings per data set for a Defuse run that finishes in minutes (examples/defuse.py).

The paper trains the β-VAE for 800 epochs at batch 2048 on a GPU; on a shared CPU these presets
train a few epochs at batch 64 instead. β, latent size and VAE epochs were chosen by measuring the
reconstruction accuracy (a strong classifier's accuracy on decode(μ(x)), `evaluation.
reconstruction_accuracy`) on held-out images; the numbers are in each preset's `note`.
Identification noise follows the paper: a = b = 50 on MNIST, a = b = 75 off MNIST (appendix B.3,
B.4: SVHN, German signs), which perturbs less. τ (scenario sample diversity) is the paper's 0.5 on
MNIST; off MNIST the paper uses 0.01 for its 15-d latent spaces.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class DefusePreset:
    """VAE (latent_dim, beta, vae_epochs, vae_batch), identification (q, a, b, max_per_source,
    recon_min_proba), sampling (tau) and correction (epochs_correct) settings."""

    latent_dim: int = 10
    beta: float = 0.4
    vae_epochs: int = 12
    vae_batch: int = 64
    q: int = 50
    a: float = 50.0
    b: float = 50.0
    max_per_source: int = 100
    recon_min_proba: float = 0.5
    tau: float = 0.5
    epochs_correct: int = 3
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


# 7 of the paper's 17 λs (PAPER_LAMBDAS): the paper's tiny λs (1e-10 .. 1e-4) act like the λ = 0
# control, which the honest table reports separately; each λ costs a fine-tuning run on the CPU.
CPU_LAMBDAS: tuple[float, ...] = (0.01, 0.1, 1.0, 2.0, 5.0, 10.0, 20.0)

CPU_PRESETS: dict[str, DefusePreset] = {
    # MNIST-5k: β 0.4 / latent 10 / 12 epochs (the former example's) reconstructed only 39.4% of validation
    # digits into their class (simulated judge; KL 7.7 nats, still falling) — scenarios were mixtures of
    # digits. The Fashion-MNIST measurement's choice (β 0.1, latent 20, 16 epochs) is used instead.
    "mnist": DefusePreset(latent_dim=20, beta=0.1, vae_epochs=16,
                          note="MNIST-5k CPU preset: β 0.1, latent 20, 16 VAE epochs at batch 64"),
    # Fashion-MNIST: paper's non-MNIST noise a = b = 75. VAE measured on the 5k subset (batch 64;
    # reconstruction accuracy on 1,000 test images by an 83%-accurate CNN, under load ~15):
    # β 0.4 / latent 10: 66.0% (8 epochs), 70.1% (16); β 0.1 / latent 10: 62.5%, 71.6%;
    # β 0.1 / latent 20: 67.1%, 71.6% — the last chosen (best at both lengths).
    "fashion": DefusePreset(latent_dim=20, beta=0.1, vae_epochs=16, a=75.0, b=75.0, tau=0.5,
                            note="Fashion-MNIST CPU preset: β 0.1, latent 20, 16 VAE epochs at batch 64, a = b = 75"),
}


def cpu_preset(name: str) -> DefusePreset:
    """The CPU preset for a data set name (keys of CPU_PRESETS)."""
    if name not in CPU_PRESETS:
        raise ValueError(f"name: expected one of {sorted(CPU_PRESETS)}, got {name!r}")
    return CPU_PRESETS[name]

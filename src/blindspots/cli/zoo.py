"""`blindspots zoo list | train`: reference architectures and a demo target + competitors."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

# Lazy imports: torch (`blindspots --help` starts without them).

zoo_app = typer.Typer(help="Reference segmentation architectures (no pretrained weights) and demo training.",
                      no_args_is_help=True)


@zoo_app.command("list")
def list_models() -> None:
    """List the zoo architectures."""
    from blindspots.models import ZOO, ZOO_DESCRIPTIONS

    width = max(map(len, ZOO)) + 1  # the longest name still leaves a space before its description
    for name in ZOO:
        typer.echo(f"{name:{width}s} {ZOO_DESCRIPTIONS.get(name, '')}")


@zoo_app.command("train")
def train(
    out: Path = typer.Option(..., "--out", "-o", help="Output folder: <arch>.pt checkpoints and zoo.json."),
    target: Optional[str] = typer.Option(None, "--target", help="Target architecture (trained on the narrow "
                                         "'train' slice of scene conditions). Default: tiny_unet."),
    competitors: Optional[str] = typer.Option(None, "--competitors", help="Comma-separated competitor "
                                              "architectures (trained on 'broad' conditions). "
                                              "Default: pspnet_r18,lraspp_mnv3,small_fcn."),
    n_train: int = typer.Option(600, "--n-train", min=2, help="Training scenes per model."),
    n_val: int = typer.Option(150, "--n-val", min=1, help="Validation scenes (in-distribution and hard each)."),
    size: int = typer.Option(64, "--size", min=16, max=1024, help="Scene side in pixels."),
    epochs: int = typer.Option(8, "--epochs", min=1, help="Training epochs per model."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed for scenes, weight init and batches."),
    restart: bool = typer.Option(False, "--restart", help="Ignore existing checkpoints instead of resuming."),
    jobs: int = typer.Option(-1, "--jobs", "-j", help="Processes rendering the scenes (-1: all cores)."),
) -> None:
    """Train a target and competitors on procedural scenes (resumable) and report their mIoU."""
    from blindspots.training import DEFAULT_COMPETITORS, DEFAULT_TARGET, train_zoo

    comps = DEFAULT_COMPETITORS if competitors is None else tuple(c.strip() for c in competitors.split(",") if c.strip())
    summary = train_zoo(out, target=target or DEFAULT_TARGET, competitors=comps, n_train=n_train, n_val=n_val,
                        size=size, epochs=epochs, seed=seed, resume=not restart, n_jobs=jobs)
    typer.echo(f"{'model':16s} {'role':10s} {'mIoU in':>8s} {'mIoU hard':>9s} {'train s':>8s}")
    for name, m in summary["models"].items():
        typer.echo(f"{name:16s} {m['role']:10s} {m['metrics']['val_in']['miou']:8.3f} "
                   f"{m['metrics']['val_hard']['miou']:9.3f} {m['train_seconds']:8.0f}")
    typer.echo(f"wrote {out / 'zoo.json'}")


def register(app: typer.Typer) -> None:
    app.add_typer(zoo_app, name="zoo")

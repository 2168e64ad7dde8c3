"""`blindspots scenes generate`: write a labelled procedural street-scene set."""
from __future__ import annotations

from pathlib import Path

import typer

from blindspots.data.scenes import generate_scene_set, read_conditions

scenes_app = typer.Typer(help="Procedural street scenes with pixel labels and recorded conditions.",
                         no_args_is_help=True)


@scenes_app.command("generate")
def generate(
    out: Path = typer.Argument(..., help="Output folder: images/<id>.png, masks/<id>.png, conditions.csv."),
    n: int = typer.Option(1000, "--n", min=1, help="Number of scenes."),
    distribution: str = typer.Option("pool", "--distribution", "-d",
                                      help="Conditions: train (the target's narrow slice), broad (everything), "
                                      "pool (mostly in-distribution, ~5% hard), hard (only shifted)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Set seed; the same seed gives the same scenes."),
    size: int = typer.Option(128, "--size", min=16, max=2048, help="Scene side in pixels."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Worker processes (-1: all cores); output does not depend on it."),
) -> None:
    """Render N scenes (resumable: scenes already on disk are kept)."""
    generate_scene_set(out, n, seed=seed, distribution=distribution, size=size, n_jobs=jobs)
    conds = read_conditions(out)
    hard = sum(c.is_hard for c in conds.values())
    typer.echo(f"wrote {len(conds)} scenes ({hard} hard) to {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(scenes_app, name="scenes")

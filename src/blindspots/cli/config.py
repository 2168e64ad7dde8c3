"""`blindspots config PROJECT [--raters N] [--n4 N]`: show or change the settings a project may change after `init`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.project_folder import open_project

# Lazy imports: pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without them).


def config(
    project: Path = typer.Argument(..., help="Project folder."),
    raters: Optional[int] = typer.Option(None, "--raters", help="Ratings needed per candidate image (the quota; "
                                         "paper: 3). One person rating alone: 1."),
    n4: Optional[int] = typer.Option(None, "--n4", help="Images pixel-labelled per round: the n4 lowest-rated "
                                     "candidates form S (paper: 100). One person drawing the masks: e.g. 10."),
    labels: Optional[str] = typer.Option(None, "--labels", help="What people label in S: masks (whole masks) or "
                                         "regions (the class of the few regions where the target fails)."),
    regions_per_image: Optional[int] = typer.Option(None, "--regions-per-image", help="With --labels regions: "
                                                    "regions asked about per image (default 8)."),
) -> None:
    """Show the project's settings, or change the rater quota and the size of S (kept in blindspots.toml)."""
    from blindspots.loop import rating_progress, set_labels, set_n4, set_raters

    proj = open_project(project)
    if labels is not None or regions_per_image is not None:
        for key, (old, new) in set_labels(proj, labels, regions_per_image).items():
            typer.echo(f"{key}: {old} -> {new}")
        if raters is None and n4 is None:
            return
    if n4 is not None:
        old, new = set_n4(proj, n4)
        typer.echo(f"ratings.n4: {old} -> {new} (images pixel-labelled per round, the lowest-rated first)")
    if raters is not None:
        old, new = set_raters(proj, raters)
        typer.echo(f"ratings.raters: {old} -> {new} (answers needed per candidate image)")
    if raters is not None or n4 is not None:
        rnd = proj.answers.rating_round()
        if rnd is not None:
            typer.echo(f"round {rnd}: {rating_progress(proj, rnd).counts()}; "
                       f"run `blindspots round {project}` to continue")
        return
    c = proj.config
    typer.echo(f"project {proj.path}\n  pool: {c.pool.root}\n  target: {c.target.name} = {c.target.path}")
    for g in c.competitors:
        typer.echo(f"  competitor: {g.name} = {g.path}")
    typer.echo(f"  ratings.raters: {c.ratings.raters} (change: --raters N)\n  ratings.n4: {c.ratings.n4} (change: --n4 N)\n"
               f"  rounds: {c.project.rounds}\n  mining: {c.mining.strategy}\n"
               f"  labels: {c.labels.kind} (change: --labels masks|regions), {c.labels.regions_per_image} regions "
               f"per image (--regions-per-image K)\n  settings file: "
               f"{proj.path / 'blindspots.toml'}")


def register(app: typer.Typer) -> None:
    """Add the `config` command."""
    app.command("config")(config)

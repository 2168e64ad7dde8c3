"""`blindspots config PROJECT [--raters N]`: show or change the settings a project may change after `init`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.loop import open_project

# Lazy imports: pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without them).


def config(
    project: Path = typer.Argument(..., help="Project folder."),
    raters: Optional[int] = typer.Option(None, "--raters", help="Ratings needed per candidate image (the quota; "
                                         "paper: 3). One person rating alone: 1."),
) -> None:
    """Show the project's settings, or change the rater quota (kept in blindspots.toml)."""
    from blindspots.loop.progress import rating_progress, set_raters

    proj = open_project(project)
    if raters is not None:
        old, new = set_raters(proj, raters)
        typer.echo(f"ratings.raters: {old} -> {new} (answers needed per candidate image)")
        rnd = proj.rating_round()
        if rnd is not None:
            typer.echo(f"round {rnd}: {rating_progress(proj, rnd).counts()}; "
                       f"run `blindspots round {project}` to continue")
        return
    c = proj.config
    typer.echo(f"project {proj.path}\n  pool: {c.pool.root}\n  target: {c.target.name} = {c.target.path}")
    for g in c.competitors:
        typer.echo(f"  competitor: {g.name} = {g.path}")
    typer.echo(f"  ratings.raters: {c.ratings.raters} (change: --raters N)\n  ratings.n4: {c.ratings.n4}\n"
               f"  rounds: {c.project.rounds}\n  mining: {c.mining.strategy}\n  settings file: "
               f"{proj.path / 'blindspots.toml'}")


def register(app: typer.Typer) -> None:
    """Add the `config` command."""
    app.command("config")(config)

"""`blindspots ratings import`: people's ratings of the mined candidates M from a CSV."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.project_folder import open_project

# Lazy imports: jinja2, matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without
# them).

ratings_app = typer.Typer(help="Weak labels (ACR ratings 1-5 or out-of-domain) of the mined candidates M.",
                          no_args_is_help=True)


@ratings_app.command("import")
def ratings_import(
    project: Path = typer.Argument(..., help="Project folder."),
    csv: Path = typer.Argument(..., help="CSV with columns image_id,rater,score (score 1-5 or ood)."),
    round: Optional[int] = typer.Option(None, "--round", help="Round (default: the current one)."),
) -> None:
    """Import ACR ratings of the candidates M from a CSV."""
    from blindspots.loop import import_ratings

    if not csv.is_file():
        raise ValueError(f"csv: expected an existing CSV file, got {str(csv)!r}")
    n = import_ratings(open_project(project), csv, round=round)
    typer.echo(f"imported {n} ratings; run `blindspots round {project}` to continue")


def register(app: typer.Typer) -> None:
    """Add `ratings` to the root `blindspots` app."""
    app.add_typer(ratings_app, name="ratings")

"""`blindspots register`: the target's next version, retrained on S in your own stack."""
from __future__ import annotations

from pathlib import Path

import typer

from blindspots.cli.project_folder import open_project

# Lazy imports: jinja2, matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without
# them).


def register_model(
    project: Path = typer.Argument(..., help="Project folder."),
    spec: str = typer.Argument(..., help="The retrained target as a model SPEC (as for `init --target`)."),
) -> None:
    """Register the target's next version (retrained on S in your own stack); `round` then continues with it."""
    from blindspots.loop import register_version

    version = register_version(open_project(project), spec, base_dir=Path.cwd())
    typer.echo(f"registered the target's version {version}; run `blindspots round {project}` to scan and mine with it")


def register(app: typer.Typer) -> None:
    """Add `register` to the root `blindspots` app."""
    app.command("register")(register_model)

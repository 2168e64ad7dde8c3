"""`blindspots masks import`: pixel labels of the counterexamples S and the test set T."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.project_folder import echo_next, open_project

# Lazy imports: jinja2, matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without
# them).

masks_app = typer.Typer(help="Pixel labels of the counterexamples S and the test set T.", no_args_is_help=True)


@masks_app.command("import")
def masks_import(
    project: Path = typer.Argument(..., help="Project folder."),
    source: Path = typer.Argument(..., help="Folder of index/palette PNGs, CVAT zip or Label Studio JSON."),
    round: Optional[int] = typer.Option(None, "--round", help="Round (default: the current one)."),
    annotator: Optional[str] = typer.Option(None, "--annotator", help="Who drew the masks."),
) -> None:
    """Import pixel labels for S and T."""
    from blindspots.loop import after_masks_import, import_masks

    p = open_project(project)
    n = import_masks(p, source, round=round, annotator=annotator)
    st = after_masks_import(p, round)
    typer.echo(f"imported {n} masks; {st.message}")
    echo_next(st, project)


def register(app: typer.Typer) -> None:
    """Add `masks` to the root `blindspots` app."""
    app.add_typer(masks_app, name="masks")

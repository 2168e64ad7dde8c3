"""What the commands over a project folder share: open it, print its next actions as commands, refresh its
round page."""
from __future__ import annotations

from pathlib import Path

import typer

# Lazy imports: jinja2, matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without
# them).


def open_project(project: Path):  # noqa: ANN202 - Project
    """`Project.open` for the commands over a project folder."""
    from blindspots.loop import Project

    return Project.open(project)  # a ProjectError (ValueError) becomes one line via the CLI handler


def echo_next(st, project: Path) -> None:  # noqa: ANN001 - loop.Status
    """The status's next actions, phrased as commands."""
    from blindspots.loop import phrase_commands

    if st.next:
        typer.echo(phrase_commands(st.next, project))


def refresh_round_page(project: Path, round: int) -> None:
    """Rewrite the round's report page, so that it shows the state `status` just printed."""
    from blindspots.report import write_round_report

    try:
        write_round_report(project, round)
    except Exception as e:  # noqa: BLE001 - the page is a view; a failure must not fail `status`
        typer.echo(f"warning: could not refresh the round report: {type(e).__name__}: {e}", err=True)

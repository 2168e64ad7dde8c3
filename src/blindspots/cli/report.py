"""`blindspots report`: write the offline HTML report of a scan folder (and, later, of a project round)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def report(
    source: Path = typer.Argument(..., help="A scan folder (with scan.json) written by `blindspots scan`."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for index.html and its figures "
                                       "(default: SOURCE/report)."),
    n: int = typer.Option(12, "-n", help="How many of the most disputed images to show."),
    pool: Optional[Path] = typer.Option(None, help="Where the pool's images are now (default: the folder "
                                        "that was scanned)."),
) -> None:
    """Write SOURCE's report: one self-contained page (OUT/index.html) plus its figures as PNG."""
    from blindspots.report.scan_page import write_scan_report

    if not (source / "scan.json").is_file():
        raise ValueError(f"SOURCE: expected a scan folder with scan.json, got {str(source)!r}")
    index = write_scan_report(source, out if out is not None else source / "report", n_disputed=n, pool_root=pool)
    typer.echo(f"report: {index}")


def register(app: typer.Typer) -> None:
    """Add the `report` command."""
    app.command("report", help="Write an offline HTML report (figures as PNG beside it) of a scan folder.")(report)

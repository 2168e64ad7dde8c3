"""`blindspots report`: write the offline HTML report of a project round or of a scan folder.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

# Lazy imports: `blindspots.report` imports jinja2, matplotlib, pandas, scipy and sklearn (its pages and figures), and
# every command of the CLI starts by importing this module.


def report(
    source: Path = typer.Argument(..., help="A project folder (`blindspots init`), a scan folder (with "
                                  "scan.json) written by `blindspots scan`, a `blindspots label-issues --out` "
                                  "or `blindspots surprise analyze --out` folder, or a Defuse run folder "
                                  "(holding the --out folders of `blindspots defuse ...`: review, correct, "
                                  "report figures)."),
    round: Optional[int] = typer.Option(None, "--round", "-r", help="Project: which round (default: the "
                                        "latest with mined candidates)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for index.html and its figures "
                                       "(default: PROJECT/reports/html/round-<i>, or SOURCE/report)."),
    n: int = typer.Option(12, "-n", help="Scan: how many of the most disputed images to show; project: "
                          "candidates shown (twice this)."),
    scenarios: bool = typer.Option(False, "--scenarios/--no-scenarios", help="Project: add the failure "
                                   "scenarios of the confirmed failures so far (decodes every pool image once)."),
    pool: Optional[Path] = typer.Option(None, help="Scan: where the pool's images are now (default: the "
                                        "folder that was scanned)."),
) -> None:
    """Write SOURCE's report: one self-contained page (OUT/index.html) plus its figures as PNG."""
    from blindspots.report import (write_defuse_report, write_label_issues_report, write_scan_report,
                                   write_surprise_report)

    kind = source_kind(source)
    if kind != "project" and round is not None:
        raise ValueError(f"--round: expected no round for a {kind} folder, got {round}")
    default = out if out is not None else source / "report"
    if kind == "scan":
        index = write_scan_report(source, default, n_disputed=n, pool_root=pool)
    elif kind == "label-issues":
        index = write_label_issues_report(source, default, n=2 * n)
    elif kind == "surprise":
        index = write_surprise_report(source, default, n=n)
    elif kind == "defuse":
        index = write_defuse_report(source, default)
    else:
        index = _project_report(source, round, out, n=n, scenarios=scenarios)
    typer.echo(f"report: {index}")


def source_kind(source: Path) -> str:
    """What SOURCE is, sniffed once: "project" (blindspots.toml), "scan" (scan.json), "label-issues",
    "surprise" or "defuse" (an engine's --out folder); anything else is taken for a project, whose
    opening then says what is missing."""
    from blindspots.report import is_defuse_dir, is_label_issues_dir, is_surprise_dir

    if (source / "blindspots.toml").is_file():
        return "project"
    if (source / "scan.json").is_file():
        return "scan"
    for kind, test in (("label-issues", is_label_issues_dir), ("surprise", is_surprise_dir), ("defuse", is_defuse_dir)):
        if test(source):
            return kind
    return "project"


def _project_report(source: Path, round: int | None, out: Path | None, *, n: int, scenarios: bool) -> Path:
    """The round page of a project: the project opened once, its scan manifest read once."""
    from blindspots.loop import Project
    from blindspots.report import default_round, export_scenario_votes, round_scenarios, vote_prefix, write_round_report
    from blindspots.scan import load_manifest

    project = Project.open(source)
    i = default_round(project) if round is None else round
    manifest = load_manifest(project.scan_dir) or {}
    found = round_scenarios(project, i, manifest=manifest) if scenarios else None
    if scenarios and found is None:
        typer.echo("scenarios: fewer than 2 confirmed failures so far; none shown", err=True)
    index = write_round_report(project, i, out, n_gallery=2 * n, scenarios=found, manifest=manifest)
    if found is not None and len(found):
        votes = export_scenario_votes(found, project.config.open_pool(),
                                      index.parent / "scenario-votes", prefix=vote_prefix(i))
        typer.echo(f"scenario vote set: {votes} (offer it on the vote page with `blindspots web attach-votes "
                   f"{source} {votes} --name scenarios-r{i}`)")
    return index


def write_round_pages(project: Path, last_round: int) -> Path | None:
    """Write the report page of rounds 0..last_round (as far as each got) and echo the last one's path.

    Called by `round` and the demo. A failure here is a warning, not the command's failure: the
    round's own results are already stored.
    """
    from blindspots.loop import Project
    from blindspots.report import write_round_report
    from blindspots.scan import load_manifest

    path = None
    try:
        opened = Project.open(project)  # once for every page, with the scan's manifest
        manifest = load_manifest(opened.scan_dir) or {}
        for i in range(last_round + 1):
            path = write_round_report(opened, i, manifest=manifest)
    except Exception as e:  # noqa: BLE001 - the loop's results are safe; say why the page is missing
        typer.echo(f"warning: could not write the round report: {type(e).__name__}: {e}", err=True)
        return None
    typer.echo(f"report: {path}")
    return path


def register(app: typer.Typer) -> None:
    """Add the `report` command."""
    app.command("report", help="Write an offline HTML report (figures as PNG beside it) of a project round, "
                "a scan folder, a label-issues or surprise folder or a Defuse run folder.")(report)

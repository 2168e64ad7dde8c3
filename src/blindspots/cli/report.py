"""`blindspots report`: write the offline HTML report of a project round or of a scan folder."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


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
    from blindspots.report.defuse_page import is_defuse_dir
    from blindspots.report.labels_page import is_label_issues_dir
    from blindspots.report.surprise_page import is_surprise_dir

    project = (source / "blindspots.toml").is_file()
    engine = not project and not (source / "scan.json").is_file() and \
        (is_label_issues_dir(source) or is_defuse_dir(source) or is_surprise_dir(source))
    if engine and round is not None:
        raise ValueError(f"--round: expected no round for a label-issues, surprise or Defuse folder, got {round}")
    if (source / "scan.json").is_file():
        from blindspots.report.scan_page import write_scan_report

        if round is not None:
            raise ValueError(f"--round: expected no round for a scan folder, got {round}")
        index = write_scan_report(source, out if out is not None else source / "report", n_disputed=n,
                                  pool_root=pool)
    elif not project and is_label_issues_dir(source):
        from blindspots.report.labels_page import write_label_issues_report

        index = write_label_issues_report(source, out if out is not None else source / "report", n=2 * n)
    elif not project and is_surprise_dir(source):
        from blindspots.report.surprise_page import write_surprise_report

        index = write_surprise_report(source, out if out is not None else source / "report", n=n)
    elif not project and is_defuse_dir(source):
        from blindspots.report.defuse_page import write_defuse_report

        index = write_defuse_report(source, out if out is not None else source / "report")
    else:
        from blindspots.report.round_page import round_scenarios, write_round_report

        found = round_scenarios(source, round) if scenarios else None
        if scenarios and found is None:
            typer.echo("scenarios: fewer than 2 confirmed failures so far; none shown", err=True)
        index = write_round_report(source, round, out, n_gallery=2 * n, scenarios=found)
        if found is not None and len(found):
            from blindspots.report.round_page import default_round
            from blindspots.report.scenario_votes import export_scenario_votes, vote_prefix
            from blindspots.loop.project import Project

            proj = Project.open(source)
            i = default_round(proj) if round is None else round
            votes = export_scenario_votes(found, proj.config.open_pool(),
                                          index.parent / "scenario-votes", prefix=vote_prefix(i))
            typer.echo(f"scenario vote set: {votes} (offer it on the vote page with `blindspots web attach-votes "
                       f"{source} {votes} --name scenarios-r{i}`)")
    typer.echo(f"report: {index}")


def write_round_pages(project: Path, last_round: int) -> Path | None:
    """Write the report page of rounds 0..last_round (as far as each got) and echo the last one's path.

    Called by `round` and the demo. A failure here is a warning, not the command's failure: the
    round's own results are already stored.
    """
    from blindspots.report.round_page import write_round_report

    path = None
    try:
        for i in range(last_round + 1):
            path = write_round_report(project, i)
    except Exception as e:  # noqa: BLE001 - the loop's results are safe; say why the page is missing
        typer.echo(f"warning: could not write the round report: {type(e).__name__}: {e}", err=True)
        return None
    typer.echo(f"report: {path}")
    return path


def register(app: typer.Typer) -> None:
    """Add the `report` command."""
    app.command("report", help="Write an offline HTML report (figures as PNG beside it) of a project round, "
                "a scan folder, a label-issues or surprise folder or a Defuse run folder.")(report)

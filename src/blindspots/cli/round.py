"""`blindspots round | status | leaderboard`: advance the troubleshooting loop (Algorithm 1 of the MAD paper) over
a project folder, say where it stands, print Table 1."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.common import progress_wanted
from blindspots.cli.project_folder import echo_next, open_project, refresh_round_page
from blindspots.cli.report import write_round_pages

# Lazy imports: jinja2, matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without
# them).


def round_(
    project: Path = typer.Argument(..., help="Project folder."),
    simulate: bool = typer.Option(False, "--simulate", help="Let simulated raters and annotators answer (demo)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after this many steps."),
) -> None:
    """Advance the loop to the next step that needs a human, and say what is awaited."""
    from blindspots.loop import activity_since_last_round, advance, last_event_id, steps_done_since, steps_ran

    proj = open_project(project)
    before, since = last_event_id(proj), activity_since_last_round(proj)
    st = advance(proj, simulate=simulate, max_steps=max_steps, progress=progress_wanted())
    for line in since + steps_ran(proj, before):  # what people did since the last `round`, and what ran now
        typer.echo(f"  {line}")
    proj.journal.log_event("round-run", {"state": st.state, "round": st.round, "step": st.step})
    typer.echo(st.message)
    echo_next(st, project)
    if st.state == "finished" or any(step == "evaluate" for _, step in steps_done_since(proj, before)):
        typer.echo("Table 1 (also reports/leaderboard.txt; `blindspots leaderboard` prints it again):")
        leaderboard(project)  # a round was scored now: its result, where the user is looking
    if st.awaited:
        shown = ", ".join(st.awaited[:10]) + (" ..." if len(st.awaited) > 10 else "")
        typer.echo(f"awaiting {len(st.awaited)} images: {shown}")
    write_round_pages(project, st.round)


def status(project: Path = typer.Argument(..., help="Project folder.")) -> None:
    """Show the rounds, the steps done and what the loop waits for."""
    from blindspots.loop import status as loop_status

    proj = open_project(project)
    steps = proj.journal.steps()
    for _, r in steps.iterrows():
        state = r["status"]
        err = proj.journal.step_failure(int(r["round"]), r["step"]) if state != "done" else None
        if err is not None:  # the step raised: say why (the next `round` retries it)
            state = f"failed: {err}"
        done_at = r["finished_at"]  # None (NaN in the frame) while the step runs or waits for people
        when = done_at if isinstance(done_at, str) and done_at else f"started {r['started_at']}"
        typer.echo(f"round {r['round']}  {r['step']:<9} {state:<8} model v{r['model_version']}  "
                   f"seed {r['seed']}  {when}")
    from blindspots.loop import activity_since_last_round

    since = activity_since_last_round(proj)
    if since:
        typer.echo("since the last `blindspots round`:")
        for line in since:
            typer.echo(f"  {line}")
    st = loop_status(proj)
    typer.echo(st.message)
    echo_next(st, project)
    refresh_round_page(project, st.round)


def leaderboard(project: Path = typer.Argument(..., help="Project folder.")) -> None:
    """Print Table 1: every model's mIoU on T0 and on each unbiased test set T(i)."""
    from blindspots.loop import format_leaderboard, leaderboard_frame

    df = leaderboard_frame(open_project(project))
    typer.echo(format_leaderboard(df) if len(df) else "no round has been evaluated yet")


def register(app: typer.Typer) -> None:
    """Add `round`, `status` and `leaderboard` to the root `blindspots` app."""
    app.command("round")(round_)
    app.command("status")(status)
    app.command("leaderboard")(leaderboard)

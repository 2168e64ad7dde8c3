"""`blindspots serve | annotators add/list/remove | web attach-votes/attach-review/sample`:
the web app for ratings, pixel labels, scenario votes and label-issue review."""
from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Optional

import typer

import blindspots.app as web_app  # its names load on first use: create_app brings FastAPI
from blindspots.app import bind_port, serve_on
from blindspots.cli.project_folder import open_project, refresh_round_page
from blindspots.extras import require

# Lazy imports: fastapi, matplotlib, pandas, scipy, skimage, sklearn, threadpoolctl, torch, uvicorn
# (`blindspots --help` starts without them).

KEEP_ALIVE_S = 75  # seconds an idle HTTP connection stays open (uvicorn's default: 5)
annotators_app = typer.Typer(help="People who answer in the web app (tokens are stored hashed).",
                             no_args_is_help=True)
app_app = typer.Typer(help="Web-app extras: attach vote / label-issue review sets, build a sample project.",
                      no_args_is_help=True)


def serve(
    project: Path = typer.Argument(..., help="Project folder (made by `blindspots init`)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (default: loopback only)."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    secure_cookies: bool = typer.Option(False, "--secure-cookies", help="Mark the session cookie Secure "
                                        "(when served over HTTPS behind a proxy)."),
    allowed_host: Optional[list[str]] = typer.Option(
        None, "--allowed-host", metavar="HOST", help="A Host name the app answers besides loopback and --host (repeatable; "
        "e.g. the name annotators type behind a proxy; '*' for any). Also BLINDSPOTS_ALLOWED_HOSTS."),
) -> None:
    """Serve the web app (rate, label, vote, review, dashboard; JSON API under /api)."""
    uvicorn = require("uvicorn", "blindspots serve")
    require("fastapi", "blindspots serve")


    sock = bind_port(host, port)  # a busy port: one line and exit code 2, before anything is announced
    # warm_up: the first annotators do not pay for lazy set-up; the collector skips start-up objects
    web = web_app.create_app(project, secure_cookies=secure_cookies, allowed_hosts=allowed_host or None, warm_up=True)
    _refresh_round_page(project)
    typer.echo(f"serving {project} on http://{host}:{port}/  (sign-in links: `blindspots annotators add`)")
    # Keep idle connections 75 s (uvicorn's default is 5 s): an annotator looking at an image for
    # longer than that would reconnect for the next answer. uvicorn picks uvloop and httptools
    # when they are installed (about a quarter less CPU per request).
    serve_on(uvicorn, web, sock, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S)


def _refresh_round_page(project: Path) -> None:
    """The round report page as of now (it is a file: without this it shows the last `round`'s state)."""
    from blindspots.loop import status

    refresh_round_page(project, status(open_project(project)).round)


@annotators_app.command("add")
def annotators_add(
    project: Path = typer.Argument(..., help="Project folder."),
    name: str = typer.Argument(..., help="Annotator name (letters, digits, _ . @ -)."),
    admin: bool = typer.Option(False, "--admin", help="Give the admin role (dashboard, results, annotators)."),
    url: str = typer.Option("http://127.0.0.1:8000", "--url", help="Base URL of the app for the sign-in link."),
) -> None:
    """Create an annotator (or give an existing one a new token) and print their sign-in link."""
    if not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", name):
        raise ValueError(f"name: expected 1-64 letters, digits or _ . @ -, got {name!r}")
    proj = open_project(project)
    token = secrets.token_urlsafe(24)
    proj.answers.add_annotator(name, token, "admin" if admin else "annotator")
    from blindspots.app.tables import AppStore

    AppStore(proj).end_sessions_of(name)
    typer.echo(f"{name} ({'admin' if admin else 'annotator'}): {url.rstrip('/')}/signin#token={token}")
    typer.echo("the token is shown only now; run `add` again to replace it")
    people, quota = len(proj.answers.annotators()), int(proj.config.ratings.raters)
    if people < quota:  # e.g. one person on a project made with the default quota of 3
        typer.echo(f"note: each candidate needs {quota} ratings and {people} "
                   f"{'person' if people == 1 else 'people'} can rate; one person alone: "
                   f"`blindspots config {project} --raters {people}`")


@annotators_app.command("list")
def annotators_list(project: Path = typer.Argument(..., help="Project folder.")) -> None:
    """List annotators with their role and creation time."""
    df = open_project(project).answers.annotators()
    if not len(df):
        typer.echo("no annotators yet; add one with `blindspots annotators add PROJECT NAME`")
    for r in df.itertuples():
        typer.echo(f"{r.name}\t{r.role}\t{r.created}")


@annotators_app.command("remove")
def annotators_remove(
    project: Path = typer.Argument(..., help="Project folder."),
    name: str = typer.Argument(..., help="Annotator to remove (their answers are kept)."),
) -> None:
    """Remove an annotator: their token and sessions stop working; their answers stay."""
    proj = open_project(project)
    if not proj.answers.remove_annotator(name):
        raise ValueError(f"name: expected a registered annotator, got {name!r}")
    from blindspots.app.tables import AppStore

    AppStore(proj).end_sessions_of(name)
    typer.echo(f"removed {name}")


@app_app.command("attach-votes")
def attach_votes(
    project: Path = typer.Argument(..., help="Project folder."),
    folder: Path = typer.Argument(..., help="A scenario review folder (`blindspots defuse export-review`): "
                                  "items.csv, classes.json, images/<item_id>.png."),
    name: str = typer.Option("scenarios", "--name", help="Set name shown in the app."),
) -> None:
    """Offer a Defuse scenario review set on the vote page."""
    import pandas as pd

    from blindspots.app.tables import AppStore, check_set_name

    proj = open_project(project)
    check_set_name(name)
    for f in ("items.csv", "classes.json"):
        if not (folder / f).is_file():
            raise ValueError(f"folder: expected {f} (from export_review) in {str(folder)!r}, got none")
    ids = set(pd.read_csv(folder / "items.csv", dtype={"item_id": str})["item_id"])
    store = AppStore(proj)
    for s in store.sets("vote"):
        if s["name"] != name:
            other = set(pd.read_csv(s["path"] / "items.csv", dtype={"item_id": str})["item_id"])
            if ids & other:
                raise ValueError(f"folder: expected item ids unlike those of vote set {s['name']!r}, got "
                                 f"{len(ids & other)} shared (votes are keyed by item id)")
    store.attach_set("vote", name, folder)
    typer.echo(f"attached vote set {name!r} ({len(ids)} items)")


@app_app.command("attach-review")
def attach_review(
    project: Path = typer.Argument(..., help="Project folder."),
    folder: Path = typer.Argument(..., help="Output of `blindspots label-issues` (images.csv, regions.csv)."),
    images: Path = typer.Option(..., "--images", help="Folder of the images (ids as in regions.csv)."),
    masks: Path = typer.Option(..., "--masks", help="Folder of the given masks (<stem>.png)."),
    predictions: Path = typer.Option(..., "--predictions", help="Folder of the model's predicted index masks "
                                     "(<stem>.png)."),
    name: str = typer.Option("labels", "--name", help="Set name shown in the app."),
) -> None:
    """Offer a label-issue review set on the review page."""
    from blindspots.app.tables import AppStore

    proj = open_project(project)
    if not (folder / "regions.csv").is_file():
        raise ValueError(f"folder: expected regions.csv (from blindspots label-issues) in {str(folder)!r}, got none")
    for opt, p in (("--images", images), ("--masks", masks), ("--predictions", predictions)):
        if not p.is_dir():
            raise ValueError(f"{opt}: expected an existing folder, got {str(p)!r}")
    AppStore(proj).attach_set("review", name, folder, {"images": str(images.resolve()), "masks": str(masks.resolve()),
                                                      "predictions": str(predictions.resolve())})
    typer.echo(f"attached review set {name!r}")


@app_app.command("sample")
def sample(
    out: Path = typer.Argument(..., help="New folder for the sample (the project is OUT/project)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the scenes, models and picks."),
    n_pool: int = typer.Option(40, "--pool-size", help="Images in the pool."),
    size: int = typer.Option(64, "--size", help="Image side in pixels."),
    candidates: int = typer.Option(12, "--candidates", help="Candidates M to rate."),
) -> None:
    """Build a small sample project (scenes, untrained models, a vote set, a review set) waiting for ratings."""
    from blindspots.app.services import make_sample_project

    token = secrets.token_urlsafe(24)
    p = make_sample_project(out, n_pool=n_pool, size=size, seed=seed, n_candidates=candidates,
                            annotators={"admin": ("admin", token)})
    typer.echo(f"sample project: {p.path}\nserve it: blindspots serve {p.path}\n"
               f"admin sign-in: http://127.0.0.1:8000/signin#token={token}")


def register(app: typer.Typer) -> None:
    """Add `serve`, `annotators` and `web` to the root `blindspots` app."""
    app.command("serve")(serve)
    app.add_typer(annotators_app, name="annotators")
    app.add_typer(app_app, name="web")

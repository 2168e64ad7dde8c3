"""`blindspots labelstudio connect|push|pull|listen` and `blindspots labelstudio-backend`: a project live with a
Label Studio server (blindspots.integrations.labelstudio). The API token comes from an environment
variable (default LABEL_STUDIO_API_KEY) or a file, never from the command line."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from blindspots.app import bind_port, serve_on
from blindspots.cli.project_folder import open_project
from blindspots.extras import require

# Lazy imports: fastapi, httpx, pandas, scipy, sklearn, threadpoolctl, torch, uvicorn (`blindspots --help` starts
# without them).

ls_app = typer.Typer(help="Label a project's rounds in a running Label Studio: connect, push, pull.",
                     no_args_is_help=True)

_TOKEN_ENV = typer.Option(None, "--token-env", help="Environment variable holding the API token "
                          "(default: LABEL_STUDIO_API_KEY).")
_TOKEN_FILE = typer.Option(None, "--token-file", help="File whose first line is the API token (instead of "
                           "the environment).")


@ls_app.command("connect")
def connect(
    project: Path = typer.Argument(..., help="Project folder."),
    url: str = typer.Option(..., "--url", help="Label Studio's address, e.g. http://127.0.0.1:8080."),
    token_env: Optional[str] = _TOKEN_ENV,
    token_file: Optional[Path] = _TOKEN_FILE,
    masks_project: Optional[int] = typer.Option(None, "--masks-project", help="Use this existing Label Studio "
                                                "project for masks (default: create one)."),
    ratings_project: Optional[int] = typer.Option(None, "--ratings-project", help="Use this existing Label Studio "
                                                  "project for ratings (default: create one)."),
    document_root: Optional[Path] = typer.Option(None, "--document-root", help="Label Studio's "
                                                 "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT, a parent of the pool "
                                                 "(default: that variable here)."),
    image_url: Optional[str] = typer.Option(None, "--image-url", help="Instead of local files: an image URL "
                                            "template with {id}, or an http(s)/s3/gs base URL of the pool."),
    update_config: bool = typer.Option(False, "--update-config", help="Write the generated labelling configs "
                                       "into existing Label Studio projects."),
) -> None:
    """Connect a project to Label Studio: create (or check) its masks and ratings projects and the pool's storage."""
    from blindspots.integrations.labelstudio import connect as do_connect

    conn = do_connect(open_project(project), url, token_env=token_env, token_file=token_file,
                      masks_project=masks_project, ratings_project=ratings_project, image_url=image_url,
                      document_root=document_root, update_config=update_config)
    typer.echo(f"connected {project} to Label Studio at {conn.url}: masks project {conn.masks_project} "
               f"({conn.url}/projects/{conn.masks_project}), ratings project {conn.ratings_project}; next: "
               f"`blindspots labelstudio push {project}` (add --ratings for the candidates M)")


@ls_app.command("push")
def push(
    project: Path = typer.Argument(..., help="Project folder."),
    ratings: bool = typer.Option(False, "--ratings", help="Push the candidates M for rating (default: S ∪ T "
                                 "for masks)."),
    round: Optional[int] = typer.Option(None, "--round", help="Round (default: the current one)."),
) -> None:
    """Push the round's images as tasks, the target's prediction pre-annotated."""
    from blindspots.integrations.labelstudio import push as do_push

    typer.echo(str(do_push(open_project(project), round=round, kind="ratings" if ratings else "masks")))


@ls_app.command("pull")
def pull(
    project: Path = typer.Argument(..., help="Project folder."),
    ratings: bool = typer.Option(False, "--ratings", help="Pull ratings of M (default: masks)."),
    ignore_other: bool = typer.Option(False, "--ignore-other", help="Report annotations on images no round "
                                      "awaits instead of stopping."),
    watch: Optional[float] = typer.Option(None, "--watch", help="Poll every this many seconds until no task "
                                          "awaits an annotation."),
) -> None:
    """Pull finished annotations into the project's masks (or ratings); `blindspots round` then continues."""
    from blindspots.integrations.labelstudio import pull as do_pull
    from blindspots.loop import NextAction, phrase_commands

    if watch is not None and not watch > 0:
        raise ValueError(f"--watch: expected seconds > 0, got {watch}")
    while True:
        report = do_pull(open_project(project), kind="ratings" if ratings else "masks", ignore_other=ignore_other)
        for line in report.lines():
            typer.echo(line)
        after = report.after.next if report.after is not None else (
            (NextAction("advance", "once every candidate has its ratings"),) if ratings else ())
        if after:
            typer.echo(phrase_commands(after, project))
        if watch is None or not report.waiting:
            return
        time.sleep(watch)


@ls_app.command("listen")
def listen(
    project: Path = typer.Argument(..., help="Project folder."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(9091, "--port", help="Port."),
    public_url: Optional[str] = typer.Option(None, "--public-url", help="The receiver's address as Label Studio "
                                             "reaches it (default: http://HOST:PORT)."),
    ignore_other: bool = typer.Option(False, "--ignore-other", help="As for pull."),
) -> None:
    """Receive Label Studio's webhooks and pull on each annotation event (instead of polling)."""
    uvicorn = require("uvicorn", "a Label Studio webhook or ML backend server")

    from blindspots.integrations.labelstudio.webhook import create_webhook_app, register_webhooks

    p = open_project(project)
    sock = bind_port(host, port)  # before the webhooks point here: a busy port is one line, exit code 2
    url = (public_url or f"http://{host}:{port}").rstrip("/") + "/webhook"
    register_webhooks(p.path, url)
    typer.echo(f"pulling on every annotation event; Label Studio posts to {url} (Ctrl-C stops)")
    serve_on(uvicorn, create_webhook_app(p.path, ignore_other=ignore_other), sock, log_level="warning")


def backend(
    project: Path = typer.Argument(..., help="Project folder."),
    model: Optional[str] = typer.Option(None, "--model", help="A registered model (default: the target)."),
    version: Optional[int] = typer.Option(None, "--version", help="Its version (default: the latest)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(9090, "--port", help="Port (Label Studio's default for ML backends)."),
) -> None:
    """Serve a registered model's predictions to Label Studio (the ML backend protocol)."""
    uvicorn = require("uvicorn", "a Label Studio webhook or ML backend server")

    from blindspots.integrations.labelstudio import create_backend

    sock = bind_port(host, port)
    app = create_backend(open_project(project), model=model, version=version)
    typer.echo(f"Label Studio ML backend on http://{host}:{port} (add it in Label Studio: project Settings -> Model)")
    serve_on(uvicorn, app, sock, log_level="warning")


def register(app: typer.Typer) -> None:
    app.add_typer(ls_app, name="labelstudio")
    app.command("labelstudio-backend")(backend)

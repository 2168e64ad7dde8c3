"""The app factory: `create_app(project_path)` -> a FastAPI app serving one project folder.

The app's shared objects (project, view, store, writer, templates) live on `app.state`; routers
reach them only through `blindspots.app.deps` and never import this module (no cycle).

Server-rendered pages (Jinja2) with plain JavaScript from `static/` (no build step), and a JSON
API under `/api` for every action (OpenAPI schema at `/api/openapi.json`, docs at `/api/docs`
served from local assets, see app/docs.py). The outer layer (hosts, per-route body limits, headers)
is app/security/guard.py; the error answers app/errors.py.
Run it with `blindspots serve PROJECT` (uvicorn, 127.0.0.1:8000 by default).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from blindspots.app import warmup
from blindspots.app.batching import GroupWriter
from blindspots.app.docs import add_docs
from blindspots.app.errors import add_error_handlers
from blindspots.app.routers import api, dashboard, images, label, rate, regions, review, vote
from blindspots.app.security import Guard, NeedsSignIn, SignInThrottle, host_set
from blindspots.app.services import SegmentCache
from blindspots.app.project_view import ProjectView
from blindspots.app.tables import AppStore
from blindspots.loop.project import Project

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
MAX_BODY_BYTES = 16 * 1024 * 1024  # mask routes: a full-HD mask as base64 JSON is ~3 MB; uploads are PNGs
MAX_JSON_BYTES = 8 * 1024  # every other route: a rating is ~100 bytes, a 1024-character id escaped < 7 KB


@asynccontextmanager
async def _lifespan(app: FastAPI):  # noqa: ANN202
    if app.state.warm_up:  # before the server takes its first connection (app/warmup.py)
        await warmup.warm_up(app)
    try:
        yield
    finally:
        app.state.writer.close()
        if app.state.warm_up:
            warmup.cool_down()


def create_app(project_path: str | Path, *, max_body_bytes: int = MAX_BODY_BYTES,
               max_json_bytes: int = MAX_JSON_BYTES, secure_cookies: bool = False,
               allowed_hosts: Sequence[str] | None = None, signin_failures_per_minute: int = 10,
               warm_up: bool = False) -> FastAPI:
    """A FastAPI app for the project at `project_path` (opened with `Project.open`).

    max_body_bytes: largest request body of the mask routes (JSON mask, file upload; 413 beyond).
    max_json_bytes: largest body of every other route (capped at max_body_bytes). secure_cookies:
    mark the session cookie Secure (set it when served over HTTPS behind a proxy). allowed_hosts:
    Host names accepted besides loopback and the bound address (also BLINDSPOTS_ALLOWED_HOSTS;
    "*": any).
    signin_failures_per_minute: failed sign-ins per client address before 429. warm_up: on
    start-up, pay the one-off costs before the first request and freeze the start-up heap for the
    garbage collector (process-wide; `blindspots serve` sets it; app/warmup.py).
    """
    for name, v in (("max_body_bytes", max_body_bytes), ("max_json_bytes", max_json_bytes)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1024:
            raise ValueError(f"{name}: expected an int >= 1024, got {v!r}")
    project = Project.open(project_path)
    store = AppStore(project)
    app = FastAPI(title="blindspots", summary="Ratings, pixel labels, scenario votes and label-issue review.",
                  lifespan=_lifespan, openapi_url="/api/openapi.json", docs_url=None, redoc_url=None)
    app.state.project = project
    app.state.store = store
    app.state.view = ProjectView(project, store)
    app.state.writer = GroupWriter(project, store.write_lock)
    app.state.segments = SegmentCache()  # the label page's superpixels, per app (not per process)
    app.state.templates = Jinja2Templates(directory=str(HERE / "templates"))
    app.state.secure_cookies = bool(secure_cookies)
    app.state.max_body_bytes, app.state.max_json_bytes = max_body_bytes, max_json_bytes
    app.state.throttle = SignInThrottle(limit=signin_failures_per_minute, window=60.0)
    app.state.warm_up = bool(warm_up)

    app.add_middleware(Guard, limit=max_body_bytes, small=max_json_bytes, large=label.LARGE_BODY_PATHS,
                       hosts=host_set(allowed_hosts))
    add_error_handlers(app)

    @app.exception_handler(NeedsSignIn)
    async def _signin(request: Request, exc: NeedsSignIn) -> RedirectResponse:
        return RedirectResponse("/signin", status_code=303)

    for r in (api, rate, label, regions, vote, review, dashboard, images):
        app.include_router(r.router)
    app.state.has_docs = add_docs(app)

    @app.get("/favicon.ico", include_in_schema=False)
    def _favicon() -> FileResponse:
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml",
                            headers={"Cache-Control": "public, max-age=86400"})

    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    return app


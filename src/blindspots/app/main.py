"""The app factory: `create_app(project_path)` -> a FastAPI app serving one project folder.

The app's shared objects (project, view, store, writer, templates) live on `app.state`; routers
reach them only through `blindspots.app.deps` and never import this module (no cycle).

Server-rendered pages (Jinja2) with plain JavaScript from `static/` (no build step), and a JSON
API under `/api` for every action (OpenAPI schema at `/api/openapi.json`, docs at `/api/docs`
served from local assets, see app/docs.py). The outer layer (hosts, body limit, headers) is app/guard.py.
Run it with `blindspots serve PROJECT` (uvicorn, 127.0.0.1:8000 by default).
"""
from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from blindspots.app.auth import NeedsSignIn
from blindspots.app.batching import GroupWriter
from blindspots.app.docs import add_docs
from blindspots.app.guard import Guard, host_set
from blindspots.app.sources import NotFound, ProjectView
from blindspots.app.store import AppStore
from blindspots.app.throttle import SignInThrottle
from blindspots.loop.project import Project

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
MAX_BODY_BYTES = 16 * 1024 * 1024  # a full-HD mask as base64 JSON is ~3 MB; uploads are PNGs


@asynccontextmanager
async def _lifespan(app: FastAPI):  # noqa: ANN202
    yield
    app.state.writer.close()


def create_app(project_path: str | Path, *, max_body_bytes: int = MAX_BODY_BYTES,
               secure_cookies: bool = False, allowed_hosts: Sequence[str] | None = None,
               signin_failures_per_minute: int = 10) -> FastAPI:
    """A FastAPI app for the project at `project_path` (opened with `Project.open`).

    max_body_bytes: largest request body accepted (413 beyond). secure_cookies: mark the session
    cookie Secure (set it when served over HTTPS behind a proxy). allowed_hosts: Host names
    accepted besides loopback and the bound address (also BLINDSPOTS_ALLOWED_HOSTS; "*": any).
    signin_failures_per_minute: failed sign-ins per client address before 429.
    """
    if not isinstance(max_body_bytes, int) or max_body_bytes < 1024:
        raise ValueError(f"max_body_bytes: expected an int >= 1024, got {max_body_bytes!r}")
    project = Project.open(project_path)
    store = AppStore(project)
    app = FastAPI(title="blindspots", summary="Ratings, pixel labels, scenario votes and label-issue review.",
                  lifespan=_lifespan, openapi_url="/api/openapi.json", docs_url=None, redoc_url=None)
    app.state.project = project
    app.state.store = store
    app.state.view = ProjectView(project, store)
    app.state.writer = GroupWriter(project, store.write_lock)
    app.state.templates = Jinja2Templates(directory=str(HERE / "templates"))
    app.state.secure_cookies = bool(secure_cookies)
    app.state.max_body_bytes = max_body_bytes
    app.state.throttle = SignInThrottle(limit=signin_failures_per_minute, window=60.0)

    app.add_middleware(Guard, limit=max_body_bytes, hosts=host_set(allowed_hosts))

    @app.exception_handler(NeedsSignIn)
    async def _signin(request: Request, exc: NeedsSignIn) -> RedirectResponse:
        return RedirectResponse("/signin", status_code=303)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(ValueError)
    async def _bad_value(request: Request, exc: ValueError) -> JSONResponse:
        # An invalid value in a request is 422 everywhere, like the schema checks below.
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        msgs = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
            msgs.append(f"{loc or 'request'}: {e.get('msg')}")
        return JSONResponse({"detail": "; ".join(msgs), "errors": jsonable(exc.errors())}, status_code=422)

    from blindspots.app.routers import api, dashboard, images, label, rate, review, vote

    for r in (api, rate, label, vote, review, dashboard, images):
        app.include_router(r.router)
    app.state.has_docs = add_docs(app)

    @app.get("/favicon.ico", include_in_schema=False)
    def _favicon() -> FileResponse:
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml",
                            headers={"Cache-Control": "public, max-age=86400"})

    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    return app


def jsonable(errors: list) -> list:
    from fastapi.encoders import jsonable_encoder

    return jsonable_encoder([{k: v for k, v in e.items() if k != "ctx"} for e in errors])

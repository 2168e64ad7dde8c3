"""The app factory: `create_app(project_path)` -> a FastAPI app serving one project folder.

The app's shared objects (project, view, store, writer, templates) live on `app.state`; routers
reach them only through `blindspots.app.deps` and never import this module (no cycle).

Server-rendered pages (Jinja2) with plain JavaScript from `static/` (no build step), and a JSON
API under `/api` for every action (OpenAPI schema at `/api/openapi.json`, docs at `/api/docs`).
Run it with `blindspots serve PROJECT` (uvicorn, 127.0.0.1:8000 by default).
"""
from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from blindspots.app.auth import NeedsSignIn
from blindspots.app.batching import GroupWriter
from blindspots.app.sources import NotFound, ProjectView
from blindspots.app.store import AppStore
from blindspots.loop.project import Project

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
MAX_BODY_BYTES = 16 * 1024 * 1024  # a full-HD mask as base64 JSON is ~3 MB; uploads are PNGs


SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; script-src 'self'; "
                               "style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
}


class Guard:
    """Pure ASGI middleware (cheaper than `@app.middleware`): security headers on every
    response, and 413 for request bodies over `limit` bytes (declared or streamed)."""

    def __init__(self, app, limit: int) -> None:  # noqa: ANN001 - ASGI app
        self.app, self.limit = app, limit
        self.headers = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    too_big = int(v) > self.limit
                except ValueError:
                    too_big = True
                if too_big:
                    return await self._reject(send)
        seen = 0
        started = False

        async def limited():  # noqa: ANN202
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge()
            return msg

        async def with_headers(msg) -> None:  # noqa: ANN001
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
                have = {k.lower() for k, _ in msg.get("headers", [])}
                msg = {**msg, "headers": list(msg.get("headers", [])) + [h for h in self.headers if h[0] not in have]}
            await send(msg)

        try:
            await self.app(scope, limited, with_headers)
        except _TooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send) -> None:  # noqa: ANN001
        body = (b'{"detail":"body: expected at most %d bytes, got more (upload too large)"}' % self.limit)
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                    + self.headers})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass




@asynccontextmanager
async def _lifespan(app: FastAPI):  # noqa: ANN202
    yield
    app.state.writer.close()


def create_app(project_path: str | Path, *, max_body_bytes: int = MAX_BODY_BYTES,
               secure_cookies: bool = False) -> FastAPI:
    """A FastAPI app for the project at `project_path` (opened with `Project.open`).

    max_body_bytes: largest request body accepted (413 beyond). secure_cookies: mark the session
    cookie Secure (set it when served over HTTPS behind a proxy).
    """
    if not isinstance(max_body_bytes, int) or max_body_bytes < 1024:
        raise ValueError(f"max_body_bytes: expected an int >= 1024, got {max_body_bytes!r}")
    project = Project.open(project_path)
    store = AppStore(project)
    app = FastAPI(title="blindspots", summary="Ratings, pixel labels, scenario votes and label-issue review.",
                  lifespan=_lifespan, openapi_url="/api/openapi.json", docs_url="/api/docs", redoc_url=None)
    app.state.project = project
    app.state.store = store
    app.state.view = ProjectView(project, store)
    app.state.writer = GroupWriter(project, store.write_lock)
    app.state.templates = Jinja2Templates(directory=str(HERE / "templates"))
    app.state.secure_cookies = bool(secure_cookies)
    app.state.max_body_bytes = max_body_bytes

    app.add_middleware(Guard, limit=max_body_bytes)

    @app.exception_handler(NeedsSignIn)
    async def _signin(request: Request, exc: NeedsSignIn) -> RedirectResponse:
        return RedirectResponse("/signin", status_code=303)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(ValueError)
    async def _bad_value(request: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

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
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    return app


def jsonable(errors: list) -> list:
    from fastapi.encoders import jsonable_encoder

    return jsonable_encoder([{k: v for k, v in e.items() if k != "ctx"} for e in errors])

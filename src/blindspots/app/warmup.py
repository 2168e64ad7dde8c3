"""Ready to serve: pay the one-off costs before the first annotator does.

A fresh app answers its first requests several times slower than a warm one
(`benchmarks/app_load.py`; figures in docs/benchmarks.md), because:

- FastAPI builds each router's route state on the first request it matches; Jinja compiles a
  template on its first render;
- the group writer starts its thread and opens its SQLite connection on the first answer;
- the server process holds ~100,000 objects from its imports, which every full (generation 2)
  garbage collection walks with the GIL held, stalling every request in flight.
  `gc.freeze()` moves what exists after start-up out of the collector's way, so later full
  collections walk only request garbage.

`warm_up(app)` does these once: anonymous in-process requests through the whole middleware and
router stack (each refused or a public page: nothing is written and no sign-in is attempted),
the writer started, then one collection and a freeze. The app's lifespan runs it before the
server takes its first connection when `create_app(warm_up=True)` (as `blindspots serve` does),
and unfreezes at shutdown; it is off by default, since freezing is process-wide (an app embedded
in a bigger program, or built per test, should not decide that for its host).
"""
from __future__ import annotations

import asyncio
import gc
import logging
import time

from fastapi import FastAPI

log = logging.getLogger(__name__)

# (method, path): public or refused without credentials; together they match every router once.
WARM_REQUESTS = (("GET", "/signin"), ("GET", "/api/me"), ("GET", "/rate"), ("GET", "/api/ratings/queue"),
                 ("POST", "/api/ratings"), ("GET", "/label"), ("GET", "/vote"), ("GET", "/review"),
                 ("GET", "/dashboard"), ("GET", "/api/status"))


async def _request(app: FastAPI, method: str, path: str) -> int:
    """One anonymous request through the ASGI app in-process; returns the status code."""
    body = b"{}" if method == "POST" else b""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0), "state": {}}
    sent = False
    status = 0

    async def receive() -> dict:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)  # no disconnect while the app still answers
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(msg: dict) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]

    await app(scope, receive, send)
    return status


async def _warm_requests(app: FastAPI) -> list[int]:
    out = []
    for method, path in WARM_REQUESTS:
        try:
            out.append(await asyncio.wait_for(_request(app, method, path), 30))
        except Exception:  # noqa: BLE001 - warming is best effort; the real request reports its own error
            log.debug("warm-up request %s %s failed", method, path, exc_info=True)
            out.append(-1)
    return out


async def warm_up(app: FastAPI) -> None:
    """Warm `app` (a `create_app` result) before it serves, then freeze the heap for the collector.

    Awaited by the app's lifespan on start-up (the running event loop answers the warm requests).
    """
    t = time.perf_counter()
    statuses = await _warm_requests(app)
    app.state.writer.start()
    gc.collect()
    gc.freeze()
    log.info("app warmed in %.0f ms (statuses %s); %d objects frozen", (time.perf_counter() - t) * 1000,
             statuses, gc.get_freeze_count())


def cool_down() -> None:
    """Undo `warm_up`'s freeze (at shutdown: what was frozen may be collected again)."""
    gc.unfreeze()

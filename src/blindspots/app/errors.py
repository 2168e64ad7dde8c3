"""Error answers that name the field and what was expected, and quote only a short piece of what came.

Why: FastAPI's default validation answer carries each error's whole `input`, so a request with a
10 MB field got a 10 MB error back (the client makes the server echo whatever it sent, into
responses and logs). Here every error body is built from `quote` (at most `MAX_QUOTE` characters
of a value, with its full length said) and `clip` (at most `MAX_DETAIL` characters of a message),
whatever raised it: the schema checks, a `ValueError` of the app or the store, an `HTTPException`
of a router. A model that fails while serving (`models.protocol.ModelFailure`, which is a
`ValueError` too) is the server's failure, not the client's: 500, with the reason logged.
"""
from __future__ import annotations

import logging
import sys

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from blindspots.app.quote import MAX_DETAIL, MAX_QUOTE, clip, json_type, quote
from blindspots.app.project_view import NotFound

log = logging.getLogger(__name__)
_WHERE = ("body", "query", "path", "header", "cookie")


def _field(loc: tuple) -> str:
    """The field's dotted name; each part cut like a quoted value (an unknown field's name came from
    the client and can be as long as its body)."""
    parts = [str(x) if len(str(x)) <= MAX_QUOTE else quote(str(x)) for x in loc if x not in _WHERE]
    return ".".join(parts) or (str(loc[0]) if loc else "request")


def _expected(e: dict) -> str:
    """What the schema expected, in words, from one pydantic error."""
    kind, msg, ctx = e.get("type", ""), str(e.get("msg", "")), e.get("ctx") or {}
    if kind == "missing":
        return "a value"
    if kind == "extra_forbidden":
        return "only the route's documented fields (unknown fields are refused)"
    if kind == "json_invalid":
        return f"valid JSON ({ctx.get('error', 'a decode error')})"
    if kind == "value_error":  # the app's own validators already say "expected ..., got ..."
        return msg.replace("Value error, ", "", 1)
    for prefix, say in (("Input should be ", ""), ("String should have ", "a string with "),
                        ("String should ", "a string that should "), ("List should have ", "a list with ")):
        if msg.startswith(prefix):
            return say + msg[len(prefix):]
    return msg[:1].lower() + msg[1:]


def describe(errors: list[dict]) -> tuple[str, list[dict]]:
    """(one-line detail, short per-error records) for pydantic errors; no error's whole input."""
    items, lines = [], []
    for e in errors:
        field, expected = _field(tuple(e.get("loc", ()))), clip(_expected(e), MAX_DETAIL // 2)
        # "missing" carries the whole enclosing object as its input: nothing came for the field itself.
        got = "none" if e.get("type") == "missing" or "input" not in e else quote(e["input"])
        if str(e.get("type", "")).endswith("_type") and "input" in e:  # strict types: "0" is no integer
            got += f" ({json_type(e['input'])})"
        if e.get("type") == "value_error":  # the message names what came already (cut by `clip`)
            lines.append(f"{field}: {expected}")
        else:
            lines.append(f"{field}: expected {expected}, got {got}")
        items.append({"field": field, "type": e.get("type", ""), "expected": expected, "got": got})
    return clip("; ".join(lines)), items


def _is_model_failure(exc: BaseException) -> bool:
    """isinstance(exc, models.protocol.ModelFailure) without importing `blindspots.models` (it imports
    torch): a model that raised it has imported the module already."""
    protocol = sys.modules.get("blindspots.models.protocol")
    return protocol is not None and isinstance(exc, protocol.ModelFailure)


def add_error_handlers(app: FastAPI) -> None:
    """Install the app's error answers (see the module docstring) on `app`."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail, items = describe(list(exc.errors()))
        return JSONResponse({"detail": detail, "errors": items}, status_code=422)

    @app.exception_handler(ValueError)
    async def _bad_value(request: Request, exc: ValueError) -> JSONResponse:
        if _is_model_failure(exc):
            log.error("model failure on %s %s: %s", request.method, clip(request.url.path, 200), clip(str(exc)))
            # the reason names model files and shapes: for the server's log, not for every client
            return JSONResponse({"detail": "model: expected the model to answer, but it failed on this request "
                                 "(the reason is in the server's log)"}, status_code=500)
        # Any other invalid value in a request is 422, like the schema checks above.
        return JSONResponse({"detail": clip(str(exc))}, status_code=422)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": clip(str(exc))}, status_code=404)

    @app.exception_handler(HTTPException)  # starlette's: routing's 404 / 405 too, not only the routers'
    async def _http(request: Request, exc: HTTPException) -> Response:
        if exc.status_code in (204, 304):  # no body allowed
            return Response(status_code=exc.status_code, headers=exc.headers)
        detail = clip(exc.detail) if isinstance(exc.detail, str) else exc.detail
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

"""The app's outer ASGI layer: allowed hosts, per-route body limits, security headers.

One pure ASGI middleware (cheaper than `@app.middleware`) so every response, errors included,
carries the same headers:

- Host check (DNS rebinding): the Host header must name an allowed host. Default: the loopback
  names and the address the server socket is bound to (`scope["server"]`), plus any extra names
  given to `create_app(allowed_hosts=...)` or in `BLINDSPOTS_ALLOWED_HOSTS` (comma-separated).
  "*" allows any host. 400 otherwise.
- 413 for a body over the route's limit, whether declared (Content-Length) or streamed (chunked
  transfer, no Content-Length). Limits are per route: the paths in `large` (mask and file uploads)
  take up to `limit` bytes, every other route `small` (a rating is ~100 bytes; a few KiB leaves
  room for the longest ids, and a 10 MB field in a rating is refused before it is read). A
  streamed body is read here first (up to the limit, which the app would read anyway) so it is
  refused even where a route never reads it; a declared one is still counted as it arrives, and
  once over the limit whatever the app answers (its body parser may turn the aborted read into a
  400) is replaced by the 413. The 413's body is a few dozen bytes.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable

log = logging.getLogger(__name__)

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin (not no-referrer): a browser then sends a real Origin on same-site form posts,
    # which the sign-in CSRF check reads; nothing leaks to other sites either way.
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; script-src 'self'; "
                               "style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
                               "form-action 'self'",
}
LOOPBACK = ("localhost", "127.0.0.1", "::1")
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
HOSTS_ENV = "BLINDSPOTS_ALLOWED_HOSTS"


def host_name(host_header: str) -> str:
    """'Example.org:8000' -> 'example.org'; '[::1]:8000' -> '::1'."""
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def host_set(extra: Iterable[str] | None) -> frozenset[str]:
    """The configured host names: loopback + `extra` + the BLINDSPOTS_ALLOWED_HOSTS variable."""
    if isinstance(extra, str):
        raise ValueError(f"allowed_hosts: expected a list of host names, got the string {extra!r}")
    names = set(LOOPBACK)
    for h in list(extra or []) + os.environ.get(HOSTS_ENV, "").split(","):
        if not isinstance(h, str):
            raise ValueError(f"allowed_hosts: expected host names (str), got {h!r}")
        if h.strip():
            names.add(host_name(h) if h.strip() != "*" else "*")
    return frozenset(names)


class Guard:
    """ASGI middleware: allowed hosts (400), per-route body limits (413), security headers on every
    response. limit: bytes for the paths in `large`; small: bytes for every other route."""

    def __init__(self, app, limit: int, hosts: frozenset[str], *, small: int | None = None,  # noqa: ANN001
                 large: Iterable[str] = ()) -> None:
        self.app, self.hosts = app, hosts
        self.large_limit, self.small_limit, self.large = limit, min(limit, small or limit), frozenset(large)
        self.headers = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]

    def limit_for(self, scope: dict) -> int:
        """The body limit of the route `scope` asks for (by exact path, before routing)."""
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if root and path.startswith(root):  # served under a prefix (uvicorn --root-path behind a proxy)
            path = path[len(root):]
        return self.large_limit if path in self.large else self.small_limit

    def host_ok(self, scope: dict) -> bool:
        if "*" in self.hosts:
            return True
        host = ""
        for k, v in scope.get("headers", []):
            if k == b"host":
                host = host_name(v.decode("latin-1"))
                break
        if host in self.hosts:
            return True
        bound = (scope.get("server") or ("",))[0]  # the address this server answers on
        return bool(host) and host == str(bound).lower() and host not in ("0.0.0.0", "::")

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if not self.host_ok(scope):
            log.warning("refused Host header from %s", (scope.get("client") or ("?",))[0])
            return await self._reply(send, 400, b'{"detail":"Host: expected an allowed host name (see '
                                     b'BLINDSPOTS_ALLOWED_HOSTS), got another"}')
        limit = self.limit_for(scope)
        declared = False
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                declared = True
                try:
                    too_big = int(v) > limit
                except ValueError:
                    too_big = True
                if too_big:
                    return await self._too_large(send, limit)
        if not declared and scope.get("method") in BODY_METHODS:
            receive = await self._buffered(receive, limit)
            if receive is None:
                return await self._too_large(send, limit)
        seen, started, over = 0, False, False

        async def limited():  # noqa: ANN202
            nonlocal seen, over
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    over = True
                    raise _TooLarge()
            return msg

        async def with_headers(msg) -> None:  # noqa: ANN001
            nonlocal started
            if over:  # the app answered an aborted read (400/422/500): answer 413 instead, once
                if not started:
                    started = True
                    await self._too_large(send, limit)
                return
            if msg["type"] == "http.response.start":
                started = True
                have = {k.lower() for k, _ in msg.get("headers", [])}
                msg = {**msg, "headers": list(msg.get("headers", [])) + [h for h in self.headers if h[0] not in have]}
            await send(msg)

        try:
            await self.app(scope, limited, with_headers)
        except _TooLarge:
            if not started:
                started = True
                await self._too_large(send, limit)

    async def _buffered(self, receive, limit: int):  # noqa: ANN001, ANN202
        """Read a streamed body whole (None when it passes `limit`); a receive that replays it."""
        parts, n = [], 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":  # the client left: the app sees that as it would
                first = msg
                break
            parts.append(msg.get("body", b""))
            n += len(parts[-1])
            if n > limit:
                return None
            if not msg.get("more_body", False):
                first = {"type": "http.request", "body": b"".join(parts), "more_body": False}
                break
        sent = False

        async def replay():  # noqa: ANN202
            nonlocal sent
            if not sent:
                sent = True
                return first
            return await receive()

        return replay

    async def _too_large(self, send, limit: int) -> None:  # noqa: ANN001
        await self._reply(send, 413, b'{"detail":"body: expected at most %d bytes for this route, got more '
                          b'(too large)"}' % limit)

    async def _reply(self, send, status: int, body: bytes) -> None:  # noqa: ANN001
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                    + self.headers})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass

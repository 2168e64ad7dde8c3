"""Who is asking: personal tokens (hashed in the store), cookie sessions with CSRF, roles.

Two ways in, both checked on every route but sign-in:

- ``Authorization: Bearer <token>`` — for scripts. A bearer header is never sent by a browser
  on its own, so no CSRF check is needed.
- the ``bs_session`` cookie set by sign-in — for the pages. The session id is random and only
  its SHA-256 is stored; every state-changing request (POST, PUT, PATCH, DELETE) must carry the
  session's CSRF token in the ``X-CSRF-Token`` header (the pages read it from a meta tag), and
  the cookie is HttpOnly and SameSite=Strict.

Roles: "admin" sees progress, results and the dashboard and manages annotators; "annotator"
sees only their own queues.
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import NoReturn

from fastapi import HTTPException, Request

SESSION_COOKIE = "bs_session"
CSRF_HEADER = "X-CSRF-Token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Principal:
    """The signed-in annotator. via: "token" (bearer header) or "session" (cookie)."""

    name: str
    role: str
    via: str
    csrf: str = ""

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


class NeedsSignIn(Exception):
    """Raised by page routes so the app redirects a browser to the sign-in page."""


def _bearer(request: Request) -> str | None:
    h = request.headers.get("authorization", "")
    scheme, _, value = h.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def client_address(request: Request) -> str:
    """The address the request came from (the proxy's, behind one: the throttle counts per this)."""
    return request.client.host if request.client else "unknown"


def refuse_unknown_token(request: Request, field: str, *, bearer: bool) -> NoReturn:
    """Count an unknown token against its address (security/throttle.py) and refuse it: 401, or 429 with
    Retry-After once the address had too many failures. field: where the token came from ("token",
    "Authorization")."""
    throttle = request.app.state.throttle
    wait = throttle.failed(client_address(request))
    if wait:
        raise HTTPException(429, f"{field}: expected a valid annotator token, got an unknown one, and more than "
                            f"{throttle.limit} a minute from this address; its failed attempts are refused for "
                            f"{wait} s (valid tokens are served)", headers={"Retry-After": str(wait)})
    raise HTTPException(401, f"{field}: expected a valid annotator token, got an unknown one",
                        headers={"WWW-Authenticate": "Bearer"} if bearer else None)


def identify(request: Request) -> Principal | None:
    """The principal of a request (checking CSRF for cookie sessions), or None if anonymous.

    Raises HTTPException 401 for an unknown bearer token (429 once the address had too many, see
    security/throttle.py; a valid token is served whatever its address did) and 403 for a missing/wrong
    CSRF token.
    """
    app = request.app.state
    token = _bearer(request)
    if token is not None:
        who = app.project.answers.annotator_for_token(token)
        if who is None:  # a bearer header is a sign-in too: counted against the same throttle
            refuse_unknown_token(request, "Authorization", bearer=True)
        return Principal(who["name"], who["role"], "token")
    sid = request.cookies.get(SESSION_COOKIE)
    if not sid:
        return None
    sess = app.store.session(sid)
    if sess is None:
        return None
    if request.method in UNSAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not sent or not hmac.compare_digest(sent, sess["csrf"]):
            raise HTTPException(403, f"{CSRF_HEADER}: expected the session's CSRF token for a "
                                f"{request.method} request, got {'none' if not sent else 'a wrong one'}")
    return Principal(sess["name"], sess["role"], "session", sess["csrf"])


async def require_user(request: Request) -> Principal:
    """Dependency for API routes: any signed-in annotator (401 otherwise). Async: it runs on the
    event loop (a hashed-token lookup, well under a millisecond) instead of costing a thread hop."""
    who = identify(request)
    if who is None:
        raise HTTPException(401, "expected a bearer token (Authorization: Bearer ...) or a signed-in session, "
                            "got neither", headers={"WWW-Authenticate": "Bearer"})
    return who


async def require_admin(request: Request) -> Principal:
    """Dependency for admin API routes (403 for annotators)."""
    who = await require_user(request)
    if not who.is_admin:
        raise HTTPException(403, f"role: expected an admin for this route, got {who.role!r} ({who.name})")
    return who


def page_user(request: Request) -> Principal:
    """Dependency for HTML pages: redirects anonymous browsers to /signin."""
    who = identify(request)
    if who is None:
        raise NeedsSignIn()
    return who


def page_admin(request: Request) -> Principal:
    who = page_user(request)
    if not who.is_admin:
        raise HTTPException(403, f"role: expected an admin for this page, got {who.role!r} ({who.name})")
    return who

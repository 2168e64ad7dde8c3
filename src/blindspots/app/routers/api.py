"""Sign-in/out, who am I, annotators (admin), loop status, attached sets (admin)."""
from __future__ import annotations

import hmac
import logging
import secrets
from typing import Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import Field

from blindspots.app import deps
from blindspots.app.deps import page
from blindspots.app.quote import quote
from blindspots.app.routers.bodies import Body
from blindspots.app.security import (SESSION_COOKIE, Principal, client_address, identify, refuse_unknown_token,
                                     require_admin, require_user)

router = APIRouter()
log = logging.getLogger(__name__)
LOGIN_COOKIE = "bs_login"  # the pre-session CSRF token of the sign-in form


class SignIn(Body):
    token: str = Field(min_length=8, max_length=256, description="The personal token of the sign-in link.")


def _check_origin(request: Request) -> None:
    """Login CSRF, first line: a browser's cross-site POST carries a foreign (or "null") Origin."""
    origin = request.headers.get("origin")
    if origin is None:  # not a browser form/fetch (scripts); the form's token still guards /signin
        return
    if urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
        log.warning("refused cross-site sign-in from %s (Origin %s)", client_address(request), quote(origin))
        raise HTTPException(403, f"Origin: expected this site's own origin for a sign-in, got {quote(origin)}")


def _start_session(request: Request, token: str, response: Response) -> dict:
    who = deps.project(request).answers.annotator_for_token(token)
    if who is None:
        refuse_unknown_token(request, "token", bearer=False)
    sid, csrf = deps.store(request).create_session(who["name"])
    response.set_cookie(SESSION_COOKIE, sid, httponly=True, samesite="strict", secure=deps.secure_cookies(request),
                        max_age=12 * 3600, path="/")
    return {"name": who["name"], "role": who["role"], "csrf": csrf}


@router.get("/signin", response_class=HTMLResponse, include_in_schema=False)
def signin_page(request: Request, error: str = "") -> Response:
    # Login CSRF, second line: a pre-session token, in a SameSite=Strict cookie and in the form
    # (double submit); another site can neither read it nor make the browser send the cookie.
    login_csrf = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
    resp = page(request, "signin.html", None, error=error[:200], login_csrf=login_csrf)
    resp.set_cookie(LOGIN_COOKIE, login_csrf, httponly=True, samesite="strict", secure=deps.secure_cookies(request),
                    max_age=12 * 3600, path="/signin")
    resp.headers["Cache-Control"] = "no-store"
    return resp


@router.post("/signin", include_in_schema=False)
def signin_form(request: Request, token: str = Form(..., min_length=1, max_length=256),
                csrf: str = Form("", max_length=256)) -> Response:
    _check_origin(request)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    if not (csrf and expected and hmac.compare_digest(csrf, expected)):
        # Refused (no session); back to a fresh form, since a person's form may just have expired.
        log.warning("refused sign-in without the form's token from %s", client_address(request))
        return RedirectResponse("/signin?error=the+sign-in+form+had+expired%2C+please+sign+in+again", status_code=303)
    resp = RedirectResponse("/", status_code=303)
    try:
        _start_session(request, token, resp)
    except HTTPException as e:
        if e.status_code == 429:  # a person at the form gets the form back, saying how long to wait
            wait = (e.headers or {}).get("Retry-After", "60")
            held = signin_page(request, error=f"too many failed sign-ins from this address; try again in {wait} s")
            held.status_code = 429
            held.headers["Retry-After"] = wait
            return held
        return RedirectResponse("/signin?error=unknown+token", status_code=303)
    return resp


@router.post("/api/signin", tags=["auth"])
def api_signin(body: SignIn, request: Request, response: Response) -> dict:
    """Exchange a personal token for a cookie session; returns the session's CSRF token. An unknown
    token is 401, or 429 (Retry-After) once its address had 10 failures in a minute; a valid token
    is served whatever its address did."""
    _check_origin(request)
    return _start_session(request, body.token, response)


@router.post("/api/signout", tags=["auth"])
def api_signout(request: Request, who: Principal = Depends(require_user)) -> JSONResponse:
    """End the cookie session (bearer tokens stay valid until the annotator is removed)."""
    sid = request.cookies.get(SESSION_COOKIE)
    if sid:
        deps.store(request).end_session(sid)
    resp = JSONResponse({"ok": True})
    resp.delete_cookie(SESSION_COOKIE, path="/")
    return resp


@router.get("/", include_in_schema=False)
def home(request: Request) -> Response:
    who = identify(request)
    if who is None:
        return RedirectResponse("/signin", status_code=303)
    return RedirectResponse("/dashboard" if who.is_admin else "/rate", status_code=303)


@router.get("/api/me", tags=["auth"])
def me(who: Principal = Depends(require_user)) -> dict:
    """The signed-in annotator: name, role and how they signed in."""
    return {"name": who.name, "role": who.role, "via": who.via}


# ---- annotators (admin) ---------------------------------------------------------------------------

class NewAnnotator(Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    role: Literal["annotator", "admin"] = "annotator"


@router.get("/api/annotators", tags=["annotators"])
def list_annotators(request: Request, who: Principal = Depends(require_admin)) -> list[dict]:
    """Every annotator: name, role, created (tokens are never shown again)."""
    return deps.project(request).answers.annotators().to_dict(orient="records")


@router.post("/api/annotators", tags=["annotators"], status_code=201)
def add_annotator(body: NewAnnotator, request: Request, who: Principal = Depends(require_admin)) -> dict:
    """Create (or re-key) an annotator; the token is returned once, only its hash is stored."""
    token = secrets.token_urlsafe(24)
    with deps.store(request).write_lock:
        deps.project(request).answers.add_annotator(body.name, token, body.role)
    deps.store(request).end_sessions_of(body.name)
    return {"name": body.name, "role": body.role, "token": token, "link": f"/signin#token={token}"}


@router.delete("/api/annotators/{name}", tags=["annotators"])
def remove_annotator(name: str, request: Request, who: Principal = Depends(require_admin)) -> dict:
    """Remove an annotator (their answers stay; their token and sessions stop working)."""
    if name == who.name:
        raise HTTPException(400, "name: expected another annotator than yourself")
    with deps.store(request).write_lock:
        removed = deps.project(request).answers.remove_annotator(name)
    if not removed:
        raise HTTPException(404, f"name: expected a registered annotator, got {quote(name)}")
    deps.store(request).end_sessions_of(name)
    return {"removed": name}


# ---- loop status ------------------------------------------------------------------------------------

@router.get("/api/status", tags=["loop"])
def loop_status(request: Request, who: Principal = Depends(require_user)) -> dict:
    """Where the loop stands and what it waits for (awaited ids only for admins)."""
    st = deps.view(request).status()
    out = {"state": st.state, "round": st.round, "step": st.step, "message": st.message, "done": st.done,
           "total": st.total, "next": [{"kind": a.kind, "why": a.why} for a in st.next]}
    if who.is_admin:
        out["awaited"] = list(st.awaited)
    return out

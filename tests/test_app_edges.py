"""The app's edges over HTTP: login CSRF, sign-in throttling, 413 for every
oversized body (declared or streamed), allowed hosts, 422 for invalid values, offline docs,
favicon and `[hidden]`."""
from __future__ import annotations

import logging
import re

import pytest
import torch
from fastapi.testclient import TestClient

from app_project_helpers import minimal_project
from blindspots.app import create_app
from blindspots.app.security import SignInThrottle

torch.set_num_threads(1)
TOKEN, ADMIN = "edges-annotator-token", "edges-admin-token"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    p = minimal_project(tmp_path_factory.mktemp("edges"), pool_image=True)
    p.answers.add_annotator("ann", TOKEN, "annotator")
    p.answers.add_annotator("boss", ADMIN, "admin")
    return p


@pytest.fixture()
def client(project) -> TestClient:  # noqa: ANN001
    return TestClient(create_app(project.path, max_body_bytes=4096, signin_failures_per_minute=3))


def form_token(client: TestClient) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', client.get("/signin").text).group(1)


def test_sign_in_form_needs_its_token_and_own_origin(client: TestClient) -> None:
    # No token (a cross-site form cannot read it; its SameSite cookie is not sent cross-site).
    for sent in ({"token": TOKEN}, {"token": TOKEN, "csrf": "forged-token"}):
        r = client.post("/signin", data=sent, follow_redirects=False)  # refused: back to a fresh form
        assert r.status_code == 303 and r.headers["location"].startswith("/signin?error=") and "bs_session" not in r.cookies
    assert client.get("/api/me").status_code == 401
    csrf = form_token(client)
    # The right token, but posted from another site.
    r = client.post("/signin", data={"token": TOKEN, "csrf": csrf}, headers={"Origin": "http://evil.example"},
                    follow_redirects=False)
    assert r.status_code == 403 and "Origin" in r.json()["detail"]
    assert client.post("/signin", data={"token": TOKEN, "csrf": csrf}, headers={"Origin": "null"},
                       follow_redirects=False).status_code == 403
    assert client.post("/api/signin", json={"token": TOKEN}, headers={"Origin": "http://evil.example"}).status_code == 403
    # Same origin: signed in.
    r = client.post("/signin", data={"token": TOKEN, "csrf": csrf}, headers={"Origin": "http://testserver"},
                    follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/" and "bs_session" in r.cookies


def test_sign_in_throttled_per_address_and_logged(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="blindspots.app.security.throttle"):
        for _ in range(3):
            assert client.post("/api/signin", json={"token": "wrong-token-x"}).status_code == 401
    fails = [r for r in caplog.records if "failed sign-in from testclient" in r.getMessage()]
    assert len(fails) == 3
    r = client.post("/api/signin", json={"token": "wrong-token-y"})  # failed attempts are refused now
    assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
    csrf = form_token(client)
    held = client.post("/signin", data={"token": "wrong-token-z", "csrf": csrf}, follow_redirects=False)
    # the form's answer is the sign-in page again (a person reads it), with the wait in words and header
    assert held.status_code == 429 and held.headers["content-type"].startswith("text/html")
    assert 1 <= int(held.headers["Retry-After"]) <= 60 and "too many failed sign-ins" in held.text
    assert f"try again in {held.headers['Retry-After']} s" in held.text and 'name="token"' in held.text
    # a colleague behind the same address signs in all the same (no lock-out by a neighbour)
    assert client.post("/api/signin", json={"token": TOKEN}).status_code == 200
    r = client.post("/signin", data={"token": TOKEN, "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/" and "bs_session" in r.cookies
    other = TestClient(client.app, client=("10.1.2.3", 5000))  # another address has its own count
    assert other.post("/api/signin", json={"token": "wrong-token-x"}).status_code == 401


def test_unknown_bearer_tokens_are_throttled_too(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="blindspots.app.security.throttle"):
        for _ in range(3):
            assert client.get("/api/me", headers={"Authorization": "Bearer guess-guess"}).status_code == 401
    assert sum("failed sign-in" in r.getMessage() for r in caplog.records) == 3
    r = client.get("/api/me", headers={"Authorization": "Bearer guess-guess"})
    assert r.status_code == 429 and "Retry-After" in r.headers
    assert client.post("/api/signin", json={"token": "guess-guess"}).status_code == 429  # one budget per address
    r = client.get("/api/me", headers={"Authorization": f"Bearer {TOKEN}"})  # a valid token is served
    assert r.status_code == 200 and r.json()["name"] == "ann"


def test_throttle_window_slides() -> None:
    now = [0.0]
    t = SignInThrottle(limit=2, window=60, clock=lambda: now[0])
    t.failed("a")
    now[0] = 30.0
    t.failed("a")
    assert t.retry_after("a") == 30 and t.retry_after("b") == 0
    now[0] = 60.5  # the first failure left the window
    assert t.retry_after("a") == 0
    with pytest.raises(ValueError, match="limit"):
        SignInThrottle(limit=0)


@pytest.mark.parametrize("path,ctype", [("/api/ratings", "application/json"), ("/api/signin", "application/json"),
                                        ("/signin", "application/x-www-form-urlencoded"),
                                        ("/api/labels/upload", "multipart/form-data; boundary=b"),
                                        ("/api/ratings", "text/plain")])
def test_oversized_bodies_are_413_declared_or_streamed(client: TestClient, path: str, ctype: str) -> None:
    big = b"x" * 5000
    h = {"Authorization": f"Bearer {TOKEN}", "Content-Type": ctype}
    assert client.post(path, content=big, headers=h).status_code == 413

    def chunks():  # noqa: ANN202 - a streamed body: chunked transfer, no Content-Length
        for _ in range(10):
            yield b"y" * 1000

    r = client.post(path, content=chunks(), headers=h)
    assert r.status_code == 413, r.text
    assert "too large" in r.json()["detail"] and r.headers["x-content-type-options"] == "nosniff"
    small = client.post("/api/ratings", content=(b for b in [b'{"round": 0, ', b'"image_id": "a.png", "score": 9}']),
                        headers={**h, "Content-Type": "application/json"})
    assert small.status_code == 422  # a small streamed body is read as usual


def test_host_header_must_be_allowed(project, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    def status(app, host: str) -> int:  # noqa: ANN001 - the TestClient's server address is "testserver"
        return TestClient(app).get("/signin", headers={"Host": host}).status_code

    app = create_app(project.path)
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000", "testserver"):  # loopback and the bound host
        assert status(app, host) == 200, host
    r = TestClient(app).get("/signin", headers={"Host": "evil.example"})
    assert r.status_code == 400 and "Host" in r.json()["detail"]
    assert status(app, "evil.example:8000") == 400
    configured = create_app(project.path, allowed_hosts=["Annotate.Lab"])
    assert status(configured, "annotate.lab:8443") == 200 and status(configured, "evil.example") == 400
    assert status(create_app(project.path, allowed_hosts=["*"]), "anything.example") == 200
    monkeypatch.setenv("BLINDSPOTS_ALLOWED_HOSTS", "a.example, b.example")
    from_env = create_app(project.path)
    assert status(from_env, "b.example") == 200 and status(from_env, "c.example") == 400
    with pytest.raises(ValueError, match="allowed_hosts"):
        create_app(project.path, allowed_hosts="annotate.lab")


def test_invalid_values_are_422(client: TestClient) -> None:
    h = {"Authorization": f"Bearer {TOKEN}"}
    for body in ({"round": 0, "image_id": "a.png", "score": 7}, {"round": -1, "image_id": "a.png", "score": 3},
                 {"round": 0, "image_id": "", "score": 3}, {"round": 0, "image_id": "a.png", "score": "meh"},
                 {"round": 0, "image_id": "a.png"}):
        r = client.post("/api/ratings", json=body, headers=h)
        assert r.status_code == 422 and r.json()["detail"], (body, r.status_code)
    assert client.post("/api/ratings", content=b"{not json", headers={**h, "Content-Type": "application/json"}
                       ).status_code == 422
    assert client.post("/api/reviews", json={"set": "s", "image_id": "a", "region": "1", "verdict": "maybe"},
                       headers=h).status_code == 422
    assert client.post("/signin", data={"token": "t" * 300, "csrf": form_token(client)}).status_code == 422


def test_favicon_and_hidden(client: TestClient) -> None:
    r = client.get("/favicon.ico")
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    css = client.get("/static/app.css").text
    assert re.search(r"\[hidden\]\s*\{\s*display:\s*none\s*!important", css)


def test_no_docs_link_without_local_swagger_assets(project, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.setattr("blindspots.app.docs.swagger_assets", lambda: None)
    c = TestClient(create_app(project.path))
    assert c.get("/api/docs").status_code == 404 and c.get("/api/openapi.json").status_code == 200
    c.post("/api/signin", json={"token": ADMIN})
    assert 'href="/api/docs"' not in c.get("/dashboard").text


def test_docs_served_from_local_assets(client: TestClient) -> None:
    from blindspots.app.docs import swagger_assets

    if swagger_assets() is None:
        pytest.skip("swagger-ui-bundle-v2 is not installed (no docs pages then)")
    r = client.get("/api/docs")
    assert r.status_code == 200 and "/api/docs/assets/swagger-ui-bundle.js" in r.text and "cdn" not in r.text.lower()
    assert "<script>" not in r.text  # the CSP allows no inline script
    assert client.get("/api/docs/assets/swagger-ui-bundle.js").status_code == 200
    assert client.get("/api/docs/assets/swagger-ui.css").status_code == 200
    client.post("/api/signin", json={"token": ADMIN})
    assert 'href="/api/docs"' in client.get("/dashboard").text

"""The app's three edges, over HTTP: error bodies quote only a short piece of what came
(responses and logs), valid tokens are served while their address is throttled, and per-route
body limits with unknown fields and converted types refused on write routes."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from blindspots.app import create_app
from blindspots.app.services import make_sample_project

torch.set_num_threads(1)
ANN, ANN2, ADMIN = "limits-annotator-token", "limits-second-token", "limits-admin-token"
MB10 = 10 * 1024 * 1024


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    project = make_sample_project(tmp_path_factory.mktemp("limits") / "sample", n_pool=12, size=16, n_candidates=6,
                                  annotators={"ann": ("annotator", ANN), "bob": ("annotator", ANN2),
                                              "boss": ("admin", ADMIN)})
    ids = list(project.answers.candidates(0, "M")["id"])
    return {"project": project, "ids": ids}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def stored(world: dict, who: str) -> dict:
    return world["project"].answers.ratings_of(0, who)


def test_a_10_mb_field_is_413_with_a_small_body(world: dict) -> None:
    c = TestClient(create_app(world["project"].path))  # the default limits
    rating = {"round": 0, "image_id": world["ids"][0], "score": 3}
    r = c.post("/api/ratings", json={**rating, "note": "x" * MB10}, headers=bearer(ANN2))
    assert r.status_code == 413 and len(r.content) < 200 and "bytes" in r.json()["detail"]
    assert world["ids"][0] not in stored(world, "bob")  # nothing of it was stored
    r = c.post("/api/ratings", json={**rating, "image_id": "x" * MB10}, headers=bearer(ANN2))
    assert r.status_code == 413 and len(r.content) < 200
    # the mask routes take large bodies (as before): there a 1 MB id is read, refused by the schema,
    # and the answer quotes 40 characters of it
    r = c.post("/api/labels", json={"kind": "round", "ref": "0", "image_id": "y" * 2**20, "width": 1, "height": 1,
                                    "mask": "AA=="}, headers=bearer(ANN2))
    assert r.status_code == 422 and len(r.content) < 1000, len(r.content)
    assert "image_id" in r.json()["detail"] and f"({2**20} characters)" in r.json()["detail"]
    assert "y" * 41 not in r.text and "input" not in r.json()["errors"][0]


def test_validation_errors_name_field_expected_and_a_short_piece(world: dict) -> None:
    c = TestClient(create_app(world["project"].path))
    long_id = "z" * 5000  # fits the body limit; the schema allows at most 1024 characters
    r = c.post("/api/ratings", json={"round": 0, "image_id": long_id, "score": 3}, headers=bearer(ANN2))
    assert r.status_code == 422 and len(r.content) < 1000
    assert r.json()["detail"].startswith("image_id: expected a string with at most 1024 characters, got 'zzz")
    assert "(5000 characters)" in r.json()["detail"] and "z" * 41 not in r.text
    r = c.post("/api/ratings", json={"round": 0, "image_id": world["ids"][0], "score": "w" * 3000},
               headers=bearer(ANN2))
    assert r.status_code == 422 and "score" in r.json()["detail"] and "w" * 41 not in r.text
    r = c.post("/api/ratings", json={"round": 0, "image_id": world["ids"][0], "score": 3, "k" * 3000: 1},
               headers=bearer(ANN2))  # an unknown field's name is the client's text too
    assert r.status_code == 422 and "unknown fields are refused" in r.json()["detail"] and "k" * 41 not in r.text
    r = c.get("/api/images/pool", params={"id": "q" * 1000}, headers=bearer(ANN2))  # a router's own 404
    assert r.status_code == 404 and "(1000 characters)" in r.json()["detail"] and "q" * 41 not in r.text
    r = c.post("/api/ratings", content=b'{"round": 0, "image_id": "' + b"j" * 3000, headers={
        **bearer(ANN2), "Content-Type": "application/json"})
    assert r.status_code == 422 and "valid JSON" in r.json()["detail"] and "j" * 41 not in r.text


@pytest.mark.parametrize("change,field,says", [
    ({"round": "0"}, "round", "got '0' (a string)"), ({"round": True}, "round", "(a boolean)"),
    ({"round": 0.0}, "round", "(a number)"), ({"image_id": 5}, "image_id", "(an integer)"),
    ({"note": "hi"}, "note", "unknown fields are refused"), ({"score": True}, "score", "score")])
def test_write_routes_take_strict_types_and_no_unknown_fields(world: dict, change: dict, field: str,
                                                              says: str) -> None:
    c = TestClient(create_app(world["project"].path))
    body = {"round": 0, "image_id": world["ids"][1], "score": 2, **change}
    r = c.post("/api/ratings", json=body, headers=bearer(ANN2))
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith(f"{field}:") and says in detail, detail
    assert world["ids"][1] not in stored(world, "bob")


def test_every_write_body_refuses_unknown_fields(world: dict) -> None:
    c = TestClient(create_app(world["project"].path))
    for url, body in [("/api/ratings/undo", {"round": 0, "image_id": world["ids"][0]}),
                      ("/api/votes", {"set": "s", "item_id": "i", "label": "none"}),
                      ("/api/reviews", {"set": "s", "image_id": "a", "region": "1", "verdict": "fine"}),
                      ("/api/annotators", {"name": "newbie"}),
                      ("/api/labels", {"kind": "round", "ref": "0", "image_id": "a", "width": 1, "height": 1,
                                       "mask": "AA=="}),
                      ("/api/signin", {"token": ANN})]:
        r = c.post(url, json={**body, "extra": 1}, headers=bearer(ADMIN))
        assert r.status_code == 422 and r.json()["detail"] == ("extra: expected only the route's documented fields "
                                                               "(unknown fields are refused), got 1"), (url, r.text)
    assert c.post("/api/ratings/undo", json={"round": "0", "image_id": world["ids"][0]},
                  headers=bearer(ADMIN)).status_code == 422


def test_valid_tokens_are_served_while_the_address_is_throttled(world: dict,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    c = TestClient(create_app(world["project"].path, signin_failures_per_minute=3))
    with caplog.at_level(logging.WARNING, logger="blindspots.app.security.throttle"):
        for _ in range(3):
            assert c.get("/api/ratings/queue", headers=bearer("wrong-guess")).status_code == 401
        for _ in range(5):  # over the limit: failed attempts refused (and logged once, not five times)
            r = c.get("/api/ratings/queue", headers=bearer("wrong-guess"))
            assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    lines = [m.getMessage() for m in caplog.records]
    assert len(lines) == 4 and "valid tokens are still served" in lines[-1]
    assert c.post("/api/signin", json={"token": "wrong-guess"}).status_code == 429
    # a colleague behind the same address: bearer token, rating stored
    assert c.get("/api/ratings/queue", headers=bearer(ANN)).status_code == 200
    r = c.post("/api/ratings", json={"round": 0, "image_id": world["ids"][2], "score": 4}, headers=bearer(ANN))
    assert r.status_code == 200 and stored(world, "ann")[world["ids"][2]] == 4
    # ... and a cookie session (sign-in, then a rating with the CSRF token)
    s = c.post("/api/signin", json={"token": ANN2})
    assert s.status_code == 200
    r = c.post("/api/ratings", json={"round": 0, "image_id": world["ids"][2], "score": 5},
               headers={"X-CSRF-Token": s.json()["csrf"]})
    assert r.status_code == 200 and stored(world, "bob")[world["ids"][2]] == 5
    c.cookies.clear()
    assert c.get("/api/me", headers=bearer("wrong-guess")).status_code == 429  # still refused


def test_a_failing_model_is_a_logged_500_not_a_client_error(world: dict, caplog: pytest.LogCaptureFixture) -> None:
    from blindspots.models import CallableSegmenter

    def crashes(images: np.ndarray) -> np.ndarray:
        raise RuntimeError("out of memory " + "m" * 10_000)

    seg = CallableSegmenter(crashes, num_classes=2)
    app = create_app(world["project"].path)

    @app.get("/predict-test")
    def predict() -> dict:  # a route that runs a model, as a model-serving route would
        return {"shape": list(seg.predict_proba(np.zeros((1, 8, 8, 3), np.uint8)).shape)}

    with caplog.at_level(logging.ERROR, logger="blindspots.app.errors"):
        r = TestClient(app).get("/predict-test")
    assert r.status_code == 500 and "model" in r.json()["detail"] and "server's log" in r.json()["detail"]
    assert "out of memory" not in r.text  # the reason stays on the server
    logged = [m.getMessage() for m in caplog.records]
    assert len(logged) == 1 and "RuntimeError: out of memory" in logged[0] and len(logged[0]) < 600


@pytest.mark.parametrize("root", ["", "/annotate"])  # also served under a prefix behind a proxy
def test_mask_routes_keep_the_large_limit(world: dict, root: str) -> None:
    c = TestClient(create_app(world["project"].path, max_json_bytes=1024), root_path=root)
    body = {"kind": "round", "ref": "0", "image_id": "a", "width": 64, "height": 64, "mask": "A" * 5000}
    r = c.post(f"{root}/api/labels", json=body, headers=bearer(ANN2))
    assert r.status_code == 409  # the body was read: then no round takes masks
    r = c.post(f"{root}/api/ratings", json={"round": 0, "image_id": "a" * 1000, "score": 3}, headers=bearer(ANN2))
    assert r.status_code == 413 and "1024 bytes" in r.json()["detail"]

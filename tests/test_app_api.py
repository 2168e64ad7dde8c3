"""The web app's JSON API (FastAPI TestClient) on a real sample project: auth, CSRF, path
traversal, validation, idempotent and concurrent submissions, every endpoint."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

from blindspots.app import create_app
from blindspots.app.services import make_sample_project
from blindspots.ids import find_artifact
from blindspots import loop
from blindspots.loop.project import Project

torch.set_num_threads(1)
ADMIN, ANN, ANN2, ANN3 = "admintoken-0001", "anntoken-00001", "anntoken-00002", "anntoken-00003"
PEOPLE = {"boss": ("admin", ADMIN), "ann": ("annotator", ANN), "bob": ("annotator", ANN2),
          "cy": ("annotator", ANN3)}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("app")
    project = make_sample_project(root / "sample", n_pool=24, size=32, n_candidates=8, annotators=PEOPLE)
    pool_root = Path(project.config.resolve(project.config.pool.root))
    secret = root / "secret.txt"
    secret.write_text("top secret")
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(root / "outside.png")
    os.symlink(root / "outside.png", pool_root / "escape.png")  # a link in the pool that leaves it
    os.symlink(secret, pool_root / "escape2.png")
    # Many unknown tokens on purpose below (every route): no sign-in throttling here (test_app_edges).
    app = create_app(project.path, max_body_bytes=256 * 1024, signin_failures_per_minute=10_000)
    return {"root": root, "project": project, "app": app, "pool": pool_root}


@pytest.fixture()
def client(world: dict) -> TestClient:
    return TestClient(world["app"])


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def api_routes(app) -> list[tuple[str, str]]:  # noqa: ANN001
    """(method, path) of every /api route of the app's routers (sign-in excepted)."""
    from blindspots.app.routers import api, dashboard, images, label, rate, review, vote

    out = []
    for mod in (api, dashboard, images, label, rate, review, vote):
        for r in mod.router.routes:
            if r.path.startswith("/api/") and r.path != "/api/signin":
                out += [(m, r.path) for m in sorted(r.methods - {"HEAD", "OPTIONS"})]
    return out


# ---- auth -------------------------------------------------------------------------------------

def test_every_api_route_needs_auth(world: dict, client: TestClient) -> None:
    routes = api_routes(world["app"])
    assert len(routes) >= 20
    for method, path in routes:
        url = path.replace("{name}", "ann")
        r = client.request(method, url)
        assert r.status_code == 401, (method, path, r.status_code, r.text)
        r = client.request(method, url, headers=bearer("not-a-real-token"))
        assert r.status_code == 401, (method, path)
    for page in ("/rate", "/label", "/vote", "/review", "/dashboard"):
        r = client.get(page, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/signin"
    assert client.get("/signin").status_code == 200
    assert "top secret" not in client.get("/reports/../../secret.txt").text


def test_admin_routes_refuse_annotators(client: TestClient) -> None:
    for method, url in [("GET", "/api/dashboard"), ("GET", "/api/annotators"), ("POST", "/api/annotators"),
                        ("DELETE", "/api/annotators/bob"), ("GET", "/api/figures")]:
        r = client.request(method, url, headers=bearer(ANN), json={"name": "x"})
        assert r.status_code == 403, (url, r.text)
        assert "admin" in r.json()["detail"]
    assert client.get("/dashboard", headers=bearer(ANN)).status_code == 403
    assert client.get("/api/dashboard", headers=bearer(ADMIN)).status_code == 200


def test_tokens_are_stored_hashed(world: dict) -> None:
    p: Project = world["project"]
    rows = dict(p.store.db.execute("SELECT name, token_hash FROM annotators").fetchall())
    assert rows["ann"] == hashlib.sha256(ANN.encode()).hexdigest()
    raw = b"".join(f.read_bytes() for f in p.path.glob("store.sqlite*"))
    assert ANN.encode() not in raw and ADMIN.encode() not in raw


def test_cookie_session_needs_csrf(client: TestClient) -> None:
    r = client.post("/api/signin", json={"token": ANN})
    assert r.status_code == 200 and r.json()["name"] == "ann"
    csrf = r.json()["csrf"]
    cookie = r.cookies.get("bs_session")
    assert cookie and "httponly" in r.headers["set-cookie"].lower() and "samesite=strict" in r.headers["set-cookie"].lower()
    assert client.get("/api/me").json() == {"name": "ann", "role": "annotator", "via": "session"}
    q = client.get("/api/ratings/queue").json()
    body = {"round": q["round"], "image_id": q["items"][0]["id"], "score": 2}
    r = client.post("/api/ratings", json=body)
    assert r.status_code == 403 and "CSRF" in r.json()["detail"]
    assert client.post("/api/ratings", json=body, headers={"X-CSRF-Token": "wrong"}).status_code == 403
    assert client.post("/api/ratings", json=body, headers={"X-CSRF-Token": csrf}).status_code == 200
    assert client.post("/api/ratings/undo", json={"round": q["round"], "image_id": body["image_id"]},
                       headers={"X-CSRF-Token": csrf}).json()["removed"] is True
    # The session id is stored hashed, too.
    assert client.app.state.project.store.db.execute("SELECT COUNT(*) FROM app_sessions WHERE id_hash=?",
                                               (cookie,)).fetchone()[0] == 0
    assert client.post("/api/signout", headers={"X-CSRF-Token": csrf}).status_code == 200
    client.cookies.set("bs_session", cookie)
    assert client.get("/api/me").status_code == 401


def test_form_sign_in_and_pages(client: TestClient) -> None:
    # The form carries the pre-session CSRF token of its page (login CSRF).
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/signin").text).group(1)
    r = client.post("/signin", data={"token": "wrong-token", "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and "error" in r.headers["location"]
    r = client.post("/signin", data={"token": ANN, "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    assert client.get("/", follow_redirects=False).headers["location"] == "/rate"
    for page in ("/rate", "/label", "/vote", "/review"):
        r = client.get(page)
        assert r.status_code == 200 and 'name="csrf-token"' in r.text
        assert "default-src 'self'" in r.headers["content-security-policy"]
    assert client.get("/dashboard").status_code == 403


def test_annotator_management_api(client: TestClient) -> None:
    r = client.post("/api/annotators", json={"name": "dee", "role": "annotator"}, headers=bearer(ADMIN))
    assert r.status_code == 201
    tok = r.json()["token"]
    assert r.json()["link"] == f"/signin#token={tok}"
    assert client.get("/api/me", headers=bearer(tok)).json()["name"] == "dee"
    names = [a["name"] for a in client.get("/api/annotators", headers=bearer(ADMIN)).json()]
    assert "dee" in names and all("token" not in a for a in client.get("/api/annotators", headers=bearer(ADMIN)).json())
    assert client.post("/api/annotators", json={"name": "../x"}, headers=bearer(ADMIN)).status_code == 422
    assert client.delete("/api/annotators/dee", headers=bearer(ADMIN)).json() == {"removed": "dee"}
    assert client.get("/api/me", headers=bearer(tok)).status_code == 401
    assert client.delete("/api/annotators/dee", headers=bearer(ADMIN)).status_code == 404
    assert client.delete("/api/annotators/boss", headers=bearer(ADMIN)).status_code == 400


# ---- images by id only -------------------------------------------------------------------------

@pytest.mark.parametrize("bad_id", ["../blindspots.toml", "../../secret.txt", "..%2F..%2Fsecret.txt",
                                    "%2e%2e/%2e%2e/secret.txt", "/etc/passwd", "escape.png", "escape2.png",
                                    "sub/../../secret.txt", "images\\..\\x.png", "scene_000000.png\x00.txt", ""])
def test_pool_images_by_id_only(world: dict, client: TestClient, bad_id: str) -> None:
    r = client.get("/api/images/pool", params={"id": bad_id}, headers=bearer(ANN))
    assert r.status_code in (404, 422), (bad_id, r.status_code)
    assert b"top secret" not in r.content
    r = client.get("/api/images/prediction", params={"id": bad_id, "round": 0}, headers=bearer(ANN))
    assert r.status_code in (404, 422)


def test_absolute_and_encoded_paths_in_urls(world: dict, client: TestClient) -> None:
    absolute = str(world["pool"] / "scene_000000.png")
    assert client.get("/api/images/pool", params={"id": absolute}, headers=bearer(ANN)).status_code == 404
    for raw in ("/api/images/pool?id=%2E%2E%2F%2E%2E%2Fsecret.txt", "/api/images/pool?id=..%252F..%252Fsecret.txt",
                "/reports/..%2F..%2Fsecret.txt", "/reports/%2e%2e/secret.txt", "/static/../server.py",
                "/static/%2e%2e/server.py", "/api/images/vote?set=..&id=../../secret.txt",
                "/api/images/review?set=s0&id=../../secret.txt&layer=given"):
        r = client.get(raw, headers=bearer(ADMIN))
        assert r.status_code in (404, 422), (raw, r.status_code)
        assert b"top secret" not in r.content and b"create_app" not in r.content
    ok = client.get("/api/images/pool", params={"id": "scene_000000.png"}, headers=bearer(ANN))
    assert ok.status_code == 200 and ok.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(ok.content)).size == (32, 32)


def test_symlinked_sets_cannot_escape(world: dict, client: TestClient) -> None:
    p: Project = world["project"]
    store = client.app.state.store
    vote_dir = store.sets("vote")[0]["path"]
    target = vote_dir / "images" / "s000-000.png"
    backup = target.read_bytes()
    target.unlink()
    os.symlink(world["root"] / "secret.txt", target)
    try:
        client.app.state.view._cache._d.clear()
        r = client.get("/api/images/vote", params={"set": "digits", "id": "s000-000"}, headers=bearer(ANN))
        assert r.status_code == 404 and b"top secret" not in r.content
    finally:
        target.unlink()
        target.write_bytes(backup)
    assert client.get("/api/images/vote", params={"set": "digits", "id": "s000-000"}, headers=bearer(ANN)).status_code == 200
    assert p.path.is_dir()


# ---- ratings ------------------------------------------------------------------------------------

@pytest.mark.parametrize("score", [0, 6, -1, 3.5, "3", "bad", True, None, [3]])
def test_out_of_range_ratings(client: TestClient, score: object) -> None:
    q = client.get("/api/ratings/queue", headers=bearer(ANN2)).json()
    r = client.post("/api/ratings", json={"round": q["round"], "image_id": q["items"][0]["id"], "score": score},
                    headers=bearer(ANN2))
    assert r.status_code == 422, (score, r.text)
    assert "score" in r.json()["detail"]


def test_rating_errors_are_clear(client: TestClient) -> None:
    q = client.get("/api/ratings/queue", headers=bearer(ANN2)).json()
    iid = q["items"][0]["id"]
    r = client.post("/api/ratings", json={"round": q["round"] + 1, "image_id": iid, "score": 3}, headers=bearer(ANN2))
    assert r.status_code == 409 and "round" in r.json()["detail"]
    r = client.post("/api/ratings", json={"round": q["round"], "image_id": "not_a_candidate.png", "score": 3},
                    headers=bearer(ANN2))
    assert r.status_code == 404 and "candidate" in r.json()["detail"]
    r = client.post("/api/ratings", content=b"{not json", headers={**bearer(ANN2), "Content-Type": "application/json"})
    assert r.status_code == 422
    r = client.post("/api/ratings", json={"round": -1, "image_id": iid, "score": 3}, headers=bearer(ANN2))
    assert r.status_code == 422 and "round" in r.json()["detail"]


def test_double_submission_keeps_one_answer(world: dict, client: TestClient) -> None:
    p: Project = world["project"]
    q = client.get("/api/ratings/queue", headers=bearer(ANN3)).json()
    iid = q["items"][1]["id"]
    for _ in range(3):
        r = client.post("/api/ratings", json={"round": q["round"], "image_id": iid, "score": 4}, headers=bearer(ANN3))
        assert r.status_code == 200 and r.json()["done"] == 1
    r = client.post("/api/ratings", json={"round": q["round"], "image_id": iid, "score": "ood"}, headers=bearer(ANN3))
    rows = p.store.db.execute("SELECT score, out_of_domain FROM ratings WHERE annotator='cy' AND image_id=?", (iid,)).fetchall()
    assert rows == [(None, 1)]
    q2 = client.get("/api/ratings/queue", headers=bearer(ANN3)).json()
    assert q2["done"] == 1 and [x["score"] for x in q2["items"] if x["id"] == iid] == ["ood"]
    undo = client.post("/api/ratings/undo", json={"round": q["round"], "image_id": iid}, headers=bearer(ANN3)).json()
    assert undo == {"ok": True, "removed": True, "done": 0}
    assert client.post("/api/ratings/undo", json={"round": q["round"], "image_id": iid},
                       headers=bearer(ANN3)).json()["removed"] is False


def test_concurrent_submissions_are_neither_lost_nor_duplicated(world: dict, client: TestClient) -> None:
    p: Project = world["project"]
    tokens = {}
    for k in range(6):
        tokens[f"load{k}"] = f"loadtoken-{k:05d}"
        p.answers.add_annotator(f"load{k}", tokens[f"load{k}"])
    q = client.get("/api/ratings/queue", headers=bearer(ADMIN)).json()
    ids = [x["id"] for x in q["items"]]
    errors: list = []

    def worker(name: str) -> None:
        c = TestClient(world["app"])
        for rep in range(2):  # each answer sent twice: a retried request
            for j, iid in enumerate(ids):
                r = c.post("/api/ratings", json={"round": q["round"], "image_id": iid, "score": 1 + (j % 5)},
                           headers=bearer(tokens[name]))
                if r.status_code != 200:
                    errors.append(r.text)

    threads = [threading.Thread(target=worker, args=(n,)) for n in tokens]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = p.store.db.execute("SELECT annotator, image_id, score FROM ratings WHERE annotator LIKE 'load%'").fetchall()
    assert len(got) == len(tokens) * len(ids)
    assert sorted(got) == sorted((n, iid, 1 + (j % 5)) for n in tokens for j, iid in enumerate(ids))


# ---- invariant: the store holds the last answer per image, whatever the sequence -------------------

def test_store_matches_last_answer_model(world: dict) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    p: Project = world["project"]
    p.answers.add_annotator("hyp", "hyptoken-0001")
    c = TestClient(world["app"])
    rnd = c.get("/api/ratings/queue", headers=bearer("hyptoken-0001")).json()["round"]
    assert rnd is not None  # runs before the test that closes the ratings
    ids = [x["id"] for x in c.get("/api/ratings/queue", headers=bearer("hyptoken-0001")).json()["items"]][:4]
    action = st.tuples(st.sampled_from(ids), st.one_of(st.integers(1, 5), st.just("ood"), st.just("undo")))

    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(action, max_size=12))
    def run(actions: list) -> None:
        p.store.db.execute("DELETE FROM ratings WHERE annotator='hyp'")
        model: dict = {}
        for iid, a in actions:
            if a == "undo":
                r = c.post("/api/ratings/undo", json={"round": rnd, "image_id": iid}, headers=bearer("hyptoken-0001"))
                assert r.json()["removed"] == (iid in model)
                model.pop(iid, None)
            else:
                r = c.post("/api/ratings", json={"round": rnd, "image_id": iid, "score": a},
                           headers=bearer("hyptoken-0001"))
                model[iid] = a
            assert r.status_code == 200 and r.json()["done"] == len(model)
        rows = p.store.db.execute("SELECT image_id, score, out_of_domain FROM ratings WHERE annotator='hyp'").fetchall()
        assert {i: ("ood" if o else s) for i, s, o in rows} == model

    run()
    p.store.db.execute("DELETE FROM ratings WHERE annotator='hyp'")


# ---- votes ---------------------------------------------------------------------------------------

def test_votes(world: dict, client: TestClient) -> None:
    p: Project = world["project"]
    q = client.get("/api/votes/queue", headers=bearer(ANN)).json()
    assert q["total"] == 10 and q["sets"][0]["classes"] == [str(k) for k in range(10)]
    assert "prediction" not in str(q) and "scenario" not in str(q["sets"][0]["items"])
    item = q["sets"][0]["items"][0]["id"]
    assert client.post("/api/votes", json={"set": "digits", "item_id": item, "label": "7"},
                       headers=bearer(ANN)).json()["done"] == 1
    assert client.post("/api/votes", json={"set": "digits", "item_id": item, "label": "none"},
                       headers=bearer(ANN)).json()["done"] == 1
    assert p.answers.votes().query("annotator == 'ann'")[["item_id", "label"]].values.tolist() == [[item, None]]
    bad = [({"set": "digits", "item_id": item, "label": "11"}, 422), ({"set": "digits", "item_id": "x", "label": "1"}, 404),
           ({"set": "nope", "item_id": item, "label": "1"}, 404), ({"set": "digits", "item_id": item}, 422)]
    for body, code in bad:
        assert client.post("/api/votes", json=body, headers=bearer(ANN)).status_code == code, body
    r = client.get("/api/images/vote", params={"set": "digits", "id": item}, headers=bearer(ANN))
    assert r.status_code == 200 and Image.open(io.BytesIO(r.content)).size == (28, 28)


# ---- reviews and fixes ---------------------------------------------------------------------------

def test_reviews_and_fix_flow(world: dict, client: TestClient) -> None:
    p: Project = world["project"]
    q = client.get("/api/reviews/queue", headers=bearer(ANN)).json()
    img = q["sets"][0]["images"][0]
    reg = img["regions"][0]
    for layer in ("image", "given", "pred"):
        r = client.get("/api/images/review", params={"set": "s0", "id": img["id"], "layer": layer}, headers=bearer(ANN))
        assert r.status_code == 200, layer
    assert client.get("/api/images/review", params={"set": "s0", "id": img["id"], "layer": "x"},
                      headers=bearer(ANN)).status_code == 422
    r = client.post("/api/reviews", json={"set": "s0", "image_id": img["id"], "region": reg["region"], "verdict": "error"},
                    headers=bearer(ANN))
    assert r.status_code == 200 and r.json()["fix_url"].startswith("/label?kind=fix&ref=s0&id=")
    assert client.post("/api/reviews", json={"set": "s0", "image_id": img["id"], "region": "999", "verdict": "error"},
                       headers=bearer(ANN)).status_code == 404
    assert client.post("/api/reviews", json={"set": "s0", "image_id": img["id"], "region": reg["region"],
                                             "verdict": "maybe"}, headers=bearer(ANN)).status_code == 422
    rv = p.answers.reviews()
    assert rv.query("annotator == 'ann'")[["id", "region_id", "verdict"]].values.tolist() == \
        [[f"s0/{img['id']}", reg["region"], "error"]]
    # The confirmed error is now a label task: start from the given mask, save a fix.
    lq = client.get("/api/labels/queue", headers=bearer(ANN)).json()
    fix = [x for x in lq["items"] if x["kind"] == "fix"]
    assert fix == [{"kind": "fix", "ref": "s0", "id": img["id"], "done": False}]
    s = client.get("/api/labels/start", params={"kind": "fix", "ref": "s0", "id": img["id"]}, headers=bearer(ANN)).json()
    assert s["source"] == "given"
    mask = np.frombuffer(base64.b64decode(s["mask"]), np.uint8).reshape(s["height"], s["width"]).copy()
    x0, y0, x1, y1 = reg["box"]
    mask[y0:y1, x0:x1] = reg["predicted"]
    r = client.post("/api/labels", json={"kind": "fix", "ref": "s0", "image_id": img["id"], "width": s["width"],
                                         "height": s["height"], "mask": base64.b64encode(mask.tobytes()).decode()},
                    headers=bearer(ANN))
    assert r.status_code == 200
    fixes = client.app.state.store.fixes("s0")
    assert [f["id"] for f in fixes] == [img["id"]]
    assert np.array_equal(np.asarray(Image.open(fixes[0]["path"])), mask)


# ---- the loop continues; pixel labels --------------------------------------------------------------

def png(arr: np.ndarray, mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr, mode=mode).save(buf, format="PNG")
    return buf.getvalue()


def test_ratings_then_masks_then_loop_continues(world: dict, client: TestClient) -> None:
    p: Project = world["project"]
    q = client.get("/api/ratings/queue", headers=bearer(ANN)).json()
    for j, it in enumerate(q["items"]):
        r = client.post("/api/ratings", json={"round": q["round"], "image_id": it["id"], "score": 1 + j % 5},
                        headers=bearer(ANN))
        assert r.status_code == 200
    st = loop.advance(Project.open(p.path), progress=False)
    assert st.state == "awaiting_masks", st.message
    # Ratings are closed now.
    r = client.post("/api/ratings", json={"round": q["round"], "image_id": q["items"][0]["id"], "score": 3},
                    headers=bearer(ANN))
    assert r.status_code == 409
    lq = client.get("/api/labels/queue", headers=bearer(ANN)).json()
    todo = [x for x in lq["items"] if x["kind"] == "round"]
    assert {x["id"] for x in todo} == set(st.awaited)
    first, second = todo[0]["id"], todo[1]["id"]
    s = client.get("/api/labels/start", params={"kind": "round", "ref": "0", "id": first}, headers=bearer(ANN)).json()
    assert s["source"] == "prediction" and (s["height"], s["width"]) == (32, 32)
    pred = np.asarray(Image.open(find_artifact(p.scan_dir / "maps" / "target_v0", first)))  # the id rule
    mask = np.frombuffer(base64.b64decode(s["mask"]), np.uint8).reshape(32, 32)
    assert np.array_equal(mask, pred)
    body = {"kind": "round", "ref": "0", "image_id": first, "width": 32, "height": 32}
    paint = mask.copy()
    paint[4:12, 4:12] = 3
    paint[0, :] = 255
    # Validation: size, values, base64, the wrong round.
    assert client.post("/api/labels", json={**body, "width": 16, "mask": ""}, headers=bearer(ANN)).status_code == 422
    assert client.post("/api/labels", json={**body, "mask": "!!notbase64"}, headers=bearer(ANN)).status_code == 422
    short = base64.b64encode(paint.tobytes()[:-1]).decode()
    assert client.post("/api/labels", json={**body, "mask": short}, headers=bearer(ANN)).status_code == 422
    bad = paint.copy()
    bad[0, 0] = 200
    r = client.post("/api/labels", json={**body, "mask": base64.b64encode(bad.tobytes()).decode()}, headers=bearer(ANN))
    assert r.status_code == 422 and "class ids" in r.json()["detail"]  # 422 for every invalid value
    assert client.post("/api/labels", json={**body, "ref": "5", "mask": short}, headers=bearer(ANN)).status_code == 409
    assert client.post("/api/labels", json={**body, "image_id": "nope.png", "mask": short},
                       headers=bearer(ANN)).status_code == 404
    ok = client.post("/api/labels", json={**body, "mask": base64.b64encode(paint.tobytes()).decode()},
                     headers=bearer(ANN))
    assert ok.status_code == 200
    assert np.array_equal(p.answers.load_mask(0, first), paint)
    assert p.answers.masks_for_round(0).query("id == @first")[["source", "annotator"]].values.tolist() == [["app", "ann"]]
    again = client.get("/api/labels/start", params={"kind": "round", "ref": "0", "id": first}, headers=bearer(ANN)).json()
    assert again["source"] == "stored"
    assert client.get("/api/images/mask", params={"round": 0, "id": first}, headers=bearer(ANN)).status_code == 200
    # Uploads: malformed, wrong size, oversized, colour-coded, index.
    form = {"kind": "round", "ref": "0", "image_id": second}
    up = lambda data, name="m.png": client.post("/api/labels/upload", data=form,  # noqa: E731
                                                files={"file": (name, data, "image/png")}, headers=bearer(ANN))
    assert up(b"").status_code == 422
    assert up(b"\x89PNG\r\n\x1a\n garbage").status_code == 422
    assert up(png(np.zeros((16, 32), np.uint8), "L")).status_code == 422
    assert up(png(np.full((32, 32), 9, np.uint8), "L")).status_code == 422  # class 9 does not exist
    huge = os.urandom(300 * 1024)
    assert up(huge).status_code == 413
    classes = client.app.state.view.classes
    truth = np.zeros((32, 32), np.uint8)
    truth[16:] = 1
    r = up(png(classes.colorize(truth)))  # colour-coded in the class palette
    assert r.status_code == 200 and r.json()["pixels"] == {"0": 512, "1": 512}
    assert np.array_equal(p.answers.load_mask(0, second), truth)
    # The CVAT / Label Studio exports of the images still awaiting masks.
    r = client.get("/api/labels/export", params={"format": "cvat"}, headers=bearer(ANN))
    assert r.status_code == 200 and r.content[:2] == b"PK"
    r = client.get("/api/labels/export", params={"format": "labelstudio"}, headers=bearer(ANN))
    assert r.status_code == 200 and isinstance(r.json(), list) and len(r.json()) == len(todo) - 2
    assert client.get("/api/labels/export", params={"format": "zip"}, headers=bearer(ANN)).status_code == 422
    # Remaining masks by upload, then the loop goes on past the masks step.
    for x in todo[2:]:
        assert client.post("/api/labels/upload", data={"kind": "round", "ref": "0", "image_id": x["id"]},
                           files={"file": ("m.png", png(truth, "L"), "image/png")}, headers=bearer(ANN)).status_code == 200
    assert client.get("/api/labels/queue", headers=bearer(ANN)).json()["done"] >= len(todo)
    st = loop.advance(Project.open(p.path), progress=False, max_steps=1)
    assert p.journal.step(0, "masks")["status"] == "done", st.message


def test_body_limit(world: dict, client: TestClient) -> None:
    r = client.post("/api/votes", content=b"x" * (300 * 1024), headers={**bearer(ANN), "Content-Type": "application/json"})
    assert r.status_code == 413 and "too large" in r.json()["detail"]


# ---- dashboard and OpenAPI -----------------------------------------------------------------------

def test_dashboard_and_openapi(world: dict, client: TestClient) -> None:
    d = client.get("/api/dashboard", headers=bearer(ADMIN)).json()
    assert {a["name"] for a in d["annotators"]} >= {"boss", "ann", "bob", "cy"}
    assert d["status"]["state"] in ("awaiting_ratings", "awaiting_masks", "ready", "paused")
    assert d["vote_sets"] == ["digits"] and d["review_sets"] == ["s0"]
    html = client.get("/dashboard", headers=bearer(ADMIN)).text
    assert "Rater agreement" in html and "Leaderboard" in html
    (world["project"].reports_dir / "fig.png").write_bytes(png(np.zeros((4, 4, 3), np.uint8)))
    assert "fig.png" in client.get("/api/figures", headers=bearer(ADMIN)).json()
    assert client.get("/reports/fig.png", headers=bearer(ADMIN)).status_code == 200
    assert client.get("/reports/nope.png", headers=bearer(ADMIN)).status_code == 404
    schema = client.get("/api/openapi.json").json()
    documented = set(schema["paths"])
    for _, path in api_routes(world["app"]):
        assert path in documented, path
    st = client.get("/api/status", headers=bearer(ANN)).json()
    assert "awaited" not in st and "state" in st
    from blindspots.loop.next_action import KINDS

    assert all(set(a) == {"kind", "why"} and a["kind"] in KINDS for a in st["next"])  # what to do next, as data


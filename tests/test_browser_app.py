"""The web app in a real browser (Playwright driving Debian's chromium): sign in, rate ten images
with the keyboard (with an undo), vote on a scenario image, confirm a label issue and fix its
mask, paint and save a round mask; then the store must hold exactly those answers.

Screenshots of every page go to the test's tmp folder, and are copied to the folder named by the
environment variable BLINDSPOTS_SCREENSHOTS when it is set (for people to look at).
"""
from __future__ import annotations

from urllib.parse import quote

import os
import shutil
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

torch.set_num_threads(1)
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
ANN, ADMIN, OTHER = "browser-ann-token", "browser-admin-token", "browser-other-token"
SCREENSHOTS = os.environ.get("BLINDSPOTS_SCREENSHOTS")  # a folder to keep the screenshots in, if set

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium "
                       "(apt-get install -y chromium as root; scripts/test.sh does it)"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from blindspots.app import create_app
    from blindspots.app.services import make_sample_project

    root = tmp_path_factory.mktemp("browser")
    project = make_sample_project(root / "sample", n_pool=24, size=48, n_candidates=12,
                                  annotators={"ann": ("annotator", ANN), "boss": ("admin", ADMIN),
                                              "other": ("annotator", OTHER)})
    with start_server(create_app(project.path)) as url:
        yield {"url": url, "project": project, "root": root}


@contextmanager
def start_server(app):  # noqa: ANN001, ANN201 - an ASGI app; yields its base URL
    """Serve `app` with uvicorn on a free loopback port in a thread (also used by test_browser_answers)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():  # noqa: ANN201
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


def shoot(page, out: Path, name: str) -> None:  # noqa: ANN001
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / f"{name}.png"), full_page=True)


def settle(page) -> None:  # noqa: ANN001
    # Selectors, not wait_for_function: the app's CSP forbids eval, which that would need.
    page.wait_for_selector("body[data-pending='0']", state="attached", timeout=15000)


def signed_in(ctx, url: str, token: str):  # noqa: ANN001, ANN201 - a Playwright context; (page, page errors)
    """A new page of `ctx` signed in with the personal link of `token`, on the rate page; the list fills
    with the page's uncaught script errors."""
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{url}/signin#token={token}")
    page.wait_for_url(f"{url}/rate")
    return page, errors


def test_annotator_session_in_the_browser(served: dict, browser, tmp_path: Path) -> None:  # noqa: ANN001
    from blindspots.ids import find_artifact
    from blindspots import loop
    from blindspots.loop.project import Project

    url, p = served["url"], served["project"]
    shots = tmp_path / "screenshots"
    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    # Sign in with the personal link (token in the fragment) -> the rate page.
    page.goto(f"{url}/rate")
    assert page.url.endswith("/signin")
    shoot(page, shots, "0-signin")
    page.goto(f"{url}/signin#token={ANN}")
    page.wait_for_url(f"{url}/rate")
    page.wait_for_selector("body[data-ready='1']", state="attached")
    assert page.text_content("#progress") == "0 / 12"
    ids = [x["id"] for x in p.answers.candidates(0, "M").to_dict("records")]
    # the round's count beside the person's own, and the image at full size one click away
    need = p.config.ratings.raters
    assert page.text_content("#round-progress") == \
        f"round 0: 0 of 12 images rated by enough people ({need} each), 0 of {12 * need} answers in"
    assert page.get_attribute("#full-image", "href") == f"/api/images/pool?id={quote(ids[0], safe='')}"

    # Rate ten images with the keyboard: 1-5, O, and U to undo (then rate that one again).
    page.keyboard.press("v")  # overlay off and on again
    page.keyboard.press("v")
    page.keyboard.press("+")
    for key in ["3", "4", "5", "1", "2", "u", "1", "o", "1", "5", "4", "3"]:
        page.keyboard.press(key)
    settle(page)
    assert page.text_content("#progress") == "10 / 12"
    shoot(page, shots, "1-rate")
    expected = dict(zip(ids[:10], [3, 4, 5, 1, 1, "ood", 1, 5, 4, 3]))
    r = p.answers.ratings_for_round(0)
    got = {i: ("ood" if o else int(s)) for i, s, o in
           r[r["annotator"] == "ann"][["id", "score", "out_of_domain"]].itertuples(index=False)}
    assert got == expected
    # The other two candidates are rated by someone else (over the API), then the loop moves on.
    import httpx

    for x in ids[10:]:
        resp = httpx.post(f"{url}/api/ratings", json={"round": 0, "image_id": x, "score": 2},
                          headers={"Authorization": f"Bearer {OTHER}"})
        assert resp.status_code == 200
    # The loop waited for ratings; `blindspots round` now continues with the people's answers.
    from typer.testing import CliRunner

    from blindspots.cli import app as cli

    out = CliRunner().invoke(cli, ["round", str(p.path)])
    assert out.exit_code == 0 and "waiting for pixel labels" in out.output, out.output
    assert loop.status(Project.open(p.path)).state == "awaiting_masks"
    assert p.journal.step(0, "ratings")["result"]["n_ratings"] == 12

    # Vote on one scenario image: key 7.
    page.goto(f"{url}/vote")
    page.wait_for_selector("body[data-ready='1']", state="attached")
    first_item = page.text_content("#item").split(" · ")[1]
    assert "prediction" not in page.content().lower()
    shoot(page, shots, "2-vote")
    page.keyboard.press("7")
    settle(page)
    assert p.answers.votes().query("annotator == 'ann'")[["item_id", "label"]].values.tolist() == [[first_item, "7"]]

    # Review: confirm the first flagged region as an error, then fix the mask from the link.
    page.goto(f"{url}/review")
    page.wait_for_selector("body[data-ready='1']", state="attached")
    review_id = page.text_content("#image-id").split(" · ")[1]
    region = page.get_attribute("#regions tr.selected", "data-region")
    page.wait_for_timeout(300)
    shoot(page, shots, "3-review")
    page.keyboard.press("e")
    settle(page)
    page.wait_for_selector("a.fix")
    rv = p.answers.reviews()
    assert rv.query("annotator == 'ann'")[["id", "region_id", "verdict"]].values.tolist() == \
        [[f"s0/{review_id}", region, "error"]]
    page.click("a.fix")
    page.wait_for_selector("body[data-ready='1']", state="attached")
    assert "kind=fix" in page.url
    page.wait_for_selector(f"body[data-loaded={review_id!r}]", state="attached")
    paint_and_save(page, review_id, key="2", expect_class=1)
    shoot(page, shots, "4-label-fix")
    fixes = served_store(served).fixes("s0")
    assert [f["id"] for f in fixes] == [review_id]

    # Label: paint a round mask (starts from the prediction) and save it.
    need = loop.masks_needed(p, 0)
    page.goto(f"{url}/label?kind=round&ref=0&id={need[0]}")
    page.wait_for_selector("body[data-ready='1']", state="attached")
    page.wait_for_selector(f"body[data-loaded={need[0]!r}]", state="attached")
    pred = np.asarray(Image.open(find_artifact(p.scan_dir / "maps" / "target_v0", need[0])))  # the id rule
    saved_counts = paint_and_save(page, need[0], key="4", expect_class=3)
    shoot(page, shots, "5-label")
    m = p.answers.masks_for_round(0)
    assert m[["id", "source", "annotator"]].values.tolist() == [[need[0], "app", "ann"]]
    stored = p.answers.load_mask(0, need[0])
    changed = stored != pred
    assert changed.sum() > 20 and (stored[changed] == 3).all()
    assert {str(k): int(v) for k, v in zip(*np.unique(stored, return_counts=True))} == saved_counts

    # Nothing else was written for this annotator.
    assert len(p.answers.votes().query("annotator == 'ann'")) == 1 and len(p.answers.reviews().query("annotator == 'ann'")) == 1
    assert errors == []

    # The admin's dashboard.
    actx = browser.new_context(viewport={"width": 1300, "height": 900})
    ap = actx.new_page()
    ap.goto(f"{url}/signin#token={ADMIN}")
    ap.wait_for_url(f"{url}/dashboard")
    assert "waiting for pixel labels" in ap.text_content("#loop-status") or "masks" in ap.text_content("#loop-status")
    assert ap.locator("#people tbody tr").count() == 3
    shoot(ap, shots, "6-dashboard")
    actx.close()
    ctx.close()
    if SCREENSHOTS:
        dest = Path(SCREENSHOTS)
        dest.mkdir(parents=True, exist_ok=True)
        for f in shots.glob("*.png"):
            shutil.copy(f, dest / f.name)


def served_store(served: dict):  # noqa: ANN201
    from blindspots.app.tables import AppStore

    return AppStore(served["project"])


def paint_and_save(page, image_id: str, *, key: str, expect_class: int) -> dict:  # noqa: ANN001
    """Pick a class by its shortcut, draw a brush stroke across the canvas, save with S."""
    page.keyboard.press(key)
    page.keyboard.press("b")
    for _ in range(4):
        page.keyboard.press("]")
    box = page.locator("#mask").bounding_box()
    x0, y0 = box["x"] + box["width"] * 0.2, box["y"] + box["height"] * 0.3
    page.mouse.move(x0, y0)
    page.mouse.down()
    for k in range(1, 11):
        page.mouse.move(x0 + box["width"] * 0.06 * k, y0 + box["height"] * 0.04 * k)
    page.mouse.up()
    counts = page.evaluate("window.bsLabel.counts()")
    assert counts.get(str(expect_class), 0) > 20
    page.keyboard.press("s")
    page.wait_for_selector(f"body[data-saved={image_id!r}]", state="attached")
    settle(page)
    return {k: int(v) for k, v in counts.items()}

"""The label editor in a real browser (Playwright driving Debian's chromium): it starts from the
target's prediction, and each tool changes the mask as expected — polygon (Enter and double-click),
superpixel brush (the clicked SLIC segment), "take the competitor's region" (its connected class
region under the click), brush, eraser, fill, undo/redo, class keys; zoom and pan move the view
only; saving stores exactly the page's mask. Screenshots at 1280x800 and 1920x1080 go to
/tmp/editor_shots/ (for people to look at)."""
from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest
import torch

from browser_network import Network
from test_app_label_edges import awaiting_masks
from test_browser_app import ARGS, CHROMIUM, browser, start_server  # noqa: F401 - browser is a fixture

torch.set_num_threads(1)
ANN = "browser-label-ann-token"
SHOTS = Path("/tmp/editor_shots")
S = 48  # image side

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from blindspots.app import create_app

    p = awaiting_masks(tmp_path_factory.mktemp("browser_label"), ANN, size=S)
    with start_server(create_app(p.path)) as url:
        yield {"url": url, "project": p}


def api(served: dict, path: str, **params) -> dict:  # noqa: ANN003
    import httpx

    r = httpx.get(served["url"] + path, params=params, headers={"Authorization": f"Bearer {ANN}"})
    assert r.status_code == 200, r.text
    return r.json()


def b64(s: str, dtype: str = "u1") -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype).reshape(S, S)


class Editor:
    """The label page of one image, driven like a person: keys and clicks at mask pixels."""

    def __init__(self, page, image_id: str) -> None:  # noqa: ANN001
        self.page, self.id = page, image_id

    def mask(self) -> np.ndarray:
        return b64(self.page.evaluate("window.bsLabel.mask()"))

    def at(self, x: float, y: float) -> tuple[float, float]:
        """Screen point of mask coordinate (x, y) (pixel corners at integers)."""
        return tuple(self.page.evaluate(f"window.bsLabel.client({x}, {y})"))

    def click(self, x: int, y: int) -> None:
        self.page.mouse.click(*self.at(x + 0.5, y + 0.5))

    def keys(self, *keys: str) -> None:
        for k in keys:
            self.page.keyboard.press(k)


def open_editor(served: dict, browser, size: tuple[int, int], image_id: str):  # noqa: ANN001, ANN201
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = ctx.new_page()
    page.net = Network()  # a network switch in place before the first page loads
    ctx.route(f"{served['url']}/api/**", page.net)
    page.goto(f"{served['url']}/signin#token={ANN}")
    page.wait_for_url(f"{served['url']}/rate")
    page.goto(f"{served['url']}/label?kind=round&ref=0&id={image_id}")
    page.wait_for_selector(f"body[data-loaded={image_id!r}]", state="attached", timeout=15000)
    return ctx, page


def test_each_tool_changes_the_mask_as_expected(served: dict, browser) -> None:  # noqa: ANN001, F811
    from blindspots.app.services import component_at
    from blindspots.ids import find_artifact
    from PIL import Image

    p = served["project"]
    image_id = api(served, "/api/labels/queue")["items"][0]["id"]
    ctx, page = open_editor(served, browser, (1280, 800), image_id)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    ed = Editor(page, image_id)
    q = {"kind": "round", "ref": "0", "id": image_id}

    # Starts from the target's prediction; the canvas fills the viewport (not 320 px).
    pred = np.asarray(Image.open(find_artifact(p.scan_dir / "maps" / "target_v0", image_id)))
    assert page.get_attribute("body", "data-source") == "prediction"
    assert np.array_equal(ed.mask(), pred)
    box = page.locator("#mask").bounding_box()
    assert box["height"] > 500, box
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "label-1280x800.png"))

    # Polygon: class 3 (key "3" -> id 2), four corners, Enter fills the pixels whose centres are inside.
    ed.keys("p", "3")
    before = ed.mask()
    for x, y in [(4, 4), (20, 4), (20, 16), (4, 16)]:
        page.mouse.click(*ed.at(x, y))
    ed.keys("Enter")
    want = before.copy()
    want[4:16, 4:20] = 2
    assert np.array_equal(ed.mask(), want)
    # Undo restores, redo re-applies (keys Z and Y).
    ed.keys("z")
    assert np.array_equal(ed.mask(), before)
    ed.keys("y")
    assert np.array_equal(ed.mask(), want)
    # Double-click closes a triangle too (class 5 -> id 4).
    ed.keys("5")
    before = ed.mask()
    page.mouse.click(*ed.at(30, 30))
    page.mouse.click(*ed.at(40, 30))
    page.mouse.dblclick(*ed.at(30, 40))
    got = ed.mask()
    yy, xx = np.mgrid[0:S, 0:S] + 0.5
    edge = np.isclose(xx + yy, 70)  # centres on the long side: either way
    tri = (xx >= 30) & (yy >= 30) & (xx + yy < 70)
    out = ~tri & ~edge
    assert (got[tri] == 4).all() and np.array_equal(got[out], before[out])

    # Superpixel brush: one click fills the clicked SLIC segment with the class (key "6" -> id 5).
    segs = b64(api(served, "/api/labels/superpixels", **q)["labels"], "<u2")
    ed.keys("g", "6")
    before = ed.mask()
    ed.click(24, 40)
    want = before.copy()
    want[segs == segs[40, 24]] = 5
    assert np.array_equal(ed.mask(), want)
    assert page.locator("#edges").is_visible()  # segment edges shown while the tool is on
    page.screenshot(path=str(SHOTS / "label-superpixels-1280x800.png"))
    # A drag fills every segment it crosses, as one undo step.
    before = ed.mask()
    page.mouse.move(*ed.at(2.5, 44.5))
    page.mouse.down()
    page.mouse.move(*ed.at(20.5, 44.5), steps=6)
    page.mouse.up()
    crossed = np.unique(segs[44, 2:21])
    want = before.copy()
    want[np.isin(segs, crossed)] = 5
    assert np.array_equal(ed.mask(), want)
    ed.keys("z")
    assert np.array_equal(ed.mask(), before)
    # G again: fine superpixels (about 4x4 px) for thin objects; a click fills one of those.
    fine = b64(api(served, "/api/labels/superpixels", **q, level="fine")["labels"], "<u2")
    assert fine.max() > segs.max()
    ed.keys("g")
    page.wait_for_selector("body[data-level='fine']", state="attached")
    ed.click(40, 12)
    want = before.copy()
    want[fine == fine[12, 40]] = 5
    assert np.array_equal(ed.mask(), want)
    ed.keys("z")

    # Competitor: one click adopts the competitor's connected class region under the cursor.
    # K goes to the next competitor, whose region the next click adopts.
    comps = api(served, "/api/labels/competitors", **q)["models"]
    ed.keys("c")
    for k, (x, y) in enumerate([(10, 30), (40, 8)]):
        if k:
            ed.keys("k")
        assert page.evaluate("window.bsLabel.state().competitor") == comps[k]["name"]
        other, before = b64(comps[k]["mask"]), ed.mask()
        ed.click(x, y)
        region = component_at(other, y, x)
        want = before.copy()
        want[region] = other[region]
        assert np.array_equal(ed.mask(), want)

    # Brush stroke, eraser, flood fill.
    ed.keys("b", "1")
    page.evaluate("window.bsLabel.setSize(3)")
    before = ed.mask()
    page.mouse.move(*ed.at(2.5, 2.5))
    page.mouse.down()
    page.mouse.move(*ed.at(2.5, 20.5), steps=5)
    page.mouse.up()
    got = ed.mask()
    assert (got[2:21, 2] == 0).all() and np.array_equal(got[:, 10:], before[:, 10:])
    ed.keys("e")
    ed.click(46, 46)
    assert ed.mask()[46, 46] == 255
    ed.keys("f", "2")
    before = ed.mask()
    ed.click(2, 10)
    want = before.copy()
    want[component_at(before, 10, 2)] = 1
    assert np.array_equal(ed.mask(), want)

    # Zoom (wheel) and pan (Space+drag) move the view, not the mask; R fits again.
    before, scale = ed.mask(), page.evaluate("window.bsLabel.state().scale")
    vp = page.locator("#viewport").bounding_box()
    page.mouse.move(vp["x"] + vp["width"] / 2, vp["y"] + vp["height"] / 2)
    page.mouse.wheel(0, -400)
    assert page.evaluate("window.bsLabel.state().scale") > scale * 1.5
    b0 = page.locator("#canvas-box").bounding_box()
    page.keyboard.down(" ")
    page.mouse.down()
    page.mouse.move(vp["x"] + vp["width"] / 2 + 80, vp["y"] + vp["height"] / 2 + 40, steps=4)
    page.mouse.up()
    page.keyboard.up(" ")
    b1 = page.locator("#canvas-box").bounding_box()
    assert abs(b1["x"] - b0["x"] - 80) < 2 and abs(b1["y"] - b0["y"] - 40) < 2
    assert np.array_equal(ed.mask(), before)
    ed.keys("r")
    assert abs(page.evaluate("window.bsLabel.state().scale") - scale) < 1e-6

    # Save: the store holds exactly the page's mask, named by the id's stem.
    final = ed.mask()
    ed.keys("s")
    page.wait_for_selector(f"body[data-saved={image_id!r}]", state="attached")
    assert np.array_equal(p.answers.load_mask(0, image_id), final)
    assert not p.answers.stored_mask_path(0, image_id).name.endswith(".png.png")
    assert errors == []
    ctx.close()


def test_screens_and_save_next(served: dict, browser) -> None:  # noqa: ANN001, F811
    items = api(served, "/api/labels/queue")["items"]
    ctx, page = open_editor(served, browser, (1920, 1080), items[1]["id"])
    page.keyboard.press("g")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "label-1920x1080.png"))
    vp, box = page.locator("#viewport").bounding_box(), page.locator("#mask").bounding_box()
    assert vp["y"] + vp["height"] <= 1080 and box["height"] > 700  # the image fills the screen's height
    # A save that fails (network cut) keeps the mask, says so, and does not move on.
    ed = Editor(page, items[1]["id"])
    ed.click(20, 20)
    painted = ed.mask()
    page.net.set("cut", r"/api/labels$")
    page.keyboard.press("n")
    page.wait_for_selector("#status:has-text('NOT saved')")
    assert page.is_visible("#unsaved") and np.array_equal(ed.mask(), painted)
    assert page.get_attribute("body", "data-loaded") == items[1]["id"]
    page.net.set(None)
    # N saves and opens the next image without a mask.
    page.keyboard.press("n")
    page.wait_for_selector(f"body[data-saved={items[1]['id']!r}]", state="attached")
    nxt = next(x["id"] for x in items[2:] + items[:1] if not x["done"])
    page.wait_for_selector(f"body[data-loaded={nxt!r}]", state="attached")
    assert np.array_equal(served["project"].answers.load_mask(0, items[1]["id"]), painted)
    assert not page.is_visible("#unsaved")
    ctx.close()

"""The annotation app on a project of real photos (scikit-image and OpenCV samples, 300x451 to
1280x1024, gray and colour) with two numpy callable models, not 64-px procedural scenes: the label
API (start, superpixels at both levels, competitor maps, overlays, full-resolution save round trip),
and the label page in chromium on the 1280x1024 and the 720x1228 photos at 1280x800 and 1920x1080: fitted to the
viewport, superpixel edges, zoomed in. Screenshots go to /tmp/appreal_shots/."""
from __future__ import annotations

import base64
import io
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from real_photo_project import OPENCV, TOKEN, build_until_ratings, finish_ratings
from test_browser_app import CHROMIUM, browser, signed_in, start_server  # noqa: F401 - browser is a fixture

torch.set_num_threads(1)
SHOTS = Path("/tmp/appreal_shots")
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def rating(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The project waiting for ratings (the rate page's test runs first, on this stage)."""
    proj, sizes = build_until_ratings(tmp_path_factory.mktemp("real_photos"))
    return {"path": proj, "sizes": sizes}


@pytest.fixture(scope="module")
def project(rating: dict) -> dict:
    """The same project with S ∪ T awaiting masks."""
    finish_ratings(rating["path"], rating["sizes"])
    return rating


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium")
def test_rate_page_zooms_about_the_centre(rating: dict, browser) -> None:  # noqa: ANN001, F811
    """+ enlarges both frames (a generic .frame rule used to reset --zoom to 1) about their centres."""
    from blindspots.app import create_app

    with start_server(create_app(rating["path"])) as url:
        ctx = browser.new_context(viewport={"width": 1280, "height": 800})
        page, _ = signed_in(ctx, url, TOKEN)
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=30000)
        img = page.locator("#img")
        w0 = img.bounding_box()["width"]
        for _ in range(3):
            page.keyboard.press("+")
        assert img.bounding_box()["width"] > 1.8 * w0
        frame = page.locator("#rate-view .frame").first
        left = frame.evaluate("(f) => f.scrollLeft")  # evaluate on an element: no eval, CSP allows it
        assert left > 0, left  # scrolled to keep the centre, not at the top-left corner
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "rate-zoomed-1280x800.png"))
        ctx.close()


def decode(s: str, shape: tuple[int, int], dtype: str = "u1") -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype).reshape(shape)


def test_label_api_on_big_non_square_photos(project: dict) -> None:
    from fastapi.testclient import TestClient

    from blindspots.app import create_app
    from blindspots.app.services.superpixels import MAX_SEGMENTS

    c = TestClient(create_app(project["path"]))
    items = c.get("/api/labels/queue", headers=AUTH).json()["items"]
    big = [it for it in items if max(project["sizes"][it["id"]]) >= 1280]
    assert big or not OPENCV.is_dir(), [it["id"] for it in items]  # the 1280x1024 photo awaits a mask
    for it in items:
        h, w = project["sizes"][it["id"]]
        q = {"kind": it["kind"], "ref": it["ref"], "id": it["id"]}
        s = c.get("/api/labels/start", params=q, headers=AUTH).json()
        assert (s["height"], s["width"], s["source"]) == (h, w, "prediction")
        # Superpixels: the image's size, consecutive ids, coarse clearly coarser than fine.
        n = {}
        for level in ("coarse", "fine"):
            sp = c.get("/api/labels/superpixels", params={**q, "level": level}, headers=AUTH).json()
            labels = decode(sp["labels"], (h, w), "<u2")
            assert labels.max() + 1 == sp["n"] == len(np.unique(labels)) <= 1.5 * MAX_SEGMENTS[level]
            n[level] = sp["n"]
        assert n["fine"] > 2 * n["coarse"] > 100, n
        # compress=1 (what the page asks for): the same bytes, zlib'd (a 1280x1024 map: ~0.1 MB, not 2.6 MB)
        z = c.get("/api/labels/superpixels", params={**q, "level": "fine", "compress": 1}, headers=AUTH).json()
        assert z["encoding"] == "deflate" and sp["encoding"] == "raw"
        assert zlib.decompress(base64.b64decode(z["labels"])) == base64.b64decode(sp["labels"])
        assert len(z["labels"]) < len(sp["labels"]) / 5
        zs = c.get("/api/labels/start", params={**q, "compress": 1}, headers=AUTH).json()
        assert zlib.decompress(base64.b64decode(zs["mask"])) == base64.b64decode(s["mask"])
        # The competitor's map and the prediction overlay line up with the image (width x height).
        comps = c.get("/api/labels/competitors", params=q, headers=AUTH).json()["models"]
        assert [m["name"] for m in comps] == ["comp"]
        assert decode(comps[0]["mask"], (h, w)).max() <= 2
        for path, params in (("/api/images/prediction", {"round": 0, "id": it["id"]}),
                             ("/api/images/pool", {"id": it["id"]})):
            r = c.get(path, params=params, headers=AUTH)
            assert Image.open(io.BytesIO(r.content)).size == (w, h), path
        # Save at full resolution: the stored PNG has the image's size and exactly the class ids sent.
        mask = decode(s["mask"], (h, w)).copy()
        mask[: h // 2, : w // 3] = 2
        mask[-5:, -7:] = 255
        r = c.post("/api/labels", json={"kind": "round", "ref": "0", "image_id": it["id"], "width": w, "height": h,
                                        "mask": base64.b64encode(mask.tobytes()).decode()}, headers=AUTH)
        assert r.status_code == 200, r.text
        back = c.get("/api/labels/start", params=q, headers=AUTH).json()
        assert back["source"] == "stored" and np.array_equal(decode(back["mask"], (h, w)), mask)


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium")
@pytest.mark.skipif(not OPENCV.is_dir(), reason="needs Debian opencv-doc's photos (scripts/test.sh installs them)")
def test_label_page_fits_and_zooms_a_big_photo(project: dict, browser) -> None:  # noqa: ANN001, F811
    from blindspots.app import create_app
    from blindspots.loop.project import Project

    image_id = "baboon_1280x1024.jpg"
    h, w = project["sizes"][image_id]
    SHOTS.mkdir(parents=True, exist_ok=True)
    with start_server(create_app(project["path"])) as url:
        ctx = browser.new_context(viewport={"width": 1280, "height": 800})
        page, errors = signed_in(ctx, url, TOKEN)
        page.goto(f"{url}/label?kind=round&ref=0&id={image_id}")
        page.wait_for_selector(f"body[data-loaded={image_id!r}]", state="attached", timeout=30000)
        state = page.evaluate("window.bsLabel.state()")
        assert (state["height"], state["width"]) == (h, w)
        assert state["competitors"] == ["comp"] and state["segments"] > 100, state  # inflated from zlib'd maps
        for photo in (image_id, "baboon_portrait.jpg"):
            ph, pw = project["sizes"][photo]
            if photo != image_id:
                page.goto(f"{url}/label?kind=round&ref=0&id={photo}")
                page.wait_for_selector(f"body[data-loaded={photo!r}]", state="attached", timeout=30000)
            page.wait_for_selector(f"body[data-photo={photo!r}]", state="attached", timeout=30000)  # photo shown
            for viewport in ((1280, 800), (1920, 1080)):
                page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
                page.wait_for_timeout(300)  # the page's resize handler re-sizes the stage (then refits)
                page.keyboard.press("r")  # fit
                box = page.locator("#mask").bounding_box()
                # Fitted: all of the photo on screen, as big as the viewport allows, aspect kept.
                assert box["x"] >= 0 and box["y"] >= 0, box
                assert box["x"] + box["width"] <= viewport[0] + 1 and box["y"] + box["height"] <= viewport[1] + 1, box
                assert box["height"] > viewport[1] * 0.6, box
                assert abs(box["width"] / box["height"] - pw / ph) < 0.01, box
                page.screenshot(path=str(SHOTS / f"label-{photo}-{viewport[0]}x{viewport[1]}.png"))
        page.goto(f"{url}/label?kind=round&ref=0&id={image_id}")
        page.wait_for_selector(f"body[data-loaded={image_id!r}]", state="attached", timeout=30000)
        page.keyboard.press("g")  # superpixels on the big photo: edges drawn
        page.wait_for_selector("#edges:not([hidden])", state="attached", timeout=30000)
        page.screenshot(path=str(SHOTS / f"label-{image_id}-superpixels.png"))
        # A click fills exactly one (SLIC, full-resolution) segment; S saves the page's mask as a PNG of the
        # photo's size with those class ids.
        page.keyboard.press("3")
        before = decode(page.evaluate("window.bsLabel.mask()"), (h, w))
        page.mouse.click(*page.evaluate(f"window.bsLabel.client({w // 2 + 0.5}, {h // 2 + 0.5})"))
        after = decode(page.evaluate("window.bsLabel.mask()"), (h, w))
        changed = after != before
        assert changed.any() and (after[changed] == 2).all() and changed.sum() < h * w / 100, changed.sum()
        page.keyboard.press("s")
        page.wait_for_selector(f"body[data-saved={image_id!r}]", state="attached", timeout=30000)
        path = Project.open(project["path"]).answers.stored_mask_path(0, image_id)
        assert np.array_equal(np.asarray(Image.open(path)), after)
        # Zoom in 4x at the centre: the mask pixel under the centre stays put.
        page.keyboard.press("c")
        before = page.evaluate("window.bsLabel.state()")["scale"]
        for _ in range(4):
            page.keyboard.press("+")
        assert page.evaluate("window.bsLabel.state()")["scale"] > 2 * before
        page.screenshot(path=str(SHOTS / f"label-{image_id}-zoomed.png"))
        assert not errors, errors
        ctx.close()


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium")
@pytest.mark.skipif(not OPENCV.is_dir(), reason="needs Debian opencv-doc's photos (scripts/test.sh installs them)")
def test_review_page_on_mixed_size_photos(project: dict, browser) -> None:  # noqa: ANN001, F811
    """A review set of a 720x1228 portrait and a 451x300 photo: layers at the image's size, boxes
    inside it, the page outlines at most a dozen boxes (hundreds of regions hid the photo), Z zooms
    onto the selected region."""
    from fastapi.testclient import TestClient

    from blindspots.app import create_app
    from real_photo_project import attach_review_set

    name = attach_review_set(project["path"], ["baboon_portrait.jpg", "chelsea.png"])
    c = TestClient(create_app(project["path"]))
    sets = c.get("/api/reviews/queue", headers=AUTH).json()["sets"]
    images = next(s for s in sets if s["set"] == name)["images"]
    assert {i["id"] for i in images} == {"baboon_portrait.jpg", "chelsea.png"}
    for it in images:
        h, w = project["sizes"][it["id"]]
        for layer in ("image", "given", "pred"):
            r = c.get("/api/images/review", params={"set": name, "id": it["id"], "layer": layer}, headers=AUTH)
            assert Image.open(io.BytesIO(r.content)).size == (w, h), layer
        assert all(0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h for x0, y0, x1, y1 in (g["box"] for g in it["regions"]))
    many = max(images, key=lambda i: len(i["regions"]))
    with start_server(create_app(project["path"])) as url:
        ctx = browser.new_context(viewport={"width": 1280, "height": 800})
        page, _ = signed_in(ctx, url, TOKEN)
        page.goto(f"{url}/review")
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=30000)
        for _ in range(images.index(many)):
            page.keyboard.press("ArrowRight")
        j = min(range(min(15, len(many["regions"]))), key=lambda k: many["regions"][k]["area"])  # a small region
        for _ in range(max(1, j)):
            page.keyboard.press("ArrowDown")
        page.wait_for_timeout(500)
        boxes = page.locator("#review-view .frame").first.locator("rect")
        assert 1 <= boxes.count() <= min(13, len(many["regions"])), (boxes.count(), len(many["regions"]))
        assert page.locator("#review-view .frame").first.locator("rect.selected").count() == 1
        page.screenshot(path=str(SHOTS / "review-1280x800.png"))
        # Z zooms the three frames onto the selected region: its box grows and stays inside each frame.
        frame = page.locator("#review-view .frame").first
        small = frame.locator("rect.selected").bounding_box()
        page.keyboard.press("z")
        page.wait_for_selector("body:not([data-zoom='1'])", state="attached")
        big, fb = frame.locator("rect.selected").bounding_box(), frame.bounding_box()
        assert big["width"] > 1.5 * small["width"], (small, big)
        cx, cy = big["x"] + big["width"] / 2, big["y"] + big["height"] / 2
        assert fb["x"] <= cx <= fb["x"] + fb["width"] and fb["y"] <= cy <= fb["y"] + fb["height"], (big, fb)
        page.screenshot(path=str(SHOTS / "review-zoomed-1280x800.png"))
        page.keyboard.press("z")
        page.wait_for_selector("body[data-zoom='1']", state="attached")
        # Hundreds of regions: the table scrolls in its own box and keeps the selected row in view.
        box, rows = page.locator("#regions-box"), page.locator("#regions tr")
        n = rows.count()
        y0 = page.evaluate("window.scrollY")
        for _ in range(n):
            page.keyboard.press("ArrowDown")
        page.wait_for_timeout(200)
        last, bb = rows.nth(n - 1).bounding_box(), box.bounding_box()
        assert "selected" in rows.nth(n - 1).get_attribute("class")
        assert bb["y"] <= last["y"] and last["y"] + last["height"] <= bb["y"] + bb["height"] + 1, (last, bb)
        assert last["y"] + last["height"] <= 800, last  # and on screen
        if n > 12:  # more rows than the box holds: it scrolled, the page did not
            assert box.evaluate("(b) => b.scrollTop") > 0 and page.evaluate("window.scrollY") == y0
        for _ in range(n):
            page.keyboard.press("ArrowUp")
        page.wait_for_timeout(200)
        first, head = rows.nth(0).bounding_box(), page.locator("#regions-box thead").bounding_box()
        assert first["y"] >= head["y"] + head["height"] - 1, (first, head)  # not under the sticky header
        page.screenshot(path=str(SHOTS / "review-regions-1280x800.png"))
        ctx.close()


@pytest.mark.skipif(not OPENCV.is_dir(), reason="needs Debian opencv-doc's JPEG photos")
def test_pool_photos_are_sent_as_jpeg_when_the_file_is_one(project: dict) -> None:
    """A JPEG photo goes to the browser as JPEG (several times smaller than PNG), EXIF-rotated and with
    the pixels the models saw up to JPEG rounding; other files stay lossless PNG, equal pixel for pixel."""
    from fastapi.testclient import TestClient

    from blindspots.app import create_app
    from blindspots.app.project_view import png_bytes
    from blindspots.data import ImagePool
    from blindspots.loop.project import Project

    c = TestClient(create_app(project["path"]))
    cfg = Project.open(project["path"]).config
    pool = ImagePool(cfg.resolve(cfg.pool.root))
    kinds = set()
    for image_id in pool.ids:
        r = c.get("/api/images/pool", params={"id": image_id}, headers=AUTH)
        assert r.status_code == 200, r.text
        want = pool.load(image_id)
        got = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"))
        assert got.shape == want.shape, image_id
        if Path(image_id).suffix.lower() in (".jpg", ".jpeg"):
            kinds.add("jpeg")
            assert r.headers["content-type"] == "image/jpeg"
            assert np.abs(got.astype(int) - want).mean() < 2.0, image_id
            if want.shape[0] * want.shape[1] >= 640 * 480:
                assert len(r.content) < len(png_bytes(want)) / 3, (image_id, len(r.content))
        else:
            kinds.add("png")
            assert r.headers["content-type"] == "image/png" and np.array_equal(got, want), image_id
    assert kinds == {"jpeg", "png"}, kinds

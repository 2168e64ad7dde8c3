"""The region page in a real browser (Playwright driving Debian's chromium): a person answers every asked
region with one key each (Enter accepts the preselected guess, a digit names a class, M says mixed /
unsure), one answer while the network is cut; the store must hold exactly those answers, each image's
partial mask must follow them, and the project then fine-tunes on them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from browser_network import Network
from region_project import region_project
from test_browser_app import ARGS, CHROMIUM, browser, settle, signed_in, start_server  # noqa: F401 - the browser fixture

torch.set_num_threads(1)
ANN = "regions-browser-token"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium"),
]


def current(page) -> tuple[str, int, int]:  # noqa: ANN001
    """(image id, region, preselected guess) of the region on screen."""
    image_id, region = page.text_content("#item").split(" · region ")
    return image_id, int(region), int(page.get_attribute("#choices button.preselected", "data-label"))


def test_regions_labelled_in_the_browser_then_fine_tuned(browser, tmp_path: Path) -> None:  # noqa: ANN001, F811
    from blindspots import loop
    from blindspots.app import create_app
    from blindspots.loop import regions as rq

    p = region_project(tmp_path / "sample", {"ann": ("annotator", ANN)})
    asked = [(i, a.region) for i in rq.query_images(p, 0) for a in rq.queries(p, 0, i)]
    with start_server(create_app(p.path)) as url:
        ctx = browser.new_context(viewport={"width": 1200, "height": 900})
        net = Network()
        ctx.route(f"{url}/api/**", net)
        page, errors = signed_in(ctx, url, ANN)
        page.goto(f"{url}/regions")
        page.wait_for_selector("body[data-ready='1']", state="attached")
        assert page.text_content("#progress") == f"0 / {len(asked)}"
        expected: dict[tuple[str, int], int | None] = {}
        keys = ["Enter", "2", "m"]
        for k in range(len(asked)):
            page.wait_for_selector(f"body[data-index='{k}']", state="attached")
            image_id, region, guess = current(page)
            key = keys[k % 3]
            if k == 4:
                settle(page)  # the earlier answers are in: only this one is cut
                net.set("cut", r"/api/regions$")  # this answer waits in the browser until the network is back
            page.keyboard.press(key)
            expected[(image_id, region)] = guess if key == "Enter" else (2 if key == "2" else None)
            if k == 4:
                page.wait_for_selector("body[data-unsent='1']", state="attached")
                assert rq.answers(p, 0, image_id).get(region, "none") == "none"
                net.set(None)
                page.evaluate("BS.outbox.flush()")  # the retry the banner offers, without waiting its backoff
        page.wait_for_selector("body[data-finished='1']", state="attached")
        page.wait_for_selector("body[data-unsent='0']", state="attached", timeout=40000)
        settle(page)
        assert page.text_content("#progress") == f"{len(asked)} / {len(asked)}"
        assert sorted(expected) == sorted(asked)
        got = {(i, r): lab for i in rq.query_images(p, 0) for r, lab in rq.answers(p, 0, i).items()}
        assert got == expected and errors == []
        page.screenshot(path=str(tmp_path / "regions.png"), full_page=True)
        ctx.close()
    for image_id in rq.query_images(p, 0):
        m, seg = p.answers.load_mask(0, image_id), rq.segments(p, 0, image_id)
        for (i, region), label in expected.items():
            if i == image_id:
                assert (m[seg == region] == (255 if label is None else label)).all()
    # T gets whole masks (true ones here); then the round goes on and fine-tunes on the region answers.
    folder = tmp_path / "t-masks"
    folder.mkdir()
    truth = Path(p.config.resolve(p.config.pool.root)).parent / "masks"
    for x in p.answers.candidate_ids(0, "T"):
        Image.open(truth / Path(x).with_suffix(".png").name).save(folder / Path(x).with_suffix(".png").name)
    loop.import_masks(p, folder, annotator="ann")
    loop.advance(p, progress=False)
    assert p.journal.step(0, "masks")["result"]["n_region_images"] == len(rq.query_images(p, 0))
    assert p.journal.step(0, "finetune")["status"] == "done" and p.registry.model("target").version == 1
    assert np.isfinite(p.journal.step(0, "finetune")["result"]["val_miou"])

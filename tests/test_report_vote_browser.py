"""Naming a segmentation failure scenario on the vote page in a real browser (Playwright, Debian
chromium): the typed-name form shows for a free-text set, Enter stores the name as the vote, the
page shows it again after a reload; no page or console errors. Screenshot: /tmp/report_shots/."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from browser_network import Network
from test_browser_app import ARGS, CHROMIUM, start_server

torch.set_num_threads(1)
TOKEN = "vote-name-token-01"
SHOTS = Path("/tmp/report_shots")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium"),
]


def _free_text_set(out: Path) -> Path:
    """A two-item scenario vote set as `export_scenario_votes` writes it (strips of random tiles)."""
    from blindspots.report.scenario_votes import PROMPT

    rng = np.random.default_rng(0)
    (out / "images").mkdir(parents=True)
    for k in range(2):
        Image.fromarray(rng.integers(0, 255, (48, 148, 3), dtype=np.uint8)).save(out / "images" / f"seg-r0-s{k:03d}.png")
    pd.DataFrame({"item_id": ["seg-r0-s000", "seg-r0-s001"], "scenario": [0, 1], "prediction": [-1, -1]}).to_csv(
        out / "items.csv", index=False)
    (out / "classes.json").write_text(json.dumps({"class_names": ["brightness low", "class_vehicle high"],
                                                  "none_label": "none", "prompt": PROMPT, "free_text": True}))
    return out


def test_type_a_scenario_name(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    from blindspots.app import create_app
    from blindspots.app.services import make_sample_project
    from blindspots.app.tables import AppStore

    p = make_sample_project(tmp_path / "sample", n_pool=8, size=32, n_candidates=4, vote_set=False,
                            review_set=False, advance=False, annotators={"ann": ("annotator", TOKEN)})
    AppStore(p).attach_set("vote", "scenarios-r0", _free_text_set(tmp_path / "votes"))
    errors: list[str] = []
    with start_server(create_app(p.path)) as url:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            net = Network()  # a network switch in place before the first page loads
            page.route(f"{url}/api/**", net)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            # The one request the test cuts on purpose is logged by the browser; anything else is an error.
            page.on("console", lambda m: errors.append(f"{m.text} {m.location}") if m.type == "error"
                    and "ERR_INTERNET_DISCONNECTED" not in m.text else None)
            page.goto(f"{url}/signin#token={TOKEN}")
            page.wait_for_url(f"{url}/rate")
            page.goto(f"{url}/vote")
            page.wait_for_selector("body[data-ready='1']", state="attached")
            assert page.is_visible("#name-form") and "give it a name" in page.text_content("#prompt")
            page.fill("#name", "  night  scenes ")
            page.press("#name", "Enter")
            page.wait_for_selector("#saved:has-text('seg-r0-s000')")
            # The network goes down for the second vote: it waits in the outbox, shown as unsaved,
            # and is sent once the network is back (nothing lost).
            net.set("cut", r"/api/votes$")
            page.keyboard.press("n")  # the second scenario: none of the above
            page.wait_for_selector("body[data-unsent='1']", state="attached")
            assert len(p.answers.votes()) == 1
            net.set(None)
            page.click("#outbox button")  # "Retry now" (the backoff would also get there)
            page.wait_for_selector("body[data-unsent='0']", state="attached")
            page.wait_for_selector("#progress:has-text('2 / 2')")
            page.goto(f"{url}/vote")  # again: the first item shows the name typed before
            page.wait_for_selector("body[data-ready='1']", state="attached")
            page.keyboard.press("ArrowLeft")
            assert page.input_value("#name") == "night scenes"
            SHOTS.mkdir(exist_ok=True)
            page.screenshot(path=str(tmp_path / "vote_named.png"), full_page=True)
            shutil.copy(tmp_path / "vote_named.png", SHOTS / "vote_named.png")
            browser.close()
    assert errors == []
    votes = p.answers.votes()
    assert votes["item_id"].tolist() == ["seg-r0-s000", "seg-r0-s001"]
    assert votes["label"].iloc[0] == "night scenes" and pd.isna(votes["label"].iloc[1])  # none of the above

"""The scan report in a real browser (Playwright driving Debian's chromium): no console errors, no
failed requests, every <img> loaded, nothing fetched from outside the page's folder. A full-page
screenshot goes to the test's tmp folder (and /work/notes/screenshots/ when /work/notes exists)."""
from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from test_report_scan import make_scan
from test_rounds import make_config, world  # noqa: F401

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
NOTES = Path("/work/notes")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium "
                       "(apt-get install -y chromium as root)"),
]


def check_in_browser(index: Path, shot: Path) -> int:
    """Open `index` in chromium; assert a clean load; return the number of <img> elements."""
    from playwright.sync_api import sync_playwright

    out = index.parent
    errors, failed, outside = [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: failed.append(r.url))

            def check(request) -> None:  # noqa: ANN001
                url = urlparse(request.url)
                path = Path(unquote(url.path))
                if url.scheme != "file" or not path.resolve().is_relative_to(out.resolve()):
                    outside.append(request.url)

            page.on("request", check)
            page.goto(index.resolve().as_uri())
            page.wait_for_load_state("load")
            page.evaluate("() => Promise.all([...document.images].map(i => { i.loading = 'eager'; "
                          "return i.complete ? null : new Promise(r => { i.onload = r; i.onerror = r; }); }))")
            broken = page.evaluate("() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
                                   ".map(i => i.getAttribute('src'))")
            n_images = page.evaluate("() => document.images.length")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    if NOTES.is_dir():
        (NOTES / "screenshots").mkdir(exist_ok=True)
        shutil.copy(shot, NOTES / "screenshots" / shot.name)
    assert broken == [], broken
    assert errors == [] and failed == [] and outside == [], (errors, failed, outside)
    return n_images


def test_scan_report_opens_offline(tmp_path: Path):
    from blindspots.report import write_scan_report

    scan = make_scan(tmp_path)
    index = write_scan_report(scan, tmp_path / "report folder", n_disputed=4)  # a space: links percent-encoded
    assert check_in_browser(index, tmp_path / "report_scan.png") >= 5 + 4 * 4


def test_round_report_opens_offline(world: Path, tmp_path: Path):  # noqa: F811
    from blindspots.loop import rounds
    from blindspots.loop.project import Project
    from blindspots.report import write_round_report

    p = Project.create(tmp_path / "p", make_config(world))
    assert rounds.advance(p, simulate=True, progress=False).finished
    from blindspots.report.round_page import round_scenarios

    index = write_round_report(p, 0, tmp_path / "round report", scenarios=round_scenarios(p, 0))
    assert check_in_browser(index, tmp_path / "report_round.png") >= 4

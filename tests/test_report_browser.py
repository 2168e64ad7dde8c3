"""The scan report in a real browser (Playwright driving Debian's chromium): no console errors, no
failed requests, every <img> loaded, nothing fetched from outside the page's folder. A full-page
screenshot goes to the test's tmp folder (and /work/notes/screenshots/ when /work/notes exists)."""
from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from test_report_scan import make_scan

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
NOTES = Path("/work/notes")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium "
                       "(apt-get install -y chromium as root)"),
]


def test_scan_report_opens_offline(tmp_path: Path):
    from playwright.sync_api import sync_playwright

    from blindspots.report import write_scan_report

    scan = make_scan(tmp_path)
    out = tmp_path / "report folder"  # a space: links must be percent-encoded
    index = write_scan_report(scan, out, n_disputed=4)
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
            shot = tmp_path / "scan_report.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    if NOTES.is_dir():
        (NOTES / "screenshots").mkdir(exist_ok=True)
        shutil.copy(shot, NOTES / "screenshots" / "report_scan.png")
    assert n_images >= 5 + 4 * 4
    assert broken == [], broken
    assert errors == [] and failed == [] and outside == [], (errors, failed, outside)

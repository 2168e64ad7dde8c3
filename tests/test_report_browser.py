"""The report pages in a real browser (Playwright driving Debian's chromium): no console errors, no
failed requests, every <img> loaded, nothing fetched from outside the page's folder. Pages: the scan
page, the round page at every stage of a project (new, waiting for ratings, mid-round, finished with
engine sections) and the standalone label-issues, surprise and Defuse pages. Full-page screenshots at
1280×800 and 1920×1080 go to the test's tmp folder and to /tmp/report_shots/ (to look at)."""
from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import torch

from test_report_engines import defuse_run, label_issues_run, surprise_run
from test_report_scan import make_scan
from test_rounds import make_config, world  # noqa: F401

torch.set_num_threads(1)
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
SHOTS = Path("/tmp/report_shots")
VIEWPORTS = {"1280": (1280, 800), "1920": (1920, 1080)}

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium at /usr/bin/chromium "
                       "(apt-get install -y chromium as root)"),
]


def check_in_browser(pages: dict[str, Path], shots: Path) -> dict[str, int]:
    """Open each page (name -> index.html) in one chromium at both viewports; assert a clean load of
    each; return {name: number of <img> elements}."""
    from playwright.sync_api import sync_playwright

    shots.mkdir(parents=True, exist_ok=True)
    counts, problems = {}, {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            for name, index in pages.items():
                for vp, (w, h) in VIEWPORTS.items():
                    out = index.parent
                    errors, failed, outside = [], [], []
                    page = browser.new_page(viewport={"width": w, "height": h})
                    page.on("console", lambda m, e=errors: e.append(m.text) if m.type == "error" else None)
                    page.on("pageerror", lambda x, e=errors: e.append(str(x)))
                    page.on("requestfailed", lambda r, f=failed: f.append(r.url))

                    def check(request, out=out, outside=outside) -> None:  # noqa: ANN001
                        url = urlparse(request.url)
                        path = Path(unquote(url.path))
                        if url.scheme != "file" or not path.resolve().is_relative_to(out.resolve()):
                            outside.append(request.url)

                    page.on("request", check)
                    page.goto(index.resolve().as_uri())
                    page.wait_for_load_state("load")
                    page.evaluate("() => Promise.all([...document.images].map(i => { i.loading = 'eager'; "
                                  "return i.complete ? null : new Promise(r => { i.onload = r; i.onerror = r; }); }))")
                    broken = page.evaluate("() => [...document.images].filter(i => !(i.complete && "
                                           "i.naturalWidth > 0)).map(i => i.getAttribute('src'))")
                    # Wider than the window: a reader has to scroll sideways.
                    wide = page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth + 1")
                    counts[name] = page.evaluate("() => document.images.length")
                    shot = shots / f"{name}_{vp}.png"
                    page.screenshot(path=str(shot), full_page=True)
                    page.close()
                    if broken or errors or failed or outside or wide:
                        problems[f"{name}@{vp}"] = {"broken": broken, "errors": errors, "failed": failed,
                                                    "outside": outside, "too wide": wide}
        finally:
            browser.close()
    try:
        SHOTS.mkdir(exist_ok=True)
        for f in shots.glob("*.png"):
            shutil.copy(f, SHOTS / f.name)
    except OSError:  # a copy to look at, not part of the check
        pass
    assert problems == {}, problems
    return counts


def test_scan_report_opens_offline(tmp_path: Path):
    from blindspots.report import write_scan_report

    scan = make_scan(tmp_path)
    index = write_scan_report(scan, tmp_path / "report folder", n_disputed=4)  # a space: links percent-encoded
    assert check_in_browser({"scan": index}, tmp_path / "shots")["scan"] >= 5 + 4 * 4


def test_round_and_engine_pages_open_offline(world: Path, tmp_path: Path):  # noqa: F811
    """The round page at every stage (the finished one with the engine sections and the scenarios),
    and the engines' standalone pages."""
    from blindspots import loop
    from blindspots.loop.project import Project
    from blindspots.report import write_round_report
    from blindspots.report.pages.defuse import write_defuse_report
    from blindspots.report.pages.label_issues import write_label_issues_report
    from blindspots.report.pages.round import round_scenarios
    from blindspots.report.pages.surprise import write_surprise_report

    p = Project.create(tmp_path / "p", make_config(world))
    pages = {"round_new": write_round_report(p, out_dir=tmp_path / "new")}
    assert not loop.advance(p, simulate=False, progress=False).finished  # waits for ratings
    pages["round_waiting"] = write_round_report(p, out_dir=tmp_path / "waiting")
    loop.advance(p, simulate=True, progress=False, max_steps=2)  # rated, S selected, no masks yet
    pages["round_mid"] = write_round_report(p, out_dir=tmp_path / "mid")
    assert loop.advance(p, simulate=True, progress=False).finished
    label_issues_run(tmp_path, p.path / "label-issues")
    surprise_run(p.path / "engines" / "surprise")
    defuse_run(p.path / "engines" / "defuse")
    pages["round_finished"] = write_round_report(p, 0, tmp_path / "round report", scenarios=round_scenarios(p, 0))
    pages["labels"] = write_label_issues_report(p.path / "label-issues", tmp_path / "labels page")
    pages["surprise"] = write_surprise_report(p.path / "engines" / "surprise", tmp_path / "surprise page")
    pages["defuse"] = write_defuse_report(p.path / "engines" / "defuse", tmp_path / "defuse page")
    html = pages["round_mid"].read_text(encoding="utf-8")
    assert "MOS " in html and "not labelled yet" in html
    assert "Waiting for ratings: 0 of 4" in pages["round_waiting"].read_text(encoding="utf-8")
    assert "Round 0 has not started" in pages["round_new"].read_text(encoding="utf-8")
    assert "Round 0 is finished" in pages["round_finished"].read_text(encoding="utf-8")
    counts = check_in_browser(pages, tmp_path / "shots")
    assert counts["round_finished"] > counts["round_mid"] >= counts["round_waiting"] >= 1 and counts["defuse"] >= 5

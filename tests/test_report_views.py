"""The report pages are rendered from view-models by autoescaped Jinja templates: names, ids, reasons and
table cells that look like HTML are shown as text, never run."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from blindspots.report.render import render_blocks
from blindspots.report.pages.surprise import write_surprise_report
from blindspots.report.drawing.thumbs import Figure
from blindspots.report.viewmodels.blocks import (Figures, Group, Heading, Image, LegendItem, Nav, Pick, Pre, ScenarioCard, Table,
                                     Text, code)

EVIL = "<script>alert(1)</script>"
SHOWN = "&lt;script&gt;alert(1)&lt;/script&gt;"


def test_every_block_kind_escapes_its_text():
    blocks = [Heading(EVIL, "a"), Nav([("b", EVIL)]), Text.of(EVIL, code(EVIL)), Table([EVIL], [[EVIL]], {0}),
              Figures([Image("x.png", EVIL, caption=EVIL), Figure(EVIL, None, EVIL), Figure(EVIL, "y.jpg", full="z")]),
              Pre(EVIL), Group("pixelated", [Text.of(EVIL)]),
              Pick(1, EVIL, EVIL, EVIL, [Figure(EVIL, "t.jpg")], [LegendItem(EVIL, "#ffffff")], details=EVIL),
              ScenarioCard(EVIL, EVIL, [(EVIL, 2)], 0, True, Table(["d"], [[EVIL]]), [Figure(EVIL, None, EVIL)])]
    html = render_blocks(blocks)
    assert "<script>" not in html
    assert html.count(SHOWN) >= 20


def test_a_surprise_page_shows_markup_in_names_as_text(tmp_path: Path):
    root = tmp_path / "run <img src=x onerror=alert(1)>"
    root.mkdir()
    pd.DataFrame({"group": [EVIL], "rho": [-0.5], "p": [0.01]}).to_csv(root / "table3.csv", index=False)
    text = write_surprise_report(root, tmp_path / "page").read_text(encoding="utf-8")
    assert "<script>" not in text and "<img src=x" not in text
    assert SHOWN in text
    assert "<title>Surprise: run &lt;img src=x onerror=alert(1)&gt;</title>" in text
    assert "<h1>Surprise adequacy: run &lt;img src=x onerror=alert(1)&gt;</h1>" in text

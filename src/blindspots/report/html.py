"""Self-contained HTML pages: inline CSS, relative links only, nothing fetched from a network.

A report page must open from a folder or a zip on a machine without internet, so it never refers
to a CDN, a web font or an absolute URL; images are files beside the page, linked relatively.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from blindspots.report.render import render_blocks, write_page

BASE_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
h1 { font-size: 1.4em; } .meta { color: #555; font-size: 0.9em; }
.pick { background: #fff; border: 1px solid #ddd; border-radius: 6px; margin: 1em 0; padding: 0.8em; }
.pick h2 { font-size: 1em; margin: 0 0 0.4em 0; word-break: break-all; }
.reason { font-weight: 600; margin: 0.3em 0; } .row { display: flex; flex-wrap: wrap; gap: 0.8em; }
figure { margin: 0; } figcaption { font-size: 0.85em; color: #444; text-align: center; }
figure img { display: block; height: 200px; width: auto; max-width: 420px; object-fit: contain;
  border: 1px solid #ccc; }
.legend { list-style: none; padding: 0; margin: 0.4em 0; display: flex; flex-wrap: wrap; gap: 0.6em; }
.legend li { font-size: 0.85em; } .swatch { display: inline-block; width: 0.9em; height: 0.9em;
  border: 1px solid #888; vertical-align: middle; margin-right: 0.3em; }
.missing { width: 160px; height: 200px; display: flex; align-items: center; justify-content: center;
  background: #eee; color: #777; font-size: 0.8em; text-align: center; }
details { font-size: 0.8em; color: #555; } code { word-break: break-all; }
"""

REPORT_CSS = BASE_CSS + """
h2.section { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; }
table.data { border-collapse: collapse; background: #fff; font-size: 0.9em; margin: 0.5em 0; }
table.data th, table.data td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; }
table.data td.num { text-align: right; font-variant-numeric: tabular-nums; }
.figs { display: flex; flex-wrap: wrap; gap: 1em; }
.figs img { width: 600px; max-width: 100%; height: auto; border: 1px solid #ddd; background: #fff; }
.figs img.natural { width: auto; min-width: 300px; max-width: 100%; }  /* copied figures: their own size */
.pixelated img { image-rendering: pixelated; }  /* tiny images (e.g. 28 px) enlarged without blurring */
h3 { font-size: 1em; margin: 1.2em 0 0.4em 0; }
.note { color: #555; font-size: 0.9em; } nav a { margin-right: 1em; } p { max-width: 110em; }
.stage { background: #fff8e1; border: 1px solid #e6d28a; border-radius: 6px; padding: 0.5em 0.8em; }
"""


def output_folder(out_dir: str | Path) -> Path:
    """`out_dir` as a Path, created if missing; ValueError if it is a file."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir: expected a folder (created if missing), got the file {str(out)!r}")
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_index(out: Path, title: str, blocks: Iterable[Any], css: str | None = None) -> Path:
    """Write `out/index.html`: one self-contained page of the view-model `blocks` (`blindspots.report.viewmodels.blocks`,
    drawn by `templates/blocks.html`); returns its path."""
    return write_page(out, title, render_blocks(blocks), REPORT_CSS if css is None else css)


def rel_url(path: Path, base: Path) -> str:
    """A relative, percent-encoded URL from the folder `base` to the file `path` (inside base)."""
    rel = Path(path).resolve().relative_to(Path(base).resolve()).as_posix()
    return quote(rel)

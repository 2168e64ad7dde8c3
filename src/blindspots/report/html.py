"""Self-contained HTML pages: inline CSS, relative links only, nothing fetched from a network.

A report page must open from a folder or a zip on a machine without internet, so it never refers
to a CDN, a web font or an absolute URL; images are files beside the page, linked relatively.
"""
from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import quote

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


def write_index(out: Path, title: str, parts: list[str], css: str | None = None) -> Path:
    """Write `out/index.html` (one self-contained page of the report sections `parts`); returns its path."""
    index = out / "index.html"
    index.write_text(page(title, "\n".join(parts), css=REPORT_CSS if css is None else css), encoding="utf-8")
    return index


def esc(text: object) -> str:
    """Text made safe for HTML element content and attribute values."""
    return html.escape(str(text), quote=True)


def rel_url(path: Path, base: Path) -> str:
    """A relative, percent-encoded URL from the folder `base` to the file `path` (inside base)."""
    rel = Path(path).resolve().relative_to(Path(base).resolve()).as_posix()
    return quote(rel)


def page(title: str, body: str, css: str = BASE_CSS) -> str:
    """A complete HTML5 document with inline CSS."""
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{esc(title)}</title>\n<style>{css}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


def table(header: list[str], rows: list[list[object]], numeric: set[int] | None = None) -> str:
    """An HTML table (escaped cells); columns whose index is in `numeric` are right-aligned."""
    numeric = numeric or set()
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="num">{esc(c)}</td>' if j in numeric else f"<td>{esc(c)}</td>"
                                    for j, c in enumerate(r)) + "</tr>" for r in rows)
    return f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def heading(text: str, anchor: str, level: int = 2) -> str:
    """A section heading with id `anchor`: h2 styled as a page section, h3.. as a subsection
    (an engine's sections nested inside the round page)."""
    cls = ' class="section"' if level == 2 else ""
    return f'<h{level}{cls} id="{esc(anchor)}">{esc(text)}</h{level}>'


def figure_img(src: str, alt: str, cls: str = "") -> str:
    """An <img> of a figure file (relative URL `src`); cls: its CSS class (e.g. "natural")."""
    c = f' class="{esc(cls)}"' if cls else ""
    return f'<img src="{esc(src)}" alt="{esc(alt)}"{c}>'

"""The one Jinja environment of the report pages (autoescaped) and the renderers every page uses."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

__all__ = ["TEMPLATES", "render", "render_blocks", "write_page"]

TEMPLATES = Environment(loader=PackageLoader("blindspots.report", "templates"),
                        autoescape=select_autoescape(default=True), trim_blocks=False)


def render(template: str, **context: Any) -> Markup:
    """`templates/<template>` rendered with `context` (HTML, safe to embed in another template)."""
    return Markup(TEMPLATES.get_template(template).render(**context))


def render_blocks(blocks: Iterable[Any]) -> Markup:
    """The HTML of view-model blocks (`blindspots.report.viewmodels.blocks`)."""
    return render("blocks.html", blocks=list(blocks))


def write_page(out: Path, title: str, body: str, css: str) -> Path:
    """Write `out/index.html`: one self-contained document (inline CSS) around `body`; returns its path."""
    index = out / "index.html"
    index.write_text(render("page.html", title=title, css=Markup(css), body=Markup(body)), encoding="utf-8")
    return index

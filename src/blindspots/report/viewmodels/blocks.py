"""The report pages' view-models: what a page shows, as plain data, computed once by the page modules and
laid out by the Jinja templates in `templates/` (autoescaped: every string here is text, never HTML).

A page is a list of blocks (`Heading`, `Text`, `Table`, `Figures`, `Pre`, `Nav`, `Group`, `Pick`,
`ScenarioCard`); `templates/blocks.html` draws each kind. Text with inline code or bold is a `Text` of
runs: `Text.of("run ", code("blindspots scan"), " first")`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

__all__ = ["Run", "code", "bold", "Heading", "Text", "Table", "Image", "Figures", "Pre", "Nav", "Group", "Pick",
           "ScenarioCard", "LegendItem", "Block"]


@dataclass(frozen=True)
class Run:
    """A piece of text; style "" (plain), "code" or "b"."""

    text: str
    style: str = ""


def code(text: object) -> Run:
    return Run(str(text), "code")


def bold(text: object) -> Run:
    return Run(str(text), "b")


@dataclass
class Heading:
    """A section heading with id `anchor`: level 2 is a page section, 3.. a subsection (an engine's
    sections inside the round page)."""

    kind: ClassVar[str] = "heading"
    text: str
    anchor: str
    level: int = 2


@dataclass
class Text:
    """A paragraph of runs; cls: "note", "meta", "reason" or "stage"."""

    kind: ClassVar[str] = "text"
    runs: list[Run]
    cls: str = "note"

    @classmethod
    def of(cls, *parts: str | Run, style: str = "note") -> "Text":
        return cls([p if isinstance(p, Run) else Run(str(p)) for p in parts], style)


@dataclass
class Table:
    """A data table: header, rows of cells (shown as text), indexes of right-aligned columns; `more`:
    rows left out (said under the table)."""

    kind: ClassVar[str] = "table"
    header: list[str]
    rows: list[list[Any]]
    numeric: set[int] = field(default_factory=set)
    more: int = 0


@dataclass
class Image:
    """A figure file (relative URL `src`); with a caption it is a <figure>; cls: "natural" keeps its own
    size (another command's figure), "" fits the page's figure width."""

    src: str
    alt: str
    caption: str | None = None
    cls: str = ""


@dataclass
class Figures:
    """A row of images; cls: "figs" (figures) or "row" (thumbnails)."""

    kind: ClassVar[str] = "figures"
    images: list[Any]  # Image, or thumbs.Figure (thumbnails with a note when missing)
    cls: str = "figs"


@dataclass
class Pre:
    """Preformatted text (a table as printed)."""

    kind: ClassVar[str] = "pre"
    text: str


@dataclass
class Nav:
    """Links to the page's sections: (anchor, text)."""

    kind: ClassVar[str] = "nav"
    links: list[tuple[str, str]]


@dataclass
class Group:
    """Blocks inside a <div class="cls"> (e.g. "pixelated": tiny images enlarged without blurring)."""

    kind: ClassVar[str] = "group"
    cls: str
    blocks: list[Any]


@dataclass
class LegendItem:
    name: str
    colour: str  # "#rrggbb"


@dataclass
class Pick:
    """One picked image of a gallery: its thumbnails (thumbs.Figure), legend, score and reason."""

    kind: ClassVar[str] = "pick"
    number: int
    title: str
    reason: str
    score: str | None  # e.g. "score 0.4213"; None: not shown
    figures: list[Any]
    legend: list[LegendItem]
    details: str | None = None


@dataclass
class ScenarioCard:
    """One failure scenario: size, description, names people gave it, effects table, typical images."""

    kind: ClassVar[str] = "scenario"
    title: str
    description: str
    names: Sequence[tuple[str, int]] | None  # None: not offered on the vote page
    n_none: int
    voted: bool
    effects: Table
    figures: list[Any]


Block = Heading | Text | Table | Figures | Pre | Nav | Group | Pick | ScenarioCard

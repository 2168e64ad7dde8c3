"""The surprise report: `OUT/index.html` for a folder written by `blindspots surprise analyze --out`
(table3.csv, figure9.csv, figure9.png), plus any `surprise view` panels (SA heatmaps, PNG) found in
its direct subfolders.

Sections: Table 3 (Spearman ρ and p of surprise adequacy vs IoU per class group), Figure 9 (the
label-saving trade-off) with its table at a few savings, and up to `n` heatmap panels.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from blindspots._validation import check_int
from blindspots.report.viewmodels.copied import copy_figure, frame_table
from blindspots.report.html import output_folder, write_index
from blindspots.report.viewmodels.blocks import Block, Figures, Heading, Nav, Text, code

log = logging.getLogger(__name__)


#: Savings (fraction of images not labelled) of the Figure 9 table; the CSV has every 5% step per group.
TABLE_SAVINGS = (0.1, 0.25, 0.5, 0.75, 0.9)


def _at_savings(curves: pd.DataFrame) -> pd.DataFrame:
    """The rows of figure9.csv nearest each of TABLE_SAVINGS, per group (all rows where it has no
    `saving` column): the whole table (21 rows a group) was cut after 60 rows, i.e. three groups."""
    if "saving" not in curves.columns or curves.empty:
        return curves
    keys = curves["group"] if "group" in curves.columns else pd.Series(0, index=curves.index)
    rows = []
    for _, part in curves.groupby(keys, sort=False):
        s = part["saving"].to_numpy(dtype=float)
        picked = sorted({int(abs(s - v).argmin()) for v in TABLE_SAVINGS})
        rows.append(part.iloc[picked])
    return pd.concat(rows)


def is_surprise_dir(root: str | Path) -> bool:
    """Whether `root` looks like a `blindspots surprise analyze --out` folder (table3.csv)."""
    return (Path(root) / "table3.csv").is_file()


def surprise_sections(root: Path, out: Path, *, n: int = 12, level: int = 2, anchor: str = "",
                      fig_dir: str = "") -> list[Block]:
    """The page's sections as view-model blocks for a checked `root` (level, anchor, fig_dir: as
    `label_issues.label_issues_sections`)."""
    parts: list[Block] = [
        Heading("Table 3: surprise vs IoU (Spearman)", anchor + "table3", level),
        Text.of("Per class group: Spearman correlation of the image-level surprise adequacy with the IoU (negative: "
                "more surprising images are segmented worse) and its p-value."),
        frame_table(pd.read_csv(root / "table3.csv"), max_rows=200),
        Heading("Figure 9: label-saving trade-off", anchor + "figure9", level)]
    if (root / "figure9.png").is_file():
        cap = "Figure 9: skip labelling the least surprising images; error of accepting their predictions"
        parts.append(Figures([copy_figure(root / "figure9.png", out, fig_dir + "figure9.png", cap)]))
    if (root / "figure9.csv").is_file():
        curves = pd.read_csv(root / "figure9.csv")
        few = _at_savings(curves)
        if len(few) < len(curves):
            parts.append(Text.of(f"At savings of {', '.join(f'{v:.0%}' for v in TABLE_SAVINGS)} "
                                 "(every step: figure9.csv)."))
        parts.append(frame_table(few, max_rows=200))
    if not (root / "figure9.png").is_file() and not (root / "figure9.csv").is_file():
        parts.append(Text.of("No figure9.png / figure9.csv in this folder."))
    parts.append(Heading("Surprise heatmaps", anchor + "heatmaps", level))
    panels = sorted(p for d in sorted(root.iterdir()) if d.is_dir() and d.resolve() != out.resolve()
                    for p in d.glob("*.png"))[:n]
    if panels:
        parts.append(Text.of("Panels of ", code("blindspots surprise view"), " (input, label, prediction, "
                             "difference, SA above threshold, SA heatmap)."))
        parts.append(Figures([copy_figure(p, out, f"{fig_dir}heatmaps/{p.parent.name}_{p.name}", p.stem)
                              for p in panels]))
    else:
        parts.append(Text.of("None: write ", code("blindspots surprise view ... --out SOURCE/view"),
                             " to add them."))
    return parts


def write_surprise_report(root: str | Path, out_dir: str | Path, *, n: int = 12) -> Path:
    """Write the surprise page `out_dir/index.html` (+ figures/); returns its path.

    root: a `surprise analyze --out` folder. n: heatmap panels shown (from `surprise view` subfolders).
    """
    root = Path(root)
    if not is_surprise_dir(root):
        raise ValueError(f"root: expected a surprise-analysis folder (table3.csv; the `surprise analyze` command's --out), got {str(root)!r}")
    check_int(n, "n", minimum=0)
    out = output_folder(out_dir)
    parts: list[Block] = [Heading(f"Surprise adequacy: {root.resolve().name}", "", 1),
                          Nav([("table3", "Table 3"), ("figure9", "Figure 9"), ("heatmaps", "heatmaps")])]
    parts += surprise_sections(root, out, n=n)
    index = write_index(out, f"Surprise: {root.name}", parts)
    log.info("surprise report written to %s", index)
    return index

"""The label-issues report: `OUT/index.html` for a folder written by `blindspots label-issues --out`
(images.csv|parquet, regions.csv|parquet, summary.json, worst.png, issues/<id>.png).

Sections: counts (images, estimated issues, flagged pixels, regions by kind), the images with the
worst label quality (table), their figure (worst.png, copied to OUT/figures/worst.png), the largest issue
regions and the most common (given, predicted) confusions.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path


from blindspots._validation import check_int
from blindspots.report.viewmodels.copied import copy_figure, frame_table, read_table
from blindspots.report.html import output_folder, write_index
from blindspots.report.viewmodels.blocks import Block, Figures, Heading, Nav, Table, Text

log = logging.getLogger(__name__)


def is_label_issues_dir(root: str | Path) -> bool:
    """Whether `root` looks like a `blindspots label-issues --out` folder (summary.json + images table)."""
    root = Path(root)
    return (root / "summary.json").is_file() and read_table(root / "images") is not None \
        if root.is_dir() else False


def label_issues_sections(root: Path, out: Path, *, n: int = 20, level: int = 2, anchor: str = "",
                          fig_dir: str = "") -> tuple[list[Block], dict]:
    """The page's sections as view-model blocks (+ the folder's summary.json) for a checked `root`.

    level: heading level of the sections (2 on their own page, 3 inside the round page); anchor:
    prefix of their ids; fig_dir: subfolder of out/figures/ for the copied figure (so two engine
    sections on one page do not overwrite each other's files).
    """
    summary = json.loads((root / "summary.json").read_text(encoding="utf-8"))
    images = read_table(root / "images")
    regions = read_table(root / "regions")
    names = summary.get("class_names") or []

    def named(v: object) -> object:
        """A class id as 'id name' when summary.json has class_names."""
        try:
            i = int(v)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            return v
        return f"{i} {names[i]}" if 0 <= i < len(names) else v

    if names and regions is not None and len(regions):
        regions = regions.copy()
        for col in ("given_label", "predicted_label"):
            if col in regions:
                regions[col] = regions[col].map(named)
    assert images is not None  # is_label_issues_dir checked it
    kinds = summary.get("regions_by_kind", {})
    counts = (f'{summary.get("num_images", len(images))} images; estimated issues: '
              f'{summary.get("estimated_issues", "?")}; flagged pixels: {summary.get("flagged_pixels", "?")}; '
              f'regions: {", ".join(f"{k} {v}" for k, v in kinds.items()) or "none"}')
    parts: list[Block] = [
        Text.of(counts, style="meta"),
        Heading("Images with the worst label quality", anchor + "worst", level),
        Text.of("Lowest image score first (the mean self-confidence of the given labels; lower: more likely "
                "mislabelled). Review these annotations first."),
        frame_table(images, max_rows=n)]
    if (root / "worst.png").is_file():
        cap = "worst images: image, given labels, prediction, flagged pixels"
        parts.append(Figures([copy_figure(root / "worst.png", out, fig_dir + "worst.png", cap)]))
    parts.append(Heading("Largest issue regions", anchor + "regions", level))
    if regions is not None and len(regions):
        by_area = regions.sort_values("area", ascending=False, kind="stable") if "area" in regions else regions
        parts.append(frame_table(by_area, max_rows=n))
    else:
        parts.append(Text.of("No issue regions."))
    parts.append(Heading("Most common confusions (by area)", anchor + "confusions", level))
    conf = summary.get("common_confusions", [])
    if conf:
        cols = list(conf[0])
        label_cols = {"given_label", "predicted_label"} if names else set()
        rows = [[named(c.get(k, "")) if k in label_cols else c.get(k, "") for k in cols] for c in conf]
        parts.append(Table(cols, rows, {j for j, k in enumerate(cols) if k not in label_cols}))
    else:
        parts.append(Text.of("None."))
    return parts, summary


def write_label_issues_report(root: str | Path, out_dir: str | Path, *, n: int = 20) -> Path:
    """Write the label-issues page `out_dir/index.html` (+ figures/); returns its path.

    root: a `label-issues --out` folder. n: images and regions listed.
    """
    root = Path(root)
    if not is_label_issues_dir(root):
        raise ValueError(f"root: expected a label-issues folder (summary.json, images.csv; `Scan.label_issues(..., "
                         f"out=)` or the `label-issues` command's --out), got {str(root)!r}")
    check_int(n, "n", minimum=0)
    out = output_folder(out_dir)
    parts: list[Block] = [Heading(f"Label issues: {root.resolve().name}", "", 1),
                          Nav([("worst", "worst images"), ("regions", "regions"), ("confusions", "confusions")])]
    parts += label_issues_sections(root, out, n=n)[0]
    index = write_index(out, f"Label issues: {root.name}", parts)
    log.info("label-issues report written to %s", index)
    return index

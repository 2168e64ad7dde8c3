"""A gallery of picked images: `DIR/index.html` plus thumbnails in `DIR/thumbs/`, opened offline.

Per pick: the image, the target's and each competitor's argmax map (saved by the scan) drawn
over it in the class colours (a binary model's background left clear), a legend of the classes
shown (names and colours), the score and the reason. Each thumbnail opens a large view (the
image or overlay at up to FULL_SIDE pixels, `full/<model>/<artifact name>`) when clicked: thin
structures (text lines, poles) cannot be judged at thumbnail size. Thumbnails are JPEG files
named by the ids rule (`thumbs/<model>/<artifact name>`), linked relatively, so the folder can be
moved or zipped as a whole.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from blindspots import ids as id_rules
from blindspots.data.classes import Classes
from blindspots.report.html import BASE_CSS, rel_url, write_index
from blindspots.report.drawing.overlays import clear_classes, colorize, overlay, resize_labels, thumbnail, thumbnail_size
from blindspots.report.drawing.thumbs import Figure, legend_items, read_image, save_jpeg
from blindspots.report.viewmodels.blocks import Block, Heading, Pick, Text
from blindspots.scan import maps as map_files
from blindspots.scan.layout import ScanLayout
from blindspots.scan.manifest import load_manifest, scan_pool_source

log = logging.getLogger(__name__)

IMAGE_LAYER = "_image"  # thumbs/_image/...: the picture itself (a model name never starts with "_")
FULL_SIDE = 2400  # the click-to-enlarge view: full size up to this longer side


def gallery_blocks(picks: pd.DataFrame, scan_dir: str | Path, out_dir: str | Path, *,
                   pool_root: str | Path | None = None, target: str | None = None,
                   competitors: Sequence[str] | None = None, max_side: int = 320,
                   alpha: float = 0.5, score_label: str | None = "score",
                   display: Mapping[str, str] | None = None, manifest: dict | None = None
                   ) -> tuple[list[Pick], dict]:
    """The view-models of `picks` (one per row; thumbnails written under out_dir/thumbs/, large views
    under out_dir/full/) and what was shown: {"target", "shown" (models), "pool_root"}. Arguments as
    in `write_gallery`; other pages (the scan report) embed these sections. score_label: what the
    score is called on the page (None: no score shown, e.g. random picks, whose score is only the
    draw's key). display: scan column -> the name shown (e.g. the project's `ocr4` for `ocr4_v0`).
    manifest: the scan's scan.json when the caller has read it already (read here otherwise)."""
    for col in ("id", "score", "reason"):
        if col not in picks.columns:
            raise ValueError(f"picks: expected columns id, score, reason, got {list(picks.columns)}")
    manifest = load_manifest(scan_dir) if manifest is None else manifest
    if manifest is None:
        raise ValueError(f"scan_dir: expected a scan folder with scan.json, got {str(scan_dir)!r}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir: expected a folder (created if missing), got the file {str(out)!r}")
    root = scan_pool_source(manifest, pool_root)
    target = target or picks.attrs.get("target") or manifest["target"]
    if competitors is None:
        competitors = picks.attrs.get("competitors")
    if competitors is None:
        competitors = manifest.get("competitors", []) if target == manifest["target"] else []
    shown = [target] + [g for g in competitors if g != target]
    classes = Classes.from_dict(manifest["classes"]) if isinstance(manifest.get("classes"), dict) else None
    num_classes = int(manifest.get("num_classes", 0))
    palette = classes.palette if classes is not None else Classes(tuple(f"class_{k}" for k in range(num_classes))).palette
    model_names = {m: (manifest["models"].get(m, {}).get("classes") or (classes.names if classes else []))
                   for m in shown}
    layout = ScanLayout(scan_dir)
    thumbs, full = out / "thumbs", out / "full"
    clear = clear_classes(num_classes)
    shown_as = dict(display or {})
    blocks = []
    for pos, row in enumerate(picks.itertuples(index=False)):
        image_id = str(row.id)
        rank = getattr(row, "rank", pos + 1)
        image, why = read_image(root, image_id)
        figures, present = [], set()
        name = id_rules.artifact_name(image_id, ".jpg")
        if image is not None:
            small, large = thumbnail(image, max_side), thumbnail(image, FULL_SIDE)
            path = thumbs / IMAGE_LAYER / name
            save_jpeg(small, path)
            save_jpeg(large, full / IMAGE_LAYER / name)
            figures.append(Figure("image", rel_url(path, out), full=rel_url(full / IMAGE_LAYER / name, out)))
        else:
            figures.append(Figure("image", None, f"image not readable: {why}"))
        for m in shown:
            labels = map_files.load_map(layout, m, image_id)
            if labels is None:
                figures.append(Figure(m, None, "no saved map (scan with --maps)"))
                continue
            present |= {int(k) for k in np.unique(labels)}
            big = None
            if image is not None:
                drawn = overlay(small, labels, palette, alpha, clear=clear)
                save_jpeg(overlay(large, labels, palette, alpha, clear=clear), full / m / name)
                big = rel_url(full / m / name, out)
            else:  # the map alone, at thumbnail size
                drawn = colorize(resize_labels(labels, thumbnail_size(*labels.shape[:2], max_side)), palette)
            path = thumbs / m / name
            save_jpeg(drawn, path)
            figures.append(Figure(shown_as.get(m, m) + (" (target)" if m == target else ""), rel_url(path, out),
                                  full=big))
        legend_names = model_names[shown[0]] if shown else []
        details = getattr(row, "details", None)
        blocks.append(Pick(number=pos + 1, title=f"#{rank} {image_id}", reason=str(row.reason),
                           score=f"{score_label} {float(row.score):.4g}" if score_label else None, figures=figures,
                           legend=legend_items(present, legend_names, palette),
                           details=str(details) if details else None))
    return blocks, {"target": target, "shown": shown, "pool_root": root}


def write_gallery(picks: pd.DataFrame, scan_dir: str | Path, out_dir: str | Path, *,
                  pool_root: str | Path | None = None, target: str | None = None,
                  competitors: Sequence[str] | None = None, max_side: int = 320, alpha: float = 0.5,
                  title: str | None = None, score_label: str | None = "score", intro: str = "") -> Path:
    """Write out_dir/index.html, out_dir/thumbs/ and out_dir/full/ for `picks`; returns the page's path.

    picks: rows in display order with columns id, score, reason (plain text) and optionally rank
        and details (shown folded).
    scan_dir: the scan folder the picks come from (maps, class names and colours, pool root).
    pool_root: where the images are (default: the scan's `pool_root`).
    target, competitors: whose maps to show (default: `picks.attrs` as `mine_scan` sets them, else
        the scan's target and competitors).
    max_side: thumbnail size in pixels (longer side). alpha: opacity of the class colours.
    score_label: what the score is called (None: not shown). intro: a sentence under the heading.
    """
    out = Path(out_dir)
    blocks, info = gallery_blocks(picks, scan_dir, out, pool_root=pool_root, target=target,
                                  competitors=competitors, max_side=max_side, alpha=alpha, score_label=score_label)
    target, shown, root = info["target"], info["shown"], info["pool_root"]
    heading = title or f"{len(picks)} picks from {Path(scan_dir).name}"
    head: list[Block] = [Heading(heading, "", 1),
                         Text.of(f"target: {target}; competitors: {', '.join(shown[1:]) or 'none'}; pool: {root}",
                                 style="meta")]
    if intro:
        head.append(Text.of(intro, style="meta"))
    head.append(Text.of("Click a picture for its full-size view.", style="meta"))
    out.mkdir(parents=True, exist_ok=True)
    return write_index(out, heading, head + blocks, css=BASE_CSS)

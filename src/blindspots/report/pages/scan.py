"""The scan-only report: `DIR/index.html` for one scan folder, with its figures (`DIR/figures/*.png`)
and the thumbnails of the most disputed images (`DIR/thumbs/`), all linked relatively so the folder
opens offline, moved or zipped.

Sections: what was scanned; per-model confidence (mean entropy and max-probability, histograms);
per-pair disagreement (1 - pixel agreement, 1 - mIoU: histograms); the target's predicted class mix;
the most disputed images (mean disagreement of the target with its competitors, drawn with
`gallery_blocks`); the error rows with their messages. The scan is read only through
`blindspots.scan` (`read_score_table`, `load_manifest`, saved maps via the gallery).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from blindspots._validation import check_int
from blindspots.report.drawing import figures
from blindspots.report.pages.gallery import gallery_blocks
from blindspots.report.html import output_folder, rel_url, write_index
from blindspots.report.viewmodels.blocks import Block, Figures, Heading, Image, Nav, Table, Text, bold
from blindspots.scan import read_score_table, schema
from blindspots.scan.manifest import load_manifest

log = logging.getLogger(__name__)


def disputed(scores: pd.DataFrame, target: str, n: int) -> pd.DataFrame:
    """The `n` ok rows where the target disagrees most with its competitors.

    scores: the score table. Returns picks (id, score = mean `dpa__T__G` over the competitors,
    reason naming each competitor's disagreement), highest first; empty without pair columns.
    """
    pairs = [g for t, g in schema.distance_pairs(scores.columns, "dpa") if t == target]
    if not pairs or n <= 0:
        return pd.DataFrame({"id": [], "score": [], "reason": []})
    ok = (scores[schema.STATUS] == schema.STATUS_OK).to_numpy(bool)
    d = np.stack([scores[schema.dpa(target, g)].to_numpy(np.float64, na_value=np.nan) for g in pairs], axis=1)
    fin = np.isfinite(d)
    count = fin.sum(axis=1)
    mean = np.where(count > 0, np.where(fin, d, 0.0).sum(axis=1) / np.maximum(count, 1), np.nan)
    mean = np.where(ok & np.isfinite(mean), mean, -np.inf)
    order = np.argsort(-mean, kind="stable")[:n]
    order = order[np.isfinite(mean[order])]
    reasons = [f"{target} disagrees with its competitors on {mean[i]:.0%} of pixels (mean): " +
               ", ".join(f"{g} {d[i, j]:.0%}" for j, g in enumerate(pairs)) for i in order]
    return pd.DataFrame({"id": scores[schema.ID].to_numpy(object)[order], "score": mean[order], "reason": reasons})


def _fig(path: Path, out: Path, alt: str) -> Image:
    return Image(rel_url(path, out), alt)


def write_scan_report(scan_dir: str | Path, out_dir: str | Path, *, n_disputed: int = 12,
                      pool_root: str | Path | None = None, max_errors: int = 200, max_side: int = 240) -> Path:
    """Write the scan page `out_dir/index.html` (+ figures/, thumbs/); returns its path.

    scan_dir: a folder written by `blindspots scan`. n_disputed: how many disputed images to show.
    pool_root: where the images are now (default: the scan's pool_root). max_errors: error rows
    listed (the rest are counted). max_side: thumbnail size in pixels.
    """
    manifest = load_manifest(scan_dir)
    if manifest is None:
        raise ValueError(f"scan_dir: expected a scan folder with scan.json, got {str(scan_dir)!r}")
    check_int(n_disputed, "n_disputed", minimum=0)
    out = output_folder(out_dir)
    scores = read_score_table(scan_dir, allow_partial=True)
    target, comps = manifest["target"], list(manifest.get("competitors", []))
    models = list(manifest.get("models", {}))
    status = scores[schema.STATUS] if schema.STATUS in scores.columns else pd.Series([], dtype=object)
    ok = (status == schema.STATUS_OK).to_numpy(bool)
    n_err = int((status == schema.STATUS_ERROR).sum())
    figs = out / "figures"
    parts: list[Block] = [
        Heading(f"Scan report: {Path(scan_dir).resolve().name}", "", 1),
        Nav([("confidence", "confidence"), ("disagreement", "disagreement"), ("classes", "class mix"),
             ("disputed", "most disputed"), ("errors", "errors")]),
        Text.of(f"{len(scores)} of {manifest.get('n_images', '?')} images read ({int(ok.sum())} ok, {n_err} error); "
                "target ", bold(target), f"; competitors: {', '.join(comps) or 'none'}; pool: "
                f"{pool_root or manifest.get('pool_root', '?')}", style="meta")]

    # --- per-model confidence
    conf_models = [m for m in models if schema.entropy(m) in scores.columns]
    rows = []
    for m in conf_models:
        e = scores.loc[ok, schema.entropy(m)].to_numpy(np.float64, na_value=np.nan)
        p = scores.loc[ok, schema.maxprob(m)].to_numpy(np.float64, na_value=np.nan)
        rows.append([m + (" (target)" if m == target else ""), int(np.isfinite(e).sum()),
                     f"{np.nanmean(e):.3f}" if np.isfinite(e).any() else "–",
                     f"{np.nanmean(p):.3f}" if np.isfinite(p).any() else "–"])
    parts.append(Heading("Confidence per model", "confidence"))
    if conf_models:
        parts.append(Table(["model", "images", "mean entropy (nats)", "mean max-probability"], rows, {1, 2, 3}))
        f1 = figures.histograms({m: scores.loc[ok, schema.entropy(m)].to_numpy(np.float64, na_value=np.nan)
                                 for m in conf_models}, figs / "entropy.png", xlabel="mean pixel entropy (nats)",
                                title="Entropy per image")
        f2 = figures.histograms({m: scores.loc[ok, schema.maxprob(m)].to_numpy(np.float64, na_value=np.nan)
                                 for m in conf_models}, figs / "maxprob.png", xlabel="mean pixel max-probability",
                                title="Max-probability per image")
        parts.append(Figures([_fig(f1, out, "entropy histogram"), _fig(f2, out, "max-probability histogram")]))
    else:
        parts.append(Text.of("No model columns were read (is the scan finished?)."))

    # --- per-pair disagreement
    parts.append(Heading("Disagreement of the target with each competitor", "disagreement"))
    pairs = [(t, g) for t, g in schema.distance_pairs(scores.columns, "dpa") if t == target]
    if pairs:
        rows = []
        for t, g in pairs:
            a = scores.loc[ok, schema.dpa(t, g)].to_numpy(np.float64, na_value=np.nan)
            b = scores.loc[ok, schema.dmiou(t, g)].to_numpy(np.float64, na_value=np.nan) \
                if schema.dmiou(t, g) in scores.columns else np.full(len(a), np.nan)
            rows.append([f"{t} vs {g}", f"{np.nanmean(a):.3f}", f"{np.nanmedian(a):.3f}",
                         f"{np.nanmean(b):.3f}" if np.isfinite(b).any() else "–"])
        parts.append(Table(["pair", "mean 1 - pixel agreement", "median", "mean 1 - mIoU"], rows, {1, 2, 3}))
        f1 = figures.histograms({g: scores.loc[ok, schema.dpa(t, g)].to_numpy(np.float64, na_value=np.nan)
                                 for t, g in pairs}, figs / "disagreement_pixel.png",
                                xlabel="1 - pixel agreement with the target", title=f"Disagreement with {target}",
                                value_range=(0, 1))
        f2 = figures.histograms({g: scores.loc[ok, schema.dmiou(t, g)].to_numpy(np.float64, na_value=np.nan)
                                 for t, g in pairs if schema.dmiou(t, g) in scores.columns},
                                figs / "disagreement_miou.png", xlabel="1 - mIoU with the target",
                                title=f"Disagreement with {target} (mIoU)", value_range=(0, 1))
        parts.append(Figures([_fig(f1, out, "pixel disagreement histogram"),
                              _fig(f2, out, "mIoU disagreement histogram")]))
    else:
        parts.append(Text.of("No competitors were scanned with this target: no pair distances."))

    # --- predicted class mix of the target
    parts.append(Heading("Predicted class mix of the target", "classes"))
    ks = schema.frac_models(scores.columns).get(target, [])
    if ks and ok.any():
        names = (manifest.get("models", {}).get(target, {}).get("classes")
                 or manifest.get("classes", {}).get("names") or [])
        labels = [names[k] if k < len(names) else f"class {k}" for k in ks]
        share = np.array([np.nanmean(scores.loc[ok, schema.frac(target, k)].to_numpy(np.float64, na_value=np.nan))
                          for k in ks])
        present = np.array([np.mean(scores.loc[ok, schema.frac(target, k)].to_numpy(np.float64, na_value=0) > 0)
                            for k in ks])
        f1 = figures.bars(labels, share, figs / "class_mix.png", ylabel="mean pixel share",
                          title=f"Pixels per class in {target}'s maps")
        parts.append(Figures([_fig(f1, out, "class mix")]))
        parts.append(Table(["class", "mean pixel share", "images where predicted"],
                           [[lab, f"{s:.3f}", f"{p:.0%}"] for lab, s, p in zip(labels, share, present)], {1, 2}))
    else:
        parts.append(Text.of("No class fractions for the target."))

    # --- most disputed images
    parts.append(Heading("Most disputed images", "disputed"))
    picks = disputed(scores, target, n_disputed)
    if len(picks):
        parts.append(Text.of("Where the target disagrees most with its competitors (mean of 1 - pixel agreement): "
                             "likely failures of one of them. Overlays: each model's argmax map over the image."))
        blocks, _ = gallery_blocks(picks, scan_dir, out, pool_root=pool_root, target=target, competitors=comps,
                                   max_side=max_side)
        parts.extend(blocks)
    else:
        parts.append(Text.of("Nothing to show (no competitors, or no ok images)."))

    # --- errors
    parts.append(Heading(f"Errors ({n_err})", "errors"))
    if n_err:
        err = scores.loc[(status == schema.STATUS_ERROR).to_numpy(bool), [schema.ID, schema.ERROR]]
        shown = err.head(max_errors)
        parts.append(Table(["image", "message"], [[r[0], r[1] if isinstance(r[1], str) else ""]
                                                  for r in shown.itertuples(index=False)]))
        if len(err) > len(shown):
            parts.append(Text.of(f"{len(err) - len(shown)} more error rows not listed."))
    else:
        parts.append(Text.of("No image failed to decode and no model failed."))
    summary = {"n_rows": int(len(scores)), "n_ok": int(ok.sum()), "n_error": n_err, "target": target,
               "competitors": comps, "disputed": [str(i) for i in picks["id"]]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    index = write_index(out, f"Scan report: {Path(scan_dir).name}", parts)
    log.info("scan report written to %s", index)
    return index

"""A project's rounds on top of its scan's `SampleTable`: selections, ratings and human masks.

Round i (0-based) of Algorithm 1 mines M(i+1), rates it, and forms S(i+1) and T(i+1); the export
names them by k = i + 1, as the paper does:

    tags "M<k>", "S<k>", "T<k>"      membership of the mined candidates, counterexamples, test set
    tag "ood_<k>"                    a rater called the image out of domain
    rank_<k>, score_<k>, reason_<k>  the candidate's rank (1 = first), sampler score and reason (a sentence)
    mos_<k>, n_ratings_<k>           mean opinion score (1-5, out-of-domain answers left out), raters
    gt_<k>                           fo.Segmentation of the human pixel label (255 = ignore)

The scan part is the project's scan read with its newest target version `<target>_v<i>` (its
pairs with the competitors), so `disagreement_<target>_v<i>` shows the model being fixed now.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from blindspots.integrations.fiftyone.samples import SampleTable, id_rows, set_column, scan_samples
from blindspots.loop import Project
from blindspots.mine.reasons import describe
from blindspots.scan.manifest import load_manifest


def newest_target(project: Project) -> str:
    """The newest target version scanned into the project: `<target>_v<i>` with the highest i."""
    manifest = load_manifest(project.scan_dir)
    if manifest is None:
        raise ValueError(f"source: expected a project whose pool was scanned, got {str(project.path)!r} without a "
                         "scan; advance the project first (`Project.advance()`, the `round` command)")
    pat = re.compile(rf"^{re.escape(project.config.target.name)}_v(\d+)$")
    versions = [(int(m.group(1)), name) for name in manifest.get("models", {}) if (m := pat.match(name))]
    if not versions:
        raise ValueError(f"source: expected a scan of the target {project.config.target.name!r} in "
                         f"{str(project.scan_dir)!r}, got models {sorted(manifest.get('models', {}))}")
    return max(versions)[1]


def project_samples(project: Project, *, pool_root: str | Path | None = None, maps_dir: str | Path | None = None,
                    label_issues: str | Path | None = None, surprise_maps: str | Path | None = None,
                    progress: bool = True) -> SampleTable:
    """The project's scan (`scan_samples` with the newest target version) plus, for every round,
    its selections, ratings and human masks (module docstring). maps_dir defaults to
    `<project>/reports/fiftyone`."""
    out = scan_samples(project.scan_dir, target=newest_target(project), pool_root=pool_root,
                       maps_dir=maps_dir or project.reports_dir / "fiftyone", label_issues=label_issues,
                       surprise_maps=surprise_maps, progress=progress)
    out.info.update(kind="project", source=str(project.path), rounds=[])
    ids = out.fields["blindspots_id"].tolist()
    rows = id_rows(ids)
    masks_field: dict[str, list[str | None]] = {}
    classes = _classes_of(out)
    names = None if classes is None else [classes[0][k] for k in sorted(classes[0])]
    for rnd in sorted(int(r) for r in project.journal.rounds()["round"]):
        k = rnd + 1
        out.info["rounds"].append(k)
        for kind in ("M", "S", "T"):
            sel = project.answers.candidates(rnd, kind)
            where = [rows[i] for i in sel["id"] if i in rows]
            out.add_tags(where, f"{kind}{k}")
            if kind == "M" and len(sel):
                sel = sel[sel["id"].isin(rows)]
                set_column(out, f"rank_{k}", where, (sel["rank"] + 1).tolist())  # 1-based, as `mine` writes
                set_column(out, f"score_{k}", where, sel["score"].tolist())
                set_column(out, f"reason_{k}", where, [describe(r, names) for r in sel["reason"]])
        ratings = project.answers.ratings_for_round(rnd)
        if len(ratings):
            by_id = ratings.groupby("id")
            finite = ratings[~ratings["out_of_domain"]].groupby("id")["score"].mean()
            rated = [i for i in by_id.groups if i in rows]
            set_column(out, f"mos_{k}", [rows[i] for i in rated],
                        [float(finite[i]) if i in finite.index and np.isfinite(finite[i]) else None for i in rated])
            set_column(out, f"n_ratings_{k}", [rows[i] for i in rated], [int(by_id.size()[i]) for i in rated])
            ood = ratings.loc[ratings["out_of_domain"], "id"].unique()
            out.add_tags([rows[i] for i in ood if i in rows], f"ood_{k}")
        masks = project.answers.masks_for_round(rnd)
        if len(masks):
            col: list[str | None] = [None] * len(ids)
            for i, p in zip(masks["id"], masks["path"]):
                if i in rows:
                    col[rows[i]] = str(Path(p).resolve())
            masks_field[f"gt_{k}"] = col
    for name, col in masks_field.items():
        out.segmentations[name] = col
        if classes is not None:
            out.mask_targets[name], colors = classes
            if colors:
                out.colors[name] = colors
    return out


def _classes_of(out: SampleTable) -> tuple[dict[int, str], dict[int, str]] | None:
    """The target's mask targets and colours (human masks use the target's label space)."""
    field = f"pred_{out.info['target']}"
    if field not in out.mask_targets:
        return None
    return out.mask_targets[field], out.colors.get(field, {})

"""What an export puts into a FiftyOne dataset, built without FiftyOne: one row per pool image.

`SampleTable` holds plain values (paths, numbers, strings, tags), so building it is testable and
fast anywhere; `blindspots.integrations.fiftyone.dataset` turns it into samples. Field names:

    blindspots_id                the image id of the scan (path relative to the pool)
    <every score column>         status, error, width, height, content_hash, frac__M__k, entropy__M,
                                 maxprob__M, dpa__T__G, dmiou__T__G, surprise_*__M, ... (schema.py)
    pred_<M>                     fo.Segmentation(mask_path=<scan>/maps/<M>/...), mask_targets = M's classes
    disagreement_<T>             fo.Heatmap: competitors disagreeing with target T per pixel, range [0, G]
    label_issues                 fo.Heatmap of a `label-issues` folder's issues/<id>.png, range [0, 255]
    surprise                     fo.Heatmap of `surprise view --maps` SA maps scaled to 0..255 (heatmaps.py)
    label_quality, label_issue_fraction, label_issue_rank    its images.csv
    picks_<name>_rank|score|reason, tag "mined:<name>"        a `mine --out` folder
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from blindspots.ids import find_artifact, stem_key
from blindspots.integrations.fiftyone.heatmaps import write_disagreement_maps, write_surprise_maps
from blindspots.scan import schema
from blindspots.scan.layout import ScanLayout
from blindspots.scan.manifest import load_manifest
from blindspots.scan.table import read_score_table

ID_FIELD = "blindspots_id"
# sample fields FiftyOne owns: a score column may never take one of these names
FIFTYONE_RESERVED = ("id", "filepath", "tags", "metadata", "media_type", "created_at", "last_modified_at")
_FIELD = re.compile(r"[^a-z0-9_]+")


@dataclass
class SampleTable:
    """One export, one row per image (all lists have one entry per `filepaths` entry).

    filepaths: absolute image paths [N] (FiftyOne's key: re-exports update these samples).
    fields: scalar fields [N rows] (NaN / None: not set on that sample).
    segmentations: field -> [N] mask paths (None: no mask for that image).
    heatmaps: field -> ([N] map paths or None, (low, high) value range of the maps).
    tags: [N] tag lists (the export's own tags; a re-export replaces them, the user's stay).
    mask_targets: segmentation field -> {class id: class name}.
    colors: segmentation field -> {class id: "#rrggbb"} (the classes' palette for FiftyOne's App).
    info: dataset-level facts (source folder, target, competitors, classes).
    """

    filepaths: list[str]
    fields: pd.DataFrame
    segmentations: dict[str, list[str | None]] = field(default_factory=dict)
    heatmaps: dict[str, tuple[list[str | None], tuple[float, float]]] = field(default_factory=dict)
    tags: list[list[str]] = field(default_factory=list)
    mask_targets: dict[str, dict[int, str]] = field(default_factory=dict)
    colors: dict[str, dict[int, str]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.filepaths)
        if not self.tags:
            self.tags = [[] for _ in range(n)]
        sizes = [len(self.fields), len(self.tags)] + [len(v) for v in self.segmentations.values()] \
            + [len(v[0]) for v in self.heatmaps.values()]
        if any(s != n for s in sizes):
            raise ValueError(f"SampleTable: expected {n} rows in every part, got sizes {sizes}")

    def add_tags(self, rows: Iterable[int], tag: str) -> None:
        for r in rows:
            if tag not in self.tags[r]:
                self.tags[r].append(tag)


def field_name(text: str) -> str:
    """A FiftyOne-safe field name part: lowercase letters, digits and underscores."""
    out = _FIELD.sub("_", str(text).lower()).strip("_")
    if not out:
        raise ValueError(f"name: expected letters or digits to name a field after, got {text!r}")
    return out


def image_paths(ids: Sequence[str], pool_root: str | Path) -> list[str]:
    """Absolute file paths of scan ids: `pool_root/id`; an id that is a `file://` URI (a list or FiftyOne
    pool's absolute path) is that path. FiftyOne reads local files: other URIs are a ValueError."""
    out: list[str] = []
    local_root = None if "://" in str(pool_root) else Path(pool_root)
    for i in ids:
        if i.startswith("file://"):
            out.append(i[len("file://"):])
        elif "://" in i:
            raise ValueError(f"pool: expected images in local files (FiftyOne reads files), got the id {i!r} of a "
                             f"pool in {str(pool_root)!r}; pass --pool with a local copy of the images")
        elif local_root is None:
            raise ValueError(f"pool: expected a local folder of the pool's images (FiftyOne reads files), got "
                             f"{str(pool_root)!r}; pass --pool with a local copy")
        else:
            out.append(str((local_root / i).resolve()))
    return out


def scan_samples(scan_dir: str | Path, *, target: str | None = None, pool_root: str | Path | None = None,
                 maps_dir: str | Path | None = None, picks: Sequence[str | Path] = (),
                 label_issues: str | Path | None = None, surprise_maps: str | Path | None = None,
                 progress: bool = True) -> SampleTable:
    """A `SampleTable` of a scan folder: every score column, each model's argmax map, the
    disagreement map of `target` (default: the scan's) with its competitors, plus optional
    `mine --out` folders (`picks`), a `label-issues --out` folder and a folder of per-pixel SA maps
    (`surprise_maps`, written by `blindspots surprise view --maps`).

    pool_root: where the pool's images are now (default: the folder that was scanned).
    maps_dir: where the drawn disagreement maps go (default: `<scan_dir>/fiftyone`).
    """
    scan_dir = Path(scan_dir)
    manifest = load_manifest(scan_dir)
    if manifest is None:
        raise ValueError(f"source: expected a scan folder (with scan.json) or a project folder, got {str(scan_dir)!r}")
    table = read_score_table(scan_dir, target=target)
    target = target or manifest["target"]
    competitors = [g for _, g in schema.distance_pairs(table.columns, "dpa")]
    ids = [str(i) for i in table[schema.ID]]
    root = pool_root if pool_root is not None else manifest.get("pool_root")
    if root is None:
        raise ValueError("pool: expected the pool's folder (the scan does not record one), got none; pass --pool")
    if pool_root is not None and not Path(pool_root).is_dir():
        raise ValueError(f"pool: expected an existing folder of the pool's images, got {str(pool_root)!r}")
    fields = _score_fields(table)
    out = SampleTable(image_paths(ids, root), fields, info={
        "source": str(scan_dir.resolve()), "kind": "scan", "target": target, "competitors": competitors,
        "models": sorted(manifest.get("models", {}))})
    layout = ScanLayout(scan_dir)
    for model, info in sorted(manifest.get("models", {}).items()):
        paths = [layout.find_map(model, i) for i in ids]
        if not any(paths):
            continue  # a scan without maps (save_maps off): scores only
        name = f"pred_{model}"
        out.segmentations[name] = [None if p is None else str(p.resolve()) for p in paths]
        names = info.get("classes") or (manifest.get("classes") or {}).get("names") or []
        out.mask_targets[name] = {k: str(v) for k, v in enumerate(names)}
        palette = (manifest.get("classes") or {}).get("palette")
        if palette and len(palette) == len(names) and names == (manifest.get("classes") or {}).get("names"):
            out.colors[name] = {k: "#%02x%02x%02x" % tuple(int(c) for c in rgb) for k, rgb in enumerate(palette)}
    if competitors and f"pred_{target}" in out.segmentations:
        paths = write_disagreement_maps(scan_dir, target, competitors, ids,
                                        Path(maps_dir or scan_dir / "fiftyone") / "disagreement" / target,
                                        progress=progress)
        out.heatmaps[f"disagreement_{target}"] = ([None if p is None else str(p.resolve()) for p in paths],
                                                  (0.0, float(len(competitors))))
    for folder in picks:
        add_picks(out, ids, folder)
    if label_issues is not None:
        add_label_issues(out, ids, label_issues)
    if surprise_maps is not None:
        paths, scale = write_surprise_maps(ids, surprise_maps, Path(maps_dir or scan_dir / "fiftyone") / "surprise",
                                           progress=progress)
        out.heatmaps["surprise"] = ([None if p is None else str(p.resolve()) for p in paths], (0.0, 255.0))
        out.info["surprise_scale"] = list(scale)  # 0 and 255 of the heatmap, in SA units
    return out


def _score_fields(table: pd.DataFrame) -> pd.DataFrame:
    """The score table as sample fields: `id` becomes `blindspots_id`, every other column keeps its name."""
    clash = [c for c in table.columns if c in FIFTYONE_RESERVED and c != schema.ID]
    if clash:
        raise ValueError(f"scan: expected score columns that are not FiftyOne's own fields, got {clash}")
    fields = table.rename(columns={schema.ID: ID_FIELD}).reset_index(drop=True)
    return fields.astype(object).where(fields.notna(), None)


def id_rows(ids: Sequence[str]) -> dict[str, int]:
    """Row of every id, also under its name without extension (a labelled set's ids have none)."""
    rows = {stem_key(i): r for r, i in enumerate(ids)}
    rows.update({i: r for r, i in enumerate(ids)})
    return rows


def add_picks(out: SampleTable, ids: Sequence[str], folder: str | Path) -> None:
    """Tag the picks of a `mine --out` folder "mined:<name>" (name: the folder's) and add their
    rank, score and reason as `picks_<name>_rank|score|reason`; ValueError for ids not in the scan."""
    folder = Path(folder)
    csv = folder / "picks.csv" if folder.is_dir() else folder
    if not csv.is_file():
        raise ValueError(f"picks: expected a folder of mined picks with picks.csv (the `mine` command's --out), got {str(folder)!r}")
    picks = pd.read_csv(csv, dtype={"id": str})
    if not {"id", "rank"} <= set(picks.columns):
        raise ValueError(f"picks: expected columns id and rank in {str(csv)!r}, got {list(picks.columns)}")
    name = field_name(folder.name if folder.is_dir() else folder.stem)
    rows = id_rows(ids)
    missing = [i for i in picks["id"] if i not in rows]
    if missing:
        raise ValueError(f"picks: expected ids of this scan in {str(csv)!r}, got {len(missing)} others "
                         f"(first: {missing[0]!r}); were they mined from another scan?")
    where = [rows[i] for i in picks["id"]]
    out.add_tags(where, f"mined:{name}")
    for col in ("rank", "score", "reason"):
        if col in picks.columns:
            set_column(out, f"picks_{name}_{col}", where, picks[col].tolist())


def add_label_issues(out: SampleTable, ids: Sequence[str], folder: str | Path) -> None:
    """A `label-issues --out` folder: its issues/<id>.png as the heatmap `label_issues` (255 = issue)
    and images.csv as `label_quality`, `label_issue_fraction`, `label_issue_rank`, tag "label_issue"
    on images with flagged pixels. Its ids match the scan's ids with or without the extension."""
    folder = Path(folder)
    table = next((folder / f"images.{x}" for x in ("csv", "parquet") if (folder / f"images.{x}").is_file()), None)
    if table is None:
        raise ValueError(f"label_issues: expected a label-issues folder with images.csv "
                         "(`Scan.label_issues(..., out=)` or the `label-issues` command's --out), "
                         f"got {str(folder)!r}")
    images = pd.read_csv(table, dtype={"id": str}) if table.suffix == ".csv" else pd.read_parquet(table)
    rows = id_rows(ids)
    found = images[images["id"].isin(rows)]
    if len(images) and found.empty:
        raise ValueError(f"label_issues: expected ids of this pool in {str(table)!r}, got none of them "
                         f"(first: {images['id'].iloc[0]!r})")
    where = [rows[i] for i in found["id"]]
    for col, name in (("image_score", "label_quality"), ("issue_fraction", "label_issue_fraction"),
                      ("rank", "label_issue_rank")):
        if col in found.columns:
            set_column(out, name, where, found[col].tolist())
    if "issue_pixels" in found.columns:
        out.add_tags([r for r, n in zip(where, found["issue_pixels"]) if n > 0], "label_issue")
    paths: list[str | None] = [None] * len(ids)
    for r, i in zip(where, found["id"]):
        p = find_artifact(folder / "issues", i) or (folder / "issues" / f"{i}.png")
        paths[r] = str(p.resolve()) if p.is_file() else None
    if any(paths):
        out.heatmaps["label_issues"] = (paths, (0.0, 255.0))


def set_column(out: SampleTable, name: str, rows: Sequence[int], values: Sequence[Any]) -> None:
    col = [None] * len(out.filepaths) if name not in out.fields else out.fields[name].tolist()
    for r, v in zip(rows, values):
        col[r] = plain_value(v)
    out.fields[name] = pd.Series(col, dtype=object)


def plain_value(v: Any) -> Any:
    """numpy scalars to Python, NaN to None (FiftyOne stores what Mongo can)."""
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        return None
    return v.item() if isinstance(v, np.generic) else v

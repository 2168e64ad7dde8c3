"""Write a `SampleTable` into a FiftyOne dataset: created on the first export, updated after.

Samples are keyed by their filepath: new images are added as whole samples (one insert), images
already there get their fields set again (one bulk write per field), never a second sample. Tags: the export's own tags are recorded per sample
(`blindspots_tags`); a re-export replaces those and keeps every tag a person added in FiftyOne.
Images that left the pool keep their sample (and anything a person added to it); their count is
reported. The dataset is persistent (it outlives the process, as a dataset to look at must).
"""
from __future__ import annotations

import logging
from typing import Any

from blindspots.extras import install_hint, require
from blindspots.integrations.fiftyone.samples import SampleTable, field_name, plain_value

# Lazy imports: fiftyone (optional: only the call that uses it needs it).

log = logging.getLogger(__name__)

OWN_TAGS = "blindspots_tags"
INSTALL_HINT = install_hint("fiftyone")


def import_fiftyone() -> Any:
    """The `fiftyone` module, or a MissingExtraError (a ValueError) naming the extra that installs it."""
    return require("fiftyone", "a FiftyOne dataset")


def write_dataset(table: SampleTable, name: str, *, overwrite: bool = False, progress: bool = True) -> dict:
    """Create or update the FiftyOne dataset `name` from `table`; returns counts
    {"dataset", "samples", "added", "updated", "not_in_source"}.

    overwrite: delete an existing dataset of that name first (loses what people added there).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"dataset: expected a non-empty dataset name, got {name!r}")
    fo = import_fiftyone()
    if overwrite and fo.dataset_exists(name):
        fo.delete_dataset(name)
    ds = fo.load_dataset(name) if fo.dataset_exists(name) else fo.Dataset(name)
    ds.persistent = True
    before = set(ds.values("filepath"))
    new = [r for r, p in enumerate(table.filepaths) if p not in before]
    old = [r for r, p in enumerate(table.filepaths) if p in before]
    if new:  # whole samples in one insert: FiftyOne's fastest way in
        ds.add_samples([_sample(fo, table, r) for r in new], progress=False)
    if old:  # the samples already there: one bulk write per field, keyed by filepath
        paths = [table.filepaths[r] for r in old]
        for col in table.fields.columns:
            values = table.fields[col]
            _set(ds, col, {p: plain_value(values.iat[r]) for p, r in zip(paths, old)})
        for col, masks in table.segmentations.items():
            _set(ds, col, {p: _segmentation(fo, masks[r]) for p, r in zip(paths, old)})
        for col, (maps, rng) in table.heatmaps.items():
            _set(ds, col, {p: _heatmap(fo, maps[r], rng) for p, r in zip(paths, old)})
        _set_tags(ds, table, old)
    masks = dict(ds.mask_targets)
    masks.update({f: {int(k): v for k, v in t.items()} for f, t in table.mask_targets.items()})
    ds.mask_targets = masks
    ds.info = {**ds.info, "blindspots": table.info}
    if table.colors:
        ds.app_config.color_scheme = _color_scheme(fo, ds, table)
    ds.save()
    gone = len(before - set(table.filepaths))
    if gone:
        log.warning("%d sample(s) of dataset %r are not in this export's pool any more; kept as they are", gone, name)
    return {"dataset": name, "samples": len(ds), "added": len(new), "updated": len(old),
            "not_in_source": gone}


def _segmentation(fo: Any, path: str | None) -> Any:
    return None if path is None else fo.Segmentation(mask_path=path)


def _heatmap(fo: Any, path: str | None, value_range: tuple[float, float]) -> Any:
    return None if path is None else fo.Heatmap(map_path=path, range=[float(value_range[0]), float(value_range[1])])


def _sample(fo: Any, table: SampleTable, r: int) -> Any:
    """Row r as a new `fo.Sample` (fields without a value are left out: FiftyOne infers types from values)."""
    fields = {c: v for c in table.fields.columns if (v := plain_value(table.fields[c].iat[r])) is not None}
    fields.update({c: _segmentation(fo, m[r]) for c, m in table.segmentations.items() if m[r] is not None})
    fields.update({c: _heatmap(fo, m[r], rng) for c, (m, rng) in table.heatmaps.items() if m[r] is not None})
    return fo.Sample(filepath=table.filepaths[r], tags=list(table.tags[r]), **{OWN_TAGS: list(table.tags[r])},
                     **{own_tags_field(table): list(table.tags[r])}, **fields)


def _set(ds: Any, field: str, values: dict[str, Any]) -> None:
    """Set one field of many samples by filepath (one bulk write, not one save per sample)."""
    if all(v is None for v in values.values()) and field not in ds.get_field_schema():
        return  # FiftyOne cannot infer a type from nothing; an empty column adds no field
    ds.set_values(field, values, key_field="filepath")


def own_tags_field(table: SampleTable) -> str:
    """The field that records the tags exports of this kind wrote (`blindspots_tags_scan`, `..._project`).

    Why per kind: a scan exported onto a project's dataset replaced the project's M/S/T tags, which were
    "the export's own" too; now an export replaces only what an export of its own kind wrote."""
    return f"{OWN_TAGS}_{field_name(str(table.info.get('kind') or 'scan'))}"


def _set_tags(ds: Any, table: SampleTable, rows: list[int]) -> None:
    """Replace the tags exports of this kind wrote on the samples of `rows`, keeping the tags people added and
    those other kinds of export wrote. `blindspots_tags` holds the union of every kind's."""
    paths = [table.filepaths[r] for r in rows]
    view = ds.select_by("filepath", paths)
    fps, tags = view.values("filepath"), view.values("tags")
    schema = ds.get_field_schema()
    mine, kinds = own_tags_field(table), [f for f in schema if f.startswith(OWN_TAGS + "_")]
    # a dataset from before the per-kind fields: its blindspots_tags were all this kind's
    source = mine if mine in schema else (OWN_TAGS if not kinds and OWN_TAGS in schema else None)
    own = dict(zip(fps, view.values(source))) if source else {}
    others = {f: dict(zip(fps, view.values(f))) for f in kinds if f != mine}
    new_own = {table.filepaths[r]: list(table.tags[r]) for r in rows}
    merged, union = {}, {}
    for fp, current in zip(fps, tags):
        mine_before = set(own.get(fp) or []) - {t for o in others.values() for t in (o.get(fp) or [])}
        kept = [t for t in (current or []) if t not in mine_before]  # what a person or another export added stays
        merged[fp] = kept + [t for t in new_own[fp] if t not in kept]
        union[fp] = sorted({*new_own[fp], *(t for o in others.values() for t in (o.get(fp) or []))})
    ds.set_values("tags", merged, key_field="filepath")
    ds.set_values(mine, new_own, key_field="filepath")
    ds.set_values(OWN_TAGS, union, key_field="filepath")


def _color_scheme(fo: Any, ds: Any, table: SampleTable) -> Any:
    """FiftyOne's App colours for each segmentation field: the classes' palette, by class id."""
    old = ds.app_config.color_scheme
    fields = [f for f in (old.fields or []) if f.get("path") not in table.colors] if old is not None else []
    for path, colors in table.colors.items():
        fields.append({"path": path, "maskTargetsColors": [{"intTarget": int(k), "color": c}
                                                            for k, c in sorted(colors.items())]})
    # colour by value: each class its palette colour (by field, the App paints a whole mask in one colour)
    return fo.ColorScheme(color_by=(old.color_by if old is not None and old.color_by else "value"), fields=fields)


__all__ = ["write_dataset", "import_fiftyone", "OWN_TAGS"]

"""The acquisition columns' names (`al_{kind}__{M}`, `blindspots.mine.model_columns.acquisition` computes them), which
model's columns a sampler reads (with errors that say how to add them), and which a scan already holds.
No torch here, so importing a sampler stays light."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from blindspots.scan import schema
from blindspots.scan.layout import ScanLayout
from blindspots.scan.manifest import load_manifest

KINDS = ("margin", "bald", "features", "badge")
DEFAULT_KINDS = ("margin", "bald", "features")  # badge's C x D columns only when a strategy reads them
PREFIX = "al_"


def margin_column(model: str) -> str:
    """Column of mean pixel margin p_(1) - p_(2) of model `model`."""
    return f"{PREFIX}margin{schema.SEP}{model}"


def bald_column(model: str) -> str:
    """Column of mean pixel BALD mutual information of model `model` (nats)."""
    return f"{PREFIX}bald{schema.SEP}{model}"


def feature_column(model: str, j: int) -> str:
    """Column j of model `model`'s pooled penultimate features."""
    return f"{PREFIX}feat{schema.SEP}{model}{schema.SEP}{int(j)}"


def badge_column(model: str, j: int) -> str:
    """Column j (= class k x D + feature d) of model `model`'s BADGE gradient embedding."""
    return f"{PREFIX}badge{schema.SEP}{model}{schema.SEP}{int(j)}"


def feature_columns(columns: Sequence[object], model: str, kind: str = "feat") -> list[str]:
    """The `al_{kind}__{model}__{j}` columns present (kind "feat" or "badge"), in j order."""
    head = f"{PREFIX}{kind}{schema.SEP}{model}{schema.SEP}"
    found = [str(c) for c in columns if str(c).startswith(head) and str(c)[len(head):].isdigit()]
    return sorted(found, key=lambda c: int(c[len(head):]))


def column_models(columns: Sequence[object], kind: str) -> list[str]:
    """Models with an `al_{kind}__{M}` column (kind "margin" or "bald"; "feat" for features)."""
    head = f"{PREFIX}{kind}{schema.SEP}"
    out = []
    for c in map(str, columns):
        if c.startswith(head):
            m = c[len(head):].split(schema.SEP)[0]
            if m not in out:
                out.append(m)
    return out




def model_with_column(table: pd.DataFrame, kind: str, target: str | None) -> str:
    """The model M whose `al_{kind}__{M}` column(s) a sampler reads: `target`, or the only one present.

    kind: "margin", "bald", "feat" or "badge". ValueError naming `target` and the fix when they are missing.
    """
    models = column_models(table.columns, kind)
    how = {"margin": "margin", "bald": "bald", "feat": "features", "badge": "badge"}[kind]
    fix = (f"add them once per pool with blindspots.mine.model_columns.acquisition.add_acquisition_columns("
           f"scan_dir, pool, segmenter, name, kinds=['{how}']) or the `mine` command's --model SPEC")
    if target is None:
        if len(models) != 1:
            raise ValueError(f"target: could not infer the model from `al_{kind}__{{M}}` columns (found {models}); "
                             + ("pass target=" if models else fix))
        return models[0]
    if target not in models:
        raise ValueError(f"target: expected a model with `al_{kind}__{{M}}` columns {models}, got {target!r}; {fix}")
    return target


def part_name(name: str, kinds: Sequence[str]) -> str:
    """The extra part of these columns: `al_{kinds joined by _}__{name}`."""
    return f"{PREFIX}{'_'.join(k for k in KINDS if k in kinds)}{schema.SEP}{name}"


def missing_kinds(scan_dir: str | Path, name: str, kinds: Sequence[str]) -> list[str]:
    """The acquisition kinds of model `name` no complete extra part of the scan holds yet."""
    layout, manifest = ScanLayout(scan_dir), load_manifest(scan_dir) or {}
    n_shards = int(manifest.get("n_shards", 0))
    have: set[str] = set()
    for part in layout.extra_parts():
        head, sep, model = part.rpartition(schema.SEP)
        if sep and model == name and head.startswith(PREFIX) and all(
                layout.extra_shard(part, k).exists() for k in range(n_shards)):
            have |= {k for k in KINDS if k in head[len(PREFIX):].split("_")}
    return [k for k in kinds if k not in have]

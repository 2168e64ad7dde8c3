"""Mine a FiftyOne view of an exported scan or project: the picks of `mine_scan` restricted to the
view's images, tagged in FiftyOne (what the "mine with blindspots" operator of plugin/ runs).

The dataset remembers what it was exported from (`dataset.info["blindspots"]`: the source folder,
its kind and target), so a view needs nothing else: its samples' `blindspots_id`s are the ids to
mine among. Picks get the tag "mined:<strategy>" and `picks_<strategy>_rank|score|reason` fields,
as an exported `mine --out` folder would; tags are a person's action here, so re-exports keep them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from blindspots.integrations.fiftyone.samples import ID_FIELD
from blindspots.mine.run import mine_scan

# Lazy imports: fiftyone (optional: only the call that uses it needs it).


def scan_of(dataset: Any) -> tuple[Path, str]:
    """(scan folder, target) a dataset was exported from; ValueError for a dataset not made by blindspots."""
    info = (dataset.info or {}).get("blindspots")
    if not isinstance(info, dict) or "source" not in info:
        raise ValueError(f"dataset: expected a dataset written by blindspots (`Scan.to_fiftyone`), got {dataset.name!r} "
                         "without its blindspots info")
    source = Path(info["source"])
    return (source / "scans" if info.get("kind") == "project" else source), str(info["target"])


def mine_view(view: Any, strategy: str = "mad", n: int = 20, *, seed: int = 0) -> pd.DataFrame:
    """Pick at most `n` images of `view` with `strategy` (`mine_scan` on the view's ids), tag them in
    FiftyOne and return the picks (rank, id, score, reason, ...)."""
    scan, target = scan_of(view._dataset)
    ids = [i for i in view.values(ID_FIELD) if i is not None]
    if not ids:
        raise ValueError("view: expected samples exported by blindspots (`Scan.to_fiftyone`), got none with a blindspots_id")
    picks = mine_scan(scan, strategy, n, target=target, seed=seed, ids=ids)
    tag = f"mined:{strategy}"
    chosen = view.match(_in_ids(picks["id"].tolist()))
    chosen.tag_samples(tag)
    dataset = view._dataset
    by_id = picks.set_index("id")
    for col in ("rank", "score", "reason"):
        values = {i: (None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)) for i, v in by_id[col].items()}
        dataset.set_values(f"picks_{strategy}_{col}", values, key_field=ID_FIELD)
    return picks


def _in_ids(ids: list[str]) -> Any:
    from fiftyone import ViewField as F

    return F(ID_FIELD).is_in(ids)

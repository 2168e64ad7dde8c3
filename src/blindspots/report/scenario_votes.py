"""Segmentation failure scenarios as a vote set for the app's vote page.

Each scenario becomes one item: a strip of its most typical images; the set's choices are short
names built from the scenarios' distinguishing attributes ("brightness low; class_vehicle high"),
plus the page's *none of the above* (the images share no one failure mode). The folder has the
layout of a Defuse review set (items.csv, classes.json, images/<item_id>.png), so
`blindspots web attach-votes PROJECT FOLDER --name NAME` offers it unchanged; classes.json also
carries the question shown above the image ("prompt") and `"free_text": true`: a rater may type a
name of their own, stored as the vote's label like a chosen one (`scenario_names` reads them back).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.report.drawing.overlays import thumbnail
from blindspots.report.drawing.thumbs import read_image

PROMPT = ("One failure mode? These are the most typical images of one group of the target's failures: "
          "give it a name, or choose none of the above if they share no one failure mode.")
MAX_LABEL = 128  # the vote API's longest label


def vote_prefix(round: int) -> str:
    """The item-id prefix of round `round`'s scenario vote set ("seg-r<round>")."""
    return f"seg-r{int(round)}"


def scenario_names(votes: pd.DataFrame, prefix: str) -> dict[int, dict]:
    """The names people gave each scenario of the vote set `prefix`: {scenario index: {"names":
    [(name, votes), ...] most voted first (ties: alphabetical), "none": votes for none of the
    above}}. votes: `project.answers.votes()` (item_id, annotator, label; label None = none of the above);
    chosen and typed names count alike."""
    pattern = rf"^{re.escape(prefix)}-s(\d+)$"
    ids = votes["item_id"].astype(str).str.extract(pattern)[0]
    out: dict[int, dict] = {}
    for idx, g in votes[ids.notna()].groupby(ids[ids.notna()].astype(int)):
        counts = g["label"].dropna().astype(str).value_counts()
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        out[int(idx)] = {"names": [(str(n), int(c)) for n, c in ranked], "none": int(g["label"].isna().sum())}
    return out


def scenario_name(effects: pd.DataFrame, *, n_terms: int = 2, min_d: float = 0.5) -> str:
    """A short name from a scenario's effects (attribute, d sorted by |d|): up to n_terms
    "attribute high|low" joined by "; ", or "" when no |d| reaches min_d."""
    terms = [f"{r.attribute} {'high' if r.d > 0 else 'low'}" for r in effects.head(n_terms).itertuples(index=False)
             if abs(r.d) >= min_d]
    return "; ".join(terms)[:MAX_LABEL]


def _strip(images: list[np.ndarray], tile: int) -> np.ndarray:
    """uint8 [tile, n * (tile + 4) - 4, 3]: the images letterboxed side by side on white."""
    out = np.full((tile, max(1, len(images)) * (tile + 4) - 4, 3), 255, np.uint8)
    for k, im in enumerate(images):
        small = thumbnail(im, tile)
        h, w = small.shape[:2]
        y, x = (tile - h) // 2, k * (tile + 4) + (tile - w) // 2
        out[y:y + h, x:x + w] = small[..., :3]
    return out


def export_scenario_votes(found: Any, pool_root: str | Path, out_dir: str | Path, *, prefix: str = "seg",
                          tile: int = 96) -> Path:
    """Write the vote set of `found` (a `SegmentationScenarios`) to out_dir; returns out_dir.

    Item ids are `<prefix>-s<NNN>` (scenario index), so they stay unlike other sets' ids (votes are
    keyed by item id); the report uses `vote_prefix(round)`. items.csv: item_id, scenario,
    prediction (-1: no classifier here); classes.json: class_names (the distinct scenario names),
    none_label, prompt, free_text (true: typed names are taken).
    """
    if not len(found):
        raise ValueError("found: expected at least one scenario, got none")
    out, root = Path(out_dir), pool_root if hasattr(pool_root, "load") else Path(pool_root)
    (out / "images").mkdir(parents=True, exist_ok=True)
    rows, names = [], []
    for s in found.summaries:
        item_id = f"{prefix}-s{s.index:03d}"
        images = [im for im, _ in (read_image(root, x) for x in s.typical) if im is not None]
        Image.fromarray(_strip(images, tile)).save(out / "images" / f"{item_id}.png")
        rows.append({"item_id": item_id, "scenario": s.index, "prediction": -1})
        name = scenario_name(s.effects)
        if name and name not in names:
            names.append(name)
    pd.DataFrame(rows).to_csv(out / "items.csv", index=False)
    (out / "classes.json").write_text(json.dumps({"class_names": names, "none_label": "none", "prompt": PROMPT,
                                                  "free_text": True}, indent=2), encoding="utf-8")
    return out


def tally_scenario_votes(items: pd.DataFrame, votes: pd.DataFrame) -> pd.DataFrame:
    """Per scenario item: n_votes, n_none, name (the most voted name, ties: first in order; "" when
    none or only none-of-the-above), share (of its votes). items: items.csv; votes: `project.answers.votes()`
    (item_id, annotator, label; label None = none of the above)."""
    rows = []
    for r in items.itertuples(index=False):
        v = votes[votes["item_id"].astype(str) == str(r.item_id)]
        named = v["label"].dropna().astype(str)
        top = named.value_counts(sort=True) if len(named) else pd.Series(dtype=int)
        rows.append({"item_id": r.item_id, "scenario": int(r.scenario), "n_votes": int(len(v)),
                     "n_none": int(v["label"].isna().sum()), "name": str(top.index[0]) if len(top) else "",
                     "share": float(top.iloc[0] / len(v)) if len(top) else 0.0})
    return pd.DataFrame(rows, columns=["item_id", "scenario", "n_votes", "n_none", "name", "share"])

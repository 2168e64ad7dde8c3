"""Identified examples for people to label: the baseline row of `blindspots defuse report`.

The paper's baseline fine-tunes on individually identified failures (Algorithm 1's decodes)
labelled by annotators. `export-review --identified DIR` adds a random sample of them to the review
folder (item ids `id-NNNNN`, one votes file for everything); `import-votes` turns their votes into
majority labels (identified_labels.csv); `correct` fine-tunes on them with the same λ sweep.

Files in the review folder: identified_items.csv (item_id, identified_index, prediction,
prediction_name, image), identified.npz (images uint8 [n, H, W, C], item_id), identified_labels.csv.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.human.votes import NONE, majority_vote

# Lazy imports: scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without them).

PREFIX = "id-"


def export_identified(identified, vae, classifier, class_names: Sequence[str], out: Path, n: int,
                      seed: int = 0) -> int:
    """Decode `n` random identified failures into `out` (a review folder) and add them to its votes template.

    identified: `defuse.identify.Identified`; vae: `BetaVAE`; classifier: a `Classifier`. Returns the count.
    """
    from blindspots.scenarios.review import predict

    if n < 0:
        raise ValueError(f"n_identified: expected a non-negative count, got {n}")
    pick = np.sort(np.random.default_rng(seed).permutation(len(identified))[:n])
    if len(pick) == 0:
        return 0
    images = identified.subset(pick).images(vae)
    pred = predict(classifier, images, len(class_names))
    ids = [f"{PREFIX}{i:05d}" for i in pick]
    (out / "images").mkdir(parents=True, exist_ok=True)
    for item_id, img in zip(ids, images):
        Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img).save(out / "images" / f"{item_id}.png")
    items = pd.DataFrame({"item_id": ids, "identified_index": pick, "prediction": pred,
                          "prediction_name": [class_names[p] for p in pred],
                          "image": [f"images/{i}.png" for i in ids]})
    items.to_csv(out / "identified_items.csv", index=False)
    np.savez_compressed(out / "identified.npz", images=images, item_id=np.array(ids))
    template = out / "votes_template.csv"
    old = pd.read_csv(template, dtype=str, keep_default_na=False) if template.is_file() else None
    new = pd.DataFrame({"item_id": ids, "image": items["image"], "annotator": "", "label": ""})
    pd.concat([old, new] if old is not None else [new]).to_csv(template, index=False)
    return len(ids)


def split_votes(votes: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(votes on scenario samples, votes on identified examples), by the `id-` item id prefix."""
    mine = votes["item_id"].astype(str).str.startswith(PREFIX)
    return votes[~mine], votes[mine]


def save_identified_labels(review: Path, votes: pd.DataFrame, num_classes: int) -> pd.DataFrame:
    """Majority labels of the identified examples -> review/identified_labels.csv (NONE winners kept, flagged)."""
    items_path = review / "identified_items.csv"
    if not items_path.is_file():
        if len(votes):
            raise ValueError(f"votes: got votes on identified examples ({votes['item_id'].iloc[0]!r}, ...) but "
                             f"{items_path} is missing; export them with export-review --identified")
        return pd.DataFrame()
    known = set(pd.read_csv(items_path, dtype={"item_id": str})["item_id"])
    unknown = sorted(set(votes["item_id"].astype(str)) - known)
    if unknown:
        raise ValueError(f"votes: expected identified item ids from {items_path.name}, got unknown ids {unknown[:5]}")
    labels = majority_vote(votes, num_classes)
    labels.to_csv(review / "identified_labels.csv", index=False)
    return labels


def load_identified_examples(review: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(images uint8 [n, H, W, C], labels int64 [n]) of the identified examples people labelled with a class
    (not *none of the above*), or None when the review has no identified_labels.csv."""
    path = review / "identified_labels.csv"
    if not path.is_file():
        return None
    labels = pd.read_csv(path, dtype={"item_id": str}).set_index("item_id")["label"]
    with np.load(review / "identified.npz") as z:
        images, ids = z["images"], [str(i) for i in z["item_id"]]
    lab = np.array([labels.get(i, NONE) for i in ids], dtype=np.int64)
    keep = lab != NONE
    return images[keep], lab[keep]

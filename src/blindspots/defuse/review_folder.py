"""A Defuse review folder as one object (`ReviewFolder`: export the scenarios' samples for people, import
their votes or a simulated panel's, decide the failure scenarios, and the honest table once `correct` has run),
and the identified examples for people to label: the baseline row of the table.

The paper's baseline fine-tunes on individually identified failures (Algorithm 1's decodes)
labelled by annotators. `export-review --identified DIR` adds a random sample of them to the review
folder (item ids `id-NNNNN`, one votes file for everything); `import-votes` turns their votes into
majority labels (identified_labels.csv); `correct` fine-tunes on them with the same λ sweep.

Files in the review folder: identified_items.csv (item_id, identified_index, prediction,
prediction_name, image), identified.npz (images uint8 [n, H, W, C], item_id), identified_labels.csv.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.data.classsets import ClassificationSet
from blindspots.defuse.evaluation import flag_disputed, judge_agreement, judge_labels
from blindspots.defuse.identify import Identified
from blindspots.defuse.report_table import report_table
from blindspots.defuse.vae import BetaVAE
from blindspots.human.simulate_votes import SimulatedAnnotators
from blindspots.human.votes import NONE, majority_vote, read_votes_csv
from blindspots.models.classifier_zoo import load_classifier
from blindspots.scenarios.clustering import Scenarios
from blindspots.scenarios.review_set import build_review, decide_scenarios, export_review, load_review, predict

PREFIX = "id-"


def export_identified(identified, vae, classifier, class_names: Sequence[str], out: Path, n: int,
                      seed: int = 0) -> int:
    """Decode `n` random identified failures into `out` (a review folder) and add them to its votes template.

    identified: `defuse.identify.Identified`; vae: `BetaVAE`; classifier: a `Classifier`. Returns the count.
    """
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


@dataclass
class Votes:
    """What `ReviewFolder.import_votes` decided. decisions: one row per scenario (is_failure, label,
    label_name, agreement; judge_agreement / judge_disputed with a judge); items: the voted review items;
    identified_labels: majority labels of the identified examples voted on (empty without them);
    simulated: whether an oracle classifier voted instead of people."""

    decisions: pd.DataFrame
    items: pd.DataFrame
    identified_labels: pd.DataFrame
    simulated: bool


class ReviewFolder:
    """A review folder written by `ReviewFolder.export` (`blindspots defuse export-review`): images/,
    items.csv, review.npz, classes.json, votes_template.csv; after `import_votes`: decisions.csv,
    items_voted.csv (and identified_labels.csv). `honest_table` reads it with the `correct` folder."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.review = load_review(self.folder)  # ValueError naming what is missing

    @classmethod
    def export(cls, scenarios: str | Path, vae: str | Path, classifier: str | Path, out: str | Path, *,
               class_names: Sequence[str], n_per: int = 10, tau: float = 0.5, identified: str | Path | None = None,
               n_identified: int = 100, seed: int = 0) -> "ReviewFolder":
        """Sample `n_per` images per scenario (paper: 10; τ: 0.5 on MNIST, 0.01 off it) with the classifier's
        predictions into `out`, with a votes template; identified: also a random sample of `n_identified`
        identified failures (an `identify` folder), for the identified-examples baseline."""
        out, model, clf = Path(out), BetaVAE.load(vae), load_classifier(classifier)
        review = build_review(Scenarios.load(scenarios), model, clf, class_names, n_per=n_per, tau=tau, seed=seed)
        export_review(review, out)
        if identified is not None:
            export_identified(Identified.load(identified), model, clf, class_names, out, n_identified, seed=seed)
        return cls(out)

    @property
    def n_identified(self) -> int:
        """Identified failures added for people to label."""
        path = self.folder / "identified_items.csv"
        return len(pd.read_csv(path)) if path.is_file() else 0

    def import_votes(self, votes: str | Path | pd.DataFrame | None = None, *, simulate: str | Path | None = None,
                     annotators: int = 5, error_rate: float = 0.05, rho: float = 0.5, judge: str | Path | None = None,
                     seed: int = 0) -> Votes:
        """Decide the failure scenarios from people's votes (a CSV or table: item_id, label as a class name,
        id or 'none', optional annotator) or, with `simulate` (an oracle classifier checkpoint), from a
        SIMULATED panel of `annotators`; ρ: a scenario fails when more than this share disagrees with the
        classifier (paper: 0.5). judge: an independent classifier (a SIMULATION) whose disagreement with a
        scenario's label is flagged. Writes decisions.csv, items_voted.csv (identified_labels.csv)."""
        rs, review = self.review, self.folder
        if (votes is None) == (simulate is None):
            raise ValueError(f"votes / simulate (--votes / --simulate): expected exactly one of votes (people's) or "
                             f"simulate (an oracle checkpoint), got {'both' if votes is not None else 'neither'}")
        if votes is not None:
            table = votes.copy() if isinstance(votes, pd.DataFrame) else read_votes_csv(votes, rs.class_names)
        else:
            panel = SimulatedAnnotators(load_classifier(simulate), n_annotators=annotators, error_rate=error_rate,
                                        seed=seed)
            images, ids = rs.images, list(rs.items["item_id"])
            if (review / "identified.npz").is_file():
                with np.load(review / "identified.npz") as z:
                    images, ids = np.concatenate([images, z["images"]]), ids + [str(i) for i in z["item_id"]]
            table = panel.vote(images, ids)
            table.to_csv(review / "votes_simulated.csv", index=False)
        table, on_identified = split_votes(table)
        id_labels = save_identified_labels(review, on_identified, len(rs.class_names))
        decisions, items = decide_scenarios(rs, table, rho=rho)
        if judge is not None:
            label = dict(zip(decisions["scenario"], decisions["label"]))
            lab = items["scenario"].map(label).to_numpy(dtype=np.int64)
            has = lab >= 0  # scenarios whose voters gave a class
            agree = judge_agreement(items["scenario"].to_numpy()[has], lab[has],
                                    judge_labels(load_classifier(judge), rs.images[has]), class_names=rs.class_names)
            decisions = flag_disputed(decisions, agree)
        decisions.to_csv(review / "decisions.csv", index=False)
        items.to_csv(review / "items_voted.csv", index=False)
        return Votes(decisions, items, id_labels, simulate is not None)

    @property
    def decisions(self) -> pd.DataFrame:
        """decisions.csv (one row per scenario); ValueError before `import_votes`."""
        path = self.folder / "decisions.csv"
        if not path.is_file():
            raise ValueError(f"review: expected {path} from import_votes, got none; import the votes first")
        return pd.read_csv(path)

    def labelled_identified(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The identified examples people labelled with a class (`load_identified_examples`), or None."""
        return load_identified_examples(self.folder)

    def honest_table(self, classifier: str | Path, correct_dir: str | Path, test: ClassificationSet,
                     judge: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, str]:
        """The honest table once `correct` has run into `correct_dir`: (rows before / λ = 0 control /
        identified examples / Defuse, per-scenario judge agreement, printable text); test: images no step
        saw; judge: an independent classifier checkpoint (a SIMULATION of people)."""
        self.decisions  # noqa: B018 - the table judges voted scenarios: refuse a folder without votes
        return report_table(Path(classifier), Path(correct_dir), test, Path(judge))

"""The figures `blindspots defuse report` writes beside the honest table, from the steps' files: the t-SNE of
the training codes and the failure codes (Figure 2), the failure scenarios' review samples (Figure 3), their
nearest training images among the classifier's errors (Figure 6), and the λ trade-off of the sweeps (Figure 5)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from blindspots.data.classsets import ClassificationSet
from blindspots.defuse.identify import Identified
from blindspots.defuse.plots import plot_nearest_neighbours, plot_scenario_grids, plot_tradeoff, plot_tsne
from blindspots.defuse.report_table import sweep_test_accuracy
from blindspots.defuse.vae import BetaVAE
from blindspots.models.classifier_zoo import load_classifier_module
from blindspots.scenarios.review_set import load_review
from blindspots.training.classification import predict_labels

#: the sweeps of a `correct` folder: row name -> (sweep file, folder of its per-λ weights)
SWEEPS = {"Defuse": ("sweep.csv", "sweep"), "identified examples": ("baseline_sweep.csv", "baseline")}


def write_report_figures(data: ClassificationSet, classifier: str | Path, vae: str | Path, identified: str | Path,
                         review: str | Path, out: str | Path, *, correct_dir: str | Path | None = None,
                         test: ClassificationSet | None = None, seed: int = 0) -> list[Path]:
    """Write fig2_tsne.png, fig3_scenarios.png and fig6_nearest.png (when the review holds failure
    scenarios: decisions.csv's, else every reviewed scenario) and fig5_tradeoff.png (with `correct_dir`
    holding sweep.csv, and test accuracies from its files or from `test`) into `out`; returns their paths.

    data: the classifier's training data (images uint8 [N, H, W, C]); classifier, vae: checkpoint files;
    identified: an `identify` folder; review: a review folder."""
    out, review = Path(out), Path(review)
    out.mkdir(parents=True, exist_ok=True)
    module, info = load_classifier_module(classifier)
    names = np.array(info["class_names"], dtype=object)  # figures show class names, not ids
    rs = load_review(review)
    fails, labels = rs.items["scenario"].unique(), None
    if (review / "decisions.csv").is_file():
        dec = pd.read_csv(review / "decisions.csv")
        fails = dec.loc[dec["is_failure"], "scenario"].to_numpy()
        labels = dict(zip(dec["scenario"], dec["label_name"].astype(str)))
    written = [plot_tsne(BetaVAE.load(vae).encode(data.images)[0], Identified.load(identified).codes[:1000],
                         out / "fig2_tsne.png", seed=seed)]
    sel = np.isin(rs.items["scenario"], fails)
    if sel.any():
        pred = rs.items["prediction"].to_numpy()
        written.append(plot_scenario_grids(rs.images[sel], names[pred[sel]], rs.items["scenario"].to_numpy()[sel],
                                           out / "fig3_scenarios.png", labels=labels))
        f_pred = predict_labels(module, data.images)
        wrong = np.flatnonzero(f_pred != data.labels)
        ref = wrong if len(wrong) else np.arange(len(data))  # the nearest among the classifier's errors
        pick = np.flatnonzero(sel)[:10]
        written.append(plot_nearest_neighbours(rs.images[pick], names[pred[pick]], data.images[ref],
                                               names[f_pred[ref]], out / "fig6_nearest.png"))
    folder = Path(correct_dir) if correct_dir is not None else None
    if folder is not None and (folder / "sweep.csv").is_file():
        sweeps = {name: sweep_test_accuracy(pd.read_csv(folder / csv), Path(classifier), folder / weights, test)
                  for name, (csv, weights) in SWEEPS.items() if (folder / csv).is_file()}
        if all({"scenario_acc", "test_acc"} <= set(sw.columns) for sw in sweeps.values()):
            written.append(plot_tradeoff(sweeps, out / "fig5_tradeoff.png"))
    return written

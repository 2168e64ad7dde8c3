"""The Defuse report: `OUT/index.html` for a folder holding the outputs of `blindspots defuse ...`.

Each Defuse step writes its own --out folder; a *Defuse run folder* is one that holds them, itself or
as direct subfolders: the review folder (items.csv + classes.json, with decisions.csv after
import-votes), the correction folder (sweep.csv), the figures of `defuse report` (fig*.png) and the
β-VAE grids (samples.png, reconstructions.png). Sections: failure scenarios (the Figure 4 table:
votes per scenario, failure or not, label), the scenario grids (Figure 3) and review images per
failure scenario, the λ sweep (Figure 5 and its table), the remaining figures (t-SNE, nearest
neighbours, VAE grids), and the honest table (before / λ = 0 control / identified examples / Defuse,
judged independently) with per-scenario judge agreement when the folder holds `honest_table.csv`
(`blindspots.defuse.evaluation.save_evaluation`) or, as `blindspots defuse report --out` writes them,
`table.csv` with `judge_agreement.csv`. Figures are copied into OUT/figures so the folder opens offline.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from blindspots._validation import check_int
from blindspots.defuse.table import AGREEMENT_FILE, TABLE_FILE, format_table
from blindspots.report.viewmodels.copied import copy_figure, frame_table
from blindspots.report.html import REPORT_CSS, output_folder, write_index
from blindspots.report.viewmodels.blocks import Block, Figures, Heading, Nav, Pre, Text

log = logging.getLogger(__name__)

FIGURES = {"fig2_tsne.png": "Figure 2: t-SNE of training codes and identified failure codes",
           "fig3_scenarios.png": "Figure 3: samples of each failure scenario (classifier's prediction)",
           "fig5_tradeoff.png": "Figure 5: test accuracy vs failure-scenario accuracy over λ",
           "fig6_nearest.png": "Figure 6: scenario samples and their nearest misclassified training images"}
GRIDS = {"samples.png": "β-VAE samples", "reconstructions.png": "β-VAE reconstructions (rows: original, decoded)"}


CLI_TABLE_FILE = "table.csv"  # the same rows, as `blindspots defuse report --out` names them


def honest_table_file(folder: Path) -> Path | None:
    """The honest table in `folder`: save_evaluation's file, else the CLI's table.csv when the
    judge agreement is beside it (a table.csv alone is not taken for it); None when neither is there."""
    if (folder / TABLE_FILE).is_file():
        return folder / TABLE_FILE
    if (folder / CLI_TABLE_FILE).is_file() and (folder / AGREEMENT_FILE).is_file():
        return folder / CLI_TABLE_FILE
    return None


def _candidates(root: Path) -> list[Path]:
    return [root] + sorted(p for p in root.iterdir() if p.is_dir())


def find_defuse_parts(root: str | Path) -> dict[str, Path]:
    """The Defuse outputs in `root` or its direct subfolders: keys review, correct, figures, grids (each
    the first folder found, by name). Empty when none is there."""
    root = Path(root)
    if not root.is_dir():
        return {}
    tests = {"review": lambda d: (d / "items.csv").is_file() and (d / "classes.json").is_file(),
             "correct": lambda d: (d / "sweep.csv").is_file(),
             "figures": lambda d: any((d / f).is_file() for f in FIGURES),
             "grids": lambda d: (d / "samples.png").is_file(),
             "honest": lambda d: honest_table_file(d) is not None}
    found: dict[str, Path] = {}
    for d in _candidates(root):
        for key, test in tests.items():
            if key not in found and test(d):
                found[key] = d
    return found


def is_defuse_dir(root: str | Path) -> bool:
    """Whether `root` holds a Defuse review, correction or figures folder (see `find_defuse_parts`)."""
    return bool(set(find_defuse_parts(root)) & {"review", "correct", "figures"})


def defuse_scenario_section(review: Path, out: Path, n_per: int) -> tuple[list[Block], dict]:
    """The failure scenarios of a review folder (the Figure 4 table, review images per failure scenario)
    as view-model blocks, headed by the standalone page's h2, and its counts."""
    parts: list[Block] = [Heading("Failure scenarios", "scenarios")]
    classes = json.loads((review / "classes.json").read_text(encoding="utf-8")).get("class_names", [])
    items = pd.read_csv(review / "items.csv", dtype={"item_id": str})
    dec_path = review / "decisions.csv"
    if not dec_path.is_file():
        parts.append(Text.of(f"{len(items)} review images from {items['scenario'].nunique()} scenarios; no votes "
                             "imported yet (run `blindspots defuse import-votes`)."))
        return parts, {"n_scenarios": int(items["scenario"].nunique()), "n_failures": None}
    dec = pd.read_csv(dec_path)
    n_fail = int(dec["is_failure"].sum())
    parts.append(Text.of(f"{len(dec)} candidate scenarios, {n_fail} failure scenarios (more than ρ of their labelled "
                         "review images disagree with the classifier). As Table/Figure 4 of the paper."))
    parts.append(frame_table(dec, max_rows=200))
    votes = "items_voted.csv" if (review / "items_voted.csv").is_file() else "items.csv"
    shown = pd.read_csv(review / votes, dtype={"item_id": str})
    if "image" not in shown.columns:
        shown = shown.merge(items[["item_id", "image"]], on="item_id", how="left")
    for r in dec[dec["is_failure"]].itertuples():
        rows = shown[shown["scenario"] == r.scenario].head(n_per)
        figs = []
        for it in rows.itertuples():
            src = review / str(it.image)
            if src.is_file():
                pred = classes[int(it.prediction)] if int(it.prediction) < len(classes) else it.prediction
                cap = f"{it.item_id}: predicted {pred}"
                if "label" in rows.columns and int(getattr(it, "label")) >= 0:
                    lab = int(getattr(it, "label"))
                    cap += f", voted {classes[lab] if lab < len(classes) else lab}"
                figs.append(copy_figure(src, out, f"review/{Path(str(it.image)).name}", cap))
        parts.append(Heading(f"Scenario {r.scenario}: {r.label_name}", "", 3))
        parts.append(Figures(figs, cls="row") if figs else Text.of("No review images."))
    return parts, {"n_scenarios": int(len(dec)), "n_failures": n_fail}


def honest_section(folder: Path) -> list[Block]:
    """The honest table (as printed) and per-scenario judge agreement, if written (headed by the
    standalone page's h2)."""
    table = honest_table_file(folder)
    if table is None:
        raise ValueError(f"folder: expected {TABLE_FILE} (or {CLI_TABLE_FILE} with {AGREEMENT_FILE}), "
                         f"got neither in {str(folder)!r}")
    rows = pd.read_csv(table)
    parts: list[Block] = [
        Heading("Measured honestly", "honest"),
        Text.of("Rows: before, the λ = 0 control with the same steps, fine-tuning on identified examples, Defuse. "
                "Scenario accuracy is scored against the scenario label and against an independent judge (in the "
                "examples a SIMULATED judge)."),
        Pre(format_table(rows))]
    if (folder / AGREEMENT_FILE).is_file():
        parts.append(Text.of("Per-scenario judge agreement; disputed scenarios can be discarded."))
        parts.append(frame_table(pd.read_csv(folder / AGREEMENT_FILE), max_rows=200))
    return parts


def sweep_blocks(correct: Path, *, with_path: bool = True) -> tuple[list[Block], float | None]:
    """The λ sweep of a correction folder: the chosen λ (highest select_score, else val_acc; with_path: and
    where the corrected classifier is) and the table; and the chosen λ (None without a score column)."""
    sweep = pd.read_csv(correct / "sweep.csv")
    key = "select_score" if "select_score" in sweep.columns else "val_acc"
    parts: list[Block] = []
    best_lambda = None
    if key in sweep.columns and len(sweep):
        best_lambda = float(sweep.loc[sweep[key].idxmax()]["lambda"])
        where = f"; corrected classifier: {correct / 'corrected.pt'}" if with_path else "."
        parts.append(Text.of(f"Chosen λ = {best_lambda:g} (highest {key}){where}"))
    parts.append(frame_table(sweep, max_rows=100))
    return parts, best_lambda


def other_figures(found: dict[str, Path], out: Path, fig_dir: str = "") -> list:
    """The figures not shown in their own section (t-SNE, nearest neighbours, the VAE grids), copied."""
    figs_dir = found.get("figures")
    shown = ("fig3_scenarios.png", "fig5_tradeoff.png")
    other = [copy_figure(figs_dir / f, out, fig_dir + f, cap) for f, cap in FIGURES.items()
             if figs_dir is not None and f not in shown and (figs_dir / f).is_file()]
    if "grids" in found:
        other += [copy_figure(found["grids"] / f, out, f"{fig_dir}vae_{f}", cap) for f, cap in GRIDS.items()
                  if (found["grids"] / f).is_file()]
    return other


def figure_block(figs_dir: Path, name: str, out: Path, fig_dir: str = "") -> Figures:
    """One of the `defuse report` figures, copied to out/figures/<fig_dir><name>."""
    return Figures([copy_figure(figs_dir / name, out, fig_dir + name, FIGURES[name])])


def write_defuse_report(root: str | Path, out_dir: str | Path, *, n_per: int = 10) -> Path:
    """Write the Defuse page `out_dir/index.html` (+ figures/) for the run folder `root`; returns its path.

    n_per: review images shown per failure scenario.
    """
    root = Path(root)
    found = find_defuse_parts(root)
    if not set(found) & {"review", "correct", "figures"}:
        raise ValueError(f"root: expected a folder holding Defuse outputs (a review folder with items.csv, a "
                         f"correct folder with sweep.csv or `defuse report` figures), got {str(root)!r}")
    check_int(n_per, "n_per", minimum=0)
    out = output_folder(out_dir)
    parts: list[Block] = [Heading(f"Defuse report: {root.resolve().name}", "", 1),
                          Nav([("scenarios", "failure scenarios"), ("correction", "correction"),
                               ("figures", "figures")]),
                          Text.of("Read from: " + ", ".join(f"{k} = {v}" for k, v in found.items()), style="meta")]
    summary: dict = {"parts": {k: str(v) for k, v in found.items()}}
    if "review" in found:
        sec, info = defuse_scenario_section(found["review"], out, n_per)
        parts += sec
        summary.update(info)
    figs_dir = found.get("figures")
    if figs_dir is not None and (figs_dir / "fig3_scenarios.png").is_file():
        parts.append(figure_block(figs_dir, "fig3_scenarios.png", out))

    parts.append(Heading("Correction (λ sweep)", "correction"))
    if "correct" in found:
        sweep, best = sweep_blocks(found["correct"])
        if best is not None:
            summary["best_lambda"] = best
        parts += sweep
        if figs_dir is not None and (figs_dir / "fig5_tradeoff.png").is_file():
            parts.append(figure_block(figs_dir, "fig5_tradeoff.png", out))
    else:
        parts.append(Text.of("No correction folder (sweep.csv) found: run `blindspots defuse correct`."))

    if "honest" in found:
        parts += honest_section(found["honest"])
        summary["honest_table"] = pd.read_csv(honest_table_file(found["honest"])).to_dict("records")

    parts.append(Heading("Other figures", "figures"))
    other = other_figures(found, out)
    parts.append(Figures(other) if other else
                 Text.of("No other figures (run `blindspots defuse report --out ...` into this folder)."))
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    # Review images are tiny (e.g. 28 px): enlarge them without blurring.
    css = REPORT_CSS + ".row img { image-rendering: pixelated; }\n"
    index = write_index(out, f"Defuse report: {root.name}", parts, css=css)
    log.info("defuse report written to %s", index)
    return index

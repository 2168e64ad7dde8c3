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
from blindspots.defuse.evaluation import AGREEMENT_FILE, TABLE_FILE, format_table
from blindspots.report.copied import copy_figure, frame_table
from blindspots.report.html import REPORT_CSS, esc, output_folder, write_index

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


def defuse_scenario_section(review: Path, out: Path, n_per: int) -> tuple[list[str], dict]:
    parts = ['<h2 class="section" id="scenarios">Failure scenarios</h2>']
    classes = json.loads((review / "classes.json").read_text(encoding="utf-8")).get("class_names", [])
    items = pd.read_csv(review / "items.csv", dtype={"item_id": str})
    dec_path = review / "decisions.csv"
    if not dec_path.is_file():
        parts.append(f'<p class="note">{len(items)} review images from {items["scenario"].nunique()} scenarios; '
                     'no votes imported yet (run `blindspots defuse import-votes`).</p>')
        return parts, {"n_scenarios": int(items["scenario"].nunique()), "n_failures": None}
    dec = pd.read_csv(dec_path)
    n_fail = int(dec["is_failure"].sum())
    parts.append(f'<p class="note">{len(dec)} candidate scenarios, {n_fail} failure scenarios (more than ρ of '
                 'their labelled review images disagree with the classifier). As Table/Figure 4 of the paper.</p>')
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
        parts.append(f"<h3>Scenario {esc(r.scenario)}: {esc(r.label_name)}</h3>")
        parts.append(f'<div class="row">{"".join(figs)}</div>' if figs else '<p class="note">No review images.</p>')
    return parts, {"n_scenarios": int(len(dec)), "n_failures": n_fail}


def honest_section(folder: Path) -> list[str]:
    """The honest table (as printed) and per-scenario judge agreement, if written."""
    table = honest_table_file(folder)
    if table is None:
        raise ValueError(f"folder: expected {TABLE_FILE} (or {CLI_TABLE_FILE} with {AGREEMENT_FILE}), "
                         f"got neither in {str(folder)!r}")
    rows = pd.read_csv(table)
    parts = ['<h2 class="section" id="honest">Measured honestly</h2>',
             '<p class="note">Rows: before, the λ = 0 control with the same steps, fine-tuning on identified '
             'examples, Defuse. Scenario accuracy is scored against the scenario label and against an '
             'independent judge (in the examples a SIMULATED judge).</p>',
             f"<pre>{esc(format_table(rows))}</pre>"]
    if (folder / AGREEMENT_FILE).is_file():
        parts.append('<p class="note">Per-scenario judge agreement; disputed scenarios can be discarded.</p>')
        parts.append(frame_table(pd.read_csv(folder / AGREEMENT_FILE), max_rows=200))
    return parts


def _figs(figs_dir: Path, name: str, out: Path) -> str:
    return f'<div class="figs">{copy_figure(figs_dir / name, out, name, FIGURES[name])}</div>'


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
    parts = [f"<h1>Defuse report: {esc(root.resolve().name)}</h1>",
             '<nav><a href="#scenarios">failure scenarios</a><a href="#correction">correction</a>'
             '<a href="#figures">figures</a></nav>',
             '<p class="meta">Read from: ' + esc(", ".join(f"{k} = {v}" for k, v in found.items())) + "</p>"]
    summary: dict = {"parts": {k: str(v) for k, v in found.items()}}
    if "review" in found:
        sec, info = defuse_scenario_section(found["review"], out, n_per)
        parts += sec
        summary.update(info)
    figs_dir = found.get("figures")
    if figs_dir is not None and (figs_dir / "fig3_scenarios.png").is_file():
        parts.append(_figs(figs_dir, "fig3_scenarios.png", out))

    parts.append('<h2 class="section" id="correction">Correction (λ sweep)</h2>')
    if "correct" in found:
        sweep = pd.read_csv(found["correct"] / "sweep.csv")
        key = "select_score" if "select_score" in sweep.columns else "val_acc"
        if key in sweep.columns and len(sweep):
            best = sweep.loc[sweep[key].idxmax()]
            summary["best_lambda"] = float(best["lambda"])
            parts.append(f'<p class="note">Chosen λ = {best["lambda"]:g} (highest {esc(key)}); corrected '
                         f'classifier: {esc(found["correct"] / "corrected.pt")}</p>')
        parts.append(frame_table(sweep, max_rows=100))
        if figs_dir is not None and (figs_dir / "fig5_tradeoff.png").is_file():
            parts.append(_figs(figs_dir, "fig5_tradeoff.png", out))
    else:
        parts.append('<p class="note">No correction folder (sweep.csv) found: run `blindspots defuse correct`.</p>')

    if "honest" in found:
        parts += honest_section(found["honest"])
        summary["honest_table"] = pd.read_csv(honest_table_file(found["honest"])).to_dict("records")

    parts.append('<h2 class="section" id="figures">Other figures</h2>')
    shown = ("fig3_scenarios.png", "fig5_tradeoff.png")
    other = [copy_figure(figs_dir / f, out, f, cap) for f, cap in FIGURES.items()
             if figs_dir is not None and f not in shown and (figs_dir / f).is_file()]
    if "grids" in found:
        other += [copy_figure(found["grids"] / f, out, f"vae_{f}", cap) for f, cap in GRIDS.items()
                  if (found["grids"] / f).is_file()]
    parts.append(f'<div class="figs">{"".join(other)}</div>' if other else
                 '<p class="note">No other figures (run `blindspots defuse report --out ...` into this folder).</p>')
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    # Review images are tiny (e.g. 28 px): enlarge them without blurring.
    css = REPORT_CSS + ".row img { image-rendering: pixelated; }\n"
    index = write_index(out, f"Defuse report: {root.name}", parts, css=css)
    log.info("defuse report written to %s", index)
    return index

"""Defuse for image classifiers (Slack et al.): identify failures with a β-VAE, distill them into
failure scenarios with a Dirichlet-process GMM, review the scenarios, and correct the classifier.

vae.py (β-VAE) · identify.py (Algorithm 1) · review_folder.py (`ReviewFolder`: the review folder as one
workflow object, export for people, votes in, failure scenarios decided, the honest table out) ·
report_table.py (that table from the `correct` folder) · report_figures.py (Figures 2, 3, 5 and 6 of `defuse report`) · settings.py (presets, data specs with class
names, the held-out split) · correct.py (λ sweep) · experiment.py (sweep, control and
baseline rows, as `defuse correct` runs them) · evaluation.py (the honest
table: before / λ = 0 control / identified examples / Defuse, judged independently) · table.py (its files and
text, torch-free) · plots.py
(Figures 2, 3, 5, 6) · grids.py (PNG grids). The DP-GMM clustering (distillation) and scenario review live in
`blindspots.scenarios` (defuse imports scenarios, never the reverse); re-exported here.

The names below are loaded on first use (PEP 562): most import torch, and the report pages read a finished
evaluation through the torch-free `blindspots.defuse.table`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from blindspots._lazy import lazy_names

#: public name -> the module that defines it
_SOURCES = {
    **dict.fromkeys(["PAPER_LAMBDAS", "CorrectionResult", "ScenarioData", "correct", "scenario_data"],
                    "blindspots.defuse.correct"),
    **dict.fromkeys(["Experiment", "run_experiment"], "blindspots.defuse.experiment"),
    **dict.fromkeys(["HonestEvaluation", "run_honest_evaluation"], "blindspots.defuse.evaluation"),
    "format_table": "blindspots.defuse.table",
    **dict.fromkeys(["Identified", "IdentifySettings", "identify"], "blindspots.defuse.identify"),
    "BetaVAE": "blindspots.defuse.vae",
    **dict.fromkeys(["plot_nearest_neighbours", "plot_scenario_grids", "plot_tradeoff", "plot_tsne"],
                    "blindspots.defuse.plots"),
    **dict.fromkeys(["CPU_LAMBDAS", "CPU_PRESETS"], "blindspots.defuse.presets"),
    **dict.fromkeys(["ReviewFolder", "Votes"], "blindspots.defuse.review_folder"),
    **dict.fromkeys(["report_table", "sweep_test_accuracy"], "blindspots.defuse.report_table"),
    "write_report_figures": "blindspots.defuse.report_figures",
    **dict.fromkeys(["PAPER", "format_presets", "holdout_record", "load_data", "parse_lambdas", "preset_table",
                     "recorded_holdout", "resolve", "training_part", "validation_split"], "blindspots.defuse.settings"),
    **dict.fromkeys(["Distiller", "Scenarios", "distill", "scenario_responsibilities"],
                    "blindspots.scenarios.clustering"),
}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_names(__name__, _SOURCES, globals())  # PEP 562: a name loads on first use

if TYPE_CHECKING:  # what type checkers and the import-graph test see
    from blindspots.defuse.correct import PAPER_LAMBDAS, CorrectionResult, ScenarioData, correct, scenario_data
    from blindspots.defuse.evaluation import HonestEvaluation, run_honest_evaluation
    from blindspots.defuse.experiment import Experiment, run_experiment
    from blindspots.defuse.identify import Identified, IdentifySettings, identify
    from blindspots.defuse.table import format_table
    from blindspots.defuse.plots import plot_nearest_neighbours, plot_scenario_grids, plot_tradeoff, plot_tsne
    from blindspots.defuse.presets import CPU_LAMBDAS, CPU_PRESETS
    from blindspots.defuse.report_figures import write_report_figures
    from blindspots.defuse.report_table import report_table, sweep_test_accuracy
    from blindspots.defuse.review_folder import ReviewFolder, Votes
    from blindspots.defuse.settings import (PAPER, format_presets, holdout_record, load_data, parse_lambdas,
                                            preset_table, recorded_holdout, resolve, training_part, validation_split)
    from blindspots.defuse.vae import BetaVAE
    from blindspots.scenarios.clustering import Distiller, Scenarios, distill, scenario_responsibilities

"""Defuse for image classifiers (Slack et al.): identify failures with a β-VAE, distill them into
failure scenarios with a Dirichlet-process GMM, review the scenarios, and correct the classifier.

vae.py (β-VAE) · identify.py (Algorithm 1) · correct.py (λ sweep) · experiment.py (sweep, control and
baseline rows, as `defuse correct` runs them) · evaluation.py (the honest
table: before / λ = 0 control / identified examples / Defuse, judged independently) · plots.py
(Figures 2, 3, 5, 6) · grids.py (PNG grids). The DP-GMM clustering (distillation) and scenario review live in
`blindspots.scenarios` (defuse imports scenarios, never the reverse); re-exported here.
"""
from blindspots.defuse.correct import PAPER_LAMBDAS, CorrectionResult, ScenarioData, correct, scenario_data
from blindspots.defuse.experiment import Experiment, run_experiment
from blindspots.defuse.evaluation import HonestEvaluation, format_table, run_honest_evaluation
from blindspots.defuse.identify import Identified, IdentifySettings, identify
from blindspots.defuse.vae import BetaVAE
from blindspots.scenarios.clustering import Distiller, Scenarios, distill, scenario_responsibilities

__all__ = ["BetaVAE", "CorrectionResult", "Distiller", "Experiment", "run_experiment", "HonestEvaluation", "Identified", "IdentifySettings", "PAPER_LAMBDAS",
           "ScenarioData", "Scenarios", "correct", "distill", "format_table", "identify", "run_honest_evaluation", "scenario_data", "scenario_responsibilities"]

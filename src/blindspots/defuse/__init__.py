"""Defuse for image classifiers (Slack et al.): identify failures with a β-VAE, distill them into
failure scenarios with a Dirichlet-process GMM, review the scenarios, and correct the classifier.

vae.py (β-VAE) · identify.py (Algorithm 1) · distill.py (DP-GMM) · correct.py (λ sweep) ·
plots.py (Figures 2, 3, 5, 6) · grids.py (PNG grids). Scenario review lives in `blindspots.scenarios`.
"""
from blindspots.defuse.correct import PAPER_LAMBDAS, CorrectionResult, ScenarioData, correct, scenario_data
from blindspots.defuse.distill import Distiller, Scenarios, distill, scenario_responsibilities
from blindspots.defuse.identify import Identified, IdentifySettings, identify
from blindspots.defuse.vae import BetaVAE

__all__ = ["BetaVAE", "CorrectionResult", "Distiller", "Identified", "IdentifySettings", "PAPER_LAMBDAS",
           "ScenarioData", "Scenarios", "correct", "distill", "identify", "scenario_data", "scenario_responsibilities"]

"""Failure scenarios: DP-GMM clustering of failures' latent codes (clustering.py), sample reviewable images
per scenario, collect votes, decide which are failures."""
from blindspots.scenarios.clustering import Distiller, Scenarios, distill, scenario_responsibilities
from blindspots.scenarios.review_set import ReviewSet, build_review, decide_scenarios, export_review, load_review
from blindspots.scenarios.sampling import sample_codes

__all__ = ["Distiller", "ReviewSet", "Scenarios", "build_review", "decide_scenarios", "distill", "export_review",
           "load_review", "sample_codes", "scenario_responsibilities"]

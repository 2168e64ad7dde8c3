"""Failure scenarios: sample reviewable images per scenario, collect votes, decide which are failures."""
from blindspots.scenarios.review import ReviewSet, build_review, decide_scenarios, export_review, load_review
from blindspots.scenarios.sampling import sample_codes

__all__ = ["ReviewSet", "build_review", "decide_scenarios", "export_review", "load_review", "sample_codes"]

"""Moved to `blindspots.training.replay` (issue 12); this name stays for existing imports."""
from blindspots.training.loop import poly_lr
from blindspots.training.replay import (
    PAPER_LRS, ConcatPairs, GridRun, PairList, PairSet, ReplayFinetuner, SubsetPairs, collate, evaluate_module,
    evaluate_segmenter)

__all__ = ["PAPER_LRS", "ConcatPairs", "GridRun", "PairList", "PairSet", "ReplayFinetuner", "SubsetPairs", "collate",
           "evaluate_module", "evaluate_segmenter", "poly_lr"]

"""Selection strategies over the score table: MAD, MAD+, entropy, margin, BALD, PowerBALD, core-set, BADGE,
surprise, random (`samplers/`, one module each; `mine.samplers.registry` holds the one list), the columns the
model-based ones read (`model_columns/`: `mine.model_columns.acquisition` adds them and imports torch only
there), and the unbiased test-set rule (`testset.py`)."""
from blindspots.mine.model_columns.names import missing_kinds
from blindspots.mine.run import mine_scan, write_picks
from blindspots.mine.samplers.badge import BADGESampler, kmeans_pp_seeding
from blindspots.mine.samplers.bald import BALDSampler, PowerBALDSampler
from blindspots.mine.samplers.base import Sampler
from blindspots.mine.samplers.coreset import CoreSetSampler, k_center_greedy
from blindspots.mine.samplers.entropy import EntropySampler
from blindspots.mine.samplers.mad import MADSampler, class_area_ranges
from blindspots.mine.samplers.madplus import MADPlusSampler
from blindspots.mine.samplers.margin import MarginSampler
from blindspots.mine.samplers.random import RandomSampler
from blindspots.mine.samplers.registry import SAMPLERS, make_sampler, needs_model, sampler_names, sampler_settings
from blindspots.mine.samplers.surprise import SurpriseSampler
from blindspots.mine.testset import build_test_set, main_foreground_class

__all__ = ["BADGESampler", "BALDSampler", "CoreSetSampler", "EntropySampler", "MADPlusSampler", "MADSampler",
           "MarginSampler", "PowerBALDSampler", "RandomSampler", "SAMPLERS", "Sampler", "SurpriseSampler",
           "build_test_set", "class_area_ranges", "k_center_greedy", "kmeans_pp_seeding", "main_foreground_class",
           "make_sampler", "mine_scan", "missing_kinds", "needs_model", "sampler_names", "sampler_settings",
           "write_picks"]

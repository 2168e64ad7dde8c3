"""Selection strategies over the score table: MAD, entropy, surprise, random (`mine.registry`
holds the one list), and unbiased test sets."""
from blindspots.mine.base import Sampler
from blindspots.mine.entropy import EntropySampler
from blindspots.mine.mad import MADSampler, class_area_ranges
from blindspots.mine.random import RandomSampler
from blindspots.mine.run import mine_scan, write_picks
from blindspots.mine.registry import SAMPLERS, make_sampler, sampler_names, sampler_settings
from blindspots.mine.surprise import SurpriseSampler

__all__ = ["EntropySampler", "MADSampler", "RandomSampler", "SAMPLERS", "Sampler", "SurpriseSampler",
           "class_area_ranges", "make_sampler", "mine_scan", "sampler_names", "sampler_settings", "write_picks"]

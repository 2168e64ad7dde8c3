"""Selection strategies over the score table: MAD, entropy, random (and surprise), unbiased test sets."""
from blindspots.mine.base import Sampler
from blindspots.mine.entropy import EntropySampler
from blindspots.mine.mad import MADSampler, class_area_ranges
from blindspots.mine.random import RandomSampler
from blindspots.mine.surprise import SurpriseSampler

__all__ = ["EntropySampler", "MADSampler", "RandomSampler", "Sampler", "SurpriseSampler", "class_area_ranges"]

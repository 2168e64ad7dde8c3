"""Surprise adequacy (Kim et al., "Reducing DNN labelling cost using surprise adequacy", 2023; and the
original SA of Kim et al., ICSE 2019): how surprising each pixel and image is to a model.

traces.py (hooks, upsampling) · pixel_sampling.py (which pixels) · estimators.py (MDSA, LSA, DSA) ·
image.py (fitting traces, class / group SA, heatmaps, score-table columns) · pool.py (`fit_estimator`,
`score_pool`: a whole pool, into a file or a scan's score table) · analysis.py (Table 3,
Figure 9, Tables 4-5; `write_table3`) · views.py (Figure 6 panels, MP4; `write_panels`). These two load
matplotlib: import them from their modules.
"""
from blindspots.surprise.estimators import DSA, LSA, MDSA, SurpriseEstimator, load_estimator, make_estimator
from blindspots.surprise.image import (ImageSurprise, class_surprise, collect_fit_traces, group_surprise,
                                       surprise_columns, surprise_heatmaps)
from blindspots.surprise.pool import check_same_source, fit_estimator, fitted_extractor, score_pool
from blindspots.surprise.traces import TraceExtractor

__all__ = ["DSA", "LSA", "MDSA", "SurpriseEstimator", "load_estimator", "make_estimator", "ImageSurprise",
           "class_surprise", "collect_fit_traces", "group_surprise", "surprise_columns", "surprise_heatmaps",
           "TraceExtractor", "fit_estimator", "score_pool", "fitted_extractor", "check_same_source"]

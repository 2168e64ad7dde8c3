"""Helpers shared by the public label-issue modules (rank, filter, summary, review); not a public API.

inputs: input kinds (arrays, .npy files, iterables, model + dataset) and their checks; stats: per-pixel
statistics streamed or cached; pixels: per-pixel kernels; regions: flagged pixels -> typed regions;
figures: the worst-images figure of a review.
"""

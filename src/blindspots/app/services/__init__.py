"""What the routers compute beyond reading the project: the label editor's regions
(`label_regions`: competitors' maps, connected components) and superpixels (`superpixels`), and
a sample project built by running the real loop (`sample`, for trying, testing and benchmarking
the app)."""
from blindspots.app.services.label_regions import competitor_maps, component_at, review_prediction
from blindspots.app.services.sample import make_review_set, make_sample_project, make_vote_set
from blindspots.app.services.superpixels import SegmentCache, n_segments_for, slic_segments

__all__ = ["SegmentCache", "competitor_maps", "component_at", "make_review_set", "make_sample_project",
           "make_vote_set", "n_segments_for", "review_prediction", "slic_segments"]

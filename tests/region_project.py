"""A sample project (procedural scenes, untrained zoo models) switched to region labels and advanced to
its masks step: the images of S hold region queries, T waits for whole masks."""
from __future__ import annotations

from pathlib import Path

from blindspots import loop
from blindspots.app.services import make_sample_project
from blindspots.loop.project import Project
from blindspots.loop.regions import set_labels


def region_project(root: Path, annotators: dict[str, tuple[str, str]], *, regions_per_image: int = 3,
                   size: int = 48) -> Project:
    """The project, waiting for region answers of S(1) and masks of T(1) in round 0."""
    p = make_sample_project(root, n_pool=24, size=size, n_candidates=12, annotators=annotators,
                            vote_set=False, review_set=False)
    set_labels(p, "regions", regions_per_image)
    p.answers.add_ratings([(0, x, "rater", 1 + k % 5) for k, x in enumerate(p.answers.candidate_ids(0, "M"))])
    st = loop.advance(p, progress=False)
    assert st.state == "awaiting_masks", st.message
    return p

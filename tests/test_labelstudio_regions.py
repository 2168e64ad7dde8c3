"""Region questions as Label Studio tasks, without a server: polygons that cover their regions, a task per
image with the guesses pre-labelled, and an annotation pulled back into answers and the image's partial mask.
Push and pull against a real Label Studio: tests/test_labelstudio_regions_live.py."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from blindspots.integrations.labelstudio.regions import (_polygon_pixels, pull_region_annotation, region_polygons,
                                                         region_task)
from blindspots.loop import regions as rq
from region_project import region_project

torch.set_num_threads(1)


def test_polygon_covers_its_region() -> None:
    seg = np.zeros((20, 30), np.int32)
    seg[3:12, 5:17] = 1
    seg[12:16, 5:9] = 1  # an L shape
    pts = region_polygons(seg, 1)
    px = _polygon_pixels(pts, 20, 30)
    assert (px == (seg == 1)).all()  # the polygon runs along pixel edges
    with pytest.raises(ValueError, match="region: expected a region id present"):
        region_polygons(seg, 7)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return region_project(tmp_path_factory.mktemp("ls") / "sample", {})


def test_task_and_pulled_annotation(project) -> None:  # noqa: ANN001
    from blindspots.loop import LoopContext

    names = list(LoopContext(project, simulate=False, progress=False).classes.names)
    image = rq.query_images(project, 0)[0]
    asked = rq.queries(project, 0, image)
    task = region_task(project, 0, image, "http://ls/img.png", class_names=names)
    assert task["data"]["blindspots_id"] == image and task["data"]["kind"] == "regions"
    res = task["predictions"][0]["result"]
    assert [r["id"] for r in res] == [f"region-{a.region}" for a in asked]
    assert [r["value"]["polygonlabels"] for r in res] == [[names[a.guess]] for a in asked]
    # The person relabels the first polygon, deletes the second (mixed), redraws the third without its id.
    ann = copy.deepcopy(res)
    ann[0]["value"]["polygonlabels"] = [names[(asked[0].guess + 1) % len(names)]]
    third = dict(ann[2], id="drawn-by-hand")
    got = pull_region_annotation(project, 0, image, [ann[0], third] + ann[3:], "ls-person", class_names=names)
    assert got[asked[0].region] == (asked[0].guess + 1) % len(names)
    assert got[asked[1].region] is None and got[asked[2].region] == asked[2].guess
    assert rq.answers(project, 0, image) == got
    m, seg = project.answers.load_mask(0, image), rq.segments(project, 0, image)
    assert (m[seg == asked[1].region] == 255).all() and (m[seg == asked[0].region] == got[asked[0].region]).all()
    with pytest.raises(ValueError, match=r"results\[0\]: expected one polygon label"):
        bad = copy.deepcopy(res[:1])
        bad[0]["value"]["polygonlabels"] = ["dragon"]
        pull_region_annotation(project, 0, image, bad, "ls-person", class_names=names)

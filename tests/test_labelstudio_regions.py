"""Region questions as Label Studio tasks: polygons that cover their regions, a task per image with the
guesses pre-labelled, and an annotation pulled back into answers and the image's partial mask."""
from __future__ import annotations

import copy
from pathlib import Path

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


class FakeLabelStudio:
    """The calls push and pull make, answered from memory: one masks project (id 1) with the given config."""

    def __init__(self, config: str) -> None:
        self.config, self.stored, self.next_id = config, {}, 1

    def project(self, pid: int) -> dict:
        return {"id": pid, "label_config": self.config, "model_version": None}

    def update_project(self, pid: int, **fields) -> dict:  # noqa: ANN003
        return {}

    def import_tasks(self, pid: int, tasks: list[dict]) -> list[int]:
        ids = []
        for t in tasks:
            self.stored[self.next_id] = {"id": self.next_id, **copy.deepcopy(t), "annotations": []}
            ids.append(self.next_id)
            self.next_id += 1
        return ids

    def tasks(self, pid: int, *, page_size: int = 100):  # noqa: ANN201
        return iter(copy.deepcopy(list(self.stored.values())))

    def users(self) -> dict[int, str]:
        return {7: "ls-person@example.org"}


def test_push_and_pull_region_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from blindspots.data.formats.labelstudio_config import labeling_config
    from blindspots.integrations.labelstudio import pull, push
    from blindspots.integrations.labelstudio.connection import Connection, save_connection
    from blindspots.loop import LoopContext

    p = region_project(tmp_path / "sample", {})
    classes = LoopContext(p, simulate=False, progress=False).classes
    fake = FakeLabelStudio(labeling_config(classes))
    monkeypatch.setattr(Connection, "client", lambda self: fake)
    save_connection(p.path, Connection(url="http://127.0.0.1:9", masks_project=1, image_url="http://img/{id}"))
    push(p, kind="masks", progress=False)
    by_region = set(rq.query_images(p, 0))
    kinds = {t["data"]["blindspots_id"]: t["predictions"][0]["result"][0]["type"] for t in fake.stored.values()}
    assert {x for x, k in kinds.items() if k == "polygonlabels"} == by_region
    assert {x for x, k in kinds.items() if k == "brushlabels"} == set(p.answers.candidate_ids(0, "T")) - by_region
    # A person accepts every guess of the region tasks but deletes (mixed) the first polygon of each.
    for t in fake.stored.values():
        res = t["predictions"][0]["result"]
        if res[0]["type"] == "polygonlabels":
            t["annotations"] = [{"id": t["id"], "completed_by": 7, "updated_at": "2026-01-01T00:00:00",
                                 "result": copy.deepcopy(res[1:])}]
    report = pull(p, kind="masks")
    assert sorted(report.stored) == sorted(by_region)
    for x in by_region:
        asked = rq.queries(p, 0, x)
        assert rq.answers(p, 0, x) == {asked[0].region: None, **{a.region: a.guess for a in asked[1:]}}
        m, seg = p.answers.load_mask(0, x), rq.segments(p, 0, x)
        assert (m[seg == asked[0].region] == 255).all() and all((m[seg == a.region] == a.guess).all() for a in asked[1:])
        assert p.answers.masks_for_round(0).set_index("id").loc[x, "source"] == rq.REGION_SOURCE
    assert pull(p, kind="masks").unchanged == len(by_region)  # pulled again: nothing new

"""The region page's API (FastAPI TestClient) on a sample project asking for region labels: the queue,
the region overlay, answers (committed, replaced when sent again, refused when wrong) and the partial
mask written when an image's last region is answered."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image
import io

from blindspots.loop import regions as rq
from region_project import region_project

torch.set_num_threads(1)
ANN, OTHER = "regions-ann-token", "regions-other-token"
AUTH = {"Authorization": f"Bearer {ANN}"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from blindspots.app import create_app

    p = region_project(tmp_path_factory.mktemp("regions") / "sample",
                       {"ann": ("annotator", ANN), "other": ("annotator", OTHER)})
    return {"project": p, "client": TestClient(create_app(p.path))}


def test_queue_lists_every_asked_region_with_the_guess(world: dict) -> None:
    p, c = world["project"], world["client"]
    assert c.get("/api/regions/queue").status_code == 401
    q = c.get("/api/regions/queue", headers=AUTH).json()
    images = rq.query_images(p, 0)
    assert q["round"] == 0 and images and set(images).isdisjoint(p.answers.candidate_ids(0, "T"))
    assert [(x["image_id"], x["region"]) for x in q["items"]] == \
        [(i, a.region) for i in images for a in rq.queries(p, 0, i)]
    assert all(x["answer"] is None for x in q["items"]) and q["done"] == 0 and q["total"] == len(q["items"])
    assert q["classes"]["names"] and len(q["classes"]["palette"]) == len(q["classes"]["names"])
    x = q["items"][0]
    r = c.get("/api/images/region", params={"round": 0, "id": x["image_id"], "region": x["region"]}, headers=AUTH)
    rgba = np.asarray(Image.open(io.BytesIO(r.content)))
    inside = rq.segments(p, 0, x["image_id"]) == x["region"]
    assert rgba.shape == inside.shape + (4,) and (rgba[~inside][:, 3] > 0).all()
    assert (rgba[inside][:, 3] == 255).any() and (rgba[inside][:, 3] == 0).any()  # outline, clear middle
    bad = c.get("/api/images/region", params={"round": 0, "id": x["image_id"], "region": 9999}, headers=AUTH)
    assert bad.status_code == 404


def test_answers_are_stored_checked_and_make_the_partial_mask(world: dict) -> None:
    p, c = world["project"], world["client"]
    image = rq.query_images(p, 0)[0]
    asked = rq.queries(p, 0, image)
    post = lambda body, h=AUTH: c.post("/api/regions", json=body, headers=h)  # noqa: E731
    base = {"round": 0, "image_id": image}
    assert post({**base, "region": asked[0].region, "label": 99}).status_code == 422
    assert post({**base, "region": asked[0].region, "label": "car"}).status_code == 422
    assert post({**base, "region": asked[0].region, "label": "1"}).status_code == 422  # "1" is no class id
    assert post({**base, "region": 9999, "label": 1}).status_code == 404
    assert post({**base, "round": 1, "region": asked[0].region, "label": 1}).status_code == 409
    assert rq.answers(p, 0, image) == {}
    r = post({**base, "region": asked[0].region, "label": asked[0].guess}).json()
    assert r["ok"] and r["done"] == 1 and not r["image_done"]
    assert rq.answers(p, 0, image) == {asked[0].region: asked[0].guess}  # committed when acknowledged
    r = post({**base, "region": asked[0].region, "label": "mixed"}).json()  # changed: replaced
    assert r["done"] == 1 and rq.answers(p, 0, image) == {asked[0].region: None}
    for a in asked[1:]:
        r = post({**base, "region": a.region, "label": 2}).json()
    assert r["image_done"] and p.answers.masks_for_round(0).set_index("id").loc[image, "source"] == rq.REGION_SOURCE
    m, seg = p.answers.load_mask(0, image), rq.segments(p, 0, image)
    assert (m[seg == asked[0].region] == 255).all() and all((m[seg == a.region] == 2).all() for a in asked[1:])
    q = c.get("/api/regions/queue", headers=AUTH).json()
    mine = {x["region"]: x["answer"] for x in q["items"] if x["image_id"] == image}
    assert mine == {asked[0].region: "mixed", **{a.region: 2 for a in asked[1:]}}
    other = c.get("/api/regions/queue", headers={"Authorization": f"Bearer {OTHER}"}).json()
    assert other["done"] == 0  # the queue shows each person their own answers


def test_label_page_queue_leaves_the_region_images_to_the_region_page(world: dict) -> None:
    p, c = world["project"], world["client"]
    q = c.get("/api/labels/queue", headers=AUTH).json()
    round_ids = {x["id"] for x in q["items"] if x["kind"] == "round"}
    assert round_ids and round_ids.isdisjoint(rq.query_images(p, 0))
    assert set(p.answers.candidate_ids(0, "T")) <= round_ids

"""Region labels live with a real Label Studio server (tests/labelstudio_server.py): a project with
`labels.kind = "regions"` pushes a task per image of S with a polygon per asked region pre-labelled with the
target's guess (T: whole-mask brush tasks); a person answers through Label Studio's REST API as its editor
does (accepts guesses, relabels one polygon, deletes one, redraws one); pull stores the answers and the
partial masks, and the round fine-tunes the target from them."""
from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from blindspots import config as C
from blindspots import loop as rounds
from blindspots.data.formats.labelstudio_config import IMAGE_NAME, POLYGON_NAME, labeling_config
from blindspots.loop import regions as rq
from test_labelstudio_live import (TOKEN_ENV, _annotate, _brush, _tasks, make_project,  # noqa: F401 - fixtures
                                   root, server, task_page, world)

pytest.importorskip("label_studio_sdk",
                    reason="label-studio-sdk is not installed (pip install 'blindspots[labelstudio]')")
import httpx  # noqa: E402

from blindspots.integrations import labelstudio as ls  # noqa: E402
from blindspots.integrations.labelstudio.regions import RESULT_PREFIX, _polygon_pixels, region_polygons  # noqa: E402

torch.set_num_threads(1)


def _submit(server, pid: int, task_id: int, result: list[dict], prediction_id: int) -> dict:  # noqa: ANN001
    """POST an annotation the way Label Studio's editor submits one made from a pre-annotation."""
    r = httpx.post(f"{server.url}/api/tasks/{task_id}/annotations/", params={"project": pid},
                   headers={"Authorization": f"Token {server.token}"},
                   json={"result": result, "parent_prediction": prediction_id, "lead_time": 12.5, "project": pid})
    assert r.status_code == 201, r.text
    return r.json()


def _expected_mask(seg: np.ndarray, said: dict[int, int | None]) -> np.ndarray:
    """uint8 [H, W]: each answered region painted with its class, the rest (and mixed / unsure) ignore."""
    out = np.full(seg.shape, 255, np.uint8)
    for region, label in said.items():
        if label is not None:
            out[seg == region] = label
    return out


def test_region_tasks_round_trip_through_label_studio(server, world: Path, root: Path,  # noqa: ANN001, F811
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, server.token)
    p = make_project(world, root / "regions", n4=4,
                     labels=C.LabelSettings(kind="regions", regions_per_image=3, fill="ignore"))
    assert rounds.advance(p, progress=False).state == "awaiting_ratings"
    p.answers.add_ratings([(0, x, "rater", 1 + k % 5) for k, x in enumerate(p.answers.candidate_ids(0, "M"))])
    assert rounds.advance(p, progress=False).state == "awaiting_masks"
    by_region, t_ids = rq.query_images(p, 0), set(p.answers.candidate_ids(0, "T"))
    assert len(by_region) >= 2 and t_ids and not t_ids & set(by_region), (by_region, t_ids)
    assert all(len(rq.queries(p, 0, x)) >= 2 for x in by_region[:2])  # room to relabel, delete and redraw
    classes = rounds.LoopContext(p, simulate=False, progress=False).classes
    names = list(classes.names)

    # a masks project of one's own with brush labels only: region questions cannot be asked there
    client = ls.LabelStudio(server.url, server.token)
    own = int(client.create_project("brush only", labeling_config(classes, polygon_name=None))["id"])
    ls.connect(p, server.url, token_env=TOKEN_ENV, document_root=server.document_root, masks_project=own)
    with pytest.raises(ValueError, match=rf"^labels: expected PolygonLabels with every class in Label Studio project "
                                         rf"{own}'s .* got a config with BrushLabels .*--update-config") as err:
        ls.push(p, progress=False)
    assert "\n" not in str(err.value) and list(client.tasks(own)) == []  # nothing pushed
    conn = ls.connect(p, server.url, token_env=TOKEN_ENV, document_root=server.document_root, masks_project=own,
                      update_config=True)
    need = rounds.masks_needed(p, 0)
    assert sorted(ls.push(p, progress=False).created) == sorted(need)
    tasks = _tasks(client, conn.masks_project)
    assert sorted(tasks) == sorted(need)  # one task an image
    # the editor shows the predictions of the project's model version: the region tasks' one
    model_version = client.project(conn.masks_project)["model_version"]

    # on the server: a polygon per asked region, in rank order, labelled with the target's guess,
    # its points in percent of the image and covering exactly the region's pixels
    preds = {}
    for x in by_region:
        task = client.task(tasks[x]["id"])
        assert task["data"]["kind"] == "regions" and task["data"]["blindspots_id"] == x and task["data"]["in_S"]
        (pred,) = task["predictions"]
        assert pred["model_version"] == model_version
        asked, seg = rq.queries(p, 0, x), rq.segments(p, 0, x)
        res = pred["result"]
        assert [r["id"] for r in res] == [f"{RESULT_PREFIX}{a.region}" for a in asked]
        for r, a in zip(res, asked):
            assert (r["type"], r["from_name"], r["to_name"]) == ("polygonlabels", POLYGON_NAME, IMAGE_NAME)
            assert (r["original_height"], r["original_width"]) == seg.shape
            assert r["value"]["polygonlabels"] == [names[a.guess]] and r["value"]["closed"] is True
            pts = np.asarray(r["value"]["points"])
            assert pts.ndim == 2 and pts.shape[1] == 2 and pts.min() >= 0 and pts.max() <= 100
            np.testing.assert_array_equal(_polygon_pixels(pts.tolist(), *seg.shape), seg == a.region)
        preds[x] = pred
    for x in t_ids:  # T: whole masks, brush pre-annotations
        assert {r["type"] for r in client.task(tasks[x]["id"])["predictions"][0]["result"]} == {"brushlabels"}

    # a person answers: the first image relabels its first polygon and deletes its second (mixed / unsure);
    # the second deletes its first polygon and draws a new one over that region with another label;
    # every other image of S keeps the guesses; T accepts the target's masks
    expected: dict[str, dict[int, int | None]] = {}
    for n, x in enumerate(by_region):
        asked, res = rq.queries(p, 0, x), copy.deepcopy(preds[x]["result"])
        said: dict[int, int | None] = {a.region: a.guess for a in asked}
        if n == 0:
            other = (asked[0].guess + 1) % len(names)
            res[0]["value"]["polygonlabels"] = [names[other]]
            said[asked[0].region] = other
            res.pop(1)
            said[asked[1].region] = None
        elif n == 1:
            other = (asked[0].guess + 2) % len(names)
            drawn = dict(copy.deepcopy(res[0]), id="Xk3pQ9rTzA")  # an id as the editor makes one
            drawn["value"].update(points=region_polygons(rq.segments(p, 0, x), asked[0].region),
                                  polygonlabels=[names[other]])
            res = res[1:] + [drawn]
            said[asked[0].region] = other
        ann = _submit(server, conn.masks_project, tasks[x]["id"], res, preds[x]["id"])
        # Label Studio keeps the result ids of the pre-annotation the annotation was made from
        stored = [a for a in client.task(tasks[x]["id"])["annotations"] if a["id"] == ann["id"]][0]
        assert [r["id"] for r in stored["result"]] == [r["id"] for r in res]
        expected[x] = said
    for x in t_ids:
        _annotate(client, tasks[x]["id"], tasks[x]["predictions"][0]["result"])

    got = ls.pull(p)
    assert sorted(got.stored) == sorted(need) and not got.waiting and not got.skipped, got.lines()
    masks = p.answers.masks_for_round(0).set_index("id")
    for x in by_region:
        assert rq.answers(p, 0, x) == expected[x]
        assert set(rq.answers_of(p, 0, server.username)) >= {(x, r) for r in expected[x]}  # the person's answers
        np.testing.assert_array_equal(p.answers.load_mask(0, x), _expected_mask(rq.segments(p, 0, x), expected[x]))
        assert masks.loc[x, "source"] == rq.REGION_SOURCE
    assert set(masks.loc[sorted(t_ids), "source"]) == {"labelstudio"}
    again = ls.pull(p)
    assert again.stored == [] and again.unchanged == len(need)  # re-pulled: nothing changes

    # the person edits the first image's annotation: the deleted polygon back with the guess
    x = by_region[0]
    ann = [a for a in client.task(tasks[x]["id"])["annotations"] if not a["was_cancelled"]][0]
    time.sleep(1.1)  # a later updated_at
    client.sdk.annotations.update(id=ann["id"], result=ann["result"] + [preds[x]["result"][1]])
    assert ls.pull(p).stored == [x]
    second = rq.queries(p, 0, x)[1]
    expected[x][second.region] = second.guess
    assert rq.answers(p, 0, x) == expected[x]
    np.testing.assert_array_equal(p.answers.load_mask(0, x), _expected_mask(rq.segments(p, 0, x), expected[x]))

    # brush strokes on a region task are no answer: the pull names them and stores nothing
    y = by_region[1]
    ann = [a for a in client.task(tasks[y]["id"])["annotations"] if not a["was_cancelled"]][0]
    stroke = _brush(np.where(rq.segments(p, 0, y) == rq.queries(p, 0, y)[0].region, 0, 255).astype(np.uint8), names)
    time.sleep(1.1)
    client.sdk.annotations.update(id=ann["id"], result=ann["result"] + stroke)
    before = (rq.answers(p, 0, y), p.answers.load_mask(0, y))
    with pytest.raises(ValueError, match=rf"\({y}\), annotation {ann['id']}: expected polygon labels only on a "
                                         r"region task .* got brush strokes.*nothing was stored"):
        ls.pull(p)
    assert rq.answers(p, 0, y) == before[0] and (p.answers.load_mask(0, y) == before[1]).all()
    client.sdk.annotations.update(id=ann["id"], result=ann["result"])
    assert ls.pull(p).stored == [y] and rq.answers(p, 0, y) == expected[y]

    # the round goes on: the masks step counts the region images and the target is fine-tuned on them
    st = rounds.advance(p, progress=False)
    res = p.journal.step(0, "masks")["result"]
    assert res["n_region_images"] == len(by_region) and 0 < res["region_pixel_share"] < 1, (res, st.message)
    assert p.registry.model("target").version == 1, st.message


def test_chromium_submits_a_region_task_with_its_region_ids(server, world: Path, root: Path,  # noqa: ANN001, F811
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Label Studio's own editor (headless Chromium) opens a region task, shows a polygon per asked region
    and submits them as they are: the annotation keeps the `region-<id>` result ids, so pull reads every
    guess as its region's answer."""
    if not Path("/usr/bin/chromium").is_file():
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium; scripts/test.sh installs it as root)")
    playwright = pytest.importorskip("playwright.sync_api")
    monkeypatch.setenv(TOKEN_ENV, server.token)
    p = make_project(world, root / "regions_browser", n4=4, labels=C.LabelSettings(kind="regions", regions_per_image=3))
    assert rounds.advance(p, progress=False).state == "awaiting_ratings"
    p.answers.add_ratings([(0, x, "rater", 1 + k % 5) for k, x in enumerate(p.answers.candidate_ids(0, "M"))])
    assert rounds.advance(p, progress=False).state == "awaiting_masks"
    conn = ls.connect(p, server.url, token_env=TOKEN_ENV, document_root=server.document_root)
    client = ls.LabelStudio(server.url, server.token)
    ls.push(p, progress=False)
    x = rq.query_images(p, 0)[0]
    asked = rq.queries(p, 0, x)
    tid = int(_tasks(client, conn.masks_project)[x]["id"])
    names = list(rounds.LoopContext(p, simulate=False, progress=False).classes.names)
    blocked: list[str] = []
    with playwright.sync_playwright() as pw:
        browser, page = task_page(playwright, pw, server, conn.masks_project, tid, blocked)
        text = page.inner_text("body").split("Regions", 1)[-1]
        page.get_by_role("button", name="Submit").click()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not client.task(tid)["annotations"]:
            time.sleep(0.5)
        browser.close()
    assert all(names[a.guess] in text for a in asked), text[:500]
    (ann,) = client.task(tid)["annotations"]
    assert [r["id"] for r in ann["result"]] == [f"{RESULT_PREFIX}{a.region}" for a in asked], ann["result"]
    got = ls.pull(p)
    assert x in got.stored and rq.answers(p, 0, x) == {a.region: a.guess for a in asked}

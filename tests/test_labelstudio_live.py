"""A project live with a real Label Studio server (tests/labelstudio_server.py): connect, push the
candidates and S ∪ T with the target's prediction pre-annotated, annotate through Label Studio's API as an
annotator would, pull, and `round` goes on; the ML backend called by Label Studio itself; a Chromium look at
a task page; bad input as one line each with nothing written half-way."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import labelstudio_server
from blindspots import config as C
from blindspots.config import (Config, DataSettings, FinetuneSettings, MiningSettings, ModelSettings, PoolSettings,
                               ProjectSettings, RatingSettings, ScanSettings)
from blindspots.data.formats.labelstudio_config import labeling_config, rating_config
from blindspots import loop as rounds
from blindspots.loop.project import Project

pytest.importorskip("label_studio_sdk", reason="label-studio-sdk is not installed (pip install 'blindspots[labelstudio]')")
from label_studio_sdk.converter.brush import decode_rle, mask2rle  # noqa: E402 - Label Studio's own codec

from blindspots.integrations import labelstudio as ls  # noqa: E402

torch.set_num_threads(1)
SIZE = 48
TOKEN_ENV = "BLINDSPOTS_TEST_LS_TOKEN"


@pytest.fixture(scope="session")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ls")


@pytest.fixture(scope="session")
def server(root: Path):
    """One Label Studio for the session; its document root holds the pool."""
    (root / "docs").mkdir(exist_ok=True)
    s = labelstudio_server.start(root / "server", root / "docs")
    yield s
    labelstudio_server.stop(s)


@pytest.fixture(scope="session")
def world(root: Path) -> Path:
    """A pool of scenes under the document root, S0 / T0 and three quickly trained zoo models."""
    from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set
    from blindspots.models.zoo import build_model, save_checkpoint
    from blindspots.training.segmentation import train_segmenter

    w = root / "docs" / "world"
    generate_scene_set(w / "pool", 24, seed=1, distribution="pool", size=SIZE, progress=False)
    s0 = generate_scene_set(w / "train", 6, seed=2, distribution="train", size=SIZE, progress=False)
    generate_scene_set(w / "val", 3, seed=3, distribution="train", size=SIZE, progress=False)
    for k, (name, arch) in enumerate({"target": "small_fcn", "comp_a": "tiny_unet"}.items()):
        torch.manual_seed(k)
        model = build_model(arch, SCENE_CLASSES.num_classes)
        train_segmenter(model, s0, epochs=2, batch_size=3, seed=k, progress=False)
        save_checkpoint(w / f"{name}.pt", model, arch=arch, classes=SCENE_CLASSES, meta={"test": True})
    return w


def make_project(world: Path, path: Path, *, labelled: bool = True, labels: C.LabelSettings | None = None,
                 n4: int = 2) -> Project:
    """labelled: with S0 / T0 (the paper's plan, fine-tuning); without, the label plan (export S ∪ T).
    labels: what people label in S (default: whole masks); n4: how many images S gets."""
    data = DataSettings(train=str(world / "train"), val=str(world / "val")) if labelled else DataSettings()
    cfg = Config(pool=PoolSettings(root=str(world / "pool" / "images")),
                 target=ModelSettings("target", str(world / "target.pt")),
                 competitors=[ModelSettings("comp_a", str(world / "comp_a.pt"))],
                 data=data,
                 project=ProjectSettings(name="lsdemo", seed=0, rounds=1), scan=ScanSettings(batch_size=8, shard_size=16),
                 mining=MiningSettings(strategy="mad", n3=2, quantiles=[0.0, 1.0]),
                 ratings=RatingSettings(n4=n4, raters=1), testset=C.TestSetSettings(size=2, max_per_class=2),
                 finetune=FinetuneSettings(lrs=[1e-3], epochs=1, batch_size=2, max_replay=2),
                 labels=labels or C.LabelSettings(), base_dir=world)
    return Project.create(path, cfg)


@pytest.fixture(scope="session")
def live(server, world: Path, root: Path, monkeypatch_session) -> dict:
    """A project connected to the server, at round 0 awaiting ratings."""
    monkeypatch_session.setenv(TOKEN_ENV, server.token)
    p = make_project(world, root / "proj")
    assert rounds.advance(p, progress=False).state == "awaiting_ratings"
    res = _cli("labelstudio", "connect", p.path, "--url", server.url, "--token-env", TOKEN_ENV,
               "--document-root", server.document_root)  # the command the README shows
    assert res.exit_code == 0 and "masks project" in res.stdout, res.output
    conn = ls.load_connection(p.path)
    assert server.token not in (p.path / "labelstudio.json").read_text()  # where the token is, never the token
    return {"project": p, "conn": conn, "client": ls.LabelStudio(server.url, server.token)}


@pytest.fixture(scope="session")
def monkeypatch_session():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _target_map(p: Project, image_id: str) -> np.ndarray:
    from blindspots.loop.maps import target_map

    return target_map(rounds.LoopContext(p, simulate=False, progress=False), 0, image_id)


def _decoded(prediction: dict, shape: tuple[int, int], names: list[str]) -> np.ndarray:
    """A Label Studio prediction's brush regions decoded with Label Studio's own decoder -> class ids."""
    out = np.full(shape, 255, np.uint8)
    for r in prediction["result"]:
        layer = decode_rle(r["value"]["rle"]).reshape(shape[0], shape[1], 4)[:, :, 3]
        out[layer > 0] = names.index(r["value"]["brushlabels"][0])
    return out


def _annotate(client: ls.LabelStudio, task_id: int, result: list[dict], **extra) -> dict:
    """Submit an annotation through Label Studio's API, as the labelling page does."""
    return client.sdk.annotations.create(id=task_id, result=result, **extra).dict()


def _brush(mask: np.ndarray, names: list[str]) -> list[dict]:
    h, w = mask.shape
    return [{"type": "brushlabels", "from_name": "tag", "to_name": "image", "original_width": w,
             "original_height": h, "image_rotation": 0,
             "value": {"format": "rle", "rle": mask2rle((mask == k).astype(np.uint8) * 255),
                       "brushlabels": [names[k]]}} for k in np.unique(mask).tolist() if k < len(names)]


def _tasks(client: ls.LabelStudio, pid: int) -> dict[str, dict]:
    return {t["data"]["blindspots_id"]: t for t in client.tasks(pid) if "blindspots_id" in t["data"]}


def test_ratings_then_masks_from_label_studio_and_the_round_goes_on(live: dict, server) -> None:
    p, conn, client = live["project"], live["conn"], live["client"]
    names = list(rounds.LoopContext(p, simulate=False, progress=False).classes.names)
    # the projects carry the generated configs
    assert client.project(conn.masks_project)["label_config"].strip() == labeling_config(
        rounds.LoopContext(p, simulate=False, progress=False).classes).strip()
    assert "out-of-domain" in client.project(conn.ratings_project)["label_config"]
    # ratings of M in Label Studio
    m = list(p.answers.candidates(0, "M")["id"])
    res = _cli("labelstudio", "push", p.path, "--ratings")
    assert res.exit_code == 0 and f"pushed {len(m)} ratings task(s)" in res.stdout, res.output
    assert ls.push(p, kind="ratings", progress=False).created == []  # pushed once
    tasks = _tasks(client, conn.ratings_project)
    first = tasks[m[0]]
    assert first["data"]["mad_rank"] == 1 and "mad_reason" in first["data"] and first["data"]["set"] == "M"
    for k, x in enumerate(m):
        choice = "out-of-domain" if k == len(m) - 1 else str(1 + k % 5)
        _annotate(client, tasks[x]["id"], [{"type": "choices", "from_name": "rating", "to_name": "image",
                                            "value": {"choices": [choice]}}])
    got = ls.pull(p, kind="ratings")
    assert sorted(got.stored) == sorted(m) and not got.waiting
    r = p.answers.ratings_for_round(0)
    assert len(r) == len(m) and set(r["annotator"]) == {labelstudio_server.USERNAME}
    assert bool(r.set_index("id").loc[m[-1], "out_of_domain"])
    assert ls.pull(p, kind="ratings").stored == []  # idempotent
    st = rounds.advance(p, progress=False)
    assert st.state == "awaiting_masks"
    need = rounds.masks_needed(p, 0)

    # masks of S ∪ T: pre-annotations decode to the target's map pixel for pixel (Label Studio's decoder)
    rep = ls.push(p, progress=False)
    assert sorted(rep.created) == sorted(need)
    tasks = _tasks(client, conn.masks_project)
    s_ids, t_ids = set(p.answers.candidates(0, "S")["id"]), set(p.answers.candidates(0, "T")["id"])
    for x in need:
        task = client.task(tasks[x]["id"])
        assert task["data"]["set"] in ("S", "T", "S+T") and task["data"]["round"] == 0
        # an image in both S and T is marked both: Label Studio's T filter shows every image of T
        assert (task["data"]["in_S"], task["data"]["in_T"]) == (x in s_ids, x in t_ids)
        assert task["data"]["image"].startswith("/data/local-files/?d=world/pool/images/")
        pred = _target_map(p, x)
        np.testing.assert_array_equal(_decoded(task["predictions"][0], pred.shape, names), pred)
    # Label Studio serves the image itself from the pool (local files storage)
    import httpx

    img = httpx.get(conn.url + tasks[need[0]]["data"]["image"], headers={"Authorization": f"Token {server.token}"})
    assert img.status_code == 200 and img.content[:4] == b"\x89PNG"

    # annotators: the first accepts the prediction as it is, the second corrects it, one skips (cancelled)
    accepted, corrected, skipped = need[0], need[1], need[-1]
    expected = {}
    for x in need:
        if x == skipped:
            continue
        if x == corrected:
            fixed = _target_map(p, x).copy()
            fixed[5:20, 10:30] = names.index("vehicle")
            fixed[0:3, :] = 255  # unlabelled strip
            expected[x] = fixed
            _annotate(client, tasks[x]["id"], _brush(fixed, names))
        else:
            expected[x] = _target_map(p, x)
            _annotate(client, tasks[x]["id"], tasks[x]["predictions"][0]["result"])
    _annotate(client, tasks[skipped]["id"], [], was_cancelled=True)
    got = ls.pull(p)
    assert sorted(got.stored) == sorted(set(need) - {skipped})
    assert any(skipped in s for s in got.skipped), got.skipped
    assert rounds.advance(p, progress=False).state == "awaiting_masks"  # one mask still missing
    expected[skipped] = _target_map(p, skipped)
    _annotate(client, tasks[skipped]["id"], tasks[skipped]["predictions"][0]["result"])
    res = _cli("labelstudio", "pull", p.path)
    assert res.exit_code == 0 and "pulled 1 masks answer(s)" in res.stdout, res.output
    assert f"{len(need) - 1} unchanged" in res.stdout and "blindspots round" in res.stdout
    for x in need:  # pixel-exact
        np.testing.assert_array_equal(p.answers.load_mask(0, x), expected[x])
    assert set(p.answers.masks_for_round(0)["source"]) == {"labelstudio"}

    # an edited annotation replaces the mask stored from its older version
    ann = [a for a in client.task(tasks[accepted]["id"])["annotations"] if not a["was_cancelled"]][0]
    edited = expected[accepted].copy()
    edited[:10, :10] = names.index("road")
    time.sleep(1.1)  # a later updated_at
    client.sdk.annotations.update(id=ann["id"], result=_brush(edited, names))
    got = ls.pull(p)
    assert got.stored == [accepted]
    np.testing.assert_array_equal(p.answers.load_mask(0, accepted), edited)
    assert ls.pull(p).stored == []  # re-pull: nothing changes

    # the round goes on: the masks step is done and Table 1 is filled
    st = rounds.advance(p, progress=False, max_steps=1)
    assert p.journal.step(0, "masks")["status"] == "done", st.message

    # a task deleted in Label Studio is reported, not dropped
    client.sdk.tasks.delete(str(tasks[corrected]["id"]))
    got = ls.pull(p)
    assert any(corrected in d for d in got.deleted) and any("deleted" in line for line in got.lines())
    np.testing.assert_array_equal(p.answers.load_mask(0, corrected), expected[corrected])  # its mask stays
    live["annotated"] = True


def _after_round_trip(live: dict) -> None:
    if not live.get("annotated"):
        pytest.skip("builds on test_ratings_then_masks_from_label_studio_and_the_round_goes_on (run the file)")


@pytest.fixture(scope="session")
def backend(live: dict):
    """`blindspots labelstudio-backend`'s app on 127.0.0.1, registered in the masks project: Label Studio calls
    /health and /setup now, /predict when asked for predictions."""
    import uvicorn

    port = labelstudio_server.free_port()
    srv = uvicorn.Server(uvicorn.Config(ls.create_backend(live["project"]), host="127.0.0.1", port=port,
                                        log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    ml = live["client"].sdk.ml.create(url=url, project=live["conn"].masks_project, title="blindspots").dict()
    yield {"url": url, "ml": ml}
    srv.should_exit = True
    thread.join(timeout=10)


def _other_pool_image(p: Project) -> str:
    taken = set(p.answers.candidates(0, "M")["id"])
    return next(x for x in rounds.LoopContext(p, simulate=False, progress=False).pool.ids if x not in taken)


def test_ml_backend_answers_label_studio(live: dict, backend: dict, server) -> None:
    """An image added in Label Studio itself (no blindspots id, a Local Files URL) gets the target's
    prediction from the backend, called by Label Studio."""
    p, conn, client = live["project"], live["conn"], live["client"]
    names = list(rounds.LoopContext(p, simulate=False, progress=False).classes.names)
    x = _other_pool_image(p)
    (tid,) = client.import_tasks(conn.masks_project, [{"data": {"image": f"/data/local-files/?d=world/pool/images/{x}"}}])
    import httpx

    # connected: Label Studio called /health and /setup (read raw: SDK 1.x's model of this answer is outdated)
    ml = httpx.get(f"{conn.url}/api/ml/{backend['ml']['id']}", headers={"Authorization": f"Token {server.token}"}).json()
    assert ml["state"] == "CO", ml
    client.sdk.actions.create(id="retrieve_tasks_predictions", project=conn.masks_project,
                              selected_items={"all": False, "included": [tid]})
    preds = client.task(tid)["predictions"]
    assert [q["model_version"] for q in preds] == ["target_v0"]
    pred = _target_map(p, x)
    np.testing.assert_array_equal(_decoded(preds[0], pred.shape, names), pred)
    # a file under the document root that is not a pool image (flipped): the backend runs the model on it
    ctx = rounds.LoopContext(p, simulate=False, progress=False)
    flipped = np.ascontiguousarray(ctx.pool.load(x)[:, ::-1])
    (server.document_root / "extra").mkdir(exist_ok=True)
    Image.fromarray(flipped).save(server.document_root / "extra" / "flipped.png")
    (tid2,) = client.import_tasks(conn.masks_project, [{"data": {"image": "/data/local-files/?d=extra/flipped.png"}}])
    client.sdk.actions.create(id="retrieve_tasks_predictions", project=conn.masks_project,
                              selected_items={"all": False, "included": [tid2]})
    from blindspots.loop.models import predict_one

    want = predict_one(ctx.segmenter("target", 0), "flipped.png", flipped)[0].argmax(0)
    (pred2,) = client.task(tid2)["predictions"]
    np.testing.assert_array_equal(_decoded(pred2, want.shape, names), want)
    live["backend_task"] = (tid, x)
    live["other_server"] = backend["url"]  # a web server that is not Label Studio, for test_bad_input


def test_chromium_shows_the_pre_annotation(live: dict, server, root: Path) -> None:
    """A Label Studio task page in Chromium (headless, every request outside 127.0.0.1 refused): the
    pre-annotation's regions are listed and drawn over the image. The screenshot is kept in the test's folder."""
    if not Path("/usr/bin/chromium").is_file():
        pytest.skip("Debian chromium is not installed (/usr/bin/chromium; scripts/test.sh installs it as root)")
    playwright = pytest.importorskip("playwright.sync_api")
    if "backend_task" not in live:
        pytest.skip("needs test_ml_backend_answers_label_studio's task")
    tid, x = live["backend_task"]
    shot = root / "task_page.png"
    blocked: list[str] = []
    with playwright.sync_playwright() as pw:
        browser, page = task_page(playwright, pw, server, live["conn"].masks_project, tid, blocked)
        text = page.inner_text("body")
        model_version = live["client"].project(live["conn"].masks_project).get("model_version")
        page.screenshot(path=str(shot))
        browser.close()
    assert "Labeled regions will appear here" not in text, f"no region in the Regions panel ({model_version=})"
    names = rounds.LoopContext(live["project"], simulate=False, progress=False).classes.names
    regions = text.split("Regions", 1)[-1]
    present = [names[k] for k in np.unique(_target_map(live["project"], x)) if k < len(names)]
    assert all(n in regions for n in present), regions[:500]
    assert shot.is_file() and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}; requests to other addresses refused: {sorted(set(blocked))}")


def task_page(playwright, pw, server, pid: int, tid: int, blocked: list[str]):  # noqa: ANN001, ANN201
    """(browser, page): headless Chromium signed in as the admin on task `tid` of Label Studio project `pid`,
    once the pre-annotation's regions are listed; requests outside the server are refused (and listed in
    `blocked`)."""
    browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"], headless=True)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(server.url)
               else (blocked.append(route.request.url), route.abort()))
    page.goto(server.url + "/user/login/")
    page.fill("input[name=email]", server.username)
    page.fill("input[name=password]", server.password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle", timeout=60_000)
    assert "/user/login" not in page.url, "the admin could not sign in"
    page.goto(f"{server.url}/projects/{pid}/data?task={tid}")
    page.wait_for_selector("canvas", timeout=60_000)
    empty = "() => !document.body.innerText.includes('Labeled regions will appear here')"
    try:  # the prediction arrives after the task (slow on a loaded machine): wait for its regions
        page.wait_for_function(empty, timeout=30_000)
    except playwright.TimeoutError:
        page.reload()
        page.wait_for_selector("canvas", timeout=60_000)
        page.wait_for_function(empty, timeout=30_000)
    page.wait_for_timeout(2000)  # the brush layers are drawn after the image loads
    return browser, page


def _assert_one_line_error(res, *needles: str) -> None:
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _state(p: Project) -> tuple:
    """What a failed command must leave as it was: the connection file, the stored masks and ratings."""
    masks = p.answers.masks_for_round(0)
    return ((p.path / "labelstudio.json").read_bytes(), masks[["id", "time"]].values.tolist(),
            [Path(f).read_bytes() for f in masks["path"]], p.answers.ratings_for_round(0).values.tolist())


def _cli(*args: str, env: dict | None = None):
    from typer.testing import CliRunner

    from blindspots.cli import app

    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def test_bad_input_is_one_line_and_writes_nothing(live: dict, server, root: Path) -> None:
    _after_round_trip(live)
    if "other_server" not in live:
        pytest.skip("needs test_ml_backend_answers_label_studio's server")
    p, conn, client = live["project"], live["conn"], live["client"]
    classes = rounds.LoopContext(p, simulate=False, progress=False).classes
    before = _state(p)
    base = ["labelstudio", "connect", p.path, "--token-env", TOKEN_ENV, "--document-root", server.document_root]
    # wrong URL (nothing listens there), wrong token
    res = _cli(*base, "--url", f"http://127.0.0.1:{labelstudio_server.free_port()}", env={TOKEN_ENV: server.token})
    _assert_one_line_error(res, "url: expected a Label Studio server at http://127.0.0.1:")
    res = _cli(*base, "--url", live["other_server"], env={TOKEN_ENV: server.token})  # a server, not Label Studio
    _assert_one_line_error(res, "url: expected a Label Studio API at http://127.0.0.1:")
    res = _cli(*base, "--url", server.url, env={TOKEN_ENV: "not-the-token-0123456789"})
    _assert_one_line_error(res, "token: Label Studio at", "refused the API token")
    res = _cli(*base, "--url", server.url, env={TOKEN_ENV: ""})
    _assert_one_line_error(res, f"token: expected the Label Studio API token in the environment variable {TOKEN_ENV}")
    # a project with another labelling config; a class missing from the config
    other = client.create_project("text task", '<View><Text name="text" value="$text"/><Choices name="c" '
                                  'toName="text"><Choice value="a"/></Choices></View>')["id"]
    res = _cli(*base, "--url", server.url, "--masks-project", other, env={TOKEN_ENV: server.token})
    _assert_one_line_error(res, f"--masks-project: expected Label Studio project {other} to label images with "
                                "BrushLabels or PolygonLabels")
    xml = labeling_config(classes).replace('<Label value="vehicle"', '<Label value="automobile"')
    fewer = client.create_project("no car", xml)["id"]
    res = _cli(*base, "--url", server.url, "--masks-project", fewer, env={TOKEN_ENV: server.token})
    _assert_one_line_error(res, "['vehicle'] missing", "--update-config")
    res = _cli(*base, "--url", server.url, "--ratings-project", fewer, env={TOKEN_ENV: server.token})
    _assert_one_line_error(res, "--ratings-project: expected Label Studio project", "out-of-domain")
    assert _state(p) == before
    # annotations on an image that is not in S ∪ T: an error naming the task, nothing stored
    x = _other_pool_image(p)
    (tid,) = client.import_tasks(conn.masks_project, [{"data": {"image": f"/data/local-files/?d=world/pool/images/{x}",
                                                                "blindspots_id": x, "round": 0}}])
    need = rounds.masks_needed(p, 0)
    tasks = _tasks(client, conn.masks_project)
    pending = next(q for q in need if q in tasks)  # an edit waiting to be pulled must not be stored either
    ann = [a for a in client.task(tasks[pending]["id"])["annotations"] if not a["was_cancelled"]][0]
    time.sleep(1.1)
    edit = p.answers.load_mask(0, pending).copy()
    edit[-5:, -5:] = classes.names.index("sky")
    client.sdk.annotations.update(id=ann["id"], result=_brush(edit, list(classes.names)))
    _annotate(client, tid, _brush(np.zeros((SIZE, SIZE), np.uint8), list(classes.names)))
    res = _cli("labelstudio", "pull", p.path, env={TOKEN_ENV: server.token})
    _assert_one_line_error(res, "expected annotations on images a round awaits", f"task {tid}", "nothing was stored")
    assert _state(p) == before
    # a label that is not a class (the project's config gained one in Label Studio)
    client.update_project(conn.masks_project, label_config=labeling_config(classes).replace(
        '<Label value="vehicle" background="#', '<Label value="truck" background="#000000"/>\n    <Label value="vehicle" '
        'background="#'))
    client.sdk.tasks.delete(str(tid))
    bad = _brush(edit, list(classes.names))
    bad[0]["value"]["brushlabels"] = ["truck"]
    other_task = next(q for q in need if q in tasks and q != pending)
    ann2 = [a for a in client.task(tasks[other_task]["id"])["annotations"] if not a["was_cancelled"]][0]
    client.sdk.annotations.update(id=ann2["id"], result=bad)
    client.sdk.annotations.update(id=ann["id"], result=bad)  # a second bad annotation: every one is reported
    res = _cli("labelstudio", "pull", p.path, env={TOKEN_ENV: server.token})
    _assert_one_line_error(res, "'truck'", "got 2 that it cannot", f"({other_task})", f"({pending})",
                           "nothing was stored")
    assert _state(p) == before
    client.sdk.annotations.update(id=ann2["id"], result=_brush(p.answers.load_mask(0, other_task), list(classes.names)))
    client.sdk.annotations.update(id=ann["id"], result=_brush(edit, list(classes.names)))  # the edit again
    # the server stops answering mid-pull (after the first page of tasks): nothing stored
    with _DyingProxy(server.url, answers=1) as proxy:
        c = ls.load_connection(p.path)
        c.url = proxy.url
        ls.connection.save_connection(p.path, c)
        with pytest.raises(ValueError, match=r"tasks of project \d+: the connection to Label Studio at .* was lost") as e:
            ls.pull(p, page_size=1)
        assert "\n" not in str(e.value)
        c.url = server.url
        ls.connection.save_connection(p.path, c)
    assert _state(p)[1:] == before[1:]
    got = ls.pull(p)  # and once the server answers, the edit arrives
    assert pending in got.stored
    np.testing.assert_array_equal(p.answers.load_mask(0, pending), edit)


class _DyingProxy:
    """A real HTTP hop on 127.0.0.1 that forwards `answers` requests to Label Studio, then drops every
    connection without answering (a server that goes away mid-pull)."""

    def __init__(self, target: str, answers: int) -> None:
        import http.server

        import httpx

        proxy = self
        self.left = answers

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                if proxy.left <= 0:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                proxy.left -= 1
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                r = httpx.request(self.command, target + self.path, headers=headers, content=body, timeout=60)
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_PATCH = _forward

            def log_message(self, *args) -> None:  # quiet
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "_DyingProxy":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _serve(app) -> tuple[str, object, threading.Thread]:
    import uvicorn

    port = labelstudio_server.free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", srv, thread


def test_webhook_receiver_pulls_on_annotation_events(live: dict, server) -> None:
    """`blindspots labelstudio listen`: Label Studio posts the event, the receiver pulls, the edit is stored."""
    _after_round_trip(live)
    import httpx

    from blindspots.integrations.labelstudio.webhook import create_webhook_app, register_webhooks

    p, conn, client = live["project"], live["conn"], live["client"]
    names = list(rounds.LoopContext(p, simulate=False, progress=False).classes.names)
    url, srv, thread = _serve(create_webhook_app(p.path, delay=0.5))
    try:
        hooks = register_webhooks(p.path, url + "/webhook")
        assert register_webhooks(p.path, url + "/webhook") == hooks  # once
        tasks = _tasks(client, conn.masks_project)
        x = next(q for q in rounds.masks_needed(p, 0) if q in tasks)
        ann = [a for a in client.task(tasks[x]["id"])["annotations"] if not a["was_cancelled"]][0]
        edit = p.answers.load_mask(0, x).copy()
        edit[10:20, 10:20] = names.index("pole")
        time.sleep(1.1)
        client.sdk.annotations.update(id=ann["id"], result=_brush(edit, names))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not np.array_equal(p.answers.load_mask(0, x), edit):
            time.sleep(0.5)
        health = httpx.get(url + "/health").json()
        np.testing.assert_array_equal(p.answers.load_mask(0, x), edit)
        assert health["pulls"] >= 1 and health["error"] is None, health
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def test_personal_access_token(live: dict, server) -> None:
    """Label Studio's default token kind (a personal access token, JWT) works as well as a legacy token."""
    import httpx

    # made raw: SDK 1.x's model of this answer lacks fields Label Studio 1.23 leaves out
    r = httpx.post(server.url + "/api/token/", headers={"Authorization": f"Token {server.token}"})
    assert r.status_code in (200, 201), r.text
    pat = r.json()["token"]
    assert ls.LabelStudio(server.url, pat).whoami()["email"] == server.username


def test_label_plan_round_goes_on_with_label_studio(server, world: Path, root: Path, monkeypatch) -> None:
    """Without S0 / T0 (the label plan, e.g. an ONNX target): ratings and S ∪ T through Label Studio, and the
    next `round` scores every model on T(1) from the pulled masks (Table 1 without fine-tuning)."""
    monkeypatch.setenv(TOKEN_ENV, server.token)
    p = make_project(world, root / "label_plan", labelled=False)
    assert rounds.advance(p, progress=False).state == "awaiting_ratings"
    conn = ls.connect(p, server.url, token_env=TOKEN_ENV, document_root=server.document_root)
    client = ls.LabelStudio(server.url, server.token)
    ls.push(p, kind="ratings", progress=False)
    for k, (x, task) in enumerate(_tasks(client, conn.ratings_project).items()):
        _annotate(client, task["id"], [{"type": "choices", "from_name": "rating", "to_name": "image",
                                        "value": {"choices": [str(1 + k % 5)]}}])
    ls.pull(p, kind="ratings")
    assert rounds.advance(p, progress=False).state == "exported"
    need = rounds.masks_needed(p, 0)
    assert sorted(ls.push(p, progress=False).created) == sorted(need)
    for x, task in _tasks(client, conn.masks_project).items():
        _annotate(client, task["id"], task["predictions"][0]["result"])  # accepted as predicted
    got = ls.pull(p)
    assert sorted(got.stored) == sorted(need) and "register_version" in [a.kind for a in got.after.next], got.after
    rounds.advance(p, progress=False)
    board = rounds.leaderboard_frame(p)
    assert ("round 0", "T1") in board.columns and board[("round 0", "T1")].notna().all(), board


def test_failed_connect_leaves_no_projects_behind(server, world: Path, root: Path, monkeypatch, tmp_path: Path) -> None:
    """connect creates the masks and ratings projects before it checks how Label Studio serves the pool: when
    that check fails, the projects it created are deleted again and no connection is saved."""
    monkeypatch.setenv(TOKEN_ENV, server.token)
    p = make_project(world, root / "connect_fails", labelled=False)
    client = ls.LabelStudio(server.url, server.token)
    before = sorted(int(x.id) for x in client.sdk.projects.list())
    elsewhere = tmp_path / "not_above_the_pool"  # a document root that does not hold the pool
    elsewhere.mkdir()
    with pytest.raises(ValueError, match="document_root|image_root") as err:
        ls.connect(p, server.url, token_env=TOKEN_ENV, document_root=elsewhere)
    assert "\n" not in str(err.value)
    assert sorted(int(x.id) for x in client.sdk.projects.list()) == before
    assert not ls.connection.connection_path(p.path).is_file()
    conn = ls.connect(p, server.url, token_env=TOKEN_ENV, document_root=server.document_root)  # then it works
    assert len(set(int(x.id) for x in client.sdk.projects.list()) - set(before)) == 2
    assert {conn.masks_project, conn.ratings_project} <= {int(x.id) for x in client.sdk.projects.list()}

"""The label routes at their edges (FastAPI TestClient on a small sample project waiting for masks):
uploads are 8-bit PNGs of mode L, P or RGB only (JPEG, GIF, 16-bit, RGBA -> 422 naming what came),
a value that is no class is 422 on both the JSON and the upload route, oversized bodies are 413,
mask files are named `<stem>.png`; the editor's superpixel and competitor routes."""
from __future__ import annotations

import base64
import importlib.util
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

torch.set_num_threads(1)
ANN = "label-edges-ann-token"


def awaiting_masks(root: Path, token: str, *, size: int = 32, n_pool: int = 16):  # noqa: ANN201
    """A sample project (annotator 'ann' with `token`) whose round 0 waits for masks: every
    candidate rated 1 by a helper rater, then the loop advanced."""
    from blindspots import loop
    from blindspots.app.services import make_sample_project
    from blindspots.loop.project import Project

    p = make_sample_project(root / "sample", n_pool=n_pool, size=size, n_candidates=6,
                            annotators={"ann": ("annotator", token)}, vote_set=False, review_set=False)
    p.answers.add_ratings([(0, i, "helper", 1) for i in p.answers.candidate_ids(0, "M")])
    st = loop.advance(Project.open(p.path), progress=False)
    assert st.state == "awaiting_masks", st.message
    return Project.open(p.path)


def png(arr: np.ndarray, mode: str | None = None, fmt: str = "PNG") -> bytes:
    """Encoded `arr` (uint8, or uint16 for 16-bit); mode "P": the values as palette indices."""
    if mode == "P":
        im = Image.frombytes("P", arr.shape[::-1], np.ascontiguousarray(arr).tobytes())
        im.putpalette([v for k in range(256) for v in (k, k, k)])
    else:
        im = Image.fromarray(arr)
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    return buf.getvalue()


def png_rgb16(h: int, w: int) -> bytes:
    """A valid 48-bit (16 bits per channel) RGB PNG, written by hand (Pillow cannot)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + b"\0" * (6 * w) for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from blindspots.app import create_app

    p = awaiting_masks(tmp_path_factory.mktemp("label_edges"), ANN)
    app = create_app(p.path, max_body_bytes=64 * 1024)
    need = app.state.view.masks_needed(0)
    return {"project": p, "client": TestClient(app), "need": need}


def auth() -> dict:
    return {"Authorization": f"Bearer {ANN}"}


def upload(world: dict, data: bytes, image_id: str | None = None):  # noqa: ANN201
    form = {"kind": "round", "ref": "0", "image_id": image_id or world["need"][1]}
    return world["client"].post("/api/labels/upload", data=form, files={"file": ("m.png", data, "image/png")},
                                headers=auth())


def test_uploads_take_only_8bit_png_of_mode_l_p_rgb(world: dict) -> None:
    ok = np.zeros((32, 32), np.uint8)
    ok[8:] = 2
    bad = {
        "JPEG": png(np.zeros((32, 32, 3), np.uint8), fmt="JPEG"),
        "GIF": png(ok, fmt="GIF"),
        "16-bit": png(ok.astype(np.uint16)),
        "RGBA": png(np.zeros((32, 32, 4), np.uint8)),
    }
    for what, data in bad.items():
        r = upload(world, data)
        assert r.status_code == 422, (what, r.status_code, r.text)
        assert what in r.json()["detail"], (what, r.json()["detail"])
    r = upload(world, png_rgb16(32, 32))  # Pillow reads it as 8-bit RGB: the PNG header says 16
    assert r.status_code == 422 and "16-bit" in r.json()["detail"], r.text
    for mode in ("L", "P"):
        r = upload(world, png(ok, mode))
        assert r.status_code == 200, (mode, r.text)
        assert r.json()["pixels"] == {"0": 256, "2": 768}


def test_bad_class_value_is_422_on_both_routes(world: dict) -> None:
    m = np.zeros((32, 32), np.uint8)
    m[0, 0] = 200
    r = upload(world, png(m, "L"))
    assert r.status_code == 422 and "200" in r.json()["detail"]
    body = {"kind": "round", "ref": "0", "image_id": world["need"][0], "width": 32, "height": 32,
            "mask": base64.b64encode(m.tobytes()).decode()}
    r = world["client"].post("/api/labels", json=body, headers=auth())
    assert r.status_code == 422 and "class ids" in r.json()["detail"], r.text


def test_oversized_is_413(world: dict) -> None:
    big = np.random.default_rng(0).integers(0, 255, (400, 400), np.uint8)
    assert upload(world, png(big, "L")).status_code == 413
    body = {"kind": "round", "ref": "0", "image_id": world["need"][0], "width": 32, "height": 32,
            "mask": "A" * (100 * 1024)}
    assert world["client"].post("/api/labels", json=body, headers=auth()).status_code == 413


@pytest.mark.skipif(importlib.util.find_spec("blindspots.app.security") is None,
                    reason="413 for streamed bodies is app/security/guard.py's (appsafe); FastAPI answers 400 without it")
def test_streamed_oversized_is_413(world: dict) -> None:
    def chunks():  # a streamed body with no Content-Length
        for _ in range(100):
            yield b"x" * 1024
    r = world["client"].post("/api/labels", content=chunks(),
                             headers={**auth(), "Content-Type": "application/json"})
    assert r.status_code == 413


def test_mask_files_are_named_by_stem(world: dict) -> None:
    from blindspots.ids import artifact_name

    p, image_id = world["project"], world["need"][2]
    m = np.ones((32, 32), np.uint8)
    body = {"kind": "round", "ref": "0", "image_id": image_id, "width": 32, "height": 32,
            "mask": base64.b64encode(m.tobytes()).decode()}
    assert world["client"].post("/api/labels", json=body, headers=auth()).status_code == 200
    path = p.answers.stored_mask_path(0, image_id)
    assert path.name == Path(artifact_name(image_id)).name and not path.name.endswith(".png.png")
    assert not list(p.path.rglob("*.png.png"))


def test_superpixels_and_competitors(world: dict) -> None:
    from blindspots.app.services import component_at
    from blindspots.ids import find_artifact

    c, p, image_id = world["client"], world["project"], world["need"][0]
    q = {"kind": "round", "ref": "0", "id": image_id}
    s = c.get("/api/labels/superpixels", params=q, headers=auth()).json()
    labels = np.frombuffer(base64.b64decode(s["labels"]), "<u2").reshape(32, 32)
    assert s["n"] == labels.max() + 1 >= 4 and set(np.unique(labels)) == set(range(s["n"]))
    assert c.get("/api/labels/superpixels", params=q, headers=auth()).json()["labels"] == s["labels"]  # cached
    # the cache is the app's (app.state), not the process's: a second app on the project starts empty
    from blindspots.app import create_app

    cached = c.app.state.segments
    assert len(cached) >= 1 and len(create_app(p.path).state.segments) == 0
    fine = c.get("/api/labels/superpixels", params={**q, "level": "fine"}, headers=auth()).json()
    assert fine["level"] == "fine" and fine["n"] > s["n"]
    assert c.get("/api/labels/superpixels", params={**q, "level": "huge"}, headers=auth()).status_code == 422
    comp = c.get("/api/labels/competitors", params=q, headers=auth()).json()
    assert sorted(m["name"] for m in comp["models"]) == ["comp_a", "comp_b"]
    truth = {n: np.asarray(Image.open(find_artifact(p.scan_dir / "maps" / n, image_id))) for n in ("comp_a", "comp_b")}
    target = np.asarray(Image.open(find_artifact(p.scan_dir / "maps" / "target_v0", image_id)))
    got = {m["name"]: np.frombuffer(base64.b64decode(m["mask"]), np.uint8).reshape(32, 32) for m in comp["models"]}
    assert all(np.array_equal(got[n], truth[n]) for n in truth)
    first = comp["models"][0]["name"]  # the one disagreeing most with the target
    assert (truth[first] != target).mean() >= max((t != target).mean() for t in truth.values())
    region = component_at(truth[first], 5, 7)
    assert region[5, 7] and (truth[first][region] == truth[first][5, 7]).all()
    # Start from an empty canvas (the benchmark's baseline) or back from the prediction.
    e = c.get("/api/labels/start", params={**q, "start": "empty"}, headers=auth()).json()
    assert e["source"] == "empty" and set(base64.b64decode(e["mask"])) == {255}
    pr = c.get("/api/labels/start", params={**q, "start": "prediction"}, headers=auth()).json()
    assert pr["source"] == "prediction"
    assert c.get("/api/labels/superpixels", params={**q, "id": "nope.png"}, headers=auth()).status_code == 404
    assert c.get("/api/labels/competitors", params=q).status_code in (401, 403)

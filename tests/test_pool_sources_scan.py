"""Every pool source, local and in a local S3 server (moto on 127.0.0.1), through `scan`: the score table
equals the folder pool's row for row (sorted by content hash) and every argmax map is md5-equal.
Store errors (a missing bucket, no credentials) are one line and exit code 2; an unreadable shard is
an error row.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from pool_sources_helpers import (CORRUPT, S3_ENV, photos, s3_server, s3fs_for, upload,  # noqa: E402
                                  write_folder, write_hf, write_parquet, write_tars)

from blindspots.cli import app  # noqa: E402
from blindspots.data.sources import open_pool  # noqa: E402
from blindspots.models.adapters import TorchSegmenter  # noqa: E402
from blindspots.scan import find_map, read_score_table, scan_pool, schema  # noqa: E402

torch.set_num_threads(1)
BUCKET = "pool-bucket"
C = 3


def tiny_models() -> dict:
    out = {}
    for name, seed in (("t", 0), ("g", 1)):
        torch.manual_seed(seed)
        out[name] = TorchSegmenter(torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(),
                                                       torch.nn.Conv2d(6, C, 1)), C, batch_size=8)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Local copies of every source, the same files in a moto S3 bucket, and the server's endpoint."""
    tmp = tmp_path_factory.mktemp("s3world")
    items = photos()
    write_folder(tmp / "folder", items)
    write_parquet(tmp / "pq", items)
    write_tars(tmp / "wds", items)
    write_hf(tmp / "hf", items)
    with pytest.MonkeyPatch.context() as mp, s3_server() as endpoint:
        for k, v in S3_ENV.items():
            mp.setenv(k, v)
        fs = s3fs_for(endpoint)
        fs.mkdir(BUCKET)
        for name in ("folder", "pq", "wds", "hf"):
            upload(fs, tmp / name, f"{BUCKET}/{name}")
        uris = [f"s3://{BUCKET}/folder/{n}" for n in sorted(items) + [CORRUPT]] + [f"s3://{BUCKET}/folder/dead.png"]
        fs.pipe_file(f"{BUCKET}/lists/pool.csv", ("label,uri\n" + "".join(f"x,{u}\n" for u in uris)).encode())
        yield {"tmp": tmp, "endpoint": endpoint, "items": items}


@pytest.fixture(autouse=True)
def fresh_s3_clients():
    """s3fs caches its filesystems (and their credentials) by options: a test that removes the credentials
    must not leave a credential-less client to the next one."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


def _table(out: Path) -> pd.DataFrame:
    df = read_score_table(out)
    ok = df[df[schema.STATUS] == schema.STATUS_OK].sort_values(schema.CONTENT_HASH)
    return ok.drop(columns=[schema.ID]).reset_index(drop=True)


def _maps(out: Path) -> dict[tuple[str, str], str]:
    df = read_score_table(out)
    ok = df[df[schema.STATUS] == schema.STATUS_OK]
    return {(m, h): hashlib.md5(find_map(out, m, i).read_bytes()).hexdigest()
            for m in ("t", "g") for i, h in zip(ok[schema.ID], ok[schema.CONTENT_HASH])}


def test_every_source_scans_to_the_folder_pools_table_and_maps(world, tmp_path):
    tmp, ep = world["tmp"], {"endpoint_url": world["endpoint"]}
    models = tiny_models()
    ref = scan_pool(open_pool(tmp / "folder"), models, tmp_path / "ref", target="t", shard_size=16, progress=False)
    want, want_maps = _table(ref), _maps(ref)
    assert len(want) == 40
    sources = {
        "s3 prefix": (f"s3://{BUCKET}/folder/", {}),
        "s3 csv list of uris": (f"s3://{BUCKET}/lists/pool.csv", {}),
        "parquet": (tmp / "pq", {}),
        "s3 parquet": (f"s3://{BUCKET}/pq/", {}),
        "webdataset": (str(tmp / "wds" / "shard-{000000..000001}.tar"), {}),
        "s3 webdataset": (f"s3://{BUCKET}/wds/shard-{{000000..000001}}.tar", {}),
        "hf": (tmp / "hf", {}),
        "s3 hf": (f"s3://{BUCKET}/hf", {}),
    }
    extra_errors = {"s3 csv list of uris": "file not found", "parquet": "no image bytes in this row",
                    "s3 parquet": "no image bytes in this row", "webdataset": "truncated tar member",
                    "s3 webdataset": "truncated tar member"}
    for k, (name, (spec, kw)) in enumerate(sources.items()):
        out = scan_pool(open_pool(spec, storage_options=ep, **kw), models, tmp_path / f"s{k}", target="t",
                        shard_size=16, progress=False)
        pd.testing.assert_frame_equal(_table(out), want, obj=name)
        assert _maps(out) == want_maps, name
        errors = read_score_table(out).query("status == 'error'")[schema.ERROR].tolist()
        assert sum(e.startswith("corrupt") for e in errors) == 1, (name, errors)
        others = [e for e in errors if not e.startswith("corrupt")]
        assert [e.split(" (")[0] for e in others] == ([extra_errors[name]] if name in extra_errors else []), name


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.output  # stdout and stderr, as a person sees them


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    from blindspots.data.classes import Classes
    from blindspots.models.zoo import build_model, save_checkpoint

    torch.manual_seed(0)
    return save_checkpoint(tmp_path_factory.mktemp("m") / "m.pt", build_model("tiny_unet", C), arch="tiny_unet",
                           classes=Classes(("a", "b", "c")))


def test_cli_scan_of_an_s3_pool_and_its_errors(world, ckpt, tmp_path, monkeypatch):
    ep = world["endpoint"]
    code, out = _cli("scan", f"s3://{BUCKET}/wds/shard-{{000000..000002}}.tar", "--storage-option",
                     f"endpoint_url={ep}", "-t", f"t={ckpt}", "--out", tmp_path / "scan", "--no-progress")
    assert code == 0, out
    assert "scanned 43 images (3 with errors)" in out and "shard-000002.tar: unreadable shard" in out, out
    # label-issues reads the same shards' images from the store, paired with masks named by the id rule
    code, out = _cli("label-issues", "--model", ckpt, "--images", f"s3://{BUCKET}/wds/shard-{{000000..000001}}.tar",
                     "--storage-option", f"endpoint_url={ep}", "--masks", tmp_path / "scan" / "maps" / "t",
                     "--out", tmp_path / "issues", "--top", 0, "--no-progress")
    assert code == 0, out
    assert len(pd.read_csv(tmp_path / "issues" / "images.csv")) == 40  # every photo with a map (its own prediction)
    code, out = _cli("scan", f"s3://no-such-bucket/pool/?endpoint_url={ep}", "-t", f"t={ckpt}",
                     "--out", tmp_path / "x", "--no-progress")
    assert code == 2 and out.strip().startswith("error: pool: expected a readable 's3://no-such-bucket/pool/'"), out
    assert len(out.strip().splitlines()) == 1 and "bucket does not exist" in out, out
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    code, out = _cli("scan", f"s3://{BUCKET}/folder/", "--storage-option", f"endpoint_url={ep}", "-t", f"t={ckpt}",
                     "--out", tmp_path / "y", "--no-progress")
    assert code == 2 and len(out.strip().splitlines()) == 1 and "credentials" in out.lower(), out
    assert os.environ.get("AWS_EC2_METADATA_DISABLED") == "true"


RESUME_SCRIPT = """
import sys, time
import torch
torch.set_num_threads(1)
from blindspots.data.sources import open_pool
from blindspots.models.adapters import TorchSegmenter
from blindspots.scan import scan_pool

class Slow(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(6, 3, 1))
    def forward(self, x):
        time.sleep(float(sys.argv[4]))  # slow enough to be killed mid-way
        return self.net(x)

models = {name: TorchSegmenter(Slow(seed), 3, batch_size=4) for name, seed in [("t", 0), ("g", 1)]}
pool = open_pool(sys.argv[1], storage_options={"endpoint_url": sys.argv[3]})
scan_pool(pool, models, sys.argv[2], target="t", batch_size=4, shard_size=8, progress=False)
"""


def _scan_process(script: Path, uri: str, out: Path, endpoint: str, delay: float):
    import subprocess

    env = {**os.environ, **S3_ENV, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.Popen([sys.executable, str(script), uri, str(out), endpoint, str(delay)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_resume_after_a_kill_mid_scan_of_an_s3_pool(world, tmp_path):
    import signal
    import time

    script = tmp_path / "scan.py"
    script.write_text(RESUME_SCRIPT)
    uri, ep, killed = f"s3://{BUCKET}/folder/", world["endpoint"], tmp_path / "killed"
    proc = _scan_process(script, uri, killed, ep, 0.1)
    first = killed / "models" / "t" / "shard-00000.parquet"
    deadline = time.monotonic() + 120
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert first.exists(), proc.stderr.read().decode()[-2000:]
    done = len(list((killed / "models" / "t").glob("shard-*.parquet")))
    assert done < 6, "the scan finished before it was killed; the test did not test resuming"
    before = {p: p.stat().st_mtime_ns for p in killed.rglob("shard-*.parquet")}
    resumed = _scan_process(script, uri, killed, ep, 0.0)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()[-2000:]
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())  # finished shards are kept as they were
    clean = scan_pool(open_pool(world["tmp"] / "folder"), tiny_models(), tmp_path / "clean", target="t",
                      batch_size=4, shard_size=8, progress=False)  # the same photos, uninterrupted, from disk
    pd.testing.assert_frame_equal(_table(killed), _table(clean))
    assert _maps(killed) == _maps(clean)


def test_pools_page_snippet_runs_as_written(world, capsys):
    """docs/pools.md's Python block, pointed at the local S3 server."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "pools.md").read_text()
    code = re.findall(r"```python\n(.*?)```", text, flags=re.S)[0]
    for doc, real in {'"s3://bucket/ds/data/"': f'"s3://{BUCKET}/pq/"',
                      '"http://127.0.0.1:9000"': repr(world["endpoint"])}.items():
        assert doc in code, f"docs/pools.md: expected {doc} in its Python block"
        code = code.replace(doc, real)
    exec(code, {})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 8 and lines[0].startswith("broken.jpg None None corrupt")


def test_init_round_and_the_rating_page_with_an_s3_pool(world, ckpt, tmp_path):
    """A project whose pool is only in the object store: init -> round (scan, mine) -> the app shows each
    candidate's pixels fetched from the store -> ratings -> round exports S with the objects' s3:// URLs."""
    import json

    import numpy as np
    from fastapi.testclient import TestClient
    from PIL import Image

    from blindspots.app import create_app
    from blindspots.data.classes import Classes
    from blindspots.loop.project import Project
    from blindspots.models.zoo import build_model, save_checkpoint

    torch.manual_seed(1)
    comp = save_checkpoint(tmp_path / "comp.pt", build_model("tiny_unet", C), arch="tiny_unet",
                           classes=Classes(("a", "b", "c")))
    proj, uri = tmp_path / "proj", f"s3://{BUCKET}/folder/"
    code, out = _cli("init", proj, "--pool", uri, "--storage-option", f"endpoint_url={world['endpoint']}",
                     "--target", f"target={ckpt}", "--competitor", f"comp={comp}", "--n3", 2, "--n4", 2,
                     "--raters", 1, "--test-size", 2)
    assert code == 0, out
    cfg = Project.open(proj).config
    assert cfg.pool.root == uri and cfg.pool.storage_options == [f"endpoint_url={world['endpoint']}"]
    code, out = _cli("round", proj)
    assert code == 0 and "waiting for ratings" in out, out
    p = Project.open(proj)
    p.answers.add_annotator("ann", "ann-token-0001")
    client = TestClient(create_app(proj))
    assert client.post("/api/signin", json={"token": "ann-token-0001"}).status_code == 200
    assert client.get("/rate").status_code == 200
    auth = {"Authorization": "Bearer ann-token-0001"}
    queue = client.get("/api/ratings/queue", headers=auth).json()
    assert queue["total"] > 0
    for k, item in enumerate(queue["items"]):
        r = client.get("/api/images/pool", params={"id": item["id"]}, headers=auth)
        assert r.status_code == 200, r.text
        shown = np.asarray(Image.open(__import__("io").BytesIO(r.content)).convert("RGB"))
        want = np.asarray(Image.open(world["tmp"] / "folder" / item["id"]).convert("RGB"))
        assert shown.shape == want.shape  # the photo, fetched from the bucket
        if r.headers["content-type"] == "image/png":
            np.testing.assert_array_equal(shown, want)
        assert client.post("/api/ratings", json={"round": 0, "image_id": item["id"], "score": 1 + k % 5},
                           headers=auth).status_code == 200
    code, out = _cli("round", proj)
    assert code == 0 and "exported for pixel labelling" in out, out
    tasks = json.loads((proj / "reports" / "round-0" / "labelstudio.json").read_text())
    assert tasks and all(t["data"]["image"] == uri + t["data"]["blindspots_id"] for t in tasks)

"""The Ray Data scan engine gives the local engine's files: equal score table, md5-equal maps, the
same error rows, on a local Ray (2 CPUs) and on a two-node cluster of 1-CPU nodes (the case where
whole-CPU actors starve the decode tasks); a Ray scan stopped mid-way resumes to the same table.

All Ray traffic stays on 127.0.0.1 (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before Ray starts).
"""
from __future__ import annotations

import hashlib
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # bind every Ray process to 127.0.0.1
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage statistics
ray = pytest.importorskip("ray")

from blindspots.data import ImagePool  # noqa: E402
from blindspots.models import load_model  # noqa: E402
from blindspots.models.adapters import TorchSegmenter  # noqa: E402
from blindspots.scan import read_score_table, scan_pool  # noqa: E402
from blindspots.scan.engines import collect  # noqa: E402
from blindspots.scan.engines import ray as ray_engine  # noqa: E402

torch.set_num_threads(1)
C = 4
MODEL_MODULE = "blindspots_ray_test_models"
MODULE_SOURCE = textwrap.dedent("""
    import numpy as np

    def refuses_marked(b):
        '''Labels by red channel; raises on an image whose pixel (0, 0) is pure white.'''
        if (b[:, 0, 0] == 255).all(axis=-1).any():
            raise RuntimeError("cannot segment an image with a white corner")
        return b[..., 0].astype(np.int64) * 4 // 256
""")


def tiny_net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, C, 1))


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict:
    """A pool of 24 small images of two sizes (one corrupt file, one image the callable model
    refuses) and three models: a TorchScript file (spec), a Python-built net (pickled), a
    `module:function` callable (spec, importable by the workers through PYTHONPATH)."""
    root = tmp_path_factory.mktemp("ray")
    mods = root / "mods"
    mods.mkdir()
    (mods / f"{MODEL_MODULE}.py").write_text(MODULE_SOURCE)
    # workers inherit the driver's environment: the model module and this tree's src on their path
    src = str(Path(__file__).resolve().parents[1] / "src")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(mods), src, os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(mods))
    pool = root / "pool"
    pool.mkdir()
    rng = np.random.default_rng(0)
    for i in range(24):
        img = rng.integers(0, 250, ((32, 24)[i % 2], 40, 3), dtype=np.uint8)
        if i == 5:
            img[0, 0] = 255  # refused by the callable model: one model error row
        Image.fromarray(img).save(pool / f"im_{i:03d}.png")
    (pool / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")  # a decode error row
    ts = root / "t.ts"
    torch.jit.save(torch.jit.script(tiny_net(0)), ts)
    models = {"t": load_model(f"{ts}?num_classes={C}&batch_size=8"),
              "g1": TorchSegmenter(tiny_net(1), C, batch_size=8),
              "g2": load_model(f"{MODEL_MODULE}:refuses_marked?output=labels&num_classes={C}")}
    local = root / "local"
    scan_pool(ImagePool(pool), models, local, target="t", batch_size=4, shard_size=8, progress=False)
    yield {"root": root, "pool": pool, "models": models, "local": local}
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def local_ray(setup):
    """A local Ray with 2 CPUs and one logical GPU (Ray counts it, no device is behind it: actors that ask
    for GPUs are scheduled and their models, device=auto, stay on the CPU), bound to 127.0.0.1."""
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="WARNING",
                 log_to_driver=False)
    assert [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]] == ["127.0.0.1"]
    return ray


def table(out: Path) -> pd.DataFrame:
    """The score table sorted by id (engines may finish shards in any order)."""
    return read_score_table(out).sort_values("id").set_index("id")


def map_digests(out: Path) -> dict[str, str]:
    root = out / "maps"
    return {str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.png"))}


def assert_same_scan(a: Path, b: Path) -> None:
    ta, tb = table(a), table(b)
    pd.testing.assert_frame_equal(ta, tb, check_exact=True)
    da, db = map_digests(a), map_digests(b)
    assert len(da) == 3 * 24 - 1  # 24 decoded images, 3 models, one refused by g2
    assert da == db


def scan_ray(setup, out: Path, **kw) -> Path:
    return scan_pool(ImagePool(setup["pool"]), setup["models"], out, target="t", batch_size=4, shard_size=8,
                     progress=False, engine="ray", **kw)


def test_ray_engine_equals_local_engine(setup, local_ray, tmp_path):
    out = scan_ray(setup, tmp_path / "ray")
    assert_same_scan(setup["local"], out)
    df = table(out)
    assert df.loc["broken.png", "status"] == "error"  # the decode error row, as the local engine writes it
    assert "cannot segment an image with a white corner" in df.loc["im_005.png", "error"]
    assert df.loc["im_005.png", "status"] == "error"


def test_ray_scan_stopped_midway_resumes_to_the_same_table(setup, local_ray, tmp_path, monkeypatch):
    out = tmp_path / "ray"
    written = []
    real = collect.finish_shard

    def stop_after_one(plan, *a, **kw):
        if written:
            raise KeyboardInterrupt("stopped mid-way")
        real(plan, *a, **kw)
        written.append(plan.k)

    monkeypatch.setattr(collect, "finish_shard", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        scan_ray(setup, out)
    monkeypatch.undo()
    done = sorted(p.name for p in (out / "meta").glob("*.parquet"))
    assert len(done) == 1  # one of 4 shards finished
    scan_ray(setup, out, actors=1)  # resumes: only the 3 unfinished shards run
    assert_same_scan(setup["local"], out)


def test_ray_adds_a_competitor_to_a_finished_scan(setup, local_ray, tmp_path):
    """A competitor added on Ray to a finished scan of t and g1: only g2 runs, and its pairs with
    the target's saved maps are computed on the driver (the actors keep sending g2's maps, which
    they drop when no pair is left to the driver); the table equals one local scan of the three."""
    out = tmp_path / "grow"
    m = setup["models"]
    scan_pool(ImagePool(setup["pool"]), {"t": m["t"], "g1": m["g1"]}, out, target="t", batch_size=4, shard_size=8,
              progress=False)
    scan_ray(setup, out)
    assert_same_scan(setup["local"], out)


def test_decode_tasks_per_actor_pool():
    assert [ray_engine.decode_tasks(n) for n in (1, 2, 3, 8)] == [1, 1, 2, 4]


def test_default_actors_follow_cpus_or_gpus(setup, local_ray, tmp_path):
    assert ray_engine.default_actors(ray) == 2  # one per CPU
    assert ray_engine.default_actors(ray, 0.5) == 2 and ray_engine.default_actors(ray, 1) == 1  # GPUs / per actor
    with pytest.raises(ValueError, match=r"gpus_per_actor: expected at most the GPUs of the Ray cluster \(1\), got 2"):
        scan_ray(setup, tmp_path / "x", gpus_per_actor=2)  # more than the cluster has: an error, not a wait


def test_cli_engine_ray(setup, local_ray, tmp_path):
    from typer.testing import CliRunner

    from blindspots.cli import app

    models = setup["models"]
    res = CliRunner().invoke(app, [
        "scan", str(setup["pool"]), "--target", f"t={models['t'].info['spec']}",
        "--competitor", f"g2={models['g2'].info['spec']}", "--out", str(tmp_path / "cli"),
        "--batch-size", "4", "--shard-size", "8", "--engine", "ray", "--actors", "1", "--gpus-per-actor", "0.5",
        "--no-progress"])
    assert res.exit_code == 0, res.output
    cols = [c for c in table(setup["local"]).columns if "g1" not in c]
    pd.testing.assert_frame_equal(table(setup["local"])[cols], table(tmp_path / "cli")[cols], check_exact=True)


def test_bad_engine_and_actors_are_value_errors(setup, tmp_path):
    with pytest.raises(ValueError, match="engine"):
        scan_pool(ImagePool(setup["pool"]), setup["models"], tmp_path / "x", target="t", engine="spark")
    with pytest.raises(ValueError, match="actors"):
        scan_pool(ImagePool(setup["pool"]), setup["models"], tmp_path / "x", target="t", engine="ray", actors=0)
    with pytest.raises(ValueError, match="gpus_per_actor"):
        scan_pool(ImagePool(setup["pool"]), setup["models"], tmp_path / "x", target="t", engine="ray",
                  gpus_per_actor=0)
    assert not (tmp_path / "x").exists()


def test_two_one_cpu_nodes_do_not_starve_and_equal_local(setup, tmp_path):
    """Two 1-CPU nodes on this machine: actors and decode tasks must fit side by side."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        nodes = [n for n in ray.nodes() if n["Alive"]]
        assert len(nodes) == 2 and all(n["NodeManagerAddress"] == "127.0.0.1" for n in nodes)
        assert ray_engine.default_actors(ray) == 2
        out = scan_ray(setup, tmp_path / "cluster")  # one actor per CPU: 0.5 CPU each
        assert_same_scan(setup["local"], out)
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.timeout(240)  # Ray retries lost work without limit: a stalled pipeline must fail, not hang
def test_scan_that_loses_its_worker_node_goes_on_and_resumes_to_the_same_table(setup, tmp_path, monkeypatch):
    """Two 1-CPU nodes; the worker node is removed (`cluster.remove_node`) after the first of the 4
    shards is written. The scan goes on on the node left (Ray restarts the lost actor there and
    re-runs the lost decode tasks: two more shards are written), then its driver is stopped; run
    again on the one node left, it resumes to the local engine's table and maps."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    real = collect.finish_shard
    written: list[int] = []
    try:
        worker = cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)

        def lose_worker_then_stop(plan, *a, **kw):
            real(plan, *a, **kw)
            written.append(plan.k)
            if len(written) == 1:
                cluster.remove_node(worker)
            elif len(written) == 3:
                raise KeyboardInterrupt("driver stopped")

        monkeypatch.setattr(collect, "finish_shard", lose_worker_then_stop)
        out = tmp_path / "lost"
        with pytest.raises(KeyboardInterrupt):
            scan_ray(setup, out)  # 2 actors: one per node
        assert [n["Alive"] for n in ray.nodes()].count(True) == 1
        assert len(list((out / "meta").glob("*.parquet"))) == 3  # two of them after the node was lost
        monkeypatch.setattr(collect, "finish_shard", real)
        scan_ray(setup, out)  # the node left: one actor, the last shard
        assert_same_scan(setup["local"], out)
    finally:
        ray.shutdown()
        cluster.shutdown()

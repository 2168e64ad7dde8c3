"""Ray without a shared filesystem: a two-node Ray cluster scans a pool that exists only in an S3
store (a local moto server on 127.0.0.1, no copy on any disk), the decode tasks reading the objects
themselves, and writes the local engine's table and md5-equal maps.

All traffic stays on 127.0.0.1 (Ray: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0; S3: the moto server's
endpoint); Ray's usage statistics are off; only dummy credentials exist.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # bind every Ray process to 127.0.0.1
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
ray = pytest.importorskip("ray")
pytest.importorskip("moto.server", reason="the local S3 server needs moto[server]")
pytest.importorskip("s3fs")

sys.path.insert(0, str(Path(__file__).parent))
from pool_sources_helpers import CORRUPT, S3_ENV, photos, s3_server, s3fs_for, upload, write_folder  # noqa: E402

from blindspots.data.sources import open_pool  # noqa: E402
from blindspots.models import load_model  # noqa: E402
from blindspots.models.adapters import TorchSegmenter  # noqa: E402
from blindspots.scan import read_score_table, scan_pool  # noqa: E402

torch.set_num_threads(1)
C = 4
BUCKET = "pool-only-here"


def tiny_net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, C, 1))


def table(out: Path) -> pd.DataFrame:
    return read_score_table(out).sort_values("id").set_index("id")


def map_digests(out: Path) -> dict[str, str]:
    root = out / "maps"
    return {str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.png"))}


@pytest.fixture
def s3_env(monkeypatch):
    """Dummy credentials in this process's environment (the Ray nodes started below inherit it)."""
    for k, v in S3_ENV.items():
        monkeypatch.setenv(k, v)


@pytest.mark.timeout(300)
def test_two_node_ray_scan_of_an_s3_only_pool_equals_the_local_engine(tmp_path, s3_env, monkeypatch):
    """The pool's bytes are read in the Ray decode tasks only: during the Ray scan this process (the
    driver) refuses to read any (the workers unpickle the source with their own, untouched class)."""
    from ray.cluster_utils import Cluster

    with s3_server() as endpoint:
        fs = s3fs_for(endpoint)
        fs.mkdir(BUCKET)
        staging = write_folder(tmp_path / "staging", photos(24))  # 24 real photos of 3 sizes + a corrupt file
        upload(fs, staging, f"{BUCKET}/photos")
        shutil.rmtree(staging)  # the pool now exists only in the store
        pool = open_pool(f"s3://{BUCKET}/photos/", storage_options={"endpoint_url": endpoint})
        assert len(pool) == 25 and "://" in str(pool.root)
        ts = tmp_path / "t.ts"
        torch.jit.save(torch.jit.script(tiny_net(0)), ts)
        models = {"t": load_model(f"{ts}?num_classes={C}&batch_size=4&device=cpu"),  # a spec: loaded by each actor
                  "g": TorchSegmenter(tiny_net(1), C, batch_size=4)}  # built in Python: pickled to the actors
        kw = {"target": "t", "batch_size": 4, "shard_size": 8, "progress": False}
        scan_pool(pool, models, tmp_path / "local", **kw)

        if ray.is_initialized():
            ray.shutdown()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            cluster.add_node(num_cpus=1)
            ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
            nodes = [n for n in ray.nodes() if n["Alive"]]
            assert len(nodes) == 2 and all(n["NodeManagerAddress"] == "127.0.0.1" for n in nodes)

            def driver_reads(self, ids):
                raise AssertionError(f"the driver read pool bytes ({list(ids)[:3]}...): the Ray tasks must")

            with monkeypatch.context() as m:
                m.setattr(type(pool), "read", driver_reads)
                scan_pool(pool, models, tmp_path / "ray", engine="ray", **kw)
        finally:
            ray.shutdown()
            cluster.shutdown()

    local, on_ray = table(tmp_path / "local"), table(tmp_path / "ray")
    pd.testing.assert_frame_equal(local, on_ray, check_exact=True)
    assert on_ray.loc[CORRUPT, "status"] == "error" and (on_ray["status"] == "ok").sum() == 24
    assert on_ray["content_hash"].notna().sum() == 24  # hashed in the decode tasks, from the objects' bytes
    digests = map_digests(tmp_path / "ray")
    assert len(digests) == 2 * 24 and digests == map_digests(tmp_path / "local")

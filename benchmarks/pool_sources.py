"""Pool sources benchmark: reading and decoding from every source, and planning / resuming a scan of 10^6 ids.

1. Per source, images/s of `PoolSource.iter_items` (read + decode to RGB uint8, error rows, bookkeeping)
   against a plain loop that reads the same bytes with fsspec / pyarrow / tarfile and decodes them with
   Pillow (`np.asarray(Image.open(...).convert("RGB"))`), side by side, interleaved, median of --rounds.
   Target: ours / plain >= 0.9. The images are real photographs (scikit-image's samples) cut into
   --size crops, half PNG, half JPEG; the S3 rows read from a moto S3 server on 127.0.0.1.
2. Planning 10^6 ids: a list file of 10^6 s3:// URIs opened, listed into Arrow, sorted, checked for
   artifact-name clashes, digested, written to ids.parquet and cut into shard plans (what `scan_pool`
   does before its engine starts), in a fresh process; wall time and the process's peak RSS.
   Targets: <= 60 s and <= 2 GB. With --s3-objects N, the same for N objects listed from the moto server.
3. Resume when every shard is done: `scan_pool` on that scan folder (its ids from ids.parquet, one stat per
   shard file, no listing, no reading); wall time (target <= 10 s).

Prints the CPU model and os.getloadavg() beside the figures. Nothing but 127.0.0.1 is contacted.

    .venv/bin/python benchmarks/pool_sources.py                 # all three parts
    .venv/bin/python benchmarks/pool_sources.py --images 200 --ids 100000   # quicker
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from blindspots.machine import cpu_model as machine_cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from pool_sources_helpers import s3_server  # noqa: E402  - the tests' moto server on 127.0.0.1

S3_ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
          "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}


def cpu_model() -> str:
    return f"{machine_cpu_model()} ({os.cpu_count()} CPUs)"


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


# ----------------------------------------------------------------------------- data

def photos(n: int, size: int) -> dict[str, bytes]:
    """n crops (size x size) of scikit-image's photographs, half PNG, half JPEG (quality 90)."""
    import skimage.data as sd

    srcs = [sd.astronaut(), sd.coffee(), sd.chelsea(), sd.rocket(), sd.immunohistochemistry(), sd.hubble_deep_field()]
    rng = np.random.default_rng(0)
    out = {}
    for i in range(n):
        src = srcs[i % len(srcs)]
        y, x = rng.integers(0, src.shape[0] - size), rng.integers(0, src.shape[1] - size)
        buf = io.BytesIO()
        fmt = "PNG" if i % 2 == 0 else "JPEG"
        Image.fromarray(np.ascontiguousarray(src[y:y + size, x:x + size, :3])).save(buf, format=fmt)
        out[f"img_{i:06d}.{'png' if fmt == 'PNG' else 'jpg'}"] = buf.getvalue()
    return out


def write_all(root: Path, items: dict[str, bytes], shards: int = 4) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "folder").mkdir(parents=True)
    for n, b in items.items():
        (root / "folder" / n).write_bytes(b)
    (root / "folder" / "list.txt").write_text("\n".join(items))
    names = sorted(items)
    (root / "pq").mkdir()
    (root / "wds").mkdir()
    for s in range(shards):
        mine = names[s::shards]
        rows = [{"bytes": items[n], "path": n} for n in mine]
        pq.write_table(pa.table({"image": pa.array(rows, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))}),
                       root / "pq" / f"train-{s:05d}.parquet", row_group_size=64)
        with tarfile.open(root / "wds" / f"shard-{s:06d}.tar", "w") as tf:
            for n in mine:
                info = tarfile.TarInfo(n)
                info.size = len(items[n])
                tf.addfile(info, io.BytesIO(items[n]))
    try:
        from datasets import Dataset, Features, Image as HFImage

        Dataset.from_dict({"image": [{"bytes": items[n], "path": n} for n in names]},
                          features=Features({"image": HFImage()})).save_to_disk(str(root / "hf"), num_shards=shards)
    except ImportError:
        print("  (datasets not installed: no Hugging Face row)")


# ----------------------------------------------------------------------------- 1. decode throughput

def pil_decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def plain_files(fs, paths: list[str]) -> int:
    n = 0
    for p in paths:
        pil_decode(fs.cat_file(p))
        n += 1
    return n


def plain_parquet(fs, paths: list[str]) -> int:
    import pyarrow.parquet as pq

    n = 0
    for p in paths:
        with fs.open(p, "rb") as fh:
            col = pq.read_table(fh, columns=["image"]).column("image").combine_chunks().field("bytes")
        for b in col.to_pylist():
            pil_decode(b)
            n += 1
    return n


def plain_tars(fs, paths: list[str]) -> int:
    n = 0
    for p in paths:
        with fs.open(p, "rb") as fh, tarfile.open(fileobj=fh, mode="r|") as tf:
            for m in tf:
                if m.isfile():
                    pil_decode(tf.extractfile(m).read())
                    n += 1
    return n


def plain_hf(folder: Path) -> int:
    import pyarrow as pa

    state = json.loads((folder / "state.json").read_text())
    n = 0
    for f in state["_data_files"]:
        table = pa.ipc.open_stream(pa.memory_map(str(folder / f["filename"]), "r")).read_all()
        for b in table.column("image").combine_chunks().field("bytes").to_pylist():
            pil_decode(b)
            n += 1
    return n


def ours(spec: str, **kw):
    """A listed source and a function that reads and decodes all of it (listing is not timed, as the plain
    loops are given their file names)."""
    from blindspots.data.sources import open_pool

    src = open_pool(spec, **kw)
    src.id_array
    return lambda: sum(1 for it in src.iter_items() if it.ok)


def throughput(root: Path, endpoint: str | None, rounds: int) -> None:
    import fsspec

    local = fsspec.filesystem("file")
    names = sorted(p.name for p in (root / "folder").iterdir() if p.suffix in (".png", ".jpg"))
    cases = [
        ("folder", ours(str(root / "folder")), lambda: plain_files(local, [str(root / "folder" / n) for n in names])),
        ("list file", ours(str(root / "folder" / "list.txt")),
         lambda: plain_files(local, [str(root / "folder" / n) for n in names])),
        ("parquet", ours(str(root / "pq")),
         lambda: plain_parquet(local, sorted(str(p) for p in (root / "pq").glob("*.parquet")))),
        ("webdataset", ours(str(root / "wds" / "shard-{000000..000003}.tar")),
         lambda: plain_tars(local, sorted(str(p) for p in (root / "wds").glob("*.tar")))),
    ]
    if (root / "hf").is_dir():
        cases.append(("hf save_to_disk", ours(str(root / "hf")), lambda: plain_hf(root / "hf")))
    if endpoint:
        import s3fs

        s3 = s3fs.S3FileSystem(endpoint_url=endpoint)
        opts = {"storage_options": {"endpoint_url": endpoint}}
        cases += [
            ("s3 prefix", ours("s3://bench/folder/", **opts),
             lambda: plain_files(s3, [f"bench/folder/{n}" for n in names])),
            ("s3 parquet", ours("s3://bench/pq/", **opts),
             lambda: plain_parquet(s3, sorted(s3.glob("bench/pq/*.parquet")))),
            ("s3 webdataset", ours("s3://bench/wds/shard-{000000..000003}.tar", **opts),
             lambda: plain_tars(s3, sorted(s3.glob("bench/wds/*.tar")))),
        ]
    print(f"\n1. read + decode, images/s (median of {rounds}, interleaved; {load()})")
    print(f"  {'source':<18} {'iter_items':>11} {'plain loop':>11} {'ratio':>7}")
    for name, mine, plain in cases:
        a, b = [], []
        for _ in range(rounds):
            for fn, acc in ((mine, a), (plain, b)):
                t = time.perf_counter()
                n = fn()
                acc.append(n / (time.perf_counter() - t))
        print(f"  {name:<18} {statistics.median(a):>11.0f} {statistics.median(b):>11.0f} "
              f"{statistics.median(a) / statistics.median(b):>7.3f}   ({n} images; {load()})")


# ----------------------------------------------------------------------------- 2./3. plan and resume at 10^6

# Peak memory of a child: VmHWM (this process's own high-water mark; ru_maxrss keeps the parent's across exec)
HWM = "int([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]) / 1024"

PLAN_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from blindspots.data.sources import open_pool
from blindspots.ids import check_unique_artifacts
from blindspots.scan.layout import ScanLayout
from blindspots.scan.manifest import ids_digest, save_ids, save_manifest
from blindspots.scan.plan import num_shards, plan_shards, scan_id_array
spec, out, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
base_mb = HWM
t1 = time.perf_counter()
src = open_pool(spec, storage_options=opts)
ids = scan_id_array(src)
check_unique_artifacts(ids, "pool")
digest = ids_digest(ids)
n = num_shards(len(ids), 256)
save_manifest(out, {"n_images": len(ids), "ids_sha256": digest, "pool_source": src.describe(),
                    "pool_fingerprint": src.fingerprint()})
save_ids(out, ids)
plans = plan_shards(ScanLayout(out), ids, 256, {"t": None}, "t", [], n, True)
t2 = time.perf_counter()
print(json.dumps({"ids": len(ids), "shards": len(plans), "todo": sum(p.todo for p in plans), "plan_s": t2 - t1,
                  "imports_s": t1 - t0, "base_rss_mb": base_mb,
                  "peak_rss_mb": HWM}))
"""

RESUME_CHILD = r"""
import json, sys, time
import torch
from blindspots.data.sources import open_pool
from blindspots.models.adapters import TorchSegmenter
from blindspots.scan import scan_pool
spec, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = TorchSegmenter(torch.nn.Conv2d(3, 2, 1), 2)
base_mb = HWM
t0 = time.perf_counter()
scan_pool(open_pool(spec), {"t": model}, out, target="t", shard_size=256, progress=False)
t1 = time.perf_counter()
print(json.dumps({"resume_s": t1 - t0, "base_rss_mb": base_mb,
                  "peak_rss_mb": HWM}))
"""


def child(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "src"),
                                                         os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", code.replace("HWM", HWM), *args], capture_output=True, text=True,
                         env=env)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def plan_and_resume(root: Path, n_ids: int) -> None:
    lst = root / "million.txt"
    with open(lst, "w") as fh:  # 10^6 URIs of one bucket, as a manifest of an object-store pool looks
        for start in range(0, n_ids, 100_000):
            fh.write("".join(f"s3://bucket/pool/{i // 1000:04d}/img_{i:07d}.jpg\n"
                             for i in range(start, min(n_ids, start + 100_000))))
    out = root / "scan-million"
    print(f"\n2. plan of {n_ids:,} ids from a list file of s3:// URIs (fresh process; {load()})")
    r = child(PLAN_CHILD, str(lst), str(out), "{}")
    print(f"  plan {r['plan_s']:.2f} s (target <= 60), peak RSS {r['peak_rss_mb']:.0f} MB (target <= 2048; "
          f"{r['base_rss_mb']:.0f} MB after the imports, which took {r['imports_s']:.2f} s apart), "
          f"{r['shards']} shards, {r['todo']} to do")
    layout_files = 0
    for k in range(r["shards"]):  # every shard finished: the files a finished scan has (plan stats them)
        for part in ("meta", "models/t"):
            p = out / part / f"shard-{k:05d}.parquet"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch()
            layout_files += 1
    man = json.loads((out / "scan.json").read_text())
    man.update({"version": 1, "shard_size": 256, "n_shards": r["shards"], "num_classes": 2, "save_maps": True,
                "resize": None, "target": "t", "competitors": [], "models": {}})
    (out / "scan.json").write_text(json.dumps(man))
    print(f"\n3. resume with all {r['shards']} shards done ({layout_files} shard files; {load()})")
    r2 = child(RESUME_CHILD, str(lst), str(out))
    print(f"  scan_pool resume {r2['resume_s']:.2f} s (target <= 10), peak RSS {r2['peak_rss_mb']:.0f} MB "
          f"({r2['base_rss_mb']:.0f} MB with torch imported, before the call)")


WALK_CHILD = r"""
import json, sys, time
import s3fs
t = time.perf_counter()
fs = s3fs.S3FileSystem(endpoint_url=sys.argv[1])
n = 0
for _, _, files in fs.walk(sys.argv[2]):
    n += len(files)
print(json.dumps({"files": n, "walk_s": time.perf_counter() - t, "peak_rss_mb": HWM}))
"""


def s3_listing(root: Path, endpoint: str, n_objects: int) -> None:
    """n_objects small objects (1,000 a folder) put straight into the moto backend, then planned from the
    prefix source, beside the plain loop that walks the same prefix with s3fs and counts the names."""
    from moto.backends import get_backend

    backend = get_backend("s3")["123456789012"]["aws"]
    backend.create_bucket("many", "us-east-1")
    t = time.perf_counter()
    for i in range(n_objects):
        backend.put_object("many", f"pool/{i // 1000:04d}/img_{i:07d}.jpg", b"x")
    print(f"\n2b. plan of {n_objects:,} objects in the local S3 server ({time.perf_counter() - t:.0f} s to put "
          f"them; fresh processes; {load()})")
    r = child(PLAN_CHILD, "s3://many/pool/", str(root / "scan-s3"), json.dumps({"endpoint_url": endpoint}))
    w = child(WALK_CHILD, endpoint, "many/pool/")
    print(f"  plan {r['plan_s']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB ({r['base_rss_mb']:.0f} MB after the "
          f"imports), {r['ids']:,} ids; plain s3fs walk {w['walk_s']:.1f} s, peak RSS {w['peak_rss_mb']:.0f} MB, "
          f"{w['files']:,} names; plan / walk = {r['plan_s'] / w['walk_s']:.3f} ({load()})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=400, help="photos per source in part 1")
    ap.add_argument("--size", type=int, default=256, help="side of each photo crop")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ids", type=int, default=1_000_000, help="ids in parts 2 and 3")
    ap.add_argument("--s3-objects", type=int, default=0, help="also list this many objects from the S3 server")
    ap.add_argument("--no-s3", action="store_true", help="skip the local S3 server rows")
    ap.add_argument("--only-s3-listing", action="store_true", help="run part 2b alone (with --s3-objects)")
    a = ap.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the S3 server's one line per request
    print(f"CPU: {cpu_model()}; {load()}")
    os.environ.update(S3_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if a.only_s3_listing:
            with s3_server() as endpoint:
                s3_listing(root, endpoint, a.s3_objects or 1_000_000)
            return
        items = photos(a.images, a.size)
        write_all(root, items)
        if a.no_s3:
            throughput(root, None, a.rounds)
        else:
            with s3_server() as endpoint:
                import s3fs

                s3 = s3fs.S3FileSystem(endpoint_url=endpoint)
                s3.mkdir("bench")
                for sub in ("folder", "pq", "wds"):
                    for p in sorted((root / sub).iterdir()):
                        s3.pipe_file(f"bench/{sub}/{p.name}", p.read_bytes())
                throughput(root, endpoint, a.rounds)
                if a.s3_objects:
                    s3_listing(root, endpoint, a.s3_objects)
        plan_and_resume(root, a.ids)
    print(f"\nend: {load()}; peak RSS of this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()

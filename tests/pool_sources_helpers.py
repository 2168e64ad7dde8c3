"""One set of real photos written as every kind of pool source, and a local S3 server on 127.0.0.1.

`photos()` gives 40 small crops of scikit-image's sample photographs (PNG and JPEG) plus one corrupt
file; the writers put the same bytes into a folder, a list file, Parquet shards (with one bad row),
WebDataset tar shards (the last member cut short) and a Hugging Face `save_to_disk` folder, so
each source must give the folder pool's content hashes, errors and scores.
"""
from __future__ import annotations

import io
import os
import tarfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image

N_PHOTOS = 40
CORRUPT = "broken.jpg"
CORRUPT_BYTES = b"\xff\xd8\xff\xe0 not really a jpeg"
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
          "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
          "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}


def photos(n: int = N_PHOTOS) -> dict[str, bytes]:
    """name -> file bytes: n crops (about 40x56) of real photographs, half PNG, half JPEG."""
    import skimage.data as sd

    sources = [sd.astronaut(), sd.coffee(), sd.chelsea(), sd.rocket(), sd.immunohistochemistry(),
               sd.hubble_deep_field(), np.stack([sd.camera()] * 3, -1), np.stack([sd.coins()] * 3, -1)]
    out: dict[str, bytes] = {}
    rng = np.random.default_rng(0)
    for i in range(n):
        src = sources[i % len(sources)]
        h, w = 40 + 8 * (i % 3), 56
        y, x = rng.integers(0, src.shape[0] - h), rng.integers(0, src.shape[1] - w)
        crop = np.ascontiguousarray(src[y:y + h, x:x + w, :3])
        buf = io.BytesIO()
        fmt = "PNG" if i % 2 == 0 else "JPEG"
        Image.fromarray(crop).save(buf, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        sub = "street/" if i % 5 == 1 else ""
        out[f"{sub}photo_{i:03d}.{'png' if fmt == 'PNG' else 'jpg'}"] = buf.getvalue()
    return out


def write_folder(root: Path, items: dict[str, bytes], corrupt: bool = True) -> Path:
    for name, data in {**items, **({CORRUPT: CORRUPT_BYTES} if corrupt else {})}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def write_parquet(folder: Path, items: dict[str, bytes], shards: int = 2) -> list[Path]:
    """Hugging Face's layout: `{bytes, path}` image column, a label; shard 0 has a row with null bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(items) + [CORRUPT]
    paths = []
    for s in range(shards):
        mine = names[s::shards]
        rows = [{"bytes": items.get(n, CORRUPT_BYTES), "path": n} for n in mine]
        if s == 0:
            rows.append({"bytes": None, "path": "missing_bytes.png"})  # the bad row
        table = pa.table({"image": pa.array(rows, pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                          "label": pa.array(range(len(rows)), pa.int64())})
        path = folder / f"train-{s:05d}-of-{shards:05d}.parquet"
        pq.write_table(table, path, row_group_size=7)
        paths.append(path)
    return paths


def write_tars(folder: Path, items: dict[str, bytes], shards: int = 2) -> list[Path]:
    """WebDataset shards: sample key = name without extension, members `<key>.<ext>` and `<key>.cls`;
    the last shard ends with an extra sample whose image is cut short."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(items) + [CORRUPT]
    paths = []
    for s in range(shards):
        path = folder / f"shard-{s:06d}.tar"
        with tarfile.open(path, "w") as tf:
            for n in names[s::shards] + (["zz_cut.png"] if s == shards - 1 else []):
                data = items.get(n, CORRUPT_BYTES if n == CORRUPT else items[sorted(items)[0]])
                key, ext = n.rsplit(".", 1)
                for member, payload in ((f"{key}.{ext}", data), (f"{key}.cls", b"1")):
                    info = tarfile.TarInfo(member)
                    info.size = len(payload)
                    tf.addfile(info, io.BytesIO(payload))
        if s == shards - 1:  # cut inside the last image member's data
            with tarfile.open(path) as tf:
                last = [m for m in tf.getmembers() if m.name == "zz_cut.png"][0]
            with open(path, "r+b") as fh:
                fh.truncate(last.offset_data + last.size // 2)
        paths.append(path)
    return paths


def write_hf(folder: Path, items: dict[str, bytes]) -> Path:
    """A real `datasets` save_to_disk folder with an Image feature (same bytes, same paths)."""
    from datasets import Dataset, Features, Image as HFImage, Value

    names = sorted(items) + [CORRUPT]
    ds = Dataset.from_dict({"image": [{"bytes": items.get(n, CORRUPT_BYTES), "path": n} for n in names],
                            "label": list(range(len(names)))},
                           features=Features({"image": HFImage(), "label": Value("int32")}))
    ds.save_to_disk(str(folder), num_shards=2)
    return folder


@contextmanager
def s3_server() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (a free port); yields its endpoint URL. Dummy credentials only."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def s3fs_for(endpoint: str):
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    return s3fs.S3FileSystem(endpoint_url=endpoint)


def upload(fs, local: Path, bucket_prefix: str) -> None:
    """Copy a local folder's files to `bucket/prefix/` keeping their relative names."""
    for p in sorted(local.rglob("*")):
        if p.is_file():
            fs.pipe_file(f"{bucket_prefix.rstrip('/')}/{p.relative_to(local).as_posix()}", p.read_bytes())

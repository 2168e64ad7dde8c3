"""Pool sources: every source gives the folder pool's images, content hashes and error rows.

The same 40 real photos (and a corrupt one) as a folder, a list file of paths and URIs, a file://
prefix, Parquet shards (with a row without bytes), WebDataset shards (with a member cut short) and a
Hugging Face save_to_disk folder; sources pickle (what Ray tasks receive) and read the same there.
"""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from pool_sources_helpers import (CORRUPT, photos, write_folder, write_hf, write_parquet,  # noqa: E402
                                  write_tars)

from blindspots.data import ImagePool  # noqa: E402
from blindspots.data.sources import ListSource, PrefixSource, open_pool  # noqa: E402
from blindspots.data.sources.patterns import expand_braces  # noqa: E402
from blindspots.ids import artifact_name  # noqa: E402


@pytest.fixture(scope="module")
def pools(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("sources")
    items = photos()
    write_folder(tmp / "folder", items)
    write_parquet(tmp / "pq", items)
    write_tars(tmp / "wds", items)
    write_hf(tmp / "hf", items)
    return {"tmp": tmp, "items": items}


def _read(src) -> dict[str, tuple]:
    out = {it.id: (it.content_hash, it.error, None if it.image is None else it.image.tobytes())
           for it in src.iter_hashed_items()}
    out.update({k: (None, v, None) for k, v in src.refused.items()})
    return out


def _good(read: dict) -> dict[str, bytes]:
    return {h: pixels for h, _, pixels in read.values() if h is not None}


def test_every_local_source_reads_the_folder_pools_images(pools):
    tmp = pools["tmp"]
    folder = _read(ImagePool(tmp / "folder"))
    assert len(_good(folder)) == 40 and folder[CORRUPT][1].startswith("corrupt")
    lines = sorted(pools["items"]) + [CORRUPT]
    (tmp / "folder" / "list.txt").write_text("# the pool\n" + "\n".join(lines) + "\n\n")
    (tmp / "uris.txt").write_text("\n".join((tmp / "folder" / n).as_uri() for n in lines) + "\nfile:///nowhere/dead.png\n")
    pq.write_table(pa.table({"label": list(range(len(lines))), "path": lines}), tmp / "folder" / "list.parquet")
    cases = {
        "list txt": open_pool(tmp / "folder" / "list.txt"),
        "list parquet": open_pool(tmp / "folder" / "list.parquet"),
        "list of uris": open_pool(tmp / "uris.txt"),
        "file:// prefix": open_pool((tmp / "folder").as_uri()),
        "parquet folder": open_pool(tmp / "pq"),
        "parquet glob": open_pool(str(tmp / "pq" / "*.parquet")),
        "webdataset braces": open_pool(str(tmp / "wds" / "shard-{000000..000001}.tar")),
        "hf save_to_disk": open_pool(tmp / "hf"),
    }
    assert isinstance(cases["list txt"], ListSource) and isinstance(cases["file:// prefix"], PrefixSource)
    for name, src in cases.items():
        got = _read(src)
        assert _good(got) == _good(folder), name  # same bytes hashed, same pixels decoded
        errors = {i: e for i, (_, e, _) in got.items() if e}
        assert any(e.startswith("corrupt") for e in errors.values()), name
        extra = {e for e in errors.values() if not e.startswith("corrupt")}
        assert extra == {"list of uris": {"file not found"}, "parquet folder": {"no image bytes in this row (null)"},
                         "parquet glob": {"no image bytes in this row (null)"},
                         "webdataset braces": {"truncated tar member (got 1040 of 2081 bytes)"}}.get(name, set()), name
    assert cases["list txt"].ids == sorted(lines)  # relative paths: the folder pool's ids
    assert "train-00000-of-00002.parquet#000000" not in cases["parquet folder"]  # paths are the ids
    assert "photo_000.png" in cases["parquet folder"] and "photo_000.png" in cases["hf save_to_disk"]
    wds = cases["webdataset braces"]
    assert "shard-000000.tar#photo_000" in wds
    assert {i.split("#", 1)[1] for i in wds.ids} == {n.rsplit(".", 1)[0] for n in lines} | {"zz_cut"}
    assert artifact_name("shard-000000.tar#photo_000") == "shard-000000.tar#photo_000.png"


def test_sources_pickle_and_rebuild_from_their_description(pools):
    tmp = pools["tmp"]
    for src in (open_pool(tmp / "pq"), open_pool(str(tmp / "wds" / "*.tar")), open_pool(tmp / "hf"),
                open_pool((tmp / "folder").as_uri()), open_pool(tmp / "folder")):
        ids = src.ids[:5]
        first = [it.content_hash for it in src.iter_hashed_items(ids)]
        again = pickle.loads(pickle.dumps(src))  # what a Ray task or a worker process receives
        assert [it.content_hash for it in again.iter_hashed_items(ids)] == first, (src, [it.error for it in again.iter_hashed_items(ids)])
        rebuilt = open_pool(**src.describe())
        assert type(rebuilt) is type(src) and rebuilt.ids == src.ids


def test_shard_ids_without_paths_are_shard_and_row(tmp_path, pools):
    """Raw binary column, no paths: '<shard>#<row>' ids, rows zero-padded so a shard's rows sort together."""
    items = pools["items"]
    data = [items[n] for n in sorted(items)[:12]]
    pq.write_table(pa.table({"img": pa.array(data, pa.binary()), "n": list(range(12))}), tmp_path / "a.parquet",
                   row_group_size=5)
    src = open_pool(tmp_path / "a.parquet")
    assert src.ids == [f"a.parquet#{r:06d}" for r in range(12)]
    assert [it.content_hash for it in src.iter_hashed_items(src.ids[7:9])] == \
        [it.content_hash for it in ImagePool(pools["tmp"] / "folder").iter_hashed_items(sorted(items)[7:9])]


def test_unreadable_shard_is_one_error_row_and_bad_arguments_name_themselves(tmp_path, pools):
    write_tars(tmp_path / "wds", pools["items"])
    (tmp_path / "wds" / "shard-000002.tar").write_bytes(b"this is not a tar" * 3)
    src = open_pool(str(tmp_path / "wds" / "shard-{000000..000003}.tar"))
    assert src.refused["shard-000002.tar"].startswith("unreadable shard")
    assert src.refused["shard-000003.tar"].startswith("unreadable shard")  # named by the braces, absent
    assert len(src) == 42
    with pytest.raises(ValueError, match="format: expected one of"):
        open_pool(tmp_path, format="zip")
    with pytest.raises(ValueError, match="pool: expected an existing folder, list file"):
        open_pool(tmp_path / "nothing")
    with pytest.raises(ValueError, match="--storage-option: expected KEY=VALUE"):
        from blindspots.cli.pool_options import storage_options
        storage_options(["endpoint_url"])
    (tmp_path / "bad.txt").write_text("a.png\n../outside.png\n")
    with pytest.raises(ValueError, match="list_file: expected paths inside the pool root"):
        open_pool(tmp_path / "bad.txt").ids


def test_brace_expansion():
    assert expand_braces("s-{000..002}.tar") == ["s-000.tar", "s-001.tar", "s-002.tar"]
    assert expand_braces("{a,b}/x{1..2}") == ["a/x1", "a/x2", "b/x1", "b/x2"]


def test_a_new_kind_of_source_plugs_in(tmp_path, pools):
    """What a FiftyOne (or any other) source does: subclass PoolSource, register a format and a URI scheme."""
    from blindspots.data.sources import EXTRA_FORMATS, PoolSource, RawItem, register_format

    items = pools["items"]

    class Dict(PoolSource):
        kind = "dict"

        def __init__(self, pool, *, max_pixels, names):
            super().__init__(pool, max_pixels=max_pixels)
            self.names = names

        def list_ids(self):
            return pa.array(self.names, pa.string())

        def read(self, ids):
            for i in ids:
                yield RawItem(i, items.get(i), None if i in items else "file not found")

        def describe(self):
            return {"pool": self.root, "format": "dict", "names": self.names}

    register_format("dict", Dict, scheme="dict")
    try:
        src = open_pool("dict://mine", names=sorted(items)[:3] + ["gone.png"])
        got = {it.id: it for it in src.iter_hashed_items()}
        assert got["gone.png"].error == "file not found" and sum(it.ok for it in got.values()) == 3
        again = open_pool(**src.describe())
        assert again.ids == src.ids
        with pytest.raises(ValueError, match="options: expected none"):
            open_pool(pools["tmp"] / "folder", names=[])
    finally:
        EXTRA_FORMATS.pop("dict")


def test_the_fiftyone_format_ships_without_a_registration_at_import():
    """Importing the sources registers nothing (a fresh interpreter's EXTRA_FORMATS is empty, and the
    table of shipped formats cannot be changed); fiftyone:// still opens a FiftyOne source, and its name
    cannot be registered over."""
    import subprocess
    import sys

    from blindspots.data.sources import PLUGIN_FORMATS, open_pool, register_format
    from blindspots.data.sources.fiftyone import FiftyOneSource

    probe = "import blindspots.data.sources as s; print(len(s.EXTRA_FORMATS), sorted(s.factory_formats()))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split(None, 1)
    assert out == ["0", "['fiftyone']\n"]
    with pytest.raises(TypeError):
        PLUGIN_FORMATS["other"] = PLUGIN_FORMATS["fiftyone"]  # type: ignore[index]
    src = open_pool("fiftyone://my-set?view=hard")
    assert isinstance(src, FiftyOneSource) and (src.dataset, src.view) == ("my-set", "hard")
    with pytest.raises(ValueError, match=r"^name: expected a new format name .*'fiftyone'.*, got 'fiftyone'"):
        register_format("fiftyone", FiftyOneSource, scheme="fiftyone")


def test_a_resumed_scan_of_an_unchanged_list_reads_no_listing(tmp_path, pools, monkeypatch):
    """scan.json + ids.parquet + the finished shards' names are all a resume reads; a changed list is listed again."""
    import torch

    from blindspots.models.adapters import TorchSegmenter
    from blindspots.scan import read_score_table, scan_pool
    from blindspots.scan.layout import ScanLayout
    from blindspots.scan.plan import IdSlice, plan_shards

    folder = pools["tmp"] / "folder"
    lst = tmp_path / "pool.txt"
    lst.write_text("\n".join(f"{folder}/{n}" for n in sorted(pools["items"])[:10]))
    torch.manual_seed(0)
    models = {"t": TorchSegmenter(torch.nn.Conv2d(3, 2, 1), 2)}
    out = scan_pool(open_pool(lst), models, tmp_path / "scan", target="t", shard_size=4, progress=False)
    assert (out / "ids.parquet").is_file() and len(read_score_table(out)) == 10

    def no_listing(self):
        raise AssertionError("the pool was listed")

    monkeypatch.setattr(ListSource, "list_ids", no_listing)
    scan_pool(open_pool(lst), models, out, target="t", shard_size=4, progress=False)  # nothing to do, nothing listed
    lst.write_text(lst.read_text() + f"\n{folder}/{sorted(pools['items'])[10]}")
    with pytest.raises(AssertionError, match="the pool was listed"):  # changed: listed again (and refused)
        scan_pool(open_pool(lst), models, out, target="t", shard_size=4, progress=False)
    plans = plan_shards(ScanLayout(tmp_path / "fresh"), pa.array([f"{i:03d}.png" for i in range(10)]), 4, models,
                        "t", [], 3, True)
    assert isinstance(plans[1].ids, IdSlice) and list(plans[1].ids) == ["004.png", "005.png", "006.png", "007.png"]
    assert pickle.loads(pickle.dumps(plans[2].ids)) == ["008.png", "009.png"]


def test_prefix_listing_walks_folders_skips_hidden_ones_and_sorts(tmp_path):
    names = ["b/2.png", "a/z/1.jpg", "a/0.JPG", "c.png", ".hidden/x.png", "a/.secret.png", "a/notes.txt",
             "a/.cache/y.jpg", "b/10.png"]
    for n in names:
        (tmp_path / n).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / n).write_bytes(b"x")
    ids = PrefixSource(tmp_path.as_uri()).list_ids().to_pylist()
    assert ids == ["a/0.JPG", "a/z/1.jpg", "b/10.png", "b/2.png", "c.png"]
    assert ids == sorted(ImagePool(tmp_path).ids)  # the folder pool's rule, the same ids
    with pytest.raises(ValueError, match="pool"):
        PrefixSource((tmp_path / "missing").as_uri()).list_ids()

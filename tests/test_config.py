"""The project file `blindspots.toml`: files written before the settings became pydantic models read the
same values, the writer (tomli_w) round-trips them, and every bad value is one line naming the key, what was
expected and what came, whether it comes from the file or from Python."""
from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from blindspots import config as C
from blindspots.config import (Config, ConfigError, DataSettings, FinetuneSettings, LabelSettings, MiningSettings,
                               ModelSettings, PoolSettings, ProjectSettings, RatingSettings, ScanSettings,
                               SimulateSettings, config_from_dict, load_config, save_config)

DATA = Path(__file__).parent / "data"


def _copy(name: str, tmp: Path) -> Path:
    """A fixture file copied byte for byte (it was written by the hand-made writer the models replaced)."""
    (tmp / "blindspots.toml").write_bytes((DATA / name).read_bytes())
    return tmp / "blindspots.toml"


def test_a_file_written_before_reads_every_value(tmp_path: Path) -> None:
    cfg = load_config(_copy("config_everything.toml", tmp_path))
    assert cfg == Config(
        pool=PoolSettings(root="s3://bucket/pool/", list_file="lists/ids.csv", list_column="image_id",
                          format="parquet", image_column="image",
                          storage_options=["endpoint_url=http://127.0.0.1:9000", "anon=true"]),
        target=ModelSettings("deeplab_v3", "zoo/deeplab.pt?size=512"),
        competitors=[ModelSettings("fpn", "models/fpn.onnx"), ModelSettings("own_model", "my_pkg.models:build")],
        data=DataSettings(train="data/train", val="data/val"),
        project=ProjectSettings(name='street "scenes"\tnight\\v2 — Zürich', seed=7, rounds=3),
        scan=ScanSettings(batch_size=4, shard_size=64),
        mining=MiningSettings(strategy="powerbald", n3=10, distance="dmiou", quantiles=[0.1, 0.9], n=120,
                              dropout=0.25, mc_passes=8),
        ratings=RatingSettings(n4=40, raters=1),
        testset=C.TestSetSettings(size=12, max_per_class=2, background=["sky", "road", "building"]),
        finetune=FinetuneSettings(lrs=[1e-05, 0.0003], epochs=5, batch_size=4, momentum=0.85, weight_decay=0.0,
                                  power=1.0, image_size=256, max_replay=50, device="cuda:0"),
        simulate=SimulateSettings(ground_truth="gt/masks", noise=0.25, bias=0.0, ood_share=0.1, boundary_px=2,
                                  drop_below=16),
        labels=LabelSettings(kind="regions", regions_per_image=4, fill="ignore", agree=0.95))
    assert cfg.base_dir == tmp_path.resolve() and cfg.resolve("data/train") == (tmp_path / "data/train").resolve()
    assert cfg.location(cfg.pool.root) == "s3://bucket/pool/"


def test_a_default_file_written_before_holds_the_papers_values(tmp_path: Path) -> None:
    cfg = load_config(_copy("config_defaults.toml", tmp_path))
    default = Config(pool=PoolSettings(root="pool"), target=ModelSettings("target", "target.pt"),
                     competitors=[ModelSettings("comp", "comp.pt")])
    assert cfg == default and cfg.to_dict() == default.to_dict()
    # Section 4.1 of the MAD paper: n3 = 25, n4 = 100, |T| = 30 (4 per class), r = 2, SGD as below
    assert (cfg.mining.n3, cfg.ratings.n4, cfg.testset.size, cfg.testset.max_per_class, cfg.project.rounds) == \
        (25, 100, 30, 4, 2)
    f = cfg.finetune
    assert (f.lrs, f.epochs, f.batch_size, f.momentum, f.weight_decay, f.power) == \
        ([1e-5, 5e-5, 1e-4], 80, 2, 0.9, 5e-4, 0.9)


@pytest.mark.parametrize("name", ["config_defaults.toml", "config_everything.toml"])
def test_writing_again_keeps_tables_order_and_values(tmp_path: Path, name: str) -> None:
    before = _copy(name, tmp_path)
    cfg = load_config(before)
    again = save_config(cfg, tmp_path / "again.toml")
    old, new = tomllib.loads(before.read_text(encoding="utf-8")), tomllib.loads(again.read_text(encoding="utf-8"))
    assert new == old  # the same tables, keys and values (None stays absent)
    headers = [line for line in again.read_text(encoding="utf-8").splitlines() if line.startswith("[")]
    assert headers == [line for line in before.read_text(encoding="utf-8").splitlines() if line.startswith("[")]
    assert load_config(again) == cfg


@pytest.mark.parametrize("table, value, message", [
    ("mining", {"n3": 0}, "mining.n3: expected an integer >= 1, got 0"),
    ("mining", {"n3": "25"}, "mining.n3: expected an integer >= 1, got '25'"),  # no conversion from text
    ("mining", {"n3": True}, "mining.n3: expected an integer >= 1, got True"),
    ("mining", {"quantiles": [0.75, 0.25]}, "mining.quantiles: expected two numbers 0 <= p <= q <= 1, got [0.75, 0.25]"),
    ("finetune", {"lrs": [1e-5, -1]}, "finetune.lrs: expected a non-empty list of positive learning rates, got [1e-05, -1]"),
    ("finetune", {"momentum": float("inf")}, "finetune.momentum: expected a number in [0, 1), got inf"),
    ("labels", {"fill": "zero"}, "labels.fill: expected one of ['ignore', 'confident'], got 'zero'"),
    ("ratings", {"raters": 2, "extra": 1}, "ratings.extra: unknown key; expected one of ['n4', 'raters']"),
    ("testset", {"background": ["sky", ""]}, "testset.background: expected a list of class names (or absent), "
                                             "got ['sky', '']"),
    ("pool", {"storage_options": ["anon"]}, 'pool.storage_options: expected a list of "KEY=VALUE" strings, '
                                            "got ['anon']"),
])
def test_bad_values_in_the_file_are_one_line_naming_the_key(tmp_path: Path, table: str, value: dict,
                                                             message: str) -> None:
    raw = tomllib.loads((DATA / "config_defaults.toml").read_text(encoding="utf-8"))
    raw[table] = raw[table] | value
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw, tmp_path)
    assert str(err.value) == message and isinstance(err.value, ValueError)


def test_tables_and_rules_across_them(tmp_path: Path) -> None:
    raw = tomllib.loads((DATA / "config_defaults.toml").read_text(encoding="utf-8"))
    cases = [({"pool": None}, "pool: missing required table"),
             ({"target": {"name": "target"}}, "target.path: missing required key"),
             ({"mining": 3}, "mining: expected a table, got 3"),
             ({"competitors": []}, "competitors: expected at least one competing model ([[competitors]] tables), got []"),
             ({"competitors": [{"name": "target", "path": "x.pt"}]},
              "competitors[0].name: expected a name not used by another model, got 'target'"),
             ({"base_dir": {}}, "base_dir: unknown table"),
             ({"reports": {}}, "reports: unknown table; expected one of ['competitors', 'data', ")]
    for change, message in cases:
        d = {k: v for k, v in (raw | change).items() if v is not None}
        with pytest.raises(ConfigError, match="^" + message.replace("[", r"\[").replace("]", r"\]")
                           .replace("(", r"\(").replace(")", r"\)")):
            config_from_dict(d, tmp_path)


def test_python_construction_checks_the_same_rules() -> None:
    with pytest.raises(ConfigError, match=r"^mining.strategy: expected one of \['mad', .*got 'best'$"):
        MiningSettings(strategy="best")
    with pytest.raises(ConfigError, match=r"^model.name: expected a name of lowercase .* got 'Bad Name'$"):
        ModelSettings("Bad Name", "x.pt")
    cfg = Config(pool=PoolSettings(root="pool"), target=ModelSettings("t", "t.pt"), competitors=[ModelSettings("c", "c.pt")])
    with pytest.raises(ConfigError, match=r"^ratings.n4: expected an integer >= 1, got 0$"):
        dataclasses.replace(cfg, ratings=dataclasses.replace(cfg.ratings, n4=0))  # replace validates too
    with pytest.raises(ConfigError, match=r"^competitors: expected at least one"):
        Config(pool=PoolSettings(root="pool"), target=ModelSettings("t", "t.pt"))
    with pytest.raises(TypeError, match="at most 2 values"):
        ModelSettings("t", "t.pt", "extra")
    # lists may come as tuples and an int is a valid float; both are stored as the file writes them
    f = FinetuneSettings(lrs=(1e-5, 1), momentum=0)
    assert f.lrs == [1e-5, 1.0] and isinstance(f.momentum, float)


def test_strings_survive_the_writer(tmp_path: Path) -> None:
    name = 'a "quoted" name\twith tab, newline\nand \\ backslash, ünïcode, \x7f'
    cfg = Config(pool=PoolSettings(root="pool"), target=ModelSettings("t", "t.pt"),
                 competitors=[ModelSettings("c", "c.pt")], project=ProjectSettings(name=name))
    back = load_config(save_config(cfg, tmp_path))
    assert back.project.name == name and back == cfg
    assert "list_file" not in (tmp_path / "blindspots.toml").read_text(encoding="utf-8")  # None: left out

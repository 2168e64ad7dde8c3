"""The project file `blindspots.toml` -> typed settings, and back.

Every setting has the MAD paper's value as its default (Section 4.1 of "Efficiently
Troubleshooting Image Segmentation Models with Human-in-the-Loop", docs/architecture.md#papers): n3 = 25, n4 = 100, |T(i)| = 30 with at
most 4 images per main foreground class, r = 2 rounds, fine-tuning by SGD (momentum 0.9,
weight decay 5e-4, polynomial decay, batch size 2, at most 80 epochs, initial LR from
{1, 5, 10} x 1e-5 chosen by mIoU on T0).

Layout of the file (all tables but [pool], [target] and [[competitors]] optional)::

    [project]   name, seed, rounds
    [pool]      root (a folder, list file, URI prefix, shards; `data.sources`), list_file, list_column,
                format, image_column, storage_options (["endpoint_url=http://host:9000"])
    [target]    name, path                (a model spec, `blindspots.models.load`)
    [[competitors]] name, path
    [data]      train (S0: folder with images/ and masks/), val (T0: same layout); both optional:
                without them the loop mines, collects ratings and exports S for labelling
    [scan]      batch_size, shard_size
    [mining]    strategy ("mad" | "entropy" | "random"), n3, distance ("dmiou" | "dpa"),
                quantiles (p, q of class areas over S0), n (budget for entropy/random)
    [ratings]   n4, raters
    [testset]   size, max_per_class, background
    [finetune]  lrs, epochs, batch_size, momentum, weight_decay, power, image_size,
                max_replay, device
    [simulate]  ground_truth, noise, bias, ood_share, boundary_px, drop_below
    [labels]    kind ("masks" | "regions"), regions_per_image, fill ("ignore" | "confident"), agree

Relative paths are relative to the folder holding the file; `resolve()` makes them absolute.
Bad values raise `ValueError` naming the key (e.g. "mining.n3: expected ...").
"""
from __future__ import annotations

import math
import re
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from blindspots.atomic import write_atomic
from blindspots.data.sources import open_pool, parse_storage_option

CONFIG_FILE = "blindspots.toml"
MODEL_NAME = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")  # scan contract, no "__"
STRATEGIES = ("mad", "madplus", "entropy", "margin", "bald", "powerbald", "coreset", "badge", "qbc", "portfolio",
              "surprise", "random", "scenario")  # = mine.samplers.registry.sampler_names() (a test checks)
DISTANCES = ("dmiou", "dpa")
LABEL_KINDS = ("masks", "regions")
FILLS = ("ignore", "confident")  # = human.regions.FILL_MODES (a test checks)


@dataclass
class ProjectSettings:
    """name: free text; seed: drives every random pick; rounds: r, fine-tuning rounds (paper: 2)."""

    name: str = "blindspots"
    seed: int = 0
    rounds: int = 2


@dataclass
class PoolSettings:
    """root: the unlabeled images (D): a folder, a list file, a URI prefix (s3://bucket/pool/), Parquet or
    WebDataset shards, a Hugging Face save_to_disk folder (`blindspots.data.sources.open_pool`);
    list_file: optional file listing ids (or URIs); list_column: its column (CSV / Parquet);
    format: forces how root is read; image_column: of Parquet / Hugging Face pools;
    storage_options: "KEY=VALUE" strings for the object store (e.g. "endpoint_url=http://host:9000");
    credentials never go here: they come from the store's usual environment."""

    root: str = ""
    list_file: str | None = None
    list_column: str | None = None
    format: str | None = None
    image_column: str | None = None
    storage_options: list[str] = field(default_factory=list)


@dataclass
class ModelSettings:
    """name: `[a-z0-9_]+` (score-table columns use it); path: a model spec as the scan takes it
    (`blindspots.models.load`): a zoo checkpoint, TorchScript, ONNX, a folder of precomputed
    `.npy`, or `package.module:function`, with options after "?"."""

    name: str = ""
    path: str = ""


@dataclass
class DataSettings:
    """train: S0, the target's training set; val: T0, its validation set.

    Each is a folder with `images/` and `masks/` (the layout of `generate_scene_set`), or ""
    (none): without S0 the class-size ranges come from the target's predictions on the pool, and
    without S0 and T0 the loop does not fine-tune (it exports S for labelling instead).
    """

    train: str = ""
    val: str = ""


@dataclass
class ScanSettings:
    batch_size: int = 16
    shard_size: int = 256


@dataclass
class MiningSettings:
    """strategy: "mad" (paper), "entropy" or "random"; n3: top images per (pair, class, direction)
    (paper: 25); distance: "dmiou" (1 - mIoU) or "dpa" (1 - pixel accuracy); quantiles: [p, q]
    quantiles of each class's area over S0 masks for the content constraint (paper: first and
    third quartiles; without S0, over the target's own predictions on the pool, docs/loop.md); n: budget for entropy/random (None: the size MAD would pick, or 2*m*c*n3).
    dropout: bald/powerbald on a target without dropout layers: dropout p on its classifier layer's input
    during the MC passes (None: such a target is refused); mc_passes: T (Gal et al. 2017: 20).
    """

    strategy: str = "mad"
    n3: int = 25
    distance: str = "dpa"
    quantiles: list[float] = field(default_factory=lambda: [0.25, 0.75])
    n: int | None = None
    dropout: float | None = None
    mc_passes: int = 20


@dataclass
class RatingSettings:
    """n4: size of S per round, the lowest-MOS candidates (paper: 100); raters: answers needed
    per candidate before S is formed (paper: 3 subjects; one out-of-domain answer suffices)."""

    n4: int = 100
    raters: int = 3


@dataclass
class TestSetSettings:
    """size: |T(i)| (paper: 30); max_per_class: images per main foreground class (paper: 4);
    background: class names that never count as an image's main foreground object (None: class
    id 0, PASCAL VOC's "background"; for street scenes e.g. sky, road, building)."""

    size: int = 30
    max_per_class: int = 4
    background: list[str] | None = None


@dataclass
class FinetuneSettings:
    """Paper, Section 4.1: SGD, momentum 0.9, weight decay 5e-4, poly decay (power 0.9),
    batch size 2, at most 80 epochs, LR grid {1, 5, 10} x 1e-5 chosen by mIoU on T0.
    image_size: side to resize mixed-size batches to (None: keep sizes; mixed sizes are
    resized to the first image of the batch). max_replay: at most this many S0 images
    (None: all of S0, the paper). device: torch device string.
    """

    lrs: list[float] = field(default_factory=lambda: [1e-5, 5e-5, 1e-4])
    epochs: int = 80
    batch_size: int = 2
    momentum: float = 0.9
    weight_decay: float = 5e-4
    power: float = 0.9
    image_size: int | None = None
    max_replay: int | None = None
    device: str = "cpu"


@dataclass
class SimulateSettings:
    """Simulated humans (demo, benchmarks; `blindspots.human.simulate`). Only the simulation
    reads ground_truth.

    ground_truth: folder of true index-PNG masks for the pool, `<id, extension .png>` (""
    disables simulation); `ratings.raters` simulated raters answer, each scoring
    round(1 + 4 IoU + bias + noise); noise: std of per-rating noise; bias: std of the per-rater
    bias; ood_share: share of images flagged out-of-domain; boundary_px, drop_below: annotation
    noise of simulated annotators (0, 0: the exact true mask).
    """

    ground_truth: str = ""
    noise: float = 0.5
    bias: float = 0.3
    ood_share: float = 0.0
    boundary_px: int = 0
    drop_below: int = 0


@dataclass
class LabelSettings:
    """What people label in S: "masks" (whole masks, the paper) or "regions" (the class of the
    `regions_per_image` superpixels where the target disagrees with its competitors and is unsure;
    `blindspots.mine.regions`). T is always labelled with whole masks (it measures the target).
    fill: the rest of a region-labelled image is left out of the loss ("ignore") or, where every model
    gives the same class with probability >= `agree`, takes the target's label ("confident", the default:
    the higher T0 mIoU of the two on the scenes benchmark, by a margin within the spread over seeds).
    """

    kind: str = "masks"
    regions_per_image: int = 8
    fill: str = "confident"
    agree: float = 0.9


@dataclass
class Config:
    """All settings of one project (see the module docstring for the file layout)."""

    pool: PoolSettings
    target: ModelSettings
    data: DataSettings = field(default_factory=DataSettings)
    competitors: list[ModelSettings] = field(default_factory=list)
    project: ProjectSettings = field(default_factory=ProjectSettings)
    scan: ScanSettings = field(default_factory=ScanSettings)
    mining: MiningSettings = field(default_factory=MiningSettings)
    ratings: RatingSettings = field(default_factory=RatingSettings)
    testset: TestSetSettings = field(default_factory=TestSetSettings)
    finetune: FinetuneSettings = field(default_factory=FinetuneSettings)
    simulate: SimulateSettings = field(default_factory=SimulateSettings)
    labels: LabelSettings = field(default_factory=LabelSettings)
    base_dir: Path = field(default=Path("."), compare=False, repr=False)

    def __post_init__(self) -> None:
        validate(self)

    # ---- paths -------------------------------------------------------------------------
    def resolve(self, path: str | Path) -> Path:
        """A path from the file, made absolute against the folder holding the file."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else (Path(self.base_dir) / p).resolve()

    def location(self, value: str) -> str:
        """A pool location from the file: a URI (s3://, gs://, file://, ...) as written, a path made absolute."""
        return value if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", value) else str(self.resolve(value))

    def open_pool(self) -> Any:
        """The pool source [pool] names (`blindspots.data.sources.open_pool`); ValueError naming what is wrong."""
        p = self.pool
        return open_pool(self.location(p.root), list_file=None if p.list_file is None else self.location(p.list_file),
                         list_column=p.list_column, format=p.format, image_column=p.image_column,
                         storage_options=dict(parse_storage_option(o) for o in p.storage_options))

    @property
    def model_names(self) -> list[str]:
        """Target first, then competitors, in file order."""
        return [self.target.name] + [c.name for c in self.competitors]

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name != "base_dir"}
        return d


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    return value


# ---- validation -------------------------------------------------------------------------

def _need(cond: bool, key: str, expected: str, got: Any) -> None:
    if not cond:
        raise ValueError(f"{key}: expected {expected}, got {got!r}")


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def validate(cfg: Config) -> None:
    """Check every value; raise ValueError naming the key, what was expected and what came."""
    _need(isinstance(cfg.project.name, str), "project.name", "a string", cfg.project.name)
    _need(_int(cfg.project.seed) and cfg.project.seed >= 0, "project.seed", "an integer >= 0", cfg.project.seed)
    _need(_int(cfg.project.rounds) and cfg.project.rounds >= 1, "project.rounds", "an integer >= 1",
          cfg.project.rounds)
    _need(isinstance(cfg.pool.root, str) and cfg.pool.root != "", "pool.root", "a folder path or URI", cfg.pool.root)
    _need(cfg.pool.list_file is None or isinstance(cfg.pool.list_file, str), "pool.list_file",
          "a file path", cfg.pool.list_file)
    for key in ("list_column", "format", "image_column"):
        _need(getattr(cfg.pool, key) is None or isinstance(getattr(cfg.pool, key), str), f"pool.{key}",
              "a string (or absent)", getattr(cfg.pool, key))
    _need(isinstance(cfg.pool.storage_options, list) and all(isinstance(o, str) and "=" in o
                                                            for o in cfg.pool.storage_options),
          "pool.storage_options", 'a list of "KEY=VALUE" strings', cfg.pool.storage_options)
    names: list[str] = []
    for key, m in [("target", cfg.target)] + [(f"competitors[{i}]", c) for i, c in enumerate(cfg.competitors)]:
        _need(isinstance(m.name, str) and bool(MODEL_NAME.match(m.name)), f"{key}.name",
              "a name of lowercase letters, digits and single underscores", m.name)
        _need(isinstance(m.path, str) and m.path != "", f"{key}.path", "a model spec (path or module:function)", m.path)
        _need(m.name not in names, f"{key}.name", "a name not used by another model", m.name)
        names.append(m.name)
    _need(len(cfg.competitors) >= 1, "competitors", "at least one competing model", cfg.competitors)
    for key in ("train", "val"):
        v = getattr(cfg.data, key)
        _need(isinstance(v, str), f"data.{key}", "a folder with images/ and masks/ (or \"\")", v)
    for key in ("batch_size", "shard_size"):
        v = getattr(cfg.scan, key)
        _need(_int(v) and v >= 1, f"scan.{key}", "an integer >= 1", v)
    m = cfg.mining
    _need(m.strategy in STRATEGIES, "mining.strategy", f"one of {list(STRATEGIES)}", m.strategy)
    _need(_int(m.n3) and m.n3 >= 1, "mining.n3", "an integer >= 1", m.n3)
    _need(m.distance in DISTANCES, "mining.distance", f"one of {list(DISTANCES)}", m.distance)
    _need(isinstance(m.quantiles, (list, tuple)) and len(m.quantiles) == 2
          and all(_num(q) for q in m.quantiles) and 0 <= m.quantiles[0] <= m.quantiles[1] <= 1,
          "mining.quantiles", "two numbers 0 <= p <= q <= 1", m.quantiles)
    _need(m.n is None or (_int(m.n) and m.n >= 1), "mining.n", "an integer >= 1 (or absent)", m.n)
    _need(m.dropout is None or (isinstance(m.dropout, (int, float)) and not isinstance(m.dropout, bool)
                                and 0 < m.dropout < 1), "mining.dropout", "a probability in (0, 1) (or absent)",
          m.dropout)
    _need(_int(m.mc_passes) and m.mc_passes >= 2, "mining.mc_passes", "an integer >= 2", m.mc_passes)
    _need(_int(cfg.ratings.n4) and cfg.ratings.n4 >= 1, "ratings.n4", "an integer >= 1", cfg.ratings.n4)
    _need(_int(cfg.ratings.raters) and cfg.ratings.raters >= 1, "ratings.raters", "an integer >= 1",
          cfg.ratings.raters)
    t = cfg.testset
    _need(_int(t.size) and t.size >= 1, "testset.size", "an integer >= 1", t.size)
    _need(_int(t.max_per_class) and t.max_per_class >= 1, "testset.max_per_class", "an integer >= 1",
          t.max_per_class)
    _need(t.background is None or (isinstance(t.background, (list, tuple))
                                   and all(isinstance(b, str) and b for b in t.background)),
          "testset.background", "a list of class names (or absent)", t.background)
    f = cfg.finetune
    _need(isinstance(f.lrs, (list, tuple)) and len(f.lrs) >= 1 and all(_num(x) and x > 0 for x in f.lrs),
          "finetune.lrs", "a non-empty list of positive learning rates", f.lrs)
    _need(_int(f.epochs) and f.epochs >= 1, "finetune.epochs", "an integer >= 1", f.epochs)
    _need(_int(f.batch_size) and f.batch_size >= 1, "finetune.batch_size", "an integer >= 1", f.batch_size)
    _need(_num(f.momentum) and 0 <= f.momentum < 1, "finetune.momentum", "a number in [0, 1)", f.momentum)
    _need(_num(f.weight_decay) and f.weight_decay >= 0, "finetune.weight_decay", "a number >= 0",
          f.weight_decay)
    _need(_num(f.power) and f.power >= 0, "finetune.power", "a number >= 0", f.power)
    _need(f.image_size is None or (_int(f.image_size) and f.image_size >= 8), "finetune.image_size",
          "an integer >= 8 (or absent)", f.image_size)
    _need(f.max_replay is None or (_int(f.max_replay) and f.max_replay >= 0), "finetune.max_replay",
          "an integer >= 0 (or absent)", f.max_replay)
    _need(isinstance(f.device, str) and f.device != "", "finetune.device", "a torch device string", f.device)
    s = cfg.simulate
    _need(isinstance(s.ground_truth, str), "simulate.ground_truth", "a folder path or \"\"", s.ground_truth)
    for key in ("noise", "bias"):
        _need(_num(getattr(s, key)) and getattr(s, key) >= 0, f"simulate.{key}", "a number >= 0",
              getattr(s, key))
    _need(_num(s.ood_share) and 0 <= s.ood_share <= 1, "simulate.ood_share", "a number in [0, 1]", s.ood_share)
    for key in ("boundary_px", "drop_below"):
        _need(_int(getattr(s, key)) and getattr(s, key) >= 0, f"simulate.{key}", "an integer >= 0",
              getattr(s, key))


    lab = cfg.labels
    _need(lab.kind in LABEL_KINDS, "labels.kind", f"one of {list(LABEL_KINDS)}", lab.kind)
    _need(_int(lab.regions_per_image) and lab.regions_per_image >= 1, "labels.regions_per_image",
          "an integer >= 1", lab.regions_per_image)
    _need(lab.fill in FILLS, "labels.fill", f"one of {list(FILLS)}", lab.fill)
    _need(_num(lab.agree) and 0 < lab.agree <= 1, "labels.agree", "a probability in (0, 1]", lab.agree)


# ---- reading ----------------------------------------------------------------------------

_SECTIONS: dict[str, type] = {
    "project": ProjectSettings, "pool": PoolSettings, "target": ModelSettings, "data": DataSettings,
    "scan": ScanSettings, "mining": MiningSettings, "ratings": RatingSettings,
    "testset": TestSetSettings, "finetune": FinetuneSettings, "simulate": SimulateSettings,
    "labels": LabelSettings,
}
_REQUIRED = ("pool", "target", "competitors")


def _section(cls: type, raw: Any, key: str) -> Any:
    if not isinstance(raw, dict):
        raise ValueError(f"{key}: expected a table, got {raw!r}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{key}.{unknown[0]}: unknown key; expected one of {sorted(known)}")
    if key.split("[")[0] in _REQUIRED:
        for f in fields(cls):  # fields without a usable default must be given
            if f.name not in raw and f.default == "":
                raise ValueError(f"{key}.{f.name}: missing required key")
    return cls(**raw)


def config_from_dict(raw: dict[str, Any], base_dir: str | Path = ".") -> Config:
    """Parsed TOML (a dict) -> Config; missing or bad keys raise ValueError naming the key."""
    if not isinstance(raw, dict):
        raise ValueError(f"config: expected a table, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_SECTIONS) - {"competitors"})
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown table; expected one of {sorted(set(_SECTIONS) | {'competitors'})}")
    for key in _REQUIRED:
        if key not in raw:
            raise ValueError(f"{key}: missing required table")
    kwargs: dict[str, Any] = {}
    for key, cls in _SECTIONS.items():
        if key in raw:
            kwargs[key] = _section(cls, raw[key], key)
    comps = raw["competitors"]
    if not isinstance(comps, list):
        raise ValueError(f"competitors: expected an array of tables [[competitors]], got {comps!r}")
    kwargs["competitors"] = [_section(ModelSettings, c, f"competitors[{i}]") for i, c in enumerate(comps)]
    return Config(**kwargs, base_dir=Path(base_dir))


def load_config(path: str | Path) -> Config:
    """Read `blindspots.toml` (or the file at `path`); relative paths resolve against its folder."""
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"path: expected a config file {CONFIG_FILE}, got {str(path)!r} (not found)")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: expected valid TOML, got a syntax error: {e}") from None
    return config_from_dict(raw, base_dir=path.parent.resolve())


# ---- writing (a tiny TOML writer for the types above) ----------------------------------

def _toml_value(v: Any, key: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{key}: expected a finite number, got {v!r}")
        return repr(v)
    if isinstance(v, str):
        esc = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        return f'"{esc}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x, key) for x in v) + "]"
    raise ValueError(f"{key}: cannot write a value of type {type(v).__name__} to TOML")


def _toml_table(d: dict[str, Any], prefix: str) -> list[str]:
    # None means "absent" in TOML: leave the key out.
    return [f"{k} = {_toml_value(v, f'{prefix}.{k}')}" for k, v in d.items() if v is not None]


def dumps_config(cfg: Config) -> str:
    """Config -> TOML text (round-trips through `config_from_dict`)."""
    d = cfg.to_dict()
    lines = ["# blindspots project settings; defaults are the MAD paper's (Section 4.1)."]
    for key in ("project", "pool", "target"):
        lines += ["", f"[{key}]"] + _toml_table(d[key], key)
    for i, c in enumerate(d["competitors"]):
        lines += ["", "[[competitors]]"] + _toml_table(c, f"competitors[{i}]")
    for key in ("data", "scan", "mining", "ratings", "testset", "finetune", "simulate", "labels"):
        lines += ["", f"[{key}]"] + _toml_table(d[key], key)
    return "\n".join(lines) + "\n"


def save_config(cfg: Config, path: str | Path) -> Path:
    """Write the config atomically (`atomic.write_atomic`) to `path` (a folder gets blindspots.toml)."""
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_FILE
    text = dumps_config(cfg)
    return write_atomic(path, lambda t: t.write_text(text, encoding="utf-8"))

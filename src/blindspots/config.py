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

The tables are pydantic dataclasses: constructing one (from Python or from the file) checks every value
against the rules beside its field, and a bad value raises `ConfigError` (a ValueError) in one line naming
the key, what was expected and what came (e.g. "mining.n3: expected an integer >= 1, got 0"). Numbers are
taken as written, never converted from text ("5" is refused where an integer is expected). The file is
read with `tomllib` and written with `tomli_w`.
"""
from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, get_args

import tomli_w
from pydantic import AfterValidator, ConfigDict, Field, Strict, ValidationError
from pydantic.dataclasses import dataclass as _pydantic_dataclass
from pydantic_core import PydanticUndefined

from blindspots.atomic import write_atomic
from blindspots.data.sources import open_pool, parse_storage_option

CONFIG_FILE = "blindspots.toml"
MODEL_NAME = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")  # scan contract, no "__"
STRATEGIES = ("mad", "madplus", "entropy", "margin", "bald", "powerbald", "coreset", "badge", "qbc", "portfolio",
              "surprise", "random", "scenario")  # = mine.samplers.registry.sampler_names() (a test checks)
DISTANCES = ("dmiou", "dpa")
LABEL_KINDS = ("masks", "regions")
FILLS = ("ignore", "confident")  # = human.regions.FILL_MODES (a test checks)


class ConfigError(ValueError):
    """A bad project setting, in one line: "<key>: expected <what>, got <value>"."""


# Values are taken as written (strict): no "5" -> 5, no True -> 1; an int is still a valid float.
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Str = Annotated[str, Strict()]
_RULES = ConfigDict(extra="forbid", allow_inf_nan=False, validate_default=True)


def _key(expected: str, default: Any = PydanticUndefined, **rules: Any) -> Any:
    """A field: its default (or `default_factory=`), pydantic's rules (ge=, min_length=, ...) and the words
    an error uses for what was expected."""
    return Field(default, description=expected, **rules)


def _ordered(q: list[float]) -> list[float]:
    if not q[0] <= q[1]:
        raise ValueError("p <= q")
    return q


def _table(key: str) -> Callable[[type], type]:
    """Make `cls` a pydantic dataclass whose constructor raises `ConfigError` naming `key`.<field>."""
    def make(cls: type) -> type:
        cls = _pydantic_dataclass(cls, config=_RULES)
        validate = cls.__init__

        names = [f.name for f in dataclasses.fields(cls)]

        @functools.wraps(validate)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if len(args) > len(names) or set(names[:len(args)]) & set(kwargs):
                raise TypeError(f"{cls.__name__}: expected at most {len(names)} values, one per field "
                                f"{names}, got {len(args)} positional and {sorted(kwargs)}")
            given = dict(zip(names, args)) | kwargs  # by name, so that an error's location is the field's
            try:
                validate(self, **given)
            except ValidationError as err:
                raise ConfigError(error_message(err, cls, given, key)) from None

        cls.__init__ = __init__  # type: ignore[misc]
        return cls
    return make


@_table("project")
class ProjectSettings:
    """name: free text; seed: drives every random pick; rounds: r, fine-tuning rounds (paper: 2)."""

    name: Str = _key("a string", "blindspots")
    seed: Int = _key("an integer >= 0", 0, ge=0)
    rounds: Int = _key("an integer >= 1", 2, ge=1)


@_table("pool")
class PoolSettings:
    """root: the unlabeled images (D): a folder, a list file, a URI prefix (s3://bucket/pool/), Parquet or
    WebDataset shards, a Hugging Face save_to_disk folder (`blindspots.data.sources.open_pool`);
    list_file: optional file listing ids (or URIs); list_column: its column (CSV / Parquet);
    format: forces how root is read; image_column: of Parquet / Hugging Face pools;
    storage_options: "KEY=VALUE" strings for the object store (e.g. "endpoint_url=http://host:9000");
    credentials never go here: they come from the store's usual environment."""

    root: Str = _key("a folder path or URI", min_length=1)
    list_file: Str | None = _key("a file path (or absent)", None)
    list_column: Str | None = _key("a string (or absent)", None)
    format: Str | None = _key("a string (or absent)", None)
    image_column: Str | None = _key("a string (or absent)", None)
    storage_options: list[Annotated[Str, Field(pattern="^[^=]*=")]] = _key(
        'a list of "KEY=VALUE" strings', default_factory=list)


@_table("model")
class ModelSettings:
    """name: `[a-z0-9_]+` (score-table columns use it); path: a model spec as the scan takes it
    (`blindspots.models.load`): a zoo checkpoint, TorchScript, ONNX, a folder of precomputed
    `.npy`, or `package.module:function`, with options after "?"."""

    name: Str = _key("a name of lowercase letters, digits and single underscores", pattern=MODEL_NAME.pattern)
    path: Str = _key("a model spec (path or module:function)", min_length=1)


@_table("data")
class DataSettings:
    """train: S0, the target's training set; val: T0, its validation set.

    Each is a folder with `images/` and `masks/` (the layout of `generate_scene_set`), or ""
    (none): without S0 the class-size ranges come from the target's predictions on the pool, and
    without S0 and T0 the loop does not fine-tune (it exports S for labelling instead).
    """

    train: Str = _key('a folder with images/ and masks/ (or "")', "")
    val: Str = _key('a folder with images/ and masks/ (or "")', "")


@_table("scan")
class ScanSettings:
    """batch_size: images per forward; shard_size: rows per score-table shard (`blindspots.scan`)."""

    batch_size: Int = _key("an integer >= 1", 16, ge=1)
    shard_size: Int = _key("an integer >= 1", 256, ge=1)


@_table("mining")
class MiningSettings:
    """strategy: "mad" (paper), "entropy" or "random"; n3: top images per (pair, class, direction)
    (paper: 25); distance: "dmiou" (1 - mIoU) or "dpa" (1 - pixel accuracy); quantiles: [p, q]
    quantiles of each class's area over S0 masks for the content constraint (paper: first and
    third quartiles; without S0, over the target's own predictions on the pool, docs/loop.md); n: budget for entropy/random (None: the size MAD would pick, or 2*m*c*n3).
    dropout: bald/powerbald on a target without dropout layers: dropout p on its classifier layer's input
    during the MC passes (None: such a target is refused); mc_passes: T (Gal et al. 2017: 20).
    """

    strategy: Literal[STRATEGIES] = _key(f"one of {list(STRATEGIES)}", "mad")  # type: ignore[valid-type]
    n3: Int = _key("an integer >= 1", 25, ge=1)
    distance: Literal[DISTANCES] = _key(f"one of {list(DISTANCES)}", "dpa")  # type: ignore[valid-type]
    quantiles: Annotated[list[Annotated[Float, Field(ge=0, le=1)]], AfterValidator(_ordered)] = _key(
        "two numbers 0 <= p <= q <= 1", default_factory=lambda: [0.25, 0.75], min_length=2, max_length=2)
    n: Int | None = _key("an integer >= 1 (or absent)", None, ge=1)
    dropout: Float | None = _key("a probability in (0, 1) (or absent)", None, gt=0, lt=1)
    mc_passes: Int = _key("an integer >= 2", 20, ge=2)


@_table("ratings")
class RatingSettings:
    """n4: size of S per round, the lowest-MOS candidates (paper: 100); raters: answers needed
    per candidate before S is formed (paper: 3 subjects; one out-of-domain answer suffices)."""

    n4: Int = _key("an integer >= 1", 100, ge=1)
    raters: Int = _key("an integer >= 1", 3, ge=1)


@_table("testset")
class TestSetSettings:
    """size: |T(i)| (paper: 30); max_per_class: images per main foreground class (paper: 4);
    background: class names that never count as an image's main foreground object (None: class
    id 0, PASCAL VOC's "background"; for street scenes e.g. sky, road, building)."""

    size: Int = _key("an integer >= 1", 30, ge=1)
    max_per_class: Int = _key("an integer >= 1", 4, ge=1)
    background: list[Annotated[Str, Field(min_length=1)]] | None = _key("a list of class names (or absent)", None)


@_table("finetune")
class FinetuneSettings:
    """Paper, Section 4.1: SGD, momentum 0.9, weight decay 5e-4, poly decay (power 0.9),
    batch size 2, at most 80 epochs, LR grid {1, 5, 10} x 1e-5 chosen by mIoU on T0.
    image_size: side to resize mixed-size batches to (None: keep sizes; mixed sizes are
    resized to the first image of the batch). max_replay: at most this many S0 images
    (None: all of S0, the paper). device: torch device string.
    """

    lrs: list[Annotated[Float, Field(gt=0)]] = _key("a non-empty list of positive learning rates",
                                                   default_factory=lambda: [1e-5, 5e-5, 1e-4], min_length=1)
    epochs: Int = _key("an integer >= 1", 80, ge=1)
    batch_size: Int = _key("an integer >= 1", 2, ge=1)
    momentum: Float = _key("a number in [0, 1)", 0.9, ge=0, lt=1)
    weight_decay: Float = _key("a number >= 0", 5e-4, ge=0)
    power: Float = _key("a number >= 0", 0.9, ge=0)
    image_size: Int | None = _key("an integer >= 8 (or absent)", None, ge=8)
    max_replay: Int | None = _key("an integer >= 0 (or absent)", None, ge=0)
    device: Str = _key("a torch device string", "cpu", min_length=1)


@_table("simulate")
class SimulateSettings:
    """Simulated humans (demo, benchmarks; `blindspots.human.simulate`). Only the simulation
    reads ground_truth.

    ground_truth: folder of true index-PNG masks for the pool, `<id, extension .png>` (""
    disables simulation); `ratings.raters` simulated raters answer, each scoring
    round(1 + 4 IoU + bias + noise); noise: std of per-rating noise; bias: std of the per-rater
    bias; ood_share: share of images flagged out-of-domain; boundary_px, drop_below: annotation
    noise of simulated annotators (0, 0: the exact true mask).
    """

    ground_truth: Str = _key('a folder path or ""', "")
    noise: Float = _key("a number >= 0", 0.5, ge=0)
    bias: Float = _key("a number >= 0", 0.3, ge=0)
    ood_share: Float = _key("a number in [0, 1]", 0.0, ge=0, le=1)
    boundary_px: Int = _key("an integer >= 0", 0, ge=0)
    drop_below: Int = _key("an integer >= 0", 0, ge=0)


@_table("labels")
class LabelSettings:
    """What people label in S: "masks" (whole masks, the paper) or "regions" (the class of the
    `regions_per_image` superpixels where the target disagrees with its competitors and is unsure;
    `blindspots.mine.regions`). T is always labelled with whole masks (it measures the target).
    fill: the rest of a region-labelled image is left out of the loss ("ignore") or, where every model
    gives the same class with probability >= `agree`, takes the target's label ("confident", the default:
    the higher T0 mIoU of the two on the scenes benchmark, by a margin within the spread over seeds).
    """

    kind: Literal[LABEL_KINDS] = _key(f"one of {list(LABEL_KINDS)}", "masks")  # type: ignore[valid-type]
    regions_per_image: Int = _key("an integer >= 1", 8, ge=1)
    fill: Literal[FILLS] = _key(f"one of {list(FILLS)}", "confident")  # type: ignore[valid-type]
    agree: Float = _key("a probability in (0, 1]", 0.9, gt=0, le=1)


@_table("")
class Config:
    """All settings of one project (see the module docstring for the file layout)."""

    pool: PoolSettings = _key("a table [pool]")
    target: ModelSettings = _key("a table [target]")
    data: DataSettings = _key("a table", default_factory=DataSettings)
    competitors: list[ModelSettings] = _key("at least one competing model ([[competitors]] tables)",
                                            default_factory=list, min_length=1)
    project: ProjectSettings = _key("a table", default_factory=ProjectSettings)
    scan: ScanSettings = _key("a table", default_factory=ScanSettings)
    mining: MiningSettings = _key("a table", default_factory=MiningSettings)
    ratings: RatingSettings = _key("a table", default_factory=RatingSettings)
    testset: TestSetSettings = _key("a table", default_factory=TestSetSettings)
    finetune: FinetuneSettings = _key("a table", default_factory=FinetuneSettings)
    simulate: SimulateSettings = _key("a table", default_factory=SimulateSettings)
    labels: LabelSettings = _key("a table", default_factory=LabelSettings)
    base_dir: Path = dataclasses.field(default=Path("."), compare=False, repr=False)

    def __post_init__(self) -> None:
        # the one rule across tables: score-table columns are named after the models
        seen = {self.target.name}
        for i, c in enumerate(self.competitors):
            if c.name in seen:
                raise ConfigError(f"competitors[{i}].name: expected a name not used by another model, got {c.name!r}")
            seen.add(c.name)

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
        """The file's tables as plain values ({"pool": {...}, "competitors": [{...}], ...}), without base_dir."""
        d = dataclasses.asdict(self)
        del d["base_dir"]
        return d


# ---- one-line errors ------------------------------------------------------------------------

_MISSING = object()


def _table_class(annotation: Any) -> type | None:
    """The settings class a field holds (`X` or `list[X]`), or None for a plain value."""
    for t in (annotation, *get_args(annotation)):
        if isinstance(t, type) and hasattr(t, "__pydantic_fields__"):
            return t
    return None


def _get(container: Any, part: str | int) -> Any:
    if isinstance(container, Mapping):
        return container.get(part, _MISSING)
    if isinstance(container, (list, tuple)) and isinstance(part, int):
        return container[part] if -len(container) <= part < len(container) else _MISSING
    return getattr(container, str(part), _MISSING)


def error_message(err: ValidationError, cls: type, given: Mapping[str, Any], prefix: str = "") -> str:
    """pydantic's first error on constructing `cls` from `given` -> "<key>: expected <what>, got <value>".

    The key is the dotted path of the field (`prefix` names the table `cls` is, "" for `Config`), "what"
    is the field's description (see `_key`), the value is the field's whole value as given (a list, not
    its bad element)."""
    first = err.errors()[0]
    if first["type"] == "value_error" and not first["loc"]:  # a rule across fields (`__post_init__`), phrased there
        return str((first.get("ctx") or {}).get("error", first["msg"]))
    key, value, table, info = prefix, given, cls, None
    for part in first["loc"]:
        if table is None:  # inside a list of plain values: the key is the list's
            break
        if isinstance(part, int):
            key, value = f"{key}[{part}]", _get(value, part)
            continue
        names = sorted(n for n in table.__pydantic_fields__ if n != "base_dir")
        key = f"{key}.{part}" if key else str(part)
        if part not in names:
            return f"{key}: unknown {'table' if table is Config else 'key'}; expected one of {names}"
        info = table.__pydantic_fields__[part]
        value, table = _get(value, part), _table_class(info.annotation)
    got = first.get("input") if value is _MISSING else value
    if first["type"] == "missing":
        return f"{key}: missing required {'key' if table is None else 'table'}"
    if first["type"] in ("dataclass_type", "dataclass_args_type"):
        return f"{key}: expected a table, got {got!r}"
    expected = info.description if info is not None and info.description else first["msg"]
    return f"{key}: expected {expected}, got {got!r}"


# ---- reading ----------------------------------------------------------------------------

def config_from_dict(raw: Mapping[str, Any], base_dir: str | Path = ".") -> Config:
    """Parsed TOML (a dict) -> Config; missing or bad keys raise ConfigError naming the key."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config: expected a table, got {type(raw).__name__}")
    if "base_dir" in raw:  # a constructor argument, not a table of the file
        names = sorted(n for n in Config.__pydantic_fields__ if n != "base_dir")
        raise ConfigError(f"base_dir: unknown table; expected one of {names}")
    return Config(**raw, base_dir=Path(base_dir))


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


# ---- writing --------------------------------------------------------------------------------

#: the tables in the order the file shows them (the module docstring's)
TABLES = ("project", "pool", "target", "competitors", "data", "scan", "mining", "ratings", "testset", "finetune",
          "simulate", "labels")


def dumps_config(cfg: Config) -> str:
    """Config -> TOML text (round-trips through `config_from_dict`): each table written by `tomli_w` in the
    order of `TABLES`, a `[[competitors]]` table per competitor; a None value is left out (absent in TOML)."""
    d = cfg.to_dict()
    parts = ["# blindspots project settings; defaults are the MAD paper's (Section 4.1).\n"]
    for key in TABLES:
        header, tables = (("[[competitors]]", d[key]) if key == "competitors" else (f"[{key}]", [d[key]]))
        parts += [f"{header}\n" + tomli_w.dumps({k: v for k, v in t.items() if v is not None}) for t in tables]
    return "\n".join(parts)


def save_config(cfg: Config, path: str | Path) -> Path:
    """Write the config atomically (`atomic.write_atomic`) to `path` (a folder gets blindspots.toml)."""
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_FILE
    text = dumps_config(cfg)
    return write_atomic(path, lambda t: t.write_text(text, encoding="utf-8"))

"""Creating a checked project (`create_project`, what `blindspots init` and `blindspots.Project.create`
run) and registering a target's next version.

Everything a round would trip over later is tried here, once: the pool has a readable image,
every model loads (any spec kind `blindspots.models.load` takes) and runs on that image with one
label space, and S0 / T0 (when given) hold images with masks. So a bad spec or folder fails at
`init` in one line naming it, not rounds later after a whole scan.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from blindspots.config import Config
from blindspots.data.segsets import SegmentationSet
from blindspots.data.sources import ImagePool
from blindspots.ids import check_unique_artifacts
from blindspots.loop.budget import choose_n4, max_candidates
from blindspots.loop.context import LoopContext, step_seed, target_column
from blindspots.loop.models import absolute_spec, finetune_blocker, load_spec, probe_models
from blindspots.loop.project import STORE_FILE, Project
from blindspots.loop.scan_reuse import adopt_scan, check_scan_fits
from blindspots.loop.steps import STEP_REGISTRY

log = logging.getLogger(__name__)

__all__ = ["first_pool_image", "check_models", "check_labelled_data", "check_config", "create_project",
           "register_version"]


def first_pool_image(cfg: Config) -> tuple[str, Any]:
    """(id, uint8 [H, W, 3]) of the first readable pool image; ValueError if there is none."""
    root = cfg.location(cfg.pool.root)
    pool = cfg.open_pool()  # a folder, a list, an object store, shards: ValueError naming what is wrong
    check_unique_artifacts(pool.id_array, "pool.root")  # else the first scan stops on it, after init said yes
    errors = []
    for image_id in pool.id_array.slice(0, 20).to_pylist():
        try:
            return image_id, pool.load(image_id)
        except ValueError as e:  # unreadable file: try the next one
            errors.append(f"{image_id}: {e}")
    refused = list(pool.refused.items())  # e.g. a pool folder of links to photos elsewhere
    raise ValueError(f"pool.root: expected at least one readable image in {str(root)!r}, got "
                     + (f"none readable ({errors[0]})" if errors else
                        f"none ({len(refused)} refused, e.g. {refused[0][0]}: {refused[0][1]}; links may only "
                        "point inside the pool folder)" if refused else "none"))


def check_models(specs: dict[str, str], image_id: str, image: Any, *, import_dir: str | None = None) -> int:
    """Load every model (name -> spec) and run `image` through it; returns C. One-line ValueError
    naming the model otherwise."""
    models = {}
    for name, spec in specs.items():
        try:
            models[name] = load_spec(spec, import_dir=import_dir)
        except Exception as e:  # noqa: BLE001 - any loader failure becomes one line naming the model
            text = " ".join(str(e).split()) or type(e).__name__
            where = "" if spec.partition("?")[0] in text else f" (spec {spec!r})"
            raise ValueError(f"models.{name}: {text}{where}") from None
    return probe_models(models, image, image_id)


def check_labelled_data(cfg: Config) -> None:
    """S0 / T0 ([data] train, val), when given: folders with images/ and masks/ pairing at least one image."""
    for key in ("train", "val"):
        value = getattr(cfg.data, key)
        if not value:
            continue
        root = cfg.resolve(value)
        if not (root / "images").is_dir() or not (root / "masks").is_dir():
            raise ValueError(f"data.{key} (--{key}-data): expected a folder with images/ and masks/, got {str(root)!r}")
        try:
            n = len(SegmentationSet(root / "images", root / "masks"))
        except ValueError as e:
            raise ValueError(f"data.{key} (--{key}-data): expected images with masks in {str(root)!r}, got {e}") from None
        if n == 0:
            raise ValueError(f"data.{key} (--{key}-data): expected at least one image with a mask in {str(root)!r}, got none")


def check_config(cfg: Config) -> int:
    """Everything `init` checks before creating a project (module docstring); returns C."""
    check_labelled_data(cfg)
    image_id, image = first_pool_image(cfg)
    specs = {cfg.target.name: cfg.target.path, **{c.name: c.path for c in cfg.competitors}}
    for name, spec in list(specs.items()):
        try:
            specs[name] = _absolute(cfg, spec)
        except ValueError as e:  # a bad option: say which model's spec it is
            raise ValueError(f"models.{name}: {e}") from None
    return check_models(specs, image_id, image, import_dir=str(Path(cfg.base_dir).resolve()))


def create_project(path: str | Path, cfg: Config, *, scan: str | Path | None = None, n4: int | None = None,
                   on_note: Callable[[str], None] | None = None) -> Project:
    """A new project at `path` after every check of the module docstring; a `Project`.

    n4: the size of S per round (`cfg.ratings.n4` is replaced by it); None: the paper's 100, or a
    quarter of the most candidates a round can mine when 100 would make every candidate a mask
    (`loop.budget.choose_n4`). on_note: gets the one-line note about that choice, if any (default: logged).

    scan: a scan of this pool with these models made before (`blindspots scan`): checked to fit
    (`loop.scan_reuse.check_scan_fits`), then taken as round 0's scan and recorded as its finished
    `scan` step, so that `status` and the first `advance` go on with mining. A refused scan or any
    failed check leaves no folder behind. ValueError naming the argument otherwise."""
    path = Path(path)
    pool = str(cfg.pool.root)
    if "://" not in pool and not any(c in pool for c in "*?[{") and not cfg.resolve(pool).exists():
        raise ValueError(f"pool.root (--pool): expected an existing folder, list file or shard (or a URI), "
                         f"got {pool!r}")
    for key in ("train", "val"):
        value = getattr(cfg.data, key)
        if value and not cfg.resolve(value).is_dir():
            raise ValueError(f"data.{key} (--{key}-data): expected an existing folder, got {value!r}")
    if (path / STORE_FILE).exists():
        raise ValueError(f"path (project): expected a folder without a project, got {str(path)!r} "
                         f"(it already holds {STORE_FILE})")
    classes = check_config(cfg)  # every model loads and runs on one pool image; S0/T0 hold images with masks
    n4, note = choose_n4(n4, max_candidates(max(1, len(cfg.competitors)), classes, cfg.mining.n3))
    cfg = replace(cfg, ratings=replace(cfg.ratings, n4=n4))
    if note:
        (on_note or log.info)(note)
    if scan is not None:
        _check_scan(cfg, Path(scan))  # before the folder exists: a refused scan leaves nothing behind
    project = Project.create(path, cfg)
    if scan is not None:
        _adopt_scan(project, Path(scan))
    return project


def _check_scan(cfg: Config, scan: Path) -> None:
    """The scan fits a project of `cfg` (loop/scan_reuse.py), else ValueError with the reason."""
    here = str(Path(cfg.base_dir).resolve())
    specs = {cfg.target.name: cfg.target.path, **{c.name: c.path for c in cfg.competitors}}
    models = {n: load_spec(absolute_spec(s, cfg.base_dir), import_dir=here) for n, s in specs.items()}
    lf = None if cfg.pool.list_file is None else cfg.resolve(cfg.pool.list_file)
    check_scan_fits(scan, ImagePool(cfg.resolve(cfg.pool.root), list_file=lf), models, cfg.target.name,
                    cfg.scan.shard_size)


def _adopt_scan(project: Project, scan: Path) -> None:
    """Copy the checked scan in as round 0's and record round 0's `scan` step as done with it, as the
    step would have (`advance` then starts with mining; `status` says so)."""
    name = target_column(project, 0)
    adopt_scan(scan, project.scan_dir, project.config.target.name, name)
    ctx = LoopContext(project, simulate=False, progress=False)
    project.journal.start_round(0, model_version=0)
    project.journal.begin_step(0, "scan", STEP_REGISTRY["scan"].settings(ctx), model_version=0,
                       seed=step_seed(project.config.project.seed, 0, "scan"))
    table = ctx.score_table(0)
    project.journal.end_step(0, "scan", {"target_column": name, "scanned": [], "adopted": str(scan),
                                 "reused": sorted(c.name for c in project.config.competitors),
                                 "n_images": int(len(table)), "n_errors": int((table["status"] != "ok").sum())})


def _absolute(cfg: Config, spec: str) -> str:
    return absolute_spec(spec, cfg.base_dir)


def register_version(project: Any, spec: str, *, base_dir: str | Path = ".") -> int:
    """Register `spec` as the target's next version (after the user retrained it on S in their own
    stack); checked like `init` (loads, runs on a pool image, same number of classes). Returns the
    new version i; `blindspots round` then runs round i with it."""
    cfg = project.config
    name = cfg.target.name
    first = project.registry.model(name, 0)
    if finetune_blocker(first.spec, name, [cfg.data.train, cfg.data.val],
                        import_dir=first.meta.get("import_dir")) is None:
        raise ValueError(f"project: expected a project that does not fine-tune its target itself, got "
                         f"{str(project.path)!r} (its rounds fine-tune {name!r}; advance the project instead)")
    old = project.registry.model(name)
    if (project.journal.step(old.version, "export") or {}).get("status") != "done":
        # version i+1 is the target retrained on round i's S: registering earlier would make round i+1
        # run with a model that never saw S(i+1), and say "scan and mine with it" while round i waits
        raise ValueError(f"project: expected round {old.version}'s S({old.version + 1}) to be exported before "
                         f"version {old.version + 1} is registered, got round {old.version} not there yet "
                         f"(the project's status says what it waits for)")
    spec = absolute_spec(spec, base_dir)
    image_id, image = first_pool_image(cfg)
    here = str(Path(base_dir).resolve())
    c_new = check_models({name: spec}, image_id, image, import_dir=here)
    c_old = check_models({name: old.spec}, image_id, image, import_dir=old.meta.get("import_dir"))
    if c_new != c_old:
        raise ValueError(f"spec: expected a model with the target's {c_old} classes, got {c_new}")
    version = old.version + 1
    project.registry.register_model(name, version, "target", spec, round=version - 1,
                           meta={"import_dir": here, "registered": "by the user"})
    project.journal.log_event("register", {"name": name, "version": version, "spec": spec})
    return version

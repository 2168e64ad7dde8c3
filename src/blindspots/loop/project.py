"""The project store: one folder that holds a troubleshooting project from start to end.

Layout::

    PROJECT/
      blindspots.toml     settings (`blindspots.config`)
      store.sqlite        SQLite in WAL mode: rounds, steps (the audit log), events, candidates,
                          annotators, ratings, masks, votes, reviews, models, metrics
      scans/              the score table (Parquet shards, `blindspots.scan`) and argmax maps;
                          competitors once, each target version as `<target>_v<i>`
      masks/r<i>/<id>.png pixel labels (index PNG, 255 = ignore)
      checkpoints/        fine-tuned target models (`target-r<i>.pt`) and resumable training state
      reports/            leaderboards and figures

`Project` is the folder: its config, its `store` (loop/store.py: schema, connections,
transactions) and, over that store, one part per idea: `answers` (loop/answers.py: selections and
human answers), `journal` (rounds, steps, events) and `registry` (models and metrics; both
loop/queries.py). The web app keeps its own tables in the same file (`blindspots.app.tables`). Every
human answer is committed before the call returns; a repeated submission replaces the earlier one
(idempotent).

Rounds are numbered from 0 as in Algorithm 1: round i mines M(i+1) with the target f_t^(i),
rates it, forms S(i+1) and T(i+1), and fine-tunes f_t^(i) into f_t^(i+1). Model versions: the
target's version i is f_t^(i); competitors have version 0.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from blindspots.config import CONFIG_FILE, Config, load_config, save_config
from blindspots.loop.answers import Answers
from blindspots.loop.models import absolute_spec, is_path_spec
from blindspots.loop.queries import Journal, ModelRecord, Registry
from blindspots.loop.store import (OUT_OF_DOMAIN, ROLES, SCHEMA_VERSION, STORE_FILE, SUBFOLDERS, VERDICTS,
                                   ProjectError, Store, hash_token, mask_file, now)

__all__ = ["Project", "ProjectError", "ModelRecord", "STORE_FILE", "SCHEMA_VERSION", "OUT_OF_DOMAIN", "ROLES",
           "VERDICTS", "SUBFOLDERS", "hash_token", "now"]


class Project:
    """A project folder (see the module docstring). Use `Project.create` or `Project.open`.

    path: the folder (absolute); config: its settings; store: the SQLite file; answers, journal,
    registry: what its tables mean, each over `store`.
    """

    def __init__(self, path: Path, config: Config) -> None:
        self.store = Store(path)
        self.path = self.store.path
        self.config = config
        self.answers = Answers(self.store)
        self.journal = Journal(self.store)
        self.registry = Registry(self.store)

    def close(self) -> None:
        """Close this thread's connection to the store (a later call opens a new one)."""
        self.store.close()

    def target_version(self) -> int:
        """The latest registered version of the configured target, i.e. i in f_t^(i)."""
        return self.registry.model(self.config.target.name).version

    # ---- opening ---------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | Path, config: Config, *, exist_ok: bool = False) -> "Project":
        """Make the folder, write `blindspots.toml`, create the store and register the models.

        Relative paths in `config` are resolved against `config.base_dir` and written absolute,
        so the project can live anywhere.
        """
        path = Path(path)
        if (path / STORE_FILE).exists() and not exist_ok:
            raise ProjectError(f"path: expected a folder without a project, got {str(path)!r} "
                               f"(it already holds {STORE_FILE}; use Project.open)")
        path.mkdir(parents=True, exist_ok=True)
        cfg = _absolute(config)
        save_config(cfg, path / CONFIG_FILE)
        for sub in SUBFOLDERS:
            (path / sub).mkdir(exist_ok=True)
        proj = cls(path, load_config(path / CONFIG_FILE))
        proj.store.create_schema()
        # A callable spec imports from the folder `init` ran in (see loop/models.py).
        here = {"import_dir": str(Path(config.base_dir).resolve())}
        proj.registry.register_model(cfg.target.name, 0, "target", cfg.target.path, round=None, meta=here)
        for c in cfg.competitors:
            proj.registry.register_model(c.name, 0, "competitor", c.path, round=None, meta=here)
        proj.journal.log_event("create", {"config": cfg.to_dict()})
        return proj

    @classmethod
    def open(cls, path: str | Path, *, check_files: bool = True) -> "Project":
        """Open an existing project; ProjectError if its config, store or files are inconsistent."""
        path = Path(path)
        if not path.is_dir():
            raise ProjectError(f"path: expected a project folder, got {str(path)!r} (not a folder)")
        if not (path / CONFIG_FILE).is_file():
            raise ProjectError(f"path: expected {CONFIG_FILE} in {str(path)!r}, got none")
        if not (path / STORE_FILE).is_file():
            raise ProjectError(f"path: expected {STORE_FILE} in {str(path)!r}, got none "
                               "(create the project with `Project.create`, the `init` command)")
        try:
            cfg = load_config(path / CONFIG_FILE)
        except ValueError as e:
            raise ProjectError(f"{CONFIG_FILE}: {e}") from None
        proj = cls(path, cfg)
        proj.store.check_schema()
        if check_files:
            proj.check_files()
        return proj

    def check_files(self) -> None:
        """Every registered checkpoint and mask file exists, and the config's models match."""
        for rec in self.registry.models():
            if is_path_spec(rec.spec) and not rec.path.exists():
                raise ProjectError(f"models.{rec.name} (version {rec.version}): expected its model file "
                                   f"(checkpoint, TorchScript, ONNX or folder) {str(rec.path)!r}, got none (missing)")
        for name in self.config.model_names:
            if not self.registry.is_registered(name):
                raise ProjectError(f"{CONFIG_FILE}: model {name!r} is not registered in the store; "
                                   "the config was changed after `init`")
        for rnd, iid, p in self.answers.mask_files():
            if not (self.path / p).is_file():
                raise ProjectError(f"masks: expected file {p!r} for image {iid!r} (round {rnd}), got none")


    # ---- folders ---------------------------------------------------------------------------
    @property
    def scan_dir(self) -> Path:
        """The one scan folder of the project: competitors are scanned once, each target
        version `<target>_v<i>` is added to it (`blindspots.scan`)."""
        return self.path / "scans"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def reports_dir(self) -> Path:
        return self.path / "reports"

    def mask_path(self, round: int, image_id: str) -> Path:
        """Where the pixel label of `image_id` for `round` lives (index PNG)."""
        return mask_file(self.path, round, image_id)


def _absolute(cfg: Config) -> Config:
    """A copy of `cfg` with every path made absolute (against cfg.base_dir)."""
    def ab(p: str | None) -> str | None:
        return None if p is None or p == "" else str(cfg.resolve(p))

    return replace(
        cfg,
        pool=replace(cfg.pool, root=cfg.location(cfg.pool.root),  # a URI stays as written
                     list_file=None if cfg.pool.list_file is None else cfg.location(cfg.pool.list_file)),
        target=replace(cfg.target, path=absolute_spec(cfg.target.path, cfg.base_dir)),
        competitors=[replace(c, path=absolute_spec(c.path, cfg.base_dir)) for c in cfg.competitors],
        data=replace(cfg.data, train=ab(cfg.data.train) or "", val=ab(cfg.data.val) or ""),
        simulate=replace(cfg.simulate, ground_truth=ab(cfg.simulate.ground_truth) or ""),
    )

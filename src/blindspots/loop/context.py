"""What every step of the loop shares: the plans (which steps a round has), `Status`, the seeds,
and `LoopContext`, the lazily loaded resources of one `advance` call (pool, models by spec,
classes, S0 / T0, score tables)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from blindspots.data.classes import Classes
from blindspots.data.segsets import SegmentationSet
from blindspots.loop.models import finetune_blocker, is_path_spec, load_spec
from blindspots.loop.next_action import NextAction
from blindspots.loop.project import Project, ProjectError
from blindspots.scan import read_score_table
from blindspots.scan.table import load_manifest

log = logging.getLogger(__name__)

STEPS = ("scan", "mine", "ratings", "select", "masks", "evaluate", "finetune")
LABEL_STEPS = ("scan", "mine", "ratings", "select", "export")
_SEED_STEPS = STEPS + ("export",)  # appended: the seeds of the other steps stay the same


@dataclass
class Status:
    """Where the loop stands after `advance`.

    state: "awaiting_ratings", "awaiting_masks", "failed", "exported" (label plan: S exported,
    waiting for the target's next version) or "finished".
    round: the current round i; step: the step waiting (or "done").
    awaited: image ids still missing an answer; done / total: answers in / needed.
    next: what a person can do next, as data (`NextAction`: `as_command(folder)` for the command
        line, `as_call()` for Python); the message says where the loop stands, never a command.
    """

    state: str
    round: int
    step: str
    message: str
    awaited: list[str] = field(default_factory=list)
    done: int = 0
    total: int = 0
    next: tuple[NextAction, ...] = ()

    @property
    def finished(self) -> bool:
        return self.state == "finished"

    def __str__(self) -> str:
        return self.message


def step_seed(seed: int, round: int, step: str) -> int:
    """The seed a step uses: derived from the project seed, the round and the step name."""
    return int(np.random.SeedSequence([int(seed), int(round), _SEED_STEPS.index(step)]).generate_state(1)[0])


def target_column(project: Project, version: int) -> str:
    """The model name of target version i in the scan folder: `<target>_v<i>`."""
    return f"{project.config.target.name}_v{int(version)}"


class LoopContext:
    """Everything a step needs, loaded lazily once per `advance` call.

    project: the open project; cfg: its config; simulate: simulated raters and annotators answer
    the human steps; progress: show progress bars. The pool, models, classes, S0 / T0 and score
    tables are loaded on first use and kept for the call.
    """

    def __init__(self, project: Project, *, simulate: bool, progress: bool) -> None:
        self.project = project
        self.cfg = project.config
        self.simulate = simulate
        self.progress = progress
        self._cache: dict[str, Any] = {}

    # -- shared resources ----------------------------------------------------------------
    @property
    def pool(self) -> Any:
        if "pool" not in self._cache:  # any pool source: a folder, an object store, shards
            self._cache["pool"] = self.cfg.open_pool()
        return self._cache["pool"]

    def segmenter(self, name: str, version: int = 0) -> Any:
        """The registered model `name` at `version`, loaded from its spec (any kind `load_model` takes)."""
        key = f"seg:{name}:{version}"
        if key not in self._cache:
            rec = self.project.registry.model(name, version)
            if is_path_spec(rec.spec) and not rec.path.exists():
                raise ProjectError(f"models.{name} (version {version}): expected its model file (checkpoint, TorchScript, "
                                   f"ONNX or folder) "
                                   f"{str(rec.path)!r}, got none")
            self._cache[key] = load_spec(rec.spec, import_dir=rec.meta.get("import_dir"),
                                         device=self.cfg.finetune.device)
        return self._cache[key]

    @property
    def classes(self) -> Classes:
        """The target's label space: the project scan's (written from the target's by the scan step), else
        (before the first scan) the target's own `.classes`, else class_0..class_{C-1}."""
        if "classes" not in self._cache:
            self._cache["classes"] = project_classes(self.project, lambda: self.segmenter(self.cfg.target.name, 0))
        return self._cache["classes"]

    @property
    def blocker(self) -> str | None:
        """Why this project cannot fine-tune (None: it can, the paper's plan)."""
        return finetune_blocker_of(self.project)

    def labelled_set(self, key: str) -> Any:
        """S0 ("train") or T0 ("val") as a SegmentationSet."""
        if key not in self._cache:
            if not getattr(self.cfg.data, key):
                raise ProjectError(f"data.{key}: expected a folder with images/ and masks/, got none "
                                   "(the project has no labelled data)")
            root = self.cfg.resolve(getattr(self.cfg.data, key))
            if not (root / "images").is_dir() or not (root / "masks").is_dir():
                raise ProjectError(f"data.{key}: expected a folder with images/ and masks/, got {str(root)!r}")
            self._cache[key] = SegmentationSet(root / "images", root / "masks", classes=self.classes)
        return self._cache[key]

    def score_table(self, round: int) -> pd.DataFrame:
        return read_score_table(self.project.scan_dir, target=target_column(self.project, round),
                                competitors=[c.name for c in self.cfg.competitors])

    def last_round(self) -> int:
        return self.cfg.project.rounds


def project_classes(project: Project, load_target: Callable[[], Any]) -> Classes:
    """The loop's label space: the project scan's manifest once it exists (the scan step writes the target's
    classes there; an adopted scan was checked against the target at `init`), so no model (nor torch) is
    loaded; before the first scan, `target_classes` of `load_target()`."""
    man = load_manifest(project.scan_dir) or {}
    if isinstance(man.get("classes"), dict):
        return Classes.from_dict(man["classes"])
    return target_classes(project, load_target())


def target_classes(project: Project, target: Any) -> Classes:
    """A loaded target's label space: its `.classes` (zoo, `classes=`), else `class_0..class_{C-1}` (what the
    scan records for a model without names). `project` is unused and kept for callers."""
    classes = getattr(target, "classes", None)
    if isinstance(classes, Classes):
        return classes
    return Classes(tuple(f"class_{k}" for k in range(int(target.num_classes))))


def finetune_blocker_of(project: Project) -> str | None:
    """Why `project` cannot fine-tune its target (one sentence), or None (`loop.models.finetune_blocker`)."""
    c = project.config
    rec = project.registry.model(c.target.name, 0)
    return finetune_blocker(rec.spec, c.target.name, [c.data.train, c.data.val], import_dir=rec.meta.get("import_dir"))


def plan(project: Project) -> tuple[str, ...]:
    """The steps of one round: STEPS (the paper's, with fine-tuning) or LABEL_STEPS (no fine-tuning)."""
    return STEPS if finetune_blocker_of(project) is None else LABEL_STEPS

"""`blindspots.Project`: the troubleshooting loop (Algorithm 1 of the MAD paper) over a project folder, as
one object a notebook holds. `Project.create` runs every check `blindspots init` runs; `advance`, `status`,
`leaderboard` and `report` are what `round`, `status`, `leaderboard` and `report` print; people's answers go
in with `import_ratings` / `import_masks`. What to do next comes back as data (`Status.next`, whose
`as_call()` names the method here)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from blindspots import loop
from blindspots.allocator import keep_freed_memory
from blindspots.config import (Config, DataSettings, FinetuneSettings, MiningSettings, ModelSettings, PoolSettings,
                               ProjectSettings, RatingSettings, SimulateSettings, TestSetSettings)
from blindspots.report import write_round_report
from blindspots.workflows.scan import Scan, named_models

__all__ = ["Project"]


def _settings(cls: type, **values: Any) -> Any:
    """`cls(**values)` without the values left None, so that those keep the defaults of `blindspots.config`."""
    return cls(**{k: v for k, v in values.items() if v is not None})


class Project:
    """A project folder: `blindspots.toml`, the store (ratings, masks, selections, model versions), the
    scan, checkpoints and reports. `answers` (candidates, ratings and masks per round), `journal` (rounds,
    steps, events) and `registry` (model versions, metrics) are its parts; `loop` is the folder's
    `blindspots.loop.Project`, which holds them."""

    def __init__(self, loop_project: loop.Project) -> None:
        self.loop = loop_project

    @classmethod
    def create(cls, path: str | Path, *, pool: str | Path, target: Mapping[str, str] | str,
               competitors: Mapping[str, str] | Sequence[str], train_data: str | Path | None = None,
               val_data: str | Path | None = None, ground_truth: str | Path | None = None,
               scan: Scan | str | Path | None = None, rounds: int | None = None, seed: int | None = None,
               strategy: str | None = None, n3: int | None = None, n4: int | None = None, raters: int | None = None,
               test_size: int | None = None, epochs: int | None = None, batch_size: int | None = None,
               lrs: Sequence[float] | None = None, base_dir: str | Path = ".") -> "Project":
        """Create a project after every check `blindspots init` runs (`blindspots.loop.create_project`).

        target / competitors: {name: spec} or 'NAME=SPEC' strings (specs as `blindspots.models.load_model`
        reads them, stored in the project). train_data / val_data: S0 and T0, folders with images/ and
        masks/ (without both, rounds export S for labelling elsewhere instead of fine-tuning).
        ground_truth: true masks of the pool, for simulated people. scan: a scan of this pool with these
        models, taken as round 0's. The settings left None keep the MAD paper's defaults
        (`blindspots.config`), but n4: None takes the paper's 100 only when a round can mine more
        candidates than that (`blindspots.loop.create_project`); relative paths are read from `base_dir`.
        """
        targets = named_models(target, "target")
        if len(targets) != 1:
            raise ValueError(f"target: expected one model as {{name: spec}} or 'NAME=SPEC', got {len(targets)}")
        (name, spec), = targets.items()
        cfg = Config(
            pool=PoolSettings(root=str(pool)), target=ModelSettings(name, str(spec)),
            competitors=[ModelSettings(n, str(s)) for n, s in named_models(competitors, "competitors").items()],
            data=DataSettings(train=str(train_data or ""), val=str(val_data or "")),
            project=_settings(ProjectSettings, name=Path(path).name, seed=seed, rounds=rounds),
            mining=_settings(MiningSettings, strategy=strategy, n3=n3),
            ratings=_settings(RatingSettings, raters=raters),
            testset=_settings(TestSetSettings, size=test_size),
            finetune=_settings(FinetuneSettings, epochs=epochs, batch_size=batch_size,
                               lrs=None if lrs is None else [float(x) for x in lrs]),
            simulate=SimulateSettings(ground_truth=str(ground_truth or "")),
            base_dir=Path(base_dir))
        folder = scan.folder if isinstance(scan, Scan) else scan
        return cls(loop.create_project(path, cfg, scan=folder, n4=n4))

    @classmethod
    def open(cls, path: str | Path) -> "Project":
        """The existing project at `path`."""
        return cls(loop.Project.open(path))

    def __repr__(self) -> str:
        return f"Project({str(self.path)!r})"

    @property
    def path(self) -> Path:
        return self.loop.path

    @property
    def config(self) -> Config:
        return self.loop.config

    @property
    def answers(self) -> loop.Answers:
        """Selections M, S, T per round, annotators, ratings, masks, votes and reviews."""
        return self.loop.answers

    @property
    def journal(self) -> loop.Journal:
        """Rounds, steps (the audit log of Algorithm 1) and events."""
        return self.loop.journal

    @property
    def registry(self) -> loop.Registry:
        """Model versions and their metrics."""
        return self.loop.registry

    def advance(self, *, simulate: bool = False, max_steps: int | None = None, progress: bool = True) -> loop.Status:
        """Run the loop until people are needed (or every round is done); the `Status` says what is awaited
        and what to do next. simulate: simulated raters and annotators answer (needs `ground_truth`).
        One run at a time per project: another running one makes this raise `blindspots.loop.ProjectBusy`.
        Like `blindspots round`, this process then keeps freed memory for the forwards
        (`blindspots.keep_freed_memory`; BLINDSPOTS_MALLOC=system leaves the allocator alone)."""
        keep_freed_memory()
        return loop.advance(self.loop, simulate=simulate, progress=progress, max_steps=max_steps)

    def status(self) -> loop.Status:
        """Where the loop stands, without running anything."""
        return loop.status(self.loop)

    def leaderboard(self) -> pd.DataFrame:
        """Table 1: every model's mIoU on T0 and on each unbiased test set T(i) (empty before the first
        evaluation)."""
        return loop.leaderboard_frame(self.loop)

    def report(self, round: int | None = None) -> Path:
        """Write the report page of `round` (default: the latest mined); returns its path."""
        return write_round_report(self.loop, round)

    def import_ratings(self, csv: str | Path, *, round: int | None = None) -> int:
        """Ratings of the candidates from a CSV (image_id, rater, score 1-5 or 'ood'); returns how many."""
        return loop.import_ratings(self.loop, Path(csv), round=round)

    def import_masks(self, source: str | Path, *, round: int | None = None, annotator: str | None = None) -> int:
        """Pixel labels of S ∪ T from a folder of index PNGs, a CVAT zip or Label Studio JSON; returns how many."""
        return loop.import_masks(self.loop, Path(source), round=round, annotator=annotator)

    def export(self, format: str, out: str | Path | None = None, *, round: int | None = None,
               **options: Any) -> Path:
        """The images awaiting masks with the target's prediction, for CVAT ('cvat') or Label Studio
        ('labelstudio'); options: `blindspots.loop.export_for_annotation`'s. Returns the file."""
        return loop.export_for_annotation(self.loop, format, out, round=round, **options)

    def register_version(self, spec: str, *, base_dir: str | Path = ".") -> int:
        """The target retrained on S in your own stack as its next version; returns the version number."""
        return loop.register_version(self.loop, spec, base_dir=base_dir)

"""`blindspots.scan(...)` and `blindspots.open_scan(folder)`: a scan folder as one object a notebook holds.

A `Scan` is a handle on a folder that `blindspots scan` (or `blindspots.scan`) wrote: its score table,
its argmax maps, mining, surprise columns, the scan page and a FiftyOne dataset are methods on it, each
calling the library function the command line calls."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.allocator import keep_freed_memory
from blindspots.batches import DEFAULT_MAX_PIXELS
from blindspots.data import DEFAULT_IGNORE_INDEX, Classes, read_classes
from blindspots.data.sources import SourceSegmentationSet, open_pool
from blindspots.integrations.fiftyone import export_to_fiftyone, import_fiftyone
from blindspots.labels import MIN_AREA, LabelReview, review_label_issues, write_label_issues
from blindspots.mine import mine_scan, write_picks
from blindspots.models import load_model
from blindspots.report import write_gallery, write_scan_report
from blindspots.scan import find_map, read_score_table, scan_pool
from blindspots.scan.manifest import load_manifest
from blindspots.surprise import score_pool

__all__ = ["Scan", "scan", "open_scan"]

ModelsArg = Mapping[str, Any]


def named_models(value: ModelsArg | Sequence[str] | str | None, argument: str) -> dict[str, Any]:
    """{name: spec or model} from a mapping, a 'NAME=SPEC' string or a list of them."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    items = [value] if isinstance(value, str) else list(value)
    out: dict[str, Any] = {}
    for item in items:
        name, sep, spec = str(item).partition("=")
        if not sep or not name or not spec:
            raise ValueError(f"{argument}: expected {{name: model or spec}} or 'NAME=SPEC' strings, got {item!r}")
        out[name] = spec
    return out


def scan(pool: Any, *, target: ModelsArg | str, out: str | Path, competitors: ModelsArg | Sequence[str] | None = None,
         batch_size: int = 16, max_pixels: int | None = DEFAULT_MAX_PIXELS, shard_size: int = 256,
         save_maps: bool = True, resize: tuple[int, int] | None = None, progress: bool = True,
         engine: str = "local", **engine_options: Any) -> "Scan":
    """Stream `pool` through the target and its competitors once; write (or resume) the scan folder `out`.

    pool: a folder, list file, URI prefix, Parquet / WebDataset shards (anything
        `blindspots.data.sources.open_pool` opens) or a pool source object.
    target: the model under test, {name: model or spec} with one entry or 'NAME=SPEC'.
    competitors: {name: model or spec} or 'NAME=SPEC' strings; a competitor already scanned into
        `out` may be given as {name: None} to reuse its columns.
    A spec is what `blindspots.models.load_model` reads (a zoo .pt, TorchScript, .onnx, a Hugging Face
    folder, 'module:function', a folder of <id>.npy); a model object needs `predict_proba(uint8
    [N, H, W, 3]) -> float32 [N, C, H, W]`. The other arguments are `blindspots.scan.scan_pool`'s
    (engine_options: ray_address, actors, gpus_per_actor for engine="ray").
    Like `blindspots scan`, this process then keeps freed memory for the forwards
    (`blindspots.keep_freed_memory`; BLINDSPOTS_MALLOC=system leaves the allocator alone).
    """
    targets = named_models(target, "target")
    if len(targets) != 1:
        raise ValueError(f"target: expected one model as {{name: model or spec}} or 'NAME=SPEC', got {len(targets)}")
    comps = named_models(competitors, "competitors")
    name = next(iter(targets))
    keep_freed_memory()  # a model-running workflow, as the CLI's MODEL_COMMANDS (blindspots.allocator)
    models = {n: load_model(m) if isinstance(m, str) else m for n, m in {**targets, **comps}.items() if m is not None}
    source = open_pool(pool) if isinstance(pool, (str, Path)) else pool
    scan_pool(source, models, out, target=name, competitors=list(comps), batch_size=batch_size,
              max_pixels=max_pixels, shard_size=shard_size, save_maps=save_maps, resize=resize, progress=progress,
              engine=engine, **engine_options)
    return Scan(out)


def open_scan(folder: str | Path) -> "Scan":
    """The scan folder `folder` (written by `blindspots scan` or `blindspots.scan`) as a `Scan`."""
    return Scan(folder)


class Scan:
    """A scan folder. `table` is its score table (one row per image); `maps(id)` the saved argmax maps;
    `mine` picks candidates; `add_surprise` adds surprise columns; `label_issues` finds errors in people's
    masks of the pool; `report` writes the scan page;
    `to_fiftyone` exports it as a FiftyOne dataset."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        manifest = load_manifest(self.folder)
        if manifest is None:
            raise ValueError(f"folder: expected a scan folder with scan.json (from `blindspots.scan`), "
                             f"got {str(folder)!r}")
        self.manifest: dict = manifest
        self._table: pd.DataFrame | None = None

    def __repr__(self) -> str:
        return f"Scan({str(self.folder)!r}, target={self.target!r}, competitors={self.competitors!r})"

    @property
    def target(self) -> str:
        """The name of the model under test."""
        return str(self.manifest["target"])

    @property
    def competitors(self) -> list[str]:
        """The names of the models it is compared with."""
        return list(self.manifest.get("competitors") or [])

    @property
    def pool_root(self) -> str:
        """Where the scanned pool was read from."""
        return str(self.manifest.get("pool_root", ""))

    @property
    def table(self) -> pd.DataFrame:
        """The score table, one row per image (columns: `blindspots.scan.schema`), read once and kept."""
        if self._table is None:
            self._table = read_score_table(self.folder)
        return self._table

    def maps(self, image_id: str) -> dict[str, np.ndarray]:
        """{model name: its argmax map of `image_id`, int [H, W] of class ids} for every model with a
        saved map; KeyError when the image is not in the scan."""
        if image_id not in set(self.table["id"]):
            raise KeyError(f"image_id: expected an id of the scan, got {image_id!r}")
        out = {}
        for name in [self.target, *self.competitors]:
            path = find_map(self.folder, name, image_id)
            if path is not None:
                with Image.open(path) as im:
                    out[name] = np.asarray(im)
        return out

    def mine(self, strategy: str = "mad", n: int = 20, *, target: str | None = None, seed: int = 0,
             out: str | Path | None = None, **settings: Any) -> pd.DataFrame:
        """The `n` images most likely to be failures by `strategy` (`blindspots.mine.sampler_names()`),
        in pick order (columns rank, id, score, reason, ...). out: also write picks.csv, picks.parquet
        and an offline gallery (index.html) there. settings: the strategy's own (n3, distance, kind, ...)."""
        picks = mine_scan(self.folder, strategy, n, target=target, seed=seed, **settings)
        if out is not None:
            write_picks(picks, out)
            write_gallery(picks, self.folder, out, title=f"{strategy}: {len(picks)} picks")
        return picks

    def add_surprise(self, estimator: str | Path, *, pool: Any = None, **options: Any) -> list[str]:
        """Add surprise columns of a fitted estimator (`blindspots.surprise.fit_estimator`) to the score
        table (resumable); returns their names. pool: where the images are now (default: the scanned
        folder). options: `blindspots.surprise.score_pool`'s (name, per_class, seed, engine, ...). Keeps
        freed memory for the forwards, as `blindspots surprise` does (`blindspots.keep_freed_memory`)."""
        keep_freed_memory()
        columns = score_pool(pool if pool is not None else self.pool_root, estimator, scan=self.folder, **options)
        self._table = None  # the table has new columns
        return list(columns)

    def label_issues(self, masks: str | Path, model: Any, *, out: str | Path | None = None, pool: Any = None,
                     classes: Classes | str | Path | None = None, **options: Any) -> LabelReview:
        """Annotation errors in people's masks of the scanned pool (confident learning for segmentation,
        `blindspots.labels`): the images ranked worst first (`.images`) and the flagged pixels grouped into
        typed regions (`.regions`).

        A scan holds the models' predictions, not labels: masks is a folder of the pool's label masks, index
        PNGs named `<image id without extension>.png`; only the images with a mask take part. model: the
        model whose probabilities judge the labels, a spec or a model object (usually the scan's target; a
        scan keeps no model). pool: where the images are now (default: the scanned folder). classes: the
        label space (a `blindspots.data.Classes` or a classes file; default: the scan's, for names, ignore
        value and colours). out: also write the folder the `label-issues` command writes (images.csv,
        regions.csv, summary.json, issues/<id>.png, worst.png; `blindspots.labels.write_label_issues`).
        options: `blindspots.labels.write_label_issues`'s (downsample, background, min_area, top, ...)."""
        if masks is None:
            raise ValueError("masks: expected a folder of label masks of the pool's images (<id stem>.png), "
                             "got None (a scan holds predictions, not labels)")
        if isinstance(classes, (str, Path)):
            classes = read_classes(classes)
        elif classes is None and self.manifest.get("classes"):
            classes = Classes.from_dict(self.manifest["classes"])
        source = pool if pool is not None and not isinstance(pool, (str, Path)) else open_pool(pool or self.pool_root)
        try:
            dataset = SourceSegmentationSet(source, masks, classes=classes)
        except ValueError as err:  # the set names its own argument (masks_dir); here it is masks
            if not str(err).startswith("masks_dir:"):
                raise
            raise ValueError("masks:" + str(err).removeprefix("masks_dir:")) from None
        segmenter = load_model(model) if isinstance(model, (str, Path)) else model
        look = {"ignore_index": classes.ignore_index if classes is not None else DEFAULT_IGNORE_INDEX,
                "verbose": False, "min_area": MIN_AREA, **options}  # the folder's defaults, with or without one
        if out is None:
            return review_label_issues(model=segmenter, dataset=dataset, **look)
        names = classes.names if classes is not None else None
        palette = classes.palette if classes is not None else None
        return write_label_issues(out, model=segmenter, dataset=dataset, class_names=names, palette=palette,
                                  **look)[0]

    def report(self, out: str | Path | None = None, **options: Any) -> Path:
        """Write the scan page (default: `<folder>/report/index.html`); returns its path."""
        return write_scan_report(self.folder, out if out is not None else self.folder / "report", **options)

    def to_fiftyone(self, name: str, **options: Any) -> Any:
        """Export the scan as the FiftyOne dataset `name` (needs `pip install 'blindspots[fiftyone]'`)
        and return the dataset."""
        export_to_fiftyone(self.folder, name, **options)
        return import_fiftyone().load_dataset(name)

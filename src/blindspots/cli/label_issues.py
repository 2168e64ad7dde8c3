"""`blindspots label-issues`: find annotation errors in a labelled segmentation set."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.pool_options import open_cli_pool, storage_option_option
from blindspots.data import DEFAULT_IGNORE_INDEX, open_segset, read_classes
from blindspots.data.sources import SourceSegmentationSet

# Lazy imports: matplotlib, pandas, scipy, torch (`blindspots --help` starts without them).

_LAYOUT_HELP = ("Label layout: index (default: --images/--masks, or DATA/images + DATA/masks), voc (VOC2012: "
                "JPEGImages, SegmentationClass, --ids train|val|FILE), cityscapes (leftImg8bit + gtFine labelIds "
                "or labelTrainIds), ade20k (reduce-zero-label).")


def _read_ids(ids: Optional[str]) -> Optional[list[str]]:
    """--ids for saved arrays: a file of row ids, one per line."""
    if ids is None:
        return None
    path = Path(ids)
    if not path.is_file():
        raise ValueError(f"--ids: expected a file with one id per line for --labels/--probs, got {ids!r}")
    return [s.strip() for s in path.read_text().splitlines() if s.strip()]


def _is_source(images: str) -> bool:
    """True when --images is a pool source other than a plain folder (a URI, a shard pattern or file, a
    Hugging Face save_to_disk folder)."""
    p = Path(images)
    return "://" in images or any(c in images for c in "*?[{") or p.is_file() or (p / "state.json").is_file()


def _source_set(images: str, masks: Path, classes: Optional[Path], ids: Optional[str], storage_option: list[str]):  # noqa: ANN202

    subset = _read_ids(ids) if ids else None
    return SourceSegmentationSet(open_cli_pool(images, storage_option=storage_option), masks,
                                 classes=read_classes(classes) if classes else None, ids=subset)


def label_issues(
    data: Optional[Path] = typer.Option(None, "--data", help="Dataset root for --layout (with --model)."),
    layout: str = typer.Option("index", "--layout", help=_LAYOUT_HELP),
    images: Optional[str] = typer.Option(None, "--images", help="Folder of images (with --masks and --model), or any "
                                         "pool source: an s3:// / gs:// prefix, Parquet or WebDataset shards, a "
                                         "Hugging Face folder (docs/pools.md); masks are then <id stem>.png."),
    storage_option: list[str] = storage_option_option(),
    masks: Optional[Path] = typer.Option(None, "--masks", help="Folder of masks paired with --images by the id rule "
                                         "(a.jpg <-> a.png; a scan's maps/<model> folder works)."),
    classes: Optional[Path] = typer.Option(None, "--classes", help="Classes file: names in id order, optional "
                                           "colours, 'ignore_index N' (see blindspots.data.classfile); also "
                                           "with --labels/--probs."),
    split: Optional[str] = typer.Option(None, "--split", help="Layout sub-folder, e.g. train or val."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model SPEC: a .pt zoo checkpoint, TorchScript, "
                                        ".onnx, 'module:function' or a folder of <id>.npy probabilities."),
    labels: Optional[Path] = typer.Option(None, "--labels", help="Saved labels int [N,H,W] as .npy (with --probs) "
                                          "instead of --images/--masks/--model."),
    probs: Optional[Path] = typer.Option(None, "--probs", help="Saved probabilities float [N,K,H,W] as .npy "
                                         "(read in chunks; never loaded whole)."),
    ids: Optional[str] = typer.Option(None, "--ids", help="With a dataset: the ids to use (a list file, or a VOC "
                                      "split name). With --labels/--probs: a file naming the rows (default 0..N-1)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder: images.csv, regions.csv, issues/<id>.png, "
                             "worst.png, summary.json."),
    downsample: int = typer.Option(1, help="Block size for find_label_issues (cleanlab default 1)."),
    ignore_index: Optional[int] = typer.Option(None, help="Mask value for unlabelled pixels, never flagged "
                                               "(default: the classes' ignore value, else 255)."),
    no_ignore: bool = typer.Option(False, "--no-ignore", help="Treat every mask value as a class id."),
    background: list[int] = typer.Option([0], "--background", help="Background class id(s) for region types; "
                                         "repeat for several."),
    min_area: int = typer.Option(16, help="Smallest region (pixels) reported in regions.csv."),
    top: int = typer.Option(8, help="Images in the worst.png figure (0: no figure)."),
    fmt: str = typer.Option("csv", "--format", help="Table format: csv or parquet."),
    batch_size: int = typer.Option(8, help="Images per forward pass of --model."),
    cache_dir: Optional[Path] = typer.Option(None, help="Folder for per-pixel statistics; reuse it to resume an "
                                             "interrupted model pass (rebuilt when --model or the image ids "
                                             "differ; default: temporary)."),
    write_masks: bool = typer.Option(True, "--masks-out/--no-masks-out", help="Write issues/<id>.png."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    """Rank images by label quality, flag mislabelled pixels and group them into typed regions
    (confident learning for segmentation; cleanlab-compatible). Images may differ in size."""
    from blindspots.labels import write_label_issues

    if fmt not in ("csv", "parquet"):
        raise typer.BadParameter(f"expected csv or parquet, got {fmt!r}", param_hint="--format")
    use_arrays = labels is not None or probs is not None
    has_data = data is not None or (images is not None and masks is not None)
    if use_arrays == (model is not None) or (use_arrays and (labels is None or probs is None)) or \
            (model is not None and not has_data):
        raise typer.BadParameter("give either --labels and --probs, or --model with --images and --masks "
                                 "(or --data with --layout)", param_hint="--labels/--model")
    dataset = seg_model = None
    row_ids = None
    if model is not None:
        from blindspots.models import load_model

        if images is not None and masks is not None and _is_source(images):  # images from a store or shards
            dataset = _source_set(images, masks, classes, ids, storage_option)
        else:
            dataset = open_segset(data or Path("."), layout=layout, ids=ids, classes=classes, split=split,
                                  images=None if images is None else Path(images), masks=masks)
        seg_model = load_model(model)
        row_ids = list(dataset.ids)
    else:
        row_ids = _read_ids(ids)
    ds_classes = getattr(dataset, "classes", None)
    if classes is not None and dataset is None:  # saved arrays: the file's ignore value, colours and names

        ds_classes = read_classes(classes)
    names = ds_classes.names if ds_classes is not None else getattr(getattr(seg_model, "classes", None), "names", None)
    ign = None if no_ignore else ignore_index if ignore_index is not None else \
        ds_classes.ignore_index if ds_classes is not None else DEFAULT_IGNORE_INDEX
    review, summary = write_label_issues(
        out, labels, probs, model=seg_model, dataset=dataset, ids=row_ids, ignore_index=ign, class_names=names,
        palette=None if ds_classes is None else ds_classes.palette, top=top, fmt=fmt, write_masks=write_masks,
        downsample=downsample, background=background, min_area=min_area, model_batch_size=batch_size,
        cache_dir=cache_dir, verbose=progress)
    typer.echo(f"{summary['num_images']} images, {summary['flagged_pixels']} flagged pixels, "
               f"{len(review.regions)} regions -> {', '.join(summary['files'])}")
    for r in review.images.head(5).itertuples():
        typer.echo(f"  #{r.rank} {r.id}: score {r.image_score:.4f}, {r.issue_pixels} flagged pixels, {r.regions} regions")


def register(app: typer.Typer) -> None:
    """Add the `label-issues` command."""
    app.command("label-issues", help="Find annotation errors in a labelled segmentation set with a model "
                "(or saved probabilities): ranked images, issue masks, typed regions, a figure.")(label_issues)

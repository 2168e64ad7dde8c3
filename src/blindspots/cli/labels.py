"""`blindspots label-issues`: find annotation errors in a labelled segmentation set."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def _save_table(df, path: Path, fmt: str) -> Path:
    p = path.with_suffix(f".{fmt}")
    if fmt == "parquet":
        df.to_parquet(p, index=False)
    else:
        df.to_csv(p, index=False)
    return p


def label_issues(
    images: Optional[Path] = typer.Option(None, "--images", help="Folder of images (with --masks and --model)."),
    masks: Optional[Path] = typer.Option(None, "--masks", help="Folder of index/colour PNG masks paired with --images "
                                         "by relative path stem."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model SPEC: a .pt zoo checkpoint, TorchScript, "
                                        ".onnx, 'module:function' or a folder of <id>.npy probabilities."),
    labels: Optional[Path] = typer.Option(None, "--labels", help="Saved labels int [N,H,W] as .npy (with --probs) "
                                          "instead of --images/--masks/--model."),
    probs: Optional[Path] = typer.Option(None, "--probs", help="Saved probabilities float [N,K,H,W] as .npy "
                                         "(read in chunks; never loaded whole)."),
    ids_file: Optional[Path] = typer.Option(None, "--ids", help="Text file with one image id per line "
                                            "(for --labels/--probs; default 0..N-1)."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder: images.csv, regions.csv, issues/<id>.png, "
                             "worst.png, summary.json."),
    downsample: int = typer.Option(1, help="Block size for find_label_issues (cleanlab default 1)."),
    ignore_index: int = typer.Option(255, help="Mask value for unlabelled pixels (never flagged)."),
    no_ignore: bool = typer.Option(False, "--no-ignore", help="Treat every mask value as a class id."),
    background: list[int] = typer.Option([0], "--background", help="Background class id(s) for region types; "
                                         "repeat for several."),
    min_area: int = typer.Option(16, help="Smallest region (pixels) reported in regions.csv."),
    top: int = typer.Option(8, help="Images in the worst.png figure (0: no figure)."),
    fmt: str = typer.Option("csv", "--format", help="Table format: csv or parquet."),
    batch_size: int = typer.Option(8, help="Images per forward pass of --model."),
    cache_dir: Optional[Path] = typer.Option(None, help="Folder for per-pixel statistics; reuse it to resume an "
                                             "interrupted model pass (default: temporary)."),
    write_masks: bool = typer.Option(True, "--masks-out/--no-masks-out", help="Write issues/<id>.png."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    """Rank images by label quality, flag mislabelled pixels and group them into typed regions
    (confident learning for segmentation; cleanlab-compatible)."""
    from blindspots.labels.review import mask_png_writer, review_label_issues

    if fmt not in ("csv", "parquet"):
        raise typer.BadParameter(f"expected csv or parquet, got {fmt!r}", param_hint="--format")
    use_arrays = labels is not None or probs is not None
    use_model = images is not None or masks is not None or model is not None
    if use_arrays == use_model or (use_arrays and (labels is None or probs is None)) or \
            (use_model and (images is None or masks is None or model is None)):
        raise typer.BadParameter("give either --labels and --probs, or --images, --masks and --model",
                                 param_hint="--labels/--model")
    ign = None if no_ignore else ignore_index
    out.mkdir(parents=True, exist_ok=True)
    try:
        dataset = seg_model = None
        ids = None
        if use_model:
            from blindspots.data.segsets import SegmentationSet
            from blindspots.models.load import load_model

            dataset = SegmentationSet(images, masks)
            seg_model = load_model(model)
            ids = list(dataset.ids)
        elif ids_file is not None:
            ids = [s for s in ids_file.read_text().splitlines() if s.strip()]
        on_mask = mask_png_writer(out / "issues", ids) if write_masks else None
        review = review_label_issues(labels, probs, model=seg_model, dataset=dataset, ids=ids, downsample=downsample,
                                     ignore_index=ign, background=background, min_area=min_area,
                                     model_batch_size=batch_size, cache_dir=cache_dir, verbose=progress,
                                     on_mask=on_mask)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    img_path = _save_table(review.images, out / "images", fmt)
    reg_path = _save_table(review.regions, out / "regions", fmt)
    summary = {"num_images": len(review.images), "estimated_issues": review.num_issues,
               "flagged_pixels": int(review.images.issue_pixels.sum()),
               "confident_thresholds": [float(t) for t in review.thresholds],
               "regions_by_kind": review.regions.kind.value_counts().to_dict() if len(review.regions) else {},
               "common_confusions": (review.regions.groupby(["given_label", "predicted_label"]).area.sum()
                                     .sort_values(ascending=False).head(20).reset_index()
                                     .astype(int).to_dict(orient="records") if len(review.regions) else [])}
    if top > 0 and len(review.images):
        from blindspots.labels.figures import worst_images_figure

        fig = worst_images_figure(review, top=top, labels=labels, probs=probs, dataset=dataset, model=seg_model, ids=ids,
                                  issues_dir=out / "issues" if write_masks else None, ignore_index=ign)
        fig.savefig(out / "worst.png", dpi=80)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    worst = review.images.head(5)
    typer.echo(f"{summary['num_images']} images, {summary['flagged_pixels']} flagged pixels, "
               f"{len(review.regions)} regions -> {img_path}, {reg_path}")
    for r in worst.itertuples():
        typer.echo(f"  #{r.rank} {r.id}: score {r.image_score:.4f}, {r.issue_pixels} flagged pixels, {r.regions} regions")


def register(app: typer.Typer) -> None:
    """Add the `label-issues` command."""
    app.command("label-issues", help="Find annotation errors in a labelled segmentation set with a model "
                "(or saved probabilities): ranked images, issue masks, typed regions, a figure.")(label_issues)

"""`blindspots surprise fit|score|analyze|view`: surprise adequacy (LSA, MDSA, DSA) from the command line."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.pool_options import (POOL_HELP, format_option, image_column_option, list_column_option,
                                         list_file_option, open_cli_pool, storage_option_option)

# Lazy imports: matplotlib, pandas, scipy, torch (`blindspots --help` starts without them).

surprise_app = typer.Typer(help="Surprise adequacy (LSA, MDSA, DSA): fit per-class SA models on a labelled set, "
                           "score pools, reproduce Table 3 / Figure 9, draw Figure 6 panels and videos.",
                           no_args_is_help=True)


FEATURES_HELP = ("Feature maps from elsewhere: a folder of <image id>.npy arrays (float [D, h, w] or [D], the "
                 "id's extension replaced by .npy) or 'module:function' returning [N, D, h, w] / [N, D]; the "
                 "model then only gives the predictions (any kind, also ONNX, TorchScript or precomputed).")


def _parse_groups(values: list[str]) -> dict[str, list[int]] | None:
    if not values:
        return None
    groups = {}
    for v in values:
        name, sep, ids = v.partition("=")
        try:
            groups[name] = [int(i) for i in ids.split(",") if i.strip()]
        except ValueError:
            raise typer.BadParameter(f"expected NAME=ID,ID,... (e.g. lanes=1,2,3), got {v!r}",
                                     param_hint="--group") from None
        if not sep or not name or not groups[name]:
            raise typer.BadParameter(f"expected NAME=ID,ID,... (e.g. lanes=1,2,3), got {v!r}", param_hint="--group")
    return groups


@surprise_app.command("fit")
def fit(
    model: str = typer.Argument(..., help="Segmentation model spec (docs/models.md): torch and ONNX models give the "
                                "features themselves (ONNX: --layer names an intermediate tensor); other kinds "
                                "need --features."),
    images: Path = typer.Option(..., help="Folder of training images."),
    masks: Path = typer.Option(..., help="Folder of index-PNG masks matching the images."),
    out: Path = typer.Option(..., "--out", "-o", help="Estimator file to write (.npz; settings go to a .json beside it)."),
    kind: str = typer.Option("mdsa", help="Estimator: mdsa (default), lsa or dsa."),
    layer: Optional[str] = typer.Option(None, help="Torch: module name (NAME or NAME@input; default: input of the "
                                        "final classifier). ONNX: an intermediate tensor name, e.g. "
                                        "/backbone/layer3/Relu_output_0 (required)."),
    features: Optional[str] = typer.Option(None, help=FEATURES_HELP),
    interpolation: str = typer.Option("bilinear", help="How features are upsampled to output pixels (as the logits)."),
    max_images: int = typer.Option(10_000, help="Training images sampled (paper: 10,000)."),
    per_class: int = typer.Option(100, help="Pixels per label class per image (paper: 100)."),
    cap: int = typer.Option(10_000, help="Traces kept per class (paper: 10,000)."),
    seed: int = typer.Option(0, help="Random seed for image and pixel sampling."),
    batch_size: int = typer.Option(16, help="Images per forward pass."),
) -> None:
    """Fit one SA model per class on traces sampled from a labelled training set (resumable)."""
    from blindspots.surprise import fit_estimator

    est = fit_estimator(model, images, masks, out, kind=kind, layer=layer, features=features,
                        interpolation=interpolation, max_images=max_images, per_class=per_class, cap=cap, seed=seed,
                        batch_size=batch_size)
    meta = json.loads(out.with_suffix(".json").read_text())
    source = f"layer {meta['layer']}" if meta["layer"] is not None or not features else f"features {features}"
    typer.echo(f"fitted {kind} on {meta['traces']} traces of {len(est.classes_)} classes ({source}) -> {out}")


@surprise_app.command("score")
def score(
    pool: str = typer.Argument(..., help=POOL_HELP),
    estimator: Path = typer.Option(..., "--estimator", "-e", help="Estimator .npz written by `surprise fit`."),
    list_file: Optional[str] = list_file_option(),
    list_column: Optional[str] = list_column_option(),
    pool_format: Optional[str] = format_option(),
    image_column: Optional[str] = image_column_option(),
    storage_option: list[str] = storage_option_option(),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Parquet file of surprise columns (id + surprise_*)."),
    scan: Optional[Path] = typer.Option(None, "--scan", help="A scan folder of this pool: add the columns to its score "
                                        "table (extra/surprise_<kind>__<name>/, resumable) instead of --out."),
    model: Optional[str] = typer.Option(None, help="Model spec (default: the one recorded at fit)."),
    name: Optional[str] = typer.Option(None, help="Model name used in the column names "
                                       "surprise_{kind}__{name}[__{k}] (default: with --scan the scan's target, "
                                       "so `mine -s surprise --target` finds them; else 'target')."),
    features: Optional[str] = typer.Option(None, help="Feature source of this pool (default: the one recorded at "
                                           "fit). " + FEATURES_HELP),
    per_class: int = typer.Option(1000, help="Pixels scored per predicted class per image (paper: 1,000)."),
    seed: int = typer.Option(0, help="Random seed for pixel sampling."),
    batch_size: int = typer.Option(16, help="Images per forward pass."),
    engine: str = typer.Option("local", help="With --scan: 'local' or 'ray' (one Ray task per shard; every node "
                               "needs the estimator, the model and the pool at the same paths, see docs/ray.md)."),
    address: Optional[str] = typer.Option(None, help="With --engine ray: the Ray cluster ('auto', 'HOST:6379', "
                                          "'ray://HOST:10001'); default: a new local Ray."),
) -> None:
    """Score every image of a pool: image SA and class SA columns for the score table."""
    from blindspots.surprise import score_pool

    image_pool = open_cli_pool(pool, list_file=list_file, list_column=list_column, pool_format=pool_format,
                               image_column=image_column, storage_option=storage_option)
    result = score_pool(image_pool, estimator, scan=scan, out=out, model=model, name=name, features=features,
                        per_class=per_class, seed=seed, batch_size=batch_size, engine=engine, address=address)
    if scan is not None:
        part = {c.split("__")[0] + "__" + c.split("__")[1] for c in result}
        typer.echo(f"added {len(result)} surprise columns to the score table of {scan} (extra/{', '.join(sorted(part))})")
        return
    n_bad = int((result["status"] != "ok").sum())
    typer.echo(f"scored {len(result) - n_bad} images ({n_bad} unreadable) -> {out}")


@surprise_app.command("analyze")
def analyze(
    images: Path = typer.Option(..., help="Folder of labelled test images."),
    masks: Path = typer.Option(..., help="Folder of index-PNG masks."),
    estimator: list[Path] = typer.Option(..., "--estimator", "-e", help="Estimator .npz; repeat (e.g. LSA and MDSA)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for table3.csv, figure9.png and the trade-off CSV."),
    model: Optional[str] = typer.Option(None, help="Model spec (default: the one recorded at fit)."),
    features: Optional[str] = typer.Option(None, help="Feature source (default: the one recorded at fit)."),
    group: list[str] = typer.Option([], help="Class group NAME=ID,ID,... (repeat); default: one group per class."),
    per_class: int = typer.Option(1000, help="Pixels scored per predicted class per image (paper: 1,000)."),
    seed: int = typer.Option(0, help="Random seed for pixel sampling."),
    batch_size: int = typer.Option(16, help="Images per forward pass."),
) -> None:
    """Table 3 (Spearman SA vs IoU with p-values) and Figure 9 (label-saving trade-off, first estimator)."""
    from blindspots.surprise.analysis import write_table3

    table = write_table3(images, masks, estimator, out, model=model, features=features, groups=_parse_groups(group),
                         per_class=per_class, seed=seed, batch_size=batch_size)
    typer.echo(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    typer.echo(f"-> {out / 'table3.csv'}, {out / 'figure9.png'}")


@surprise_app.command("view")
def view(
    images: Path = typer.Argument(..., help="Folder of images (frames are taken in id order)."),
    estimator: Path = typer.Option(..., "--estimator", "-e", help="Estimator .npz written by `surprise fit`."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for one PNG panel per image (Figure 6)."),
    masks: Optional[Path] = typer.Option(None, help="Folder of label masks (adds label and difference tiles)."),
    video: Optional[Path] = typer.Option(None, help="Also write the panels as an MP4 video to this file."),
    maps: Optional[Path] = typer.Option(None, "--maps", help="Also save each image's per-pixel SA as MAPS/<id>.npy "
                                        "(float32 [H, W], NaN where the predicted class has no model; "
                                        "`blindspots fiftyone --surprise-maps` shows them)."),
    model: Optional[str] = typer.Option(None, help="Model spec (default: the one recorded at fit)."),
    features: Optional[str] = typer.Option(None, help="Feature source (default: the one recorded at fit)."),
    threshold: Optional[float] = typer.Option(None, help="SA threshold for the 'above' tile (default: 90th pct)."),
    limit: int = typer.Option(200, help="At most this many images."),
    fps: float = typer.Option(5.0, help="Video frame rate."),
    batch_size: int = typer.Option(16, help="Images per forward pass."),
) -> None:
    """Draw Figure 6 panels (input, label, prediction, difference, SA above threshold, SA heatmap)."""
    from blindspots.surprise.views import write_panels

    n, skipped = write_panels(images, estimator, out, masks=masks, video=video, maps=maps, model=model,
                              features=features, threshold=threshold, limit=limit, fps=fps, batch_size=batch_size)
    if skipped:
        typer.echo(f"skipped {len(skipped)} unreadable image(s): {', '.join(skipped[:5])}"
                   + (" ..." if len(skipped) > 5 else ""), err=True)
    typer.echo(f"wrote {n} panels -> {out}" + (f" and {video}" if video else "")
               + (f"; SA maps -> {maps}" if maps is not None else ""))


def register(app: typer.Typer) -> None:
    """Add the `surprise` command group."""
    app.add_typer(surprise_app, name="surprise")

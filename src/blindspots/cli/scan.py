"""`blindspots scan`: stream a pool through a target and competitors, write the score table."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.batches import DEFAULT_MAX_PIXELS
from blindspots.cli.pool_options import (POOL_HELP, format_option, image_column_option, list_column_option,
                                         list_file_option, open_cli_pool, storage_option_option)

# Lazy imports: pandas, torch (`blindspots --help` starts without them).


def _named_spec(value: str, option: str) -> tuple[str, str]:
    name, sep, spec = value.partition("=")
    if not sep or not name or not spec:
        raise typer.BadParameter(f"expected NAME=SPEC (e.g. deeplab=models/deeplab.onnx), got {value!r}",
                                 param_hint=option)
    return name, spec


def scan(
    pool: str = typer.Argument(..., help=POOL_HELP),
    target: str = typer.Option(..., "--target", "-t", help="The model under test, as NAME=SPEC. SPEC: a .pt zoo "
                               "checkpoint, a TorchScript .ts/.pt, an .onnx file, 'module:function', or a folder "
                               "of <id>.npy probabilities; options after '?', e.g. m.onnx?output=probabilities."),
    competitor: list[str] = typer.Option([], "--competitor", "-c", help="A competing model as NAME=SPEC; repeat "
                                         "for several. NAME alone reuses a competitor already scanned into --out."),
    out: Path = typer.Option(..., "--out", "-o", help="Scan folder (created; an existing scan there is resumed)."),
    batch_size: str = typer.Option("16", help="At most this many images per forward pass, or 'auto': as many as "
                                   "the GPU's free memory holds (logged; 16 without a GPU)."),
    max_pixels: int = typer.Option(DEFAULT_MAX_PIXELS, help="At most this many pixels per forward pass (images "
                                   "of one size are batched up to it; a larger image goes alone): bounds the "
                                   "scan's memory on large photos. 0: no pixel budget."),
    shard_size: int = typer.Option(256, help="Images per Parquet shard (the unit of resuming)."),
    maps: bool = typer.Option(True, "--maps/--no-maps", help="Save each model's argmax map as an index PNG."),
    resize: Optional[str] = typer.Option(None, help="Resize every image to HxW (e.g. 128x128) before inference; "
                                         "default: native size, batched per size."),
    list_file: Optional[str] = list_file_option(),
    list_column: Optional[str] = list_column_option(),
    pool_format: Optional[str] = format_option(),
    image_column: Optional[str] = image_column_option(),
    storage_option: list[str] = storage_option_option(),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    engine: str = typer.Option("local", help="'local' (threads on this machine) or 'ray' (Ray Data tasks and "
                               "actors; pip install 'blindspots\\[ray]'; see docs/ray.md)."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address for --engine ray (e.g. 'auto' on a "
                                          "cluster node, or HOST:6379); default: a local Ray on this machine."),
    actors: Optional[int] = typer.Option(None, help="Model actors for --engine ray (each loads every model once); "
                                         "default: one per CPU of the cluster."),
    gpus_per_actor: Optional[float] = typer.Option(None, help="GPUs each model actor asks Ray for with --engine ray "
                                                   "(e.g. 1, or 0.5 for two actors per GPU); its models then run "
                                                   "on that GPU (device=auto). Default: none (CPU)."),
    decode_workers: Optional[int] = typer.Option(None, help="Threads that decode the images (--engine local); "
                                                 "default: one per core, at most 4."),
) -> None:
    """Scan POOL with a target and competitors (MAD Algorithm 1, steps 2-4 and 7-9)."""
    from blindspots.models import load_model
    from blindspots.scan import read_score_table, scan_pool, schema

    size = None
    if resize:
        h, sep, w = resize.lower().partition("x")
        if not sep or not h.isdigit() or not w.isdigit():
            raise typer.BadParameter(f"expected HxW, got {resize!r}", param_hint="--resize")
        size = (int(h), int(w))
    t_name, t_spec = _named_spec(target, "--target")
    models = {t_name: load_model(t_spec)}
    competitors = []
    for value in competitor:
        if "=" in value:
            name, spec = _named_spec(value, "--competitor")
            models[name] = load_model(spec)
        else:
            name = value
        competitors.append(name)
    image_pool = open_cli_pool(pool, list_file=list_file, list_column=list_column, pool_format=pool_format,
                               image_column=image_column, storage_option=storage_option)
    batch: int | str = int(batch_size) if batch_size.strip().isdigit() else batch_size  # "auto": scan_pool checks
    scan_pool(image_pool, models, out, target=t_name, competitors=competitors, batch_size=batch,
              max_pixels=max_pixels or None, shard_size=shard_size, save_maps=maps, resize=size, progress=progress,
              engine=engine, ray_address=address, actors=actors, gpus_per_actor=gpus_per_actor,
              decode_workers=decode_workers)
    table = read_score_table(out)
    n_err = int((table[schema.STATUS] == schema.STATUS_ERROR).sum())
    # error rows: unreadable files, refused links, and images a model failed on (see the `error` column)
    typer.echo(f"scanned {len(table)} images ({n_err} with errors) with {len(models)} model(s) -> {out}")
    errors = table[table[schema.STATUS] == schema.STATUS_ERROR]
    for image_id, error in list(zip(errors[schema.ID], errors[schema.ERROR]))[:5]:  # why, without --verbose
        typer.echo(f"  {image_id}: {error}")
    if n_err > 5:
        typer.echo(f"  ... and {n_err - 5} more (the `error` column of the score table)")


def register(app: typer.Typer) -> None:
    """Add the `scan` command."""
    app.command("scan", help="Stream a pool through a target and competitors; write the score table "
                "(Parquet shards, resumable) and argmax maps.")(scan)

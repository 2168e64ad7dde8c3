"""`blindspots mine`: pick the images of a scan most likely to be failures; write picks and a gallery."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.data.sources import ImagePool

# Lazy imports: jinja2, matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without
# them).


def mine(
    scan_dir: Path = typer.Argument(..., help="A scan folder written by `blindspots scan`."),
    strategy: str = typer.Option("mad", "--strategy", "-s", help="mad (target vs competitors, the paper), madplus "
                                 "(MAD plus a share for failures every model shares), entropy (least certain "
                                 "target), margin, bald, powerbald, coreset, badge (need --model once), surprise (needs "
                                 "`blindspots surprise score --scan` first) or random (the control)."),
    n: int = typer.Option(20, "-n", help="How many images to pick."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for picks.csv, picks.parquet and index.html "
                             "(created)."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="The scanned model under test (default: the "
                                         "scan's target)."),
    seed: int = typer.Option(0, help="Random seed (random, powerbald, badge, coreset's first pick; the others are "
                             "deterministic)."),
    distance: str = typer.Option("pixel", help="MAD distance: pixel (1 - pixel agreement) or miou (1 - mIoU)."),
    n3: int = typer.Option(25, help="MAD: images kept per (competitor, class, direction); the paper's 25."),
    kind: str = typer.Option("mdsa", help="surprise: which surprise columns (mdsa, lsa, dsa)."),
    model: Optional[str] = typer.Option(None, "--model", help="margin, bald, powerbald, coreset, badge: the target's "
                                        "model spec, run once over the pool to add the columns they read (margin, MC "
                                        "dropout, features, gradients) when the scan lacks them."),
    dropout: Optional[float] = typer.Option(None, help="bald, powerbald: for a model without dropout layers, "
                                            "dropout p on its classifier layer's input during the MC passes "
                                            "(default: refuse such a model)."),
    mc_passes: int = typer.Option(20, help="bald, powerbald: MC-dropout passes T (Gal et al. 2017: 20)."),
    pool: Optional[Path] = typer.Option(None, help="Where the pool's images are now (default: the folder that "
                                        "was scanned)."),
    gallery: bool = typer.Option(True, "--gallery/--no-gallery", help="Write index.html with thumbnails."),
) -> None:
    """Pick N images of SCAN_DIR with a strategy; write OUT/picks.csv, OUT/picks.parquet, OUT/index.html."""
    from blindspots.mine import mine_scan, write_picks

    settings = {"mad": {"distance": distance, "n3": n3}, "madplus": {"distance": distance, "n3": n3},
                "surprise": {"kind": kind}}.get(strategy, {})
    if n < 1:
        raise ValueError(f"-n: expected a positive number of images, got {n}")
    _check_scan_fits(scan_dir, strategy, kind)
    _add_model_columns(scan_dir, strategy, target, model, pool, dropout, mc_passes)
    picks = mine_scan(scan_dir, strategy, n, target=target, seed=seed, **settings)
    csv, _ = write_picks(picks, out)
    typer.echo(f"picked {len(picks)} image(s) with {strategy} -> {csv} (and picks.parquet)")
    if gallery:
        from blindspots.report import write_gallery

        label, intro = _score_words(strategy, distance, kind, seed)
        index = write_gallery(picks, scan_dir, out, pool_root=pool, title=f"{strategy}: {len(picks)} picks",
                              score_label=label, intro=intro)
        typer.echo(f"gallery: {index}")


def _add_model_columns(scan_dir: Path, strategy: str, target: Optional[str], model: Optional[str],
                       pool: Optional[Path], dropout: Optional[float], mc_passes: int) -> None:
    """Strategies that need the model (margin, BALD, core-set): add their columns to the scan once."""
    from blindspots.mine import missing_kinds, needs_model, sampler_names
    from blindspots.scan import load_manifest

    manifest = load_manifest(scan_dir)
    if manifest is None or strategy not in sampler_names():
        return  # mine_scan names the problem
    name = target or manifest["target"]
    missing = missing_kinds(scan_dir, name, needs_model(strategy))
    if not missing:
        return
    if model is None:
        raise ValueError(f"--model: strategy {strategy!r} reads {missing} columns of {name!r} that the scan lacks; "
                         f"pass the model's spec (--model SPEC) to compute them once over the pool")
    from blindspots.mine.model_columns.acquisition import add_acquisition_columns  # torch: only when columns are missing
    from blindspots.models import load_model

    root = pool or Path(manifest["pool_root"])
    add_acquisition_columns(scan_dir, ImagePool(root), load_model(model), name, kinds=missing, mc_passes=mc_passes,
                            dropout=dropout)


def _score_words(strategy: str, distance: str, kind: str, seed: int) -> tuple[str | None, str]:
    """(what the gallery calls each pick's score, or None to show none; one sentence on the order)."""
    if strategy == "random":  # the score is the draw's uniform key: meaningless to a reader
        return None, f"Random picks in the order drawn (seed {seed}): the control at the same budget; no score."
    if strategy in ("mad", "madplus"):
        what = "share of pixels labelled differently" if distance == "pixel" else "1 - mIoU of the two maps"
        if strategy == "madplus":
            return (f"MAD distance ({what}) or shared-doubt rank", "MAD's list interleaved with images where the "
                    "models agree but are all unsure (MAD+); each reason says which part picked it.")
        return f"MAD distance ({what})", "Ordered by MAD: the best rank in any (competitor, class) list first."
    if strategy == "entropy":
        return "mean per-pixel entropy (nats)", "Ordered by the target's mean entropy, most uncertain first."
    if strategy == "margin":
        return "1 - mean margin (best minus second-best probability)", "Smallest mean margin first."
    if strategy in ("bald", "powerbald"):
        order = "Highest BALD first." if strategy == "bald" else "Drawn with probability ~ BALD (PowerBALD)."
        return ("mean BALD (nats)" if strategy == "bald" else "PowerBALD draw key"), order
    if strategy == "coreset":
        return "distance to the nearest labelled image or earlier pick", "k-Center-Greedy order (core-set)."
    if strategy == "badge":
        return ("gradient norm (first), then distance to the nearest earlier pick's gradient",
                f"BADGE: k-means++ seeding over last-layer gradient embeddings (seed {seed}).")
    if strategy == "surprise":
        return f"{kind.upper()} surprise", "Ordered by surprise, most surprising first."
    return "score", ""


def _check_scan_fits(scan_dir: Path, strategy: str, kind: str) -> None:
    """ValueError saying what to do when the scan lacks what `strategy` ranks by: MAD without a
    competitor, surprise without `surprise score --scan` columns (the samplers' own errors name
    columns and arguments that do not help)."""
    from blindspots.scan import load_manifest

    manifest = load_manifest(scan_dir)
    if manifest is None:
        return  # mine_scan says it is not a scan folder
    if strategy in ("mad", "madplus") and not manifest.get("competitors"):
        raise ValueError(f"--strategy: {strategy!r} compares the target with competitors, got a scan of "
                         f"{manifest.get('target')!r} alone in {str(scan_dir)!r}; scan again with "
                         "-c NAME=SPEC, or use --strategy entropy or random")
    if strategy == "surprise":
        # the parts' folder names (extra/surprise_<kind>__<model>/), not the whole table: mine_scan reads it next
        extra = Path(scan_dir) / "extra"
        cols = sorted(p.name for p in extra.iterdir() if p.is_dir() and p.name.startswith("surprise_")) \
            if extra.is_dir() else []
        if not any(c.startswith(f"surprise_{kind}__") for c in cols):
            kinds = sorted({c.split("__")[0].removeprefix("surprise_") for c in cols})
            raise ValueError(f"--strategy: 'surprise' ranks by `surprise_{kind}__<model>` columns, got none in "
                             f"{str(scan_dir)!r}" + (f" (it has {kinds}: pass --kind)" if kinds else
                             "; add them with `blindspots surprise fit` and `blindspots surprise score POOL "
                             f"-e ESTIMATOR.npz --scan {scan_dir}`"))


def register(app: typer.Typer) -> None:
    """Add the `mine` command."""
    app.command("mine", help="Pick the images of a scan most likely to be failures (MAD, MAD+, entropy, margin, "
                "BALD, PowerBALD, core-set, surprise, random); write the picks (CSV, Parquet) and an offline "
                "gallery.")(mine)

"""`blindspots init`: create a project folder after every check of `blindspots.loop.create_project`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.pool_options import (POOL_HELP, format_option, image_column_option, list_column_option,
                                         list_file_option, storage_option_option, storage_options)
from blindspots.config import (Config, DataSettings, FinetuneSettings, MiningSettings, ModelSettings, PoolSettings,
                               ProjectSettings, RatingSettings, SimulateSettings, TestSetSettings)

# Lazy imports: jinja2, matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without
# them).

# the defaults of init's options: the paper's, defined once in blindspots.config
PAPER_FINETUNE, PAPER_MINING, PAPER_PROJECT = FinetuneSettings(), MiningSettings(), ProjectSettings()
PAPER_RATINGS, PAPER_TESTSET = RatingSettings(), TestSetSettings()


def _model_spec(spec: str, default_name: str, option: str) -> tuple[str, str]:
    """'NAME=SPEC' or 'SPEC' (name from the file stem) -> (name, spec). An '=' after '?' belongs
    to the spec's options (`model.onnx?output=logits`), not to a name."""
    head = spec.split("=", 1)[0]
    if "=" in spec and "?" not in head:
        name, path = spec.split("=", 1)
    else:
        base = spec.partition("?")[0]
        stem = base.rsplit(":", 1)[-1] if ":" in base and not Path(base).exists() else Path(base).stem
        name, path = (default_name or stem.lower().replace("-", "_").replace(".", "_")), spec
    if not name or not path:
        raise typer.BadParameter(f"expected NAME=PATH or PATH, got {spec!r}", param_hint=option)
    return name, path


def init(
    project: Path = typer.Argument(..., help="Project folder to create."),
    pool: str = typer.Option(..., "--pool", help="The pool D. " + POOL_HELP),
    list_file: Optional[str] = list_file_option(),
    list_column: Optional[str] = list_column_option(),
    pool_format: Optional[str] = format_option(),
    image_column: Optional[str] = image_column_option(),
    storage_option: list[str] = storage_option_option(),
    target: str = typer.Option(..., "--target", "-t", help="Target model: NAME=SPEC or SPEC. SPEC as for "
                               "`blindspots scan`: a zoo .pt checkpoint, TorchScript, .onnx, a folder of <id>.npy, "
                               "or 'module:function', options after '?'."),
    competitor: list[str] = typer.Option(..., "--competitor", "-c",
                                         help="A competing model, NAME=SPEC; repeat for each."),
    train_data: Optional[Path] = typer.Option(None, "--train-data", help="S0, the target's training set: folder with "
                                              "images/ and masks/ (optional: without it class sizes come from the "
                                              "target's predictions on the pool)."),
    val_data: Optional[Path] = typer.Option(None, "--val-data", help="T0, the target's validation set: folder with "
                                            "images/ and masks/ (optional: without S0 and T0 the loop exports S for "
                                            "labelling instead of fine-tuning)."),
    ground_truth: Optional[Path] = typer.Option(None, "--ground-truth", help="True masks of the pool (only for --simulate)."),
    rounds: int = typer.Option(PAPER_PROJECT.rounds, "--rounds", help="Fine-tuning rounds r (paper: 2)."),
    seed: int = typer.Option(PAPER_PROJECT.seed, "--seed", help="Seed of every random choice (same seed, same selections)."),
    strategy: str = typer.Option(PAPER_MINING.strategy, "--strategy", help="Mining strategy: mad, madplus (MAD plus a share for "
                                 "failures every model shares), entropy, margin, bald, powerbald, coreset, badge (these "
                                 "run the target once more over the pool), surprise (needs `surprise score "
                                 "--scan` columns) or random."),
    dropout: Optional[float] = typer.Option(None, "--dropout", help="bald, powerbald: dropout p on the classifier "
                                            "layer's input of a target without dropout layers (default: refuse)."),
    n3: int = typer.Option(PAPER_MINING.n3, "--n3", help="MAD: images per (competitor, class, direction) (paper: 25)."),
    n4: Optional[int] = typer.Option(None, "--n4", help="Size of S per round, lowest MOS (paper: 100; default: "
                                     "100, or a quarter of the most candidates a round can mine when that is fewer)."),
    raters: int = typer.Option(PAPER_RATINGS.raters, "--raters", help="Ratings needed per candidate (paper: 3)."),
    test_size: int = typer.Option(PAPER_TESTSET.size, "--test-size", help="Size of each unbiased test set T(i) (paper: 30)."),
    epochs: int = typer.Option(PAPER_FINETUNE.epochs, "--epochs", help="Fine-tuning epochs (paper: 80)."),
    batch_size: int = typer.Option(PAPER_FINETUNE.batch_size, "--batch-size",
                                   help="Fine-tuning mini-batch size (paper: 2)."),
    lrs: str = typer.Option(",".join(f"{x:g}" for x in PAPER_FINETUNE.lrs), "--lrs",
                            help="Initial learning rates to grid-search on T0, comma separated."),
    scan: Optional[Path] = typer.Option(None, "--scan", help="A scan you already made of this pool with these "
                                        "models (`blindspots scan`, same names, specs and options): the project "
                                        "takes it instead of scanning again; any other scan is refused with the reason."),
) -> None:
    """Create a project folder: blindspots.toml, the SQLite store, scans/, masks/, checkpoints/, reports/.

    Every model is loaded and run on one pool image first, so a bad spec fails here."""
    from blindspots.loop import create_project

    tname, tpath = _model_spec(target, "target", "--target")
    comps = [ModelSettings(*_model_spec(c, "", "--competitor")) for c in competitor]
    cfg = Config(
        pool=PoolSettings(root=pool, list_file=list_file, list_column=list_column, format=pool_format,
                          image_column=image_column, storage_options=list(storage_option)),
        target=ModelSettings(tname, tpath), competitors=comps,
        data=DataSettings(train=str(train_data) if train_data else "", val=str(val_data) if val_data else ""),
        project=ProjectSettings(name=project.name, seed=seed, rounds=rounds),
        mining=MiningSettings(strategy=strategy, n3=n3, dropout=dropout),
        ratings=RatingSettings(raters=raters),  # n4: create_project's rule
        testset=TestSetSettings(size=test_size),
        finetune=FinetuneSettings(lrs=[float(x) for x in lrs.split(",") if x.strip()], epochs=epochs,
                                  batch_size=batch_size),
        simulate=SimulateSettings(ground_truth=str(ground_truth) if ground_truth else ""),
        base_dir=Path.cwd(),
    )
    storage_options(storage_option)  # KEY=VALUE, checked before anything is read
    # every check of `blindspots.loop.setup`, n4 against the candidates a round can mine, then the folder
    proj = create_project(project, cfg, scan=scan, n4=n4,
                          on_note=lambda note: typer.echo(f"  {note}", err=note.startswith("warning")))
    if scan is not None:
        typer.echo(f"  scan: {scan} taken as round 0's scan (same pool, same models); `round` will not scan again")
    typer.echo(f"created project {proj.path}\n  settings: {proj.path / 'blindspots.toml'}\n"
               f"  ratings: {raters} per candidate image (`blindspots config {project} --raters N` changes it; "
               f"one person rating alone: 1)\n  next: blindspots round {project}")


def register(app: typer.Typer) -> None:
    """Add `init` to the root `blindspots` app."""
    app.command("init")(init)

"""`blindspots init | round | status | leaderboard | export | register | ratings import | masks import`:
the troubleshooting loop (Algorithm 1 of the MAD paper) over a project folder."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.common import progress_wanted
from blindspots.cli.pool_options import (POOL_HELP, format_option, image_column_option, list_column_option,
                                         list_file_option, storage_option_option, storage_options)
from blindspots.cli.report import write_round_pages
from blindspots.config import (Config, DataSettings, FinetuneSettings, MiningSettings, ModelSettings, PoolSettings,
                               ProjectSettings, RatingSettings, SimulateSettings, TestSetSettings)

# Lazy imports: jinja2, matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without
# them).

# the defaults of init's options: the paper's, defined once in blindspots.config
PAPER_FINETUNE, PAPER_MINING, PAPER_PROJECT = FinetuneSettings(), MiningSettings(), ProjectSettings()
PAPER_RATINGS, PAPER_TESTSET = RatingSettings(), TestSetSettings()

ratings_app = typer.Typer(help="Weak labels (ACR ratings 1-5 or out-of-domain) of the mined candidates M.",
                          no_args_is_help=True)
masks_app = typer.Typer(help="Pixel labels of the counterexamples S and the test set T.", no_args_is_help=True)


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


def open_project(project: Path):  # noqa: ANN202 - Project
    """`Project.open` for the commands (loop and web)."""
    from blindspots.loop import Project

    return Project.open(project)  # a ProjectError (ValueError) becomes one line via the CLI handler


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


def round_(
    project: Path = typer.Argument(..., help="Project folder."),
    simulate: bool = typer.Option(False, "--simulate", help="Let simulated raters and annotators answer (demo)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after this many steps."),
) -> None:
    """Advance the loop to the next step that needs a human, and say what is awaited."""
    from blindspots.loop import activity_since_last_round, advance, last_event_id, steps_done_since, steps_ran

    proj = open_project(project)
    before, since = last_event_id(proj), activity_since_last_round(proj)
    st = advance(proj, simulate=simulate, max_steps=max_steps, progress=progress_wanted())
    for line in since + steps_ran(proj, before):  # what people did since the last `round`, and what ran now
        typer.echo(f"  {line}")
    proj.journal.log_event("round-run", {"state": st.state, "round": st.round, "step": st.step})
    typer.echo(st.message)
    _echo_next(st, project)
    if st.state == "finished" or any(step == "evaluate" for _, step in steps_done_since(proj, before)):
        typer.echo("Table 1 (also reports/leaderboard.txt; `blindspots leaderboard` prints it again):")
        leaderboard(project)  # a round was scored now: its result, where the user is looking
    if st.awaited:
        shown = ", ".join(st.awaited[:10]) + (" ..." if len(st.awaited) > 10 else "")
        typer.echo(f"awaiting {len(st.awaited)} images: {shown}")
    write_round_pages(project, st.round)


def status(project: Path = typer.Argument(..., help="Project folder.")) -> None:
    """Show the rounds, the steps done and what the loop waits for."""
    from blindspots.loop import status as loop_status

    proj = open_project(project)
    steps = proj.journal.steps()
    for _, r in steps.iterrows():
        state = r["status"]
        err = proj.journal.step_failure(int(r["round"]), r["step"]) if state != "done" else None
        if err is not None:  # the step raised: say why (the next `round` retries it)
            state = f"failed: {err}"
        done_at = r["finished_at"]  # None (NaN in the frame) while the step runs or waits for people
        when = done_at if isinstance(done_at, str) and done_at else f"started {r['started_at']}"
        typer.echo(f"round {r['round']}  {r['step']:<9} {state:<8} model v{r['model_version']}  "
                   f"seed {r['seed']}  {when}")
    from blindspots.loop import activity_since_last_round

    since = activity_since_last_round(proj)
    if since:
        typer.echo("since the last `blindspots round`:")
        for line in since:
            typer.echo(f"  {line}")
    st = loop_status(proj)
    typer.echo(st.message)
    _echo_next(st, project)
    refresh_round_page(project, st.round)


def _echo_next(st, project: Path) -> None:  # noqa: ANN001 - loop.Status
    """The status's next actions, phrased as commands."""
    from blindspots.loop import phrase_commands

    if st.next:
        typer.echo(phrase_commands(st.next, project))


def refresh_round_page(project: Path, round: int) -> None:
    """Rewrite the round's report page, so that it shows the state `status` just printed."""
    from blindspots.report import write_round_report

    try:
        write_round_report(project, round)
    except Exception as e:  # noqa: BLE001 - the page is a view; a failure must not fail `status`
        typer.echo(f"warning: could not refresh the round report: {type(e).__name__}: {e}", err=True)


def leaderboard(project: Path = typer.Argument(..., help="Project folder.")) -> None:
    """Print Table 1: every model's mIoU on T0 and on each unbiased test set T(i)."""
    from blindspots.loop import format_leaderboard, leaderboard_frame

    df = leaderboard_frame(open_project(project))
    typer.echo(format_leaderboard(df) if len(df) else "no round has been evaluated yet")


def export(
    project: Path = typer.Argument(..., help="Project folder."),
    format: str = typer.Option(..., "--format", help="cvat (zip) or labelstudio (JSON)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output file (default: reports/round-<i>-...)."),
    round: Optional[int] = typer.Option(None, "--round", help="Round (default: the current one)."),
    image_root: Optional[Path] = typer.Option(
        None, "--image-root", help="labelstudio: the pool folder as Label Studio's machine sees it (default: the "
        "project's pool); task URLs become /data/local-files/?d=<path relative to --document-root>."),
    document_root: Optional[Path] = typer.Option(
        None, "--document-root", help="labelstudio: LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT (default: that "
        "variable, else the parent of --image-root; see docs/annotation_tools.md)."),
    image_url: Optional[str] = typer.Option(
        None, "--image-url", help="labelstudio: image URL template with {id} or an http(s)/s3/gs base URL "
        "(beats --image-root)."),
) -> None:
    """Export the images awaiting masks with the target's prediction as a pre-annotation (labelstudio: and
    the labelling config beside the tasks); `--round N` exports a past round's S ∪ T again."""
    from blindspots.loop import export_for_annotation

    path = export_for_annotation(open_project(project), format, out, round=round, image_url=image_url,
                                 image_root=image_root, document_root=document_root)
    typer.echo(f"wrote {path}")
    if format == "labelstudio":
        from blindspots.loop import labelstudio_config_path

        typer.echo(f"wrote {labelstudio_config_path(path)} (paste it into the Label Studio project's Settings → "
                   "Labeling Interface, then import the tasks; docs/annotation_tools.md)")


@ratings_app.command("import")
def ratings_import(
    project: Path = typer.Argument(..., help="Project folder."),
    csv: Path = typer.Argument(..., help="CSV with columns image_id,rater,score (score 1-5 or ood)."),
    round: Optional[int] = typer.Option(None, "--round", help="Round (default: the current one)."),
) -> None:
    """Import ACR ratings of the candidates M from a CSV."""
    from blindspots.loop import import_ratings

    if not csv.is_file():
        raise ValueError(f"csv: expected an existing CSV file, got {str(csv)!r}")
    n = import_ratings(open_project(project), csv, round=round)
    typer.echo(f"imported {n} ratings; run `blindspots round {project}` to continue")


@masks_app.command("import")
def masks_import(
    project: Path = typer.Argument(..., help="Project folder."),
    source: Path = typer.Argument(..., help="Folder of index/palette PNGs, CVAT zip or Label Studio JSON."),
    round: Optional[int] = typer.Option(None, "--round", help="Round (default: the current one)."),
    annotator: Optional[str] = typer.Option(None, "--annotator", help="Who drew the masks."),
) -> None:
    """Import pixel labels for S and T."""
    from blindspots.loop import after_masks_import, import_masks

    p = open_project(project)
    n = import_masks(p, source, round=round, annotator=annotator)
    st = after_masks_import(p, round)
    typer.echo(f"imported {n} masks; {st.message}")
    _echo_next(st, project)


def register_model(
    project: Path = typer.Argument(..., help="Project folder."),
    spec: str = typer.Argument(..., help="The retrained target as a model SPEC (as for `init --target`)."),
) -> None:
    """Register the target's next version (retrained on S in your own stack); `round` then continues with it."""
    from blindspots.loop import register_version

    version = register_version(open_project(project), spec, base_dir=Path.cwd())
    typer.echo(f"registered the target's version {version}; run `blindspots round {project}` to scan and mine with it")


def register(app: typer.Typer) -> None:
    """Add the loop commands to the root `blindspots` app."""
    app.command("init")(init)
    app.command("register")(register_model)
    app.command("round")(round_)
    app.command("status")(status)
    app.command("leaderboard")(leaderboard)
    app.command("export")(export)
    app.add_typer(ratings_app, name="ratings")
    app.add_typer(masks_app, name="masks")

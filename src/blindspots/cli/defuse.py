"""`blindspots defuse ...`: Defuse for image classifiers, one command per step.

Data specs (--data, --val, --test): 'sklearn-digits', 'mnist-5k', a .npz (images, labels, class_names),
'IMAGES_IDX:LABELS_IDX', or a class-folder root. Every step writes files the next one reads.
Settings: `--preset paper` (default) is the paper's GPU settings, `--preset cpu` finishes in minutes
on a 2-core CPU; an option given explicitly always wins (`blindspots.defuse.settings` holds both).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.defuse_setup import CLASS_NAMES, PRESET, preset_help
from blindspots.defuse import (format_presets, holdout_record, load_data, parse_lambdas, resolve, training_part,
                               validation_split)
from blindspots.data import read_classes

# Lazy imports: matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without them).

app = typer.Typer(help="Defuse: generate, distill and correct novel failures of image classifiers. "
                       "Steps: train-classifier (optional), train-vae, identify, distill, export-review, "
                       "import-votes, correct, report.",
                  no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="defuse")


DATA = typer.Option(..., "--data", help="Training data spec (sklearn-digits, mnist-5k, .npz, IDX pair, folder).")
LIMIT = typer.Option(None, "--limit", help="Use only the first N images of --data (quick runs).")
SEED = typer.Option(0, "--seed", help="Random seed; the same seed gives the same result.")
BATCH = 256  # fine-tuning minibatch (paper appendix B.2; defuse.correct's default)


@app.command("presets")
def presets_cmd() -> None:
    """Print every --preset: 'paper' (the paper's GPU settings) and the CPU ones."""
    typer.echo(format_presets())


@app.command("train-classifier")
def train_classifier_cmd(
    data: str = DATA,
    out: Path = typer.Option(..., "--out", help="Classifier checkpoint to write (.pt)."),
    arch: str = typer.Option("defuse_cnn", "--arch",
                             help="Zoo architecture: defuse_cnn (paper Fig. 7) or pytorch_mnist."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help=preset_help("Training epochs", "clf_epochs")),
    batch_size: int = typer.Option(64, "--batch-size", help="Minibatch size (paper: 64)."),
    lr: float = typer.Option(1.0, "--lr", help="Adadelta learning rate (paper: 1)."),
    width: int = typer.Option(64, "--width", help="Conv channels of defuse_cnn (paper: 64)."),
    holdout: float = typer.Option(0.1, "--holdout", help="Fraction of --data held out (never trained on) and "
                                  "recorded in the checkpoint; `correct` validates on it. 0: train on all."),
    class_names: Optional[Path] = CLASS_NAMES,
    preset: str = PRESET,
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Train a zoo classifier (not part of Defuse itself; for trying the pipeline). Its checkpoint keeps the
    class names (votes use them) and which images were held out."""
    from blindspots.models import build_classifier, save_classifier
    from blindspots.training import accuracy, torch_seeded, train_classifier

    d = load_data(data, limit, class_names)
    keep, record = holdout_record(d, data, holdout, seed)
    t = d.subset(keep)
    kwargs = {"width": width} if arch == "defuse_cnn" else {}
    with torch_seeded(seed):
        net = build_classifier(arch, d.num_classes, d.image_shape, **kwargs)
    r = train_classifier(net, t.images, t.labels, epochs=resolve(preset, "clf_epochs", epochs), batch_size=batch_size,
                         lr=lr, seed=seed, checkpoint_path=out.with_suffix(".train.pt"))
    save_classifier(out, net, arch=arch, class_names=d.class_names, image_shape=d.image_shape, kwargs=kwargs,
                    meta={"trained_on": record})
    hold = record["holdout_index"]
    held = (f", held-out accuracy {accuracy(net, d.images[hold], d.labels[hold]):.4f} on {len(hold)} images"
            if hold else "")
    typer.echo(f"wrote {out} (train accuracy {accuracy(net, t.images, t.labels):.4f} on {len(t)} images{held}, "
               f"{len(r.history)} epochs; classes {', '.join(d.class_names)})")


@app.command("train-vae")
def train_vae(
    data: str = DATA,
    out: Path = typer.Option(..., "--out", help="β-VAE file to write; also the checkpoint a rerun resumes from."),
    latent_dim: Optional[int] = typer.Option(None, "--latent-dim", help=preset_help(
        "Latent size (paper: 10 MNIST/SVHN, 15 signs)", "latent_dim")),
    beta: Optional[float] = typer.Option(None, "--beta", help=preset_help("β", "beta")),
    epochs: Optional[int] = typer.Option(None, "--epochs", help=preset_help("Epochs", "vae_epochs")),
    batch_size: Optional[int] = typer.Option(None, "--batch-size",
                                             help=preset_help("Minibatch size", "vae_batch_size")),
    lr: float = typer.Option(1e-3, "--lr", help="Adam learning rate (paper: 1e-3)."),
    anneal_steps: int = typer.Option(500, "--anneal-steps", help="Linear KL annealing steps (paper: 500)."),
    width: int = typer.Option(32, "--width", help="Conv channels (paper: 32 MNIST, 64 SVHN/signs)."),
    grids: Optional[Path] = typer.Option(None, "--grids", help="Folder for reconstruction and sample grids (PNG)."),
    preset: str = PRESET,
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Train the β-VAE (resumable) and save reconstruction/sample grids."""
    from blindspots.defuse import BetaVAE

    d = load_data(data, limit)
    vae = BetaVAE(latent_dim=resolve(preset, "latent_dim", latent_dim), beta=resolve(preset, "beta", beta),
                  epochs=resolve(preset, "vae_epochs", epochs),
                  batch_size=resolve(preset, "vae_batch_size", batch_size),
                  lr=lr, anneal_steps=anneal_steps, width=width, seed=seed, checkpoint_path=out).fit(d.images)
    vae.save(out)
    if grids:
        vae.save_grids(d.images, grids)
    last = vae.history_[-1] if vae.history_ else {}
    typer.echo(f"wrote {out}: {json.dumps(last)}")


@app.command()
def identify(
    data: str = DATA,
    vae: Path = typer.Option(..., "--vae", help="β-VAE file from train-vae."),
    classifier: Path = typer.Option(..., "--classifier", help="Classifier checkpoint (models.classifier_zoo)."),
    out: Path = typer.Option(..., "--out", help="Output folder (shards, identified.npz); a rerun resumes."),
    q: Optional[int] = typer.Option(None, "--q", help=preset_help("Draws per training image", "q")),
    a: Optional[float] = typer.Option(None, "--a", help=preset_help(
        "Beta(a, b) noise a; the paper uses 50 on MNIST and 75 off MNIST (SVHN, traffic signs)", "a")),
    b: Optional[float] = typer.Option(None, "--b", help=preset_help(
        "Beta(a, b) noise b; the paper: 50 on MNIST, 75 off MNIST", "b")),
    noise: str = typer.Option("uncentred", "--noise", help="'uncentred' (paper's ε; default, measured better on "
                              "MNIST) or 'centred' (ε − a/(a+b))."),
    max_per_source: Optional[int] = typer.Option(None, "--max-per-source",
                                                 help=preset_help("Cap per source image, smallest ‖ε‖ kept",
                                                                  "max_per_source")),
    recon_min_proba: Optional[float] = typer.Option(None, "--recon-min-proba", help=preset_help(
        "Skip sources whose VAE reconstruction the classifier gives p(label) below this (0: no check)",
        "recon_min_proba")),
    only_correct: bool = typer.Option(True, "--only-correct/--all-sources", help="Perturb only images the classifier "
                                      "gets right (Algorithm 1 as written)."),
    preset: str = PRESET,
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Identify failures (Algorithm 1) over the classifier's training images of --data (the images
    train-classifier held out stay unseen, for `correct` to validate on)."""
    from blindspots.defuse import BetaVAE, IdentifySettings
    from blindspots.defuse.identify import identify as run  # the face's `identify` is shadowed by its module
    from blindspots.models import load_classifier, load_classifier_module

    d, which = training_part(load_classifier_module(classifier)[1], load_data(data, limit), data)
    typer.echo(f"identifying over {which}")
    recon_min_proba = resolve(preset, "recon_min_proba", recon_min_proba)
    settings = IdentifySettings(q=resolve(preset, "q", q), a=resolve(preset, "a", a), b=resolve(preset, "b", b),
                                noise=noise,  # type: ignore[arg-type]
                                max_per_source=resolve(preset, "max_per_source", max_per_source), seed=seed,
                                only_correct=only_correct, recon_min_proba=recon_min_proba)
    res = run(BetaVAE.load(vae), load_classifier(classifier), d.images, d.labels, num_classes=d.num_classes,
              settings=settings, out_dir=out)
    st = res.settings
    typer.echo(f"sources: {st.get('n_sources_used', len(d))} of {len(d)} images "
               f"({st.get('n_skipped_misclassified', 0)} skipped: misclassified; "
               f"{st.get('n_skipped_reconstruction', 0)} skipped: reconstruction below p(label) {recon_min_proba:g})")
    typer.echo(f"identified {len(res)} failures from {len(d)} images "
               f"({st['n_misclassified']} of {st['n_decoded']} decodes misclassified) -> {out}")


@app.command()
def distill(
    identified: Path = typer.Option(..., "--identified", help="Folder (or identified.npz) from identify."),
    out: Path = typer.Option(..., "--out", help="Scenarios file to write (.npz)."),
    n_components: Optional[int] = typer.Option(None, "--n-components",
                                               help=preset_help("DP truncation K", "n_components")),
    max_codes: Optional[int] = typer.Option(None, "--max-codes",
                                            help=preset_help("Downsample to this many codes", "max_codes")),
    weight_threshold: float = typer.Option(0.01, "--weight-threshold",
                                           help="Keep components with weight > ε (paper: 0.01)."),
    max_iter: int = typer.Option(100, "--max-iter", help="EM iterations (scikit-learn default, as the paper)."),
    preset: str = PRESET,
    seed: int = SEED,
) -> None:
    """Fit the Dirichlet-process GMM and keep the heavy components as candidate scenarios."""
    from blindspots.defuse import Identified
    from blindspots.scenarios import Distiller

    sc = Distiller(n_components=resolve(preset, "n_components", n_components),
                   max_codes=resolve(preset, "max_codes", max_codes), weight_threshold=weight_threshold,
                   max_iter=max_iter, random_state=seed).fit(Identified.load(identified)).scenarios_
    sc.save(out)
    typer.echo(f"{len(sc)} candidate scenarios -> {out}; fit: {json.dumps(sc.fit)}")


@app.command("export-review")
def export_review_cmd(
    scenarios: Path = typer.Option(..., "--scenarios", help="Scenarios file from distill."),
    vae: Path = typer.Option(..., "--vae", help="β-VAE file."),
    classifier: Path = typer.Option(..., "--classifier", help="Classifier checkpoint."),
    out: Path = typer.Option(..., "--out", help="Review folder: images/, items.csv, votes_template.csv."),
    n_per: int = typer.Option(10, "--n-per", help="Images per scenario to review (paper: 10)."),
    tau: Optional[float] = typer.Option(None, "--tau", help=preset_help(
        "Sample diversity τ (paper: 0.5 MNIST, 0.01 SVHN/signs)", "tau")),
    class_names: Optional[Path] = typer.Option(None, "--class-names",
                                               help="Text file, one class name per line in id order; default: "
                                                    "the names in the classifier checkpoint."),
    identified: Optional[Path] = typer.Option(None, "--identified", help="Folder from identify: also add a sample "
                                              "of identified failures to label (the report's baseline row)."),
    n_identified: int = typer.Option(100, "--n-identified", help="Identified failures to add with --identified."),
    preset: str = PRESET,
    seed: int = SEED,
) -> None:
    """Sample review images per scenario and write them with a votes template (CSV)."""
    from blindspots.defuse import ReviewFolder
    from blindspots.models import load_classifier_module

    names = tuple(load_classifier_module(classifier)[1]["class_names"])
    if class_names is not None:
        given = read_classes(class_names).names
        if len(given) != len(names):
            raise ValueError(f"class_names: expected {len(names)} names (the classifier's classes) in {class_names}, "
                             f"got {len(given)}")
        names = given
    folder = ReviewFolder.export(scenarios, vae, classifier, out, class_names=names, n_per=n_per,
                                 tau=resolve(preset, "tau", tau), identified=identified, n_identified=n_identified,
                                 seed=seed)
    items, n_id = folder.review.items, folder.n_identified
    typer.echo(f"{len(items)} images from {items['scenario'].nunique()} scenarios"
               f"{f' and {n_id} identified failures' if n_id else ''} -> {out}; "
               f"fill votes_template.csv (label: one of {', '.join(names)} (any case), a class id, or 'none'; "
               "annotator optional) and run import-votes")


@app.command("import-votes")
def import_votes(
    review: Path = typer.Option(..., "--review", help="Review folder from export-review."),
    votes: Optional[Path] = typer.Option(None, "--votes", help="Votes CSV: item_id, label (class name in any case, "
                                         "class id, or 'none'), optional annotator (absent: one voter)."),
    simulate: Optional[Path] = typer.Option(None, "--simulate", help="SIMULATION: oracle classifier checkpoint that "
                                            "votes instead of people."),
    annotators: int = typer.Option(5, "--annotators", help="Simulated annotators per image (paper: 5 people)."),
    error_rate: float = typer.Option(0.05, "--error-rate", help="Simulated annotators' random slip rate."),
    rho: float = typer.Option(0.5, "--rho", help="Failure if more than this fraction disagrees (paper: 0.5)."),
    judge: Optional[Path] = typer.Option(None, "--judge", help="SIMULATION: an independent classifier checkpoint; "
                                         "decisions.csv gets judge_agreement / judge_disputed per scenario (the "
                                         "judge mostly gives the review images another class) so people can "
                                         "discard those scenarios."),
    seed: int = SEED,
) -> None:
    """Import votes (CSV, or simulated), decide failure scenarios and print annotator agreement."""
    from blindspots.defuse import ReviewFolder
    from blindspots.human import agreement_table, format_agreement_table

    res = ReviewFolder(review).import_votes(votes, simulate=simulate, annotators=annotators, error_rate=error_rate,
                                            rho=rho, judge=judge, seed=seed)
    if res.simulated:
        typer.echo("NOTE: votes are SIMULATED by an oracle classifier, not people")
    decisions, id_labels = res.decisions, res.identified_labels
    typer.echo(decisions.to_string(index=False))
    typer.echo(f"\n{int(decisions['is_failure'].sum())} failure scenarios -> {review / 'decisions.csv'}")
    if "judge_disputed" in decisions.columns:
        disputed = decisions.loc[decisions["judge_disputed"] & decisions["is_failure"], "scenario"].tolist()
        typer.echo(f"the judge (a SIMULATION) disputes the label of failure scenarios {disputed}: to discard one, set "
                   "its is_failure to False in decisions.csv" if disputed else
                   "the judge (a SIMULATION) disputes no failure scenario's label")
    typer.echo(format_agreement_table(agreement_table(res.items[res.items["n_votes"] > 0])))
    if len(id_labels):
        n_cls = int((id_labels["label"] >= 0).sum())
        typer.echo(f"{len(id_labels)} identified failures voted on, {n_cls} labelled with a class "
                   f"-> {review / 'identified_labels.csv'}")


@app.command()
def correct(
    data: str = DATA,
    classifier: Path = typer.Option(..., "--classifier", help="Classifier checkpoint to correct."),
    vae: Path = typer.Option(..., "--vae", help="β-VAE file."),
    scenarios: Path = typer.Option(..., "--scenarios", help="Scenarios file from distill."),
    review: Path = typer.Option(..., "--review", help="Review folder with decisions.csv from import-votes."),
    out: Path = typer.Option(..., "--out", help="Output folder: corrected.pt, control.pt, sweep.csv, scenario "
                             "sets; resumable."),
    val: Optional[str] = typer.Option(None, "--val", help="Validation data spec (default: the images of --data that "
                                      "train-classifier held out, which the classifier never trained on)."),
    val_fraction: float = typer.Option(0.1, "--val-fraction", help="Fraction of --data split off for validation "
                                       "when --val is absent and the classifier records no held-out split."),
    lambdas: Optional[str] = typer.Option(None, "--lambdas", help=preset_help("Comma-separated λ list", "lambdas")),
    n_per: Optional[int] = typer.Option(None, "--n-per", help=preset_help(
        "Samples per failure scenario for D_f and for the scenario test set", "n_per")),
    tau: Optional[float] = typer.Option(None, "--tau", help=preset_help(
        "Sample diversity τ; use export-review's (paper: 0.5 MNIST)", "tau")),
    epochs: Optional[int] = typer.Option(None, "--epochs", help=preset_help(
        "Fine-tuning epochs per λ (paper: 3 MNIST, 5 others)", "correct_epochs")),
    control: bool = typer.Option(True, "--control/--no-control", help="Also fine-tune with λ = 0 (the same steps, "
                                 "scenario data weighted to nothing): the report's control row."),
    baseline: bool = typer.Option(True, "--baseline/--no-baseline", help="Also run the λ sweep on the identified "
                                  "failures people labelled (export-review --identified): the baseline row."),
    preset: str = PRESET,
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Fine-tune on L(D) + λ·CE(D_f) over the λ sweep; keep the best by validation accuracy (on held-out images)."""
    from blindspots.defuse import BetaVAE, ReviewFolder, run_experiment, scenario_data
    from blindspots.models import load_classifier_module
    from blindspots.scenarios import Scenarios

    d = load_data(data, limit)
    module, info = load_classifier_module(classifier)
    if len(info["class_names"]) != d.num_classes:
        raise ValueError(f"data: expected {len(info['class_names'])} classes (the classifier's), got {d.num_classes}")
    folder = ReviewFolder(review)
    decisions = folder.decisions  # ValueError before import-votes
    train, valid, said = validation_split(info, d, data, val, load_data(val) if val else None, val_fraction, seed)
    typer.echo(said)
    sd = scenario_data(Scenarios.load(scenarios), decisions, BetaVAE.load(vae),
                       n_per=resolve(preset, "n_per", n_per), tau=resolve(preset, "tau", tau), seed=seed)
    sd.save(out / "scenario_sets.npz")  # the honest table reads its held-out test samples
    (out / "validation.txt").write_text(said + "\n")
    labelled = folder.labelled_identified() if baseline else None
    exp = run_experiment(module, info, (train.images, train.labels), (valid.images, valid.labels), sd, out,
                         lambdas=parse_lambdas(resolve(preset, "lambdas", lambdas)),
                         epochs=resolve(preset, "correct_epochs", epochs), batch_size=BATCH, seed=seed,
                         control=control, labelled=labelled)
    typer.echo(exp.defuse.sweep.to_string(index=False))
    typer.echo(f"best λ = {exp.defuse.best_lambda:g} ({exp.defuse.steps} steps) -> {exp.defuse.path}")
    if exp.control is not None:
        typer.echo(f"control (λ = 0, {exp.control.steps} steps): val acc {exp.control.sweep['val_acc'].iloc[0]:.4f} "
                   f"-> {exp.control.path}")
    if exp.baseline is not None:
        b = exp.baseline
        typer.echo(f"identified-examples baseline on {b.n_fit} labelled failures ({b.n_held} held out): best λ = "
                   f"{b.best_lambda:g} ({b.steps} steps) -> {b.path}")
    elif baseline:
        typer.echo("\n".join(exp.notes) or "no identified-examples baseline: label some identified failures first "
                   "(export-review --identified, then import-votes)")


@app.command()
def report(
    data: str = DATA,
    classifier: Path = typer.Option(..., "--classifier", help="Classifier checkpoint (before correction)."),
    vae: Path = typer.Option(..., "--vae", help="β-VAE file."),
    identified: Path = typer.Option(..., "--identified", help="Folder from identify."),
    scenarios: Path = typer.Option(..., "--scenarios", help="Scenarios file from distill."),
    review: Path = typer.Option(..., "--review", help="Review folder (with decisions.csv)."),
    out: Path = typer.Option(..., "--out", help="Folder for the figures and table.csv."),
    correct_dir: Optional[Path] = typer.Option(None, "--correct", help="Folder from correct: the table's rows after "
                                               "fine-tuning and Figure 5."),
    test: Optional[str] = typer.Option(None, "--test", help="Test data spec (images no step has seen): the table's "
                                       "test accuracy and Figure 5's test accuracy per λ."),
    judge: Optional[Path] = typer.Option(None, "--judge", help="SIMULATION: an independent classifier checkpoint "
                                         "(e.g. trained on more data) that re-labels the scenario test samples; "
                                         "the table's 'judge' column."),
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Print the before / control / identified-examples / Defuse table and write the figures: t-SNE (Fig. 2),
    scenario grids (Fig. 3), λ trade-off (Fig. 5), nearest neighbours (Fig. 6)."""
    from blindspots.defuse import ReviewFolder, write_report_figures

    t = load_data(test) if test else None
    out.mkdir(parents=True, exist_ok=True)
    if correct_dir is not None and t is not None and judge is not None:
        rows, agreement, text = ReviewFolder(review).honest_table(classifier, correct_dir, t, judge)
        rows.to_csv(out / "table.csv", index=False)
        agreement.to_csv(out / "judge_agreement.csv", index=False)
        typer.echo(text + "\n")
    else:
        typer.echo("no table: it needs --correct (the fine-tuned models), --test (images no step saw) and "
                   "--judge (an independent classifier)")
    written = write_report_figures(load_data(data, limit), classifier, vae, identified, review, out,
                                   correct_dir=correct_dir, test=t, seed=seed)
    typer.echo("wrote " + ", ".join(str(p) for p in written))

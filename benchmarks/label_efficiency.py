"""Label efficiency: mIoU against human cost for every sampler, each a full loop, on procedural scenes,
(`--dataset mri`) on brain MRI slices with real atlas labels (`label_efficiency_mri.py` builds that world) or
(`--dataset microscopy`) on fluorescence-microscopy tiles with real, automatically made nuclei and cell labels
(`label_efficiency_microscopy.py`).

For each sampler of `blindspots.mine` and each seed, `--rounds` rounds of: pick from the unlabeled pool ->
simulated people -> fine-tune the target on everything labelled so far with replay of its training set S0
(`blindspots.training.replay.ReplayFinetuner`, the learning rate chosen on T0 among `--ft-lrs` each round,
the paper's rule) -> mIoU on a fixed hard test set and on T0. The rated samplers (`RATED`: MAD, MAD with the
released code's settings, MAD+, the portfolio, the portfolio with the lowest-MOS rule) have `--raters`
people rate `--n-m` candidates and label `--n4` of them (the lowest MOS, or for "portfolio" `mine.samplers.teach`);
the others label `--baseline-masks` picks a round (default: what a rated round costs at rating:mask 1:3).
`label_efficiency_cost.py` prints the tables at rating:mask 1:32, 1:10, 1:3 and in seconds from published
timing, with paired differences against the best baseline.

The scenes' pool is half shifted scenes (the "hard" distribution: one or two factors moved clearly outside
the target's training slice; `--hard-share`, 'pool' for the "pool" distribution's 5%), the rest inside the
slice, plus a planted *shared blind spot* (8%): in-slice scenes whose cars and people are camouflaged in the colour of the street
around them, which every model misses the same way, so their maps agree and MAD's disagreement does not
see it. The hard test set holds the same share of it. Per planted condition, the table counts how many of
its pool images each sampler had labelled (recall).

Sizes fit a shared 2-core CPU: 64 px scenes, a 240-image pool, three zoo models trained once (cached in
--work), 6 fine-tuning epochs on the scenes and 2 on MRI and microscopy (`--ft-epochs`; with 2 epochs and 5%
of the scenes' pool shifted, fine-tuning moved their hard set by at most 0.9 points and every sampler tied),
48 replayed S0 images; one rater rates 24 candidates a round and 8 are
labelled. Every sampler uses its published settings: BALD T = 20 MC-dropout passes (Gal et al. 2017),
PowerBALD beta = 1 (Kirsch et al. 2021), core-set k-Center-Greedy on the classifier layer's input with S0 and
every labelled image as centres (Sener & Savarese 2018), BADGE k-means++ seeding over the last layer's
gradient embeddings, the first pick the largest norm (Ash et al. 2020), QBC vote entropy over the target
and the competitors (Seung et al. 1992; McCallum & Nigam 1998), margin and entropy means over pixels, MAD
n3 = 25 with S0's quartile class ranges (the paper). The target (the zoo's tiny U-Net) has no dropout layer,
so BALD and PowerBALD run on its dropout variant (`tiny_unet_dropout`: the same architecture, channel dropout
0.25 below full resolution, active in training), trained on the same S0 with the same initial weights, epochs
and seed, and fine-tuned in their loops like the target in the others; their MC passes sample that trained
dropout (Gal, Islam & Ghahramani 2017). Its own before-fine-tuning numbers are the BALD rows' round 0.
`--dropout P` runs them on the plain target with dropout P on its classifier layer's input during the MC
passes only (the approximation used before). The rows `mad_2r` and `portfolio_2r` are MAD and the portfolio
with two raters per candidate (the MOS is their mean), every rating counted in the cost.

    PYTHONPATH=src python benchmarks/label_efficiency.py --work /tmp/label_efficiency \
        --figure docs/img/label_efficiency.png

    PYTHONPATH=src python benchmarks/label_efficiency.py --dataset mri --work /tmp/label_efficiency_mri \
        --figure docs/img/label_efficiency_mri.png

On MRI the same loop runs with the MRI world's models and sets (its docstring); the hard set's subset
reported beside it is "shared" (a wider field of view, where every model fails) instead of "planted". On
microscopy likewise, "shared" being defocus (`--micro-source`: the ndev-sampledata wheel or its .tiff). `--quick` is a
tiny run of either (1 seed, 1 round, 32 px, a 24-image pool) that tests the code path.

Prints the per-round table, the tables at each cost ratio, the portfolio's shares per round, the
per-condition recall, the MAD+ share sweep, CPU model and os.getloadavg(); writes results.json under --work
after every loop (with each run's hard-set mIoU per condition and labelled images per condition by round;
`--resume` runs only the loops it lacks) and the figure. Runs split over processes (other samplers or seeds,
each in its own --work) print together with `--report-only --merge OTHER/results.json [--figure PNG]`.
`--freeze-bn-stats` fine-tunes with BatchNorm's running statistics held; `--bn-probe` also scores each round's
fine-tuned model with its BatchNorm statistics swapped (`label_efficiency_bn.py` reads both runs).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from blindspots.machine import cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parent))  # label_efficiency_mri.py beside it

import label_efficiency_regions  # noqa: E402 - beside it too

SAMPLERS = ("random", "entropy", "margin", "bald", "powerbald", "coreset", "badge", "qbc", "mad", "mad_released",
            "madplus", "portfolio", "portfolio_mos", "mad_2r", "portfolio_2r")
# samplers whose candidates people rate before masks are drawn; all but the portfolio label the lowest MOS of M
RATED = ("mad", "mad_released", "madplus", "portfolio", "portfolio_mos", "mad_2r", "portfolio_2r")
SECOND_RATER = "_2r"  # suffix: the sampler with two raters per candidate (whatever --raters says)
DROPOUT_TARGET = ("bald", "powerbald")  # run on the target's dropout-trained variant unless --dropout is given
NEEDS = {"margin": ("margin",), "bald": ("bald",), "powerbald": ("bald",), "coreset": ("features",),
         "badge": ("badge",), "portfolio": ("margin", "features"), "portfolio_mos": ("margin", "features"),
         "portfolio_2r": ("margin", "features")}
# The planted shared blind spot: scenes inside the target's slice whose cars and people are camouflaged,
# painted in the median colour of the road, sidewalk and buildings around them. Every model misses them the
# same way (it paints them as street): mIoU drops for all three zoo models while their maps agree as much as
# on ordinary scenes, so MAD's disagreement cannot see it. (Conditions outside the competitors' range, e.g.
# a camera roll of 35-45 degrees, made the models fail *differently*: MAD picked those images.)
PLANTED_CLASSES = ("vehicle", "person")



class ArrayPairs:
    """A PairSet over arrays: images uint8 [N, H, W, 3], masks uint8 [N, H, W]."""

    def __init__(self, images: np.ndarray, masks: np.ndarray) -> None:
        self.images, self.masks = images, masks

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.images[i], self.masks[i]


# ----------------------------------------------------------------------------- data

def planted_scenes(n: int, seed: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """n scenes of the target's slice with cars and people camouflaged (the shared blind spot)."""
    from blindspots.data.scenes import BUILDING, PERSON, ROAD, SIDEWALK, VEHICLE, render_scene_arrays

    imgs, masks, _ = render_scene_arrays(n, seed=seed, distribution="train", size=size)
    imgs = imgs.copy()
    for i in range(n):
        hide = np.isin(masks[i], [VEHICLE, PERSON])
        street = ~hide & np.isin(masks[i], [ROAD, SIDEWALK, BUILDING])
        if hide.any() and street.any():
            imgs[i][hide] = np.median(imgs[i][street], axis=0).astype(np.uint8)
    return imgs, masks


def condition_label(c) -> str:
    """'in slice', or the factor(s) outside the slice ('factor:low|high', 'lighting:night')."""
    from blindspots.data.scenes import TRAIN_SLICE

    out = []
    for f in c.hard_factors:
        if f == "lighting":
            out.append(f"lighting:{c.lighting}")
        else:
            out.append(f"{f}:{'low' if getattr(c, f) < TRAIN_SLICE[f][0] else 'high'}")
    return "+".join(out) or "in slice"


def _world_module(dataset: str):  # noqa: ANN202 - a module
    """The module beside this one that builds a real dataset's world: label_efficiency_<dataset>.py."""
    import importlib

    return importlib.import_module(f"label_efficiency_{dataset}")


def make_world(args: argparse.Namespace) -> dict:
    """The models and fixed sets of one dataset: classes, target and competitor checkpoints, S0 and T0
    (images, masks), the hard test set (images, masks, flags of its `focus` subset) and `focus_labels`, the
    pool labels of that subset."""
    if args.dataset in ("mri", "microscopy"):
        return _world_module(args.dataset).make_world(args)
    from blindspots.data.scenes import SCENE_CLASSES, render_scene_arrays
    from blindspots.training.zoo import train_zoo

    zoo = train_zoo(args.work / "zoo", target=args.target_arch, competitors=args.competitor_list,
                    n_train=args.n_train, n_val=100, size=args.size, epochs=args.epochs, seed=0, progress=True)
    dropout_arch = f"{args.target_arch}_dropout"  # BALD's target: same data, seed and epochs, trained with dropout
    dzoo = train_zoo(args.work / "zoo_dropout", target=dropout_arch, competitors=(), n_train=args.n_train,
                     n_val=100, size=args.size, epochs=args.epochs, seed=0, progress=True)
    s0 = render_scene_arrays(args.n_train, seed=0, distribution="train", size=args.size)  # the target's S0
    t0 = render_scene_arrays(args.n_t0, seed=7, distribution="train", size=args.size)
    hi, hm, _ = render_scene_arrays(args.n_hard, seed=8, distribution="hard", size=args.size)
    n_pt = int(round(args.planted_share * args.n_hard / (1 - args.planted_share)))
    pi, pm = planted_scenes(n_pt, 9, args.size)
    hard = (np.concatenate([hi, pi]), np.concatenate([hm, pm]), np.r_[np.zeros(len(hi), bool), np.ones(n_pt, bool)])
    return {"classes": SCENE_CLASSES, "target": args.work / "zoo" / zoo["models"][args.target_arch]["checkpoint"],
            "target_dropout": args.work / "zoo_dropout" / dzoo["models"][dropout_arch]["checkpoint"],
            "competitors": {g: args.work / "zoo" / zoo["models"][g]["checkpoint"] for g in args.competitor_list},
            "focus": "planted", "focus_labels": ("planted",), "S0": s0[:2], "T0": t0[:2], "hard": hard}


def make_pool(args: argparse.Namespace, seed: int, world: dict):
    """(ids, images uint8 [N, H, W, 3], masks uint8 [N, H, W], condition labels) of the pool of `seed`."""
    if args.dataset in ("mri", "microscopy"):
        return _world_module(args.dataset).make_pool(args, seed, world)
    from blindspots.data.scenes import render_scene_arrays

    n_planted = int(round(args.pool * args.planted_share))
    if args.hard_share is None:  # the "pool" distribution: 5% of its scenes shifted
        pi, pm, pc = render_scene_arrays(args.pool - n_planted, seed=5000 + seed, distribution="pool", size=args.size)
    else:  # that share of the pool shifted ("hard"), the rest in the target's slice
        n_shift = int(round(args.pool * args.hard_share))
        si, sm, sc = render_scene_arrays(n_shift, seed=5000 + seed, distribution="hard", size=args.size)
        ti, tm, tc = render_scene_arrays(args.pool - n_planted - n_shift, seed=5500 + seed, distribution="train",
                                         size=args.size)
        pi, pm, pc = np.concatenate([si, ti]), np.concatenate([sm, tm]), sc + tc
    qi, qm = planted_scenes(n_planted, 6000 + seed, args.size)
    perm = np.random.default_rng([seed, 3]).permutation(args.pool)  # planted scenes spread over the ids
    labels = [condition_label(c) for c in pc] + ["planted"] * n_planted
    imgs, masks = np.concatenate([pi, qi])[perm], np.concatenate([pm, qm])[perm]
    ids = [f"scene_{i:05d}.png" for i in range(args.pool)]
    return ids, imgs, masks, [labels[i] for i in perm]


# ----------------------------------------------------------------------------- score table

def predict(seg, images: np.ndarray, batch: int = 64) -> np.ndarray:
    return np.concatenate([seg.predict_proba(images[s:s + batch]) for s in range(0, len(images), batch)])


def model_columns(name: str, proba: np.ndarray, k: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The scan's per-model columns (frac, entropy, maxprob) from probabilities [N, C, H, W], and the argmax."""
    from blindspots.scan import model_stats

    st = model_stats(proba)
    cols = {f"frac__{name}__{c}": st.frac[:, c] for c in range(k)}
    cols[f"entropy__{name}"], cols[f"maxprob__{name}"] = st.entropy, st.maxprob
    return cols, st.argmax


def competitor_columns(world: dict, images: np.ndarray) -> tuple[dict, dict]:
    """Every competitor run once over the pool images uint8 [N, H, W, 3]: (name -> (columns, argmax map), name ->
    probabilities float [N, K, H, W], QBC's committee)."""
    from blindspots.models.zoo import load_segmenter

    k = world["classes"].num_classes
    probas = {g: predict(load_segmenter(path, batch_size=64), images) for g, path in world["competitors"].items()}
    return {g: model_columns(g, p, k) for g, p in probas.items()}, probas


def score_table(ids: list[str], target_cols: dict, target_map: np.ndarray, comps: dict, k: int) -> pd.DataFrame:
    """The score table the scan would write (same columns), built in memory."""
    from blindspots.scan import pair_distances

    cols: dict = {"id": np.asarray(ids, dtype=object), "status": "ok", **target_cols}
    for g, (gcols, gmap) in comps.items():
        cols.update(gcols)
        cols[f"dpa__target__{g}"], cols[f"dmiou__target__{g}"] = pair_distances(target_map, gmap, k)
    return pd.DataFrame(cols)


# ----------------------------------------------------------------------------- one loop

def batched(compute, images: np.ndarray, size: int = 50) -> dict[str, np.ndarray]:
    """An `add_columns`-style compute over all images, `size` at a time: {column: [N]}."""
    parts = [compute(images[s:s + size]) for s in range(0, len(images), size)]
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}


def run_loop(strategy: str, seed: int, world: dict, pool: tuple, comps: dict, args: argparse.Namespace,
             shared: float | None = None, comp_probas: dict | None = None, labeller=None) -> dict:  # noqa: ANN001
    """`args.rounds` rounds of pick -> simulated people -> fine-tune with replay (learning rate chosen on T0
    among `args.ft_lrs`) -> evaluate. comp_probas: competitor -> probabilities on the pool (QBC's committee).
    labeller: region answers instead of whole masks (`label_efficiency_regions.RegionLabeller`), or None."""
    import torch

    from blindspots.human.cost import LabelCost
    from blindspots.human.simulate import SimulatedAnnotator, SimulatedRaters, image_miou
    from blindspots.mine import make_sampler
    from blindspots.mine.model_columns.acquisition import AcquisitionColumns
    from blindspots.mine.samplers.bandit import ProposerShares, round_rewards
    from blindspots.mine.model_columns.names import feature_columns, margin_column
    from blindspots.mine.samplers.coreset import labelled_features
    from blindspots.mine.samplers.mad import class_area_ranges, released_settings
    from blindspots.mine.samplers.qbc import committee_disagreement, qbc_column
    from blindspots.mine.samplers.teach import teach_order
    from blindspots.models.adapters import TorchSegmenter
    from blindspots.models.zoo import load_checkpoint
    from blindspots.training.replay import ReplayFinetuner, evaluate_module

    classes, focus = world["classes"], world["focus"]
    k = classes.num_classes
    ids, images, masks, labels = pool
    # region labels: the same number of masks' cost buys more (partially labelled) images
    cost_model = LabelCost() if labeller is None else labeller.cost_model(LabelCost())
    n4 = args.n4 if labeller is None else labeller.images_for(args.n4)
    n_baseline = args.baseline_masks if labeller is None else labeller.images_for(args.baseline_masks)
    # BALD's own target: the dropout-trained variant (its MC passes sample that dropout) unless --dropout is given
    own_dropout = strategy in DROPOUT_TARGET and args.dropout is None
    module, _ = load_checkpoint(world["target_dropout" if own_dropout else "target"])
    raters = 2 if strategy.endswith(SECOND_RATER) else args.raters
    strategy_base = strategy.removesuffix(SECOND_RATER)
    s0, t0 = ArrayPairs(*world["S0"]), ArrayPairs(*world["T0"])
    hard = ArrayPairs(world["hard"][0], world["hard"][1])
    flags = world["hard"][2]
    hard_p = ArrayPairs(world["hard"][0][flags], world["hard"][1][flags])
    ranges = class_area_ranges(list(world["S0"][1]), k)
    annotator = SimulatedAnnotator(seed=seed)
    row_of = {i: n for n, i in enumerate(ids)}
    bandit = ProposerShares(portfolio_prior(args), floor=args.portfolio_floor)

    def evaluate(m) -> dict:
        return {"hard": evaluate_module(m, hard, k), "T0": evaluate_module(m, t0, k),
                focus: evaluate_module(m, hard_p, k)}

    hard_labels = np.asarray(world.get("hard_labels", []))  # MRI: each hard image's condition

    def by_condition(m) -> dict:
        """The hard set's mIoU per condition (MRI; empty for the scenes)."""
        return {c: evaluate_module(m, ArrayPairs(world["hard"][0][hard_labels == c], world["hard"][1][hard_labels == c]),
                                   k) for c in dict.fromkeys(hard_labels.tolist())}

    points = [{"round": 0, "masks": 0, "ratings": 0, **evaluate(module)}]
    conditions, picked_rounds = [by_condition(module)], []  # per round: hard mIoU per condition, S per condition
    labelled: list[str] = []
    seen: set[str] = set()  # rated or labelled: not offered again
    n_ratings, lrs, portfolio, bn_probe = 0, [], [], []
    for r in range(args.rounds):
        module.eval()  # the fine-tuner leaves it in training mode: dropout off for the maps and features
        seg = TorchSegmenter(module, k, batch_size=64)
        proba = predict(seg, images)
        tcols, tmap = model_columns("target", proba, k)
        true_iou = image_miou(tmap, masks, k)
        table = score_table(ids, tcols, tmap, comps, k)
        if strategy in NEEDS:  # dropout=None: the model's own dropout layers (refused when it has none)
            acq = AcquisitionColumns(seg, "target", kinds=NEEDS[strategy], mc_passes=args.mc_passes,
                                     dropout=args.dropout, seed=seed)
            table = pd.concat([table, pd.DataFrame(batched(acq, images))], axis=1)  # BADGE: K x D columns at once
        if strategy == "qbc" or (strategy_base.startswith("portfolio") and "qbc" in bandit.weights):
            # the committee MAD uses: the target and every competitor
            ve, kl = committee_disagreement(np.stack([proba, *comp_probas.values()]))
            table[qbc_column("target", "vote")], table[qbc_column("target", "kl")] = ve, kl
        centres = None
        if "features" in NEEDS.get(strategy, ()):  # S0 and every image labelled so far, before they leave the table
            s0_feats = batched(AcquisitionColumns(seg, "s0", kinds=("features",)), world["S0"][0])
            centres = np.vstack([np.column_stack([s0_feats[c] for c in feature_columns(list(s0_feats), "s0")]),
                                 labelled_features(table, labelled, "target")])
        full = table
        table = table[~table["id"].isin(seen)].reset_index(drop=True)
        settings: dict = {"target": "target"}
        if strategy_base in ("mad", "madplus", "portfolio", "portfolio_mos"):
            settings.update(ranges=ranges, n3=25, classes=classes)
            if strategy == "madplus" and shared is not None:
                settings["shared"] = shared
            if strategy_base.startswith("portfolio"):
                settings.update(centers=centres, shares=bandit.shares())
        elif strategy == "mad_released":
            settings.update(released_settings(list(world["S0"][1]), k), n3=25, classes=classes)
        elif strategy == "random":
            settings = {}
        elif strategy == "coreset":
            settings["centers"] = centres
        name = {"mad_released": "mad", "portfolio_mos": "portfolio"}.get(strategy_base, strategy_base)
        sampler = make_sampler(name, **settings)
        pick_seed = seed * 100 + r
        held: list[str] = []
        if strategy in RATED:
            m_sel = sampler.select(table, args.n_m, seed=pick_seed)
            m_ids = list(m_sel["id"])
            iou = np.array([true_iou[row_of[i]] for i in m_ids])
            ratings = SimulatedRaters(raters, noise=0.5, bias_sd=0.3, seed=pick_seed).rate(m_ids, iou)
            if strategy_base == "portfolio":
                mos = ratings.mos().reindex(m_ids).to_numpy(np.float64)
                rows = pd.Index(table["id"]).get_indexer(m_ids)  # M's rows in the table
                feats = table[feature_columns(table.columns, "target")].to_numpy(np.float64)[rows]
                unsure = 1.0 - table[margin_column("target")].to_numpy(np.float64)[rows]
                order, _ = teach_order(mos, n4, uncertainty=unsure, features=feats, centers=centres,
                                       weights=args.teach_weight_list)
                s_ids = [m_ids[j] for j in order]
            else:
                s_ids = list(ratings.select_worst(n4, candidates=m_ids)["image_id"])
            n_ratings += raters * len(m_ids)
            seen |= set(m_ids)
            held = [i for i in m_ids if i not in set(s_ids)]  # rated, not labelled: the round's test set T(i)
        else:
            s_ids = list(sampler.select(table, n_baseline, seed=pick_seed)["id"])
            seen |= set(s_ids)
        labelled += s_ids
        label = annotator.annotate if labeller is None else labeller.annotator(proba, row_of)
        pairs = ArrayPairs(images[[row_of[i] for i in labelled]],
                           np.stack([label(i, masks[row_of[i]]) for i in labelled]))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ft = ReplayFinetuner(args.ft_lr_list, epochs=args.ft_epochs, batch_size=8, max_replay=args.max_replay,
                                 seed=seed, progress=False, freeze_batchnorm_stats=args.freeze_bn_stats
                                 ).fit(module, pairs, s0, t0, num_classes=k)
        if args.bn_probe:  # the fine-tuned weights with the round's starting BN statistics, and with S0's
            bn_probe.append(batchnorm_probe(ft.model_, module, world["S0"][0], evaluate, by_condition))
        module = ft.model_
        lrs.append(float(ft.lr_))
        if strategy.startswith("portfolio"):  # what each proposer's picks bought: the gain on T(i)
            t_rows = [row_of[i] for i in held]
            after = image_miou(model_columns("target", predict(TorchSegmenter(module, k, batch_size=64),
                                                               images[t_rows]), k)[1], masks[t_rows], k)
            gain = float(np.mean(after - true_iou[t_rows])) if t_rows else 0.0
            prop = dict(zip(m_ids, m_sel["proposer"]))
            portfolio.append({"round": r + 1, "shares": bandit.shares(), "gain_T": gain,
                              "M": pd.Series(list(prop.values())).value_counts().to_dict(),
                              "S": pd.Series([prop[i] for i in s_ids]).value_counts().to_dict()})
            portfolio[-1]["rewards"] = round_rewards(gain, list(prop.values()), [prop[i] for i in s_ids])
            bandit.update(portfolio[-1]["rewards"])
        points.append({"round": r + 1, "masks": len(labelled), "ratings": n_ratings,
                       "cost": cost_model.of(n_ratings, len(labelled)), **evaluate(module)})
        conditions.append(by_condition(module))
        picked_rounds.append(pd.Series([labels[row_of[i]] for i in s_ids]).value_counts().to_dict())
    picked = pd.Series([labels[row_of[i]] for i in labelled]).value_counts().to_dict()
    return {"strategy": strategy, "seed": seed, "points": points, "picked": picked, "lrs": lrs,
            "portfolio": portfolio, "conditions": conditions, "picked_rounds": picked_rounds,
            **({"bn_probe": bn_probe} if args.bn_probe else {})}


def portfolio_prior(args: argparse.Namespace) -> dict[str, float]:
    """The portfolio's round-1 weights: `--portfolio-prior` ("mad=2,margin=1,...") or the sampler's `PRIOR`
    without surprise (the benchmark's tables have no surprise columns)."""
    from blindspots.mine.samplers.bandit import PRIOR, PROPOSERS

    if args.portfolio_prior is None:
        return {p: w for p, w in PRIOR.items() if p != "surprise"}
    prior = {}
    for part in args.portfolio_prior.split(","):
        name, _, w = part.partition("=")
        if name.strip() not in PROPOSERS or not w:
            raise SystemExit(f"--portfolio-prior: expected proposer=weight pairs of {list(PROPOSERS)}, got {part!r}")
        prior[name.strip()] = float(w)
    return prior


def batchnorm_probe(tuned, before, s0_images: np.ndarray, evaluate, by_condition) -> dict:  # noqa: ANN001
    """A fine-tuned model's scores with its BatchNorm statistics swapped (weights unchanged): "start_stats",
    those of the model it was fine-tuned from; "s0_stats", re-estimated on S0's images (uint8 [N, H, W, 3]).
    Each: evaluate(m) (hard, T0, focus) and by_condition(m) under "conditions". `tuned` is left as it was."""
    import copy

    from blindspots.training.batchnorm import copy_batchnorm_stats, reestimate_batchnorm_stats

    out = {}
    for name in ("start_stats", "s0_stats"):
        m = copy.deepcopy(tuned)
        if name == "start_stats":
            copy_batchnorm_stats(before, m)
        else:
            reestimate_batchnorm_stats(m, s0_images, batch_size=8)
        m.eval()
        out[name] = {**evaluate(m), "conditions": by_condition(m)}
    return out


# ----------------------------------------------------------------------------- MAD+ share

def share_sweep(world: dict, pool: tuple, comps: dict, args: argparse.Namespace, shares: list[float]) -> pd.DataFrame:
    """Selection only, on the first round's table: images of the focus subset (the shared blind spot) and
    failing images among S = the n4 lowest-MOS of M, for MAD and MAD+ at each share."""
    from blindspots.human.simulate import SimulatedRaters, image_miou
    from blindspots.mine import make_sampler
    from blindspots.mine.samplers.mad import class_area_ranges
    from blindspots.models.adapters import TorchSegmenter
    from blindspots.models.zoo import load_checkpoint

    k, focus = world["classes"].num_classes, world["focus"]
    ids, images, masks, labels = pool
    module, _ = load_checkpoint(world["target"])
    tcols, tmap = model_columns("target", predict(TorchSegmenter(module, k, batch_size=64), images), k)
    iou = pd.Series(image_miou(tmap, masks, k), index=ids)
    lab = pd.Series(labels, index=ids)
    in_focus = lab.isin(world["focus_labels"])
    table = score_table(ids, tcols, tmap, comps, k)
    ranges = class_area_ranges(list(world["S0"][1]), k)
    rows = []
    for share in [0.0, *shares]:
        m = list(make_sampler("madplus", target="target", ranges=ranges, n3=25, shared=share)
                 .select(table, args.n_m)["id"])
        ratings = SimulatedRaters(args.raters, noise=0.5, bias_sd=0.3, seed=0).rate(m, iou[m].to_numpy())
        s = list(ratings.select_worst(args.n4, candidates=m)["image_id"])
        rows.append({"shared": share, f"{focus}_in_M": int(in_focus[m].sum()),
                     f"{focus}_in_S": int(in_focus[s].sum()), "failures_in_S": int((iou[s] < 0.5).sum()),
                     "hard_in_S": int((lab[s] != "in slice").sum())})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- output

def recall_view(dataset: str) -> dict:
    """How a dataset's condition labels are grouped: the focus group, the labels in it, and whether a label
    is its own group (MRI: 'scan:sharp') rather than grouped by factor (scenes: 'tilt')."""
    if dataset in ("mri", "microscopy"):
        return {"focus": "shared", "focus_labels": _world_module(dataset).SHARED, "whole": True}
    return {"focus": "planted", "focus_labels": ("planted",), "whole": False}


def condition_groups(label: str, focus: str = "planted", focus_labels: tuple[str, ...] = ("planted",),
                     whole: bool = False) -> list[str]:
    """'in slice' or the focus label itself (the scenes' 'planted'); else 'hard', the focus group when the
    label is one of focus_labels, and each factor outside the slice ('tilt', ...) or, with `whole`, the label."""
    if label in ("in slice", focus):
        return [label]
    parts = [label] if whole else sorted({part.split(":")[0] for part in label.split("+")})
    return ["hard", *([focus] if label in focus_labels else []), *parts]


def recall_table(runs: list[dict], pool_counts: dict, view: dict | None = None) -> tuple[pd.DataFrame, pd.Series]:
    """Images labelled per condition group, mean over seeds, and the pool's mean count per group.
    view: `recall_view(dataset)` (default: the scenes')."""
    view = view or recall_view("scenes")
    focus = view["focus"]

    def grouped(counts: dict) -> dict:
        out: dict = {}
        for label, n in counts.items():
            for g in condition_groups(label, **view):
                out[g] = out.get(g, 0) + n
        return out

    picked = pd.DataFrame([{"strategy": r["strategy"], **grouped(r["picked"])} for r in runs]).fillna(0)
    recall = picked.groupby("strategy", sort=False).mean(numeric_only=True)
    avail = pd.DataFrame([grouped(c) for c in pool_counts.values()]).fillna(0).mean()
    cols = [focus, "in slice", "hard", *sorted(c for c in avail.index if c not in (focus, "in slice", "hard"))]
    return recall.reindex(columns=cols, fill_value=0.0), avail.reindex(cols, fill_value=0.0)


def print_tables(runs: list[dict], pool_counts: dict, view: dict | None = None) -> tuple[pd.DataFrame, dict]:
    """Print the per-round table, the tables at each cost ratio (`label_efficiency_cost`), the portfolio's
    shares and yields and the per-condition recall (grouped by `view`); returns (per-round table, sweep)."""
    from label_efficiency_cost import cost_tables

    table = summarise(runs)
    pd.set_option("display.width", 250)
    print("\n== mIoU per round (mean and sd over seeds; cost in label-editor actions, a rating 1, a mask 31.6) ==")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    sweep = cost_tables(runs, RATED, focus=(view or recall_view("scenes"))["focus"])
    print_portfolio(runs)
    recall, avail = recall_table(runs, pool_counts, view)
    print("\n== images labelled per condition, mean over seeds (an image outside the slice in two factors counts "
          "in both) ==")
    print(pd.concat([avail.rename("(pool)").to_frame().T, recall]).to_string(float_format=lambda v: f"{v:.1f}"))
    return table, sweep


def print_portfolio(runs: list[dict]) -> None:
    """The portfolio's proposer shares per round, its candidates and labelled images per proposer, the gain
    on T(i) and each proposer's reward (mean over seeds)."""
    rows = [{"strategy": r["strategy"], "seed": r["seed"], "round": p["round"], "gain_T": p["gain_T"],
             **{f"share_{k}": v for k, v in p["shares"].items()}, **{f"M_{k}": v for k, v in p["M"].items()},
             **{f"S_{k}": v for k, v in p["S"].items()}, **{f"reward_{k}": v for k, v in p["rewards"].items()}}
            for r in runs for p in r.get("portfolio", [])]
    if rows:
        df = pd.DataFrame(rows).fillna(0)
        print("\n== portfolio: proposer shares of M at each round, candidates (M_) and labelled (S_) per proposer, "
              "gain on T(i) and rewards (mean over seeds) ==")
        print(df.drop(columns="seed").groupby(["strategy", "round"]).mean().T.to_string(float_format=lambda v: f"{v:.3f}"))


def summarise(runs: list[dict]) -> pd.DataFrame:
    from blindspots.human.cost import LabelCost

    rows = [{"strategy": r["strategy"], "seed": r["seed"], **p} for r in runs for p in r["points"]]
    df = pd.DataFrame(rows)
    c = LabelCost()
    df["cost"] = df["ratings"] * c.c_rate + df["masks"] * c.c_mask  # the figure's x axis (actions)
    g = df.groupby(["strategy", "round"], sort=False)
    out = g[["cost", "masks", "ratings"]].mean()
    for m in [c for c in df.columns if c not in ("strategy", "seed", "round", "cost", "masks", "ratings")]:
        out[f"{m}_mean"], out[f"{m}_sd"] = g[m].mean(), g[m].std(ddof=1)
    return out.reset_index()


# per dataset, the settings left out on the command line; --quick: a tiny run (a test of the code path)
DEFAULTS = {
    # scenes: half the pool shifted and 6 fine-tuning epochs, so that fine-tuning moves the hard set by a few
    # points (with the "pool" distribution's 5% and 2 epochs it moved it by at most 0.9 points, and every
    # sampler tied); MRI and microscopy draw a third of their pools from their conditions
    "scenes": {"target_arch": "tiny_unet", "competitors": "small_fcn,pspnet_r18", "n_train": 400, "epochs": 8,
               "n_hard": 100, "hard_share": "0.5", "ft_epochs": 6},
    "mri": {"target_arch": "tiny_unet", "competitors": "small_fcn,pspnet_r18", "n_train": 320, "epochs": 10,
            "n_hard": 120, "ft_epochs": 2},
    "microscopy": {"target_arch": "tiny_unet", "competitors": "small_fcn,pspnet_r18", "n_train": 320, "epochs": 10,
                   "n_hard": 120, "ft_epochs": 2},
}
QUICK = {"seeds": "0", "rounds": 1, "size": 32, "n_train": 24, "epochs": 1, "pool": 24, "n_t0": 6, "n_hard": 9,
         "n_m": 6, "n4": 2, "mc_passes": 2, "ft_epochs": 1, "max_replay": 4, "shares": "0.25"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=sorted(DEFAULTS), default="scenes", help="procedural scenes, brain MRI "
                    "slices of Debian's mricron-data (label_efficiency_mri.py), or fluorescence-microscopy tiles of "
                    "the ndev-sampledata wheel (label_efficiency_microscopy.py)")
    ap.add_argument("--mri-root", type=Path, default=None, help="MRI: the folder of mricron's templates "
                    "(default: Debian's /usr/share/mricron/templates)")
    ap.add_argument("--micro-source", type=Path, default=None, help="microscopy: the ndev-sampledata==0.0.3 wheel, "
                    "its scratch-assay .tiff or a folder with either (default: ~/.cache/blindspots/microscopy)")
    ap.add_argument("--quick", action="store_true", help="a tiny run: 1 seed, 1 round, 32 px, 24-image pool")
    ap.add_argument("--work", type=Path, default=Path("/tmp/label_efficiency"), help="cache folder (zoo, results)")
    ap.add_argument("--figure", type=Path, default=None, help="PNG to write (default: WORK/label_efficiency.png)")
    ap.add_argument("--project", type=Path, default=None, help="a project folder: also write the results to its "
                    "reports/ for the round report's sampler comparison")
    ap.add_argument("--samplers", default=",".join(SAMPLERS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--n-train", type=int, default=None, help="S0: the target's training images (also replayed); "
                    "scenes 400, MRI 320 (the competitors get as many)")
    ap.add_argument("--epochs", type=int, default=None, help="zoo training epochs (scenes 8, MRI 10)")
    ap.add_argument("--target-arch", default=None, help="the target's zoo architecture (tiny_unet)")
    ap.add_argument("--competitors", default=None, help="competitor architectures (small_fcn,pspnet_r18)")
    ap.add_argument("--pool", type=int, default=240)
    ap.add_argument("--hard-share", default=None, help="scenes: share of the pool drawn shifted (the \"hard\" "
                    "distribution), the rest in the target's slice (default 0.5), or 'pool': the \"pool\" "
                    "distribution, 5%% shifted")
    ap.add_argument("--planted-share", type=float, default=0.08, help="scenes: share of pool and hard set in the "
                    "planted shared blind spot")
    ap.add_argument("--n-t0", type=int, default=60)
    ap.add_argument("--n-hard", type=int, default=None, help="hard test set: scenes, its shifted scenes (100, plus "
                    "planted ones); MRI, its images, spread evenly over the conditions (120)")
    ap.add_argument("--n-m", type=int, default=24, help="MAD: candidates rated per round")
    ap.add_argument("--raters", type=int, default=1, help="raters per candidate (one: every rating is a new "
                    "image; a second rater halves the noise of the MOS at twice the rating cost)")
    ap.add_argument("--baseline-masks", type=int, default=None, help="masks per round of the samplers without "
                    "ratings (default: what a rated round costs at rating:mask 1:3, so the sweep reads every "
                    "ratio off their curves)")
    ap.add_argument("--n4", type=int, default=8, help="MAD: masks per round (lowest MOS of M)")
    ap.add_argument("--mc-passes", type=int, default=20)
    ap.add_argument("--dropout", type=float, default=None, help="BALD/PowerBALD: dropout P on the plain target's "
                    "classifier input during the MC passes only (default: none; they run on the target's "
                    "dropout-trained variant and sample its own dropout)")
    ap.add_argument("--ft-epochs", type=int, default=None, help="fine-tuning epochs a round (scenes 6, MRI and "
                    "microscopy 2)")
    ap.add_argument("--ft-lrs", default="1.7e-3,5e-3,1.5e-2", help="fine-tuning learning rates; each round picks "
                    "one on T0 (the paper's rule: three)")
    ap.add_argument("--max-replay", type=int, default=48)
    ap.add_argument("--freeze-bn-stats", action="store_true", help="fine-tune with every BatchNorm layer's running "
                    "statistics held as the model had them (ReplayFinetuner(freeze_batchnorm_stats=True)); default: "
                    "re-estimated on the fine-tuning batches")
    ap.add_argument("--bn-probe", action="store_true", help="also score each round's fine-tuned model with its "
                    "BatchNorm statistics swapped: the round's starting ones, and ones re-estimated on S0 "
                    "(results.json: each run's bn_probe)")
    ap.add_argument("--madplus-share", type=float, default=None, help="MAD+'s shared share in the loops "
                    "(default: the sampler's default)")
    ap.add_argument("--portfolio-prior", default=None, help="the portfolio's round-1 weights, e.g. "
                    "'mad=2,margin=1,coreset=1,shared=0.5' (default: mine.samplers.bandit.PRIOR without surprise)")
    ap.add_argument("--portfolio-floor", type=float, default=None, help="the portfolio's floor gamma "
                    "(default: mine.samplers.bandit.FLOOR)")
    ap.add_argument("--teach-weights", default=None, help="the portfolio's S rule weights w_fail,w_unsure,w_new "
                    "(default: mine.samplers.teach.WEIGHTS)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--shares", default="0.1,0.25,0.4", help="MAD+ shares for the selection sweep")
    ap.add_argument("--report-only", action="store_true", help="print the tables of WORK/results.json again")
    ap.add_argument("--resume", action="store_true", help="keep the loops WORK/results.json already holds (it "
                    "is written after every loop) and run only the others")
    ap.add_argument("--merge", type=Path, action="append", default=[], help="with --report-only: another run's "
                    "results.json (same dataset and settings, e.g. other samplers or seeds) whose runs are added; "
                    "repeatable")
    label_efficiency_regions.add_arguments(ap)  # --labels masks|regions and the region settings
    args = ap.parse_args(argv)
    for key, value in (QUICK.items() if args.quick else ()):
        if getattr(args, key) == ap.get_default(key):  # what the command line sets stays
            setattr(args, key, value)
    for key, value in DEFAULTS[args.dataset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.hard_share is not None:
        try:
            args.hard_share = None if args.hard_share == "pool" else float(args.hard_share)
        except ValueError:
            raise SystemExit(f"--hard-share: expected a share in [0, 1] or 'pool', got {args.hard_share!r}") from None
    args.competitor_list = tuple(args.competitors.split(","))
    args.ft_lr_list = [float(v) for v in args.ft_lrs.split(",")]
    from blindspots.mine.samplers.bandit import FLOOR
    from blindspots.mine.samplers.teach import WEIGHTS

    args.teach_weight_list = WEIGHTS if args.teach_weights is None else \
        tuple(float(v) for v in args.teach_weights.split(","))
    if len(args.teach_weight_list) != 3:
        raise SystemExit(f"--teach-weights: expected three numbers w_fail,w_unsure,w_new, got {args.teach_weights!r}")
    if args.portfolio_floor is None:
        args.portfolio_floor = FLOOR
    if args.baseline_masks is None:
        args.baseline_masks = int(np.ceil(args.n4 + args.raters * args.n_m / 3))
    return args


def merge_results(paths: list[Path]) -> dict:
    """The first results.json with the runs of the others added: a (strategy, seed) already there is kept
    from the earlier file. Refuses files of another dataset or pool size."""
    saved = json.loads(paths[0].read_text())
    have = {(r["strategy"], r["seed"]) for r in saved["runs"]}
    for path in paths[1:]:
        other = json.loads(Path(path).read_text())
        for key in ("dataset",):
            if other.get(key) != saved.get(key):
                raise SystemExit(f"--merge: {path} is a run of {key} {other.get(key)!r}, expected {saved.get(key)!r}")
        if other["args"].get("pool") != saved["args"].get("pool"):
            raise SystemExit(f"--merge: {path} has a pool of {other['args'].get('pool')}, expected "
                             f"{saved['args'].get('pool')}")
        saved["runs"] += [r for r in other["runs"] if (r["strategy"], r["seed"]) not in have]
        have |= {(r["strategy"], r["seed"]) for r in other["runs"]}
        saved["pool_counts"] = {**other["pool_counts"], **saved["pool_counts"]}
        saved["seconds"] += other["seconds"]
    return saved


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark (see the module docstring); returns what it writes to WORK/results.json."""
    args = parse_args(argv)
    if args.report_only:
        saved = merge_results([args.work / "results.json", *args.merge])
        table, _ = print_tables(saved["runs"], saved["pool_counts"], recall_view(saved.get("dataset", "scenes")))
        if args.figure is not None:  # the curves of every merged run
            from blindspots.report.pages.label_efficiency import label_efficiency_figure

            print(f"figure: {label_efficiency_figure(table, args.figure)}")
        print(f"(measured on {saved['cpu']}, {saved['seconds']:.0f} s, loadavg at the end {saved['loadavg_end']})")
        return saved
    import torch

    # one thread: under a loaded shared CPU, two OpenMP threads spin-wait (a tiny U-Net training step of 16
    # images at 64 px took 17 s with two threads against 2 s with one, load average 20)
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    print(f"CPU: {cpu_model()}, loadavg {os.getloadavg()}, dataset {args.dataset}", flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    try:
        world = make_world(args)
    except FileNotFoundError as e:  # MRI without mricron-data, microscopy without the wheel: one line naming it
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    focus = world["focus"]
    models = world["describe"](world) if "describe" in world else None
    if models is not None:
        print("\n== the models before fine-tuning, per condition (mean per-image mIoU; d = 1 - pixel agreement "
              "with the target) ==\n" + models.to_string(index=False, float_format=lambda v: f"{v:.3f}"), flush=True)
    runs: list[dict] = []
    sweep = None
    pool_counts: dict = {}
    results, before = args.work / "results.json", 0.0
    if args.resume and results.is_file():  # the loops an interrupted run finished are kept, not run again
        prev = json.loads(results.read_text())
        if prev.get("dataset") != args.dataset:
            raise SystemExit(f"--resume: {results} is a run of dataset {prev.get('dataset')!r}, expected "
                             f"{args.dataset!r}")
        runs, before = prev["runs"], float(prev["seconds"])
        pool_counts = {int(s_): c for s_, c in prev["pool_counts"].items()}
        print(f"resumed {len(runs)} finished loops from {results}", flush=True)
    done = {(r["strategy"], r["seed"]) for r in runs}

    def record(**more) -> dict:
        """What results.json holds (after every loop: an interrupted run keeps its finished loops)."""
        return {"dataset": args.dataset, "args": {k_: str(v) for k_, v in vars(args).items()}, "runs": runs,
                "pool_counts": {str(s_): c for s_, c in pool_counts.items()},
                "share_sweep": sweep.to_dict("records") if sweep is not None else None,
                "models": models.to_dict("records") if models is not None else None, "cpu": cpu_model(),
                "loadavg_end": os.getloadavg(), "seconds": before + time.perf_counter() - t_start, **more}

    for seed in [int(s) for s in args.seeds.split(",")]:
        todo = [s_ for s_ in args.samplers.split(",") if (s_, seed) not in done]
        if not todo:
            continue
        pool = make_pool(args, seed, world)
        comps, comp_probas = competitor_columns(world, pool[1])
        pool_counts[seed] = pd.Series(pool[3]).value_counts().to_dict()
        if sweep is None:
            sweep = share_sweep(world, pool, comps, args, [float(s) for s in args.shares.split(",")])
            print("\n== MAD+ share sweep (seed 0, first round, selection only) ==\n" + sweep.to_string(index=False),
                  flush=True)
        for strategy in todo:
            t = time.perf_counter()
            labeller = label_efficiency_regions.make_labeller(args, world, pool, comps)
            runs.append(run_loop(strategy, seed, world, pool, comps, args, shared=args.madplus_share,
                                 comp_probas=comp_probas, labeller=labeller))
            if labeller is not None:
                print(f"  regions: {labeller.summary()}", flush=True)
            last = runs[-1]["points"][-1]
            print(f"seed {seed} {strategy:13s}: hard {last['hard']:.4f} T0 {last['T0']:.4f} {focus} "
                  f"{last[focus]:.4f} masks {last['masks']} ratings {last['ratings']} lr {runs[-1]['lrs']} "
                  f"({time.perf_counter() - t:.0f} s, loadavg "
                  f"{os.getloadavg()[0]:.1f})", flush=True)
            results.write_text(json.dumps(record(complete=False), indent=1, default=float))
    table, cost_sweep = print_tables(runs, pool_counts, recall_view(args.dataset))
    from blindspots.report.pages.label_efficiency import RESULTS, label_efficiency_figure

    fig = label_efficiency_figure(table, args.figure or args.work / "label_efficiency.png")
    out = record(complete=True, table=table.to_dict("records"), cost_sweep=cost_sweep)
    results.write_text(json.dumps(out, indent=1, default=float))
    if args.project is not None:  # the round report's "Sampler comparison" section draws it
        (args.project / "reports").mkdir(parents=True, exist_ok=True)
        (args.project / "reports" / RESULTS).write_text(json.dumps(out, indent=1, default=float))
    print(f"\nfigure: {fig}; results: {args.work / 'results.json'}; {time.perf_counter() - t_start:.0f} s in all, "
          f"CPU {cpu_model()}, loadavg {os.getloadavg()}")
    return out


if __name__ == "__main__":
    main()

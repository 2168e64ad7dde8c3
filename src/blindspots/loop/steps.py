"""The steps of Algorithm 1 (scan, mine, ratings, select, masks, evaluate, finetune) and of the
label plan (export), each `run_<step>(loop, i, seed) -> dict | Status`, and Table 1."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from blindspots.ids import artifact_name, find_artifact
from blindspots.loop.context import Status, _Loop, target_column
from blindspots.loop.models import predict_one
from blindspots.loop.project import Project, ProjectError

log = logging.getLogger(__name__)


# ---- steps ------------------------------------------------------------------------------

def _settings(loop: _Loop, step: str) -> dict:
    c = loop.cfg
    return {
        "scan": lambda: {"batch_size": c.scan.batch_size, "shard_size": c.scan.shard_size},
        "mine": lambda: {"strategy": c.mining.strategy, "n3": c.mining.n3, "distance": c.mining.distance,
                         "quantiles": list(c.mining.quantiles), "n": c.mining.n},
        "ratings": lambda: {"raters": c.ratings.raters, "simulate": loop.simulate},
        "select": lambda: {"n4": c.ratings.n4, "test_size": c.testset.size, "max_per_class": c.testset.max_per_class,
                           "background": c.testset.background},
        "masks": lambda: {"simulate": loop.simulate},
        "evaluate": lambda: {},
        "finetune": lambda: {k: getattr(c.finetune, k) for k in ("lrs", "epochs", "batch_size", "momentum",
                                                                  "weight_decay", "power", "image_size",
                                                                  "max_replay", "device")},
        "export": lambda: {"formats": ["images", "predictions", "cvat", "labelstudio"]},
    }[step]()


def run_scan(loop: _Loop, i: int, seed: int) -> dict:
    """Scan the pool with f_t^(i) (and, once, the competitors)."""
    from blindspots.scan import scan_pool
    from blindspots.scan.table import load_manifest

    p, c = loop.project, loop.cfg
    name = target_column(p, i)
    comps = [g.name for g in c.competitors]
    scanned = set((load_manifest(p.scan_dir) or {}).get("models", {}))
    # Competitors are always passed: the scan skips their finished shards (Algorithm 1, line 7 reuses
    # line 3's columns) and completes any shard a crash left unfinished.
    _check_same_pool(loop)
    models = {name: loop.segmenter(c.target.name, i)}
    models.update({g: loop.segmenter(g, 0) for g in comps})
    scan_pool(loop.pool, models, p.scan_dir, target=name, competitors=comps, batch_size=c.scan.batch_size,
              shard_size=c.scan.shard_size, classes=loop.classes, progress=loop.progress)
    table = loop.score_table(i)
    return {"target_column": name, "scanned": sorted(set(models) - (scanned & set(comps))),
            "reused": sorted(scanned & set(comps)),
            "n_images": int(len(table)), "n_errors": int((table["status"] != "ok").sum())}


def _check_same_pool(loop: _Loop) -> None:
    """A project scans one pool in every round (one scan folder, one table). Photos added to or
    removed from it since the first scan: a ProjectError saying which and what to do (the scan's own
    error advises a new out_dir, which `round` does not take)."""
    from blindspots.scan.manifest import ids_digest
    from blindspots.scan.plan import scan_ids
    from blindspots.scan.table import load_manifest

    manifest = load_manifest(loop.project.scan_dir)
    ids = scan_ids(loop.pool)
    if manifest is None or manifest.get("ids_sha256") == ids_digest(ids):
        return
    shards = sorted((loop.project.scan_dir / "meta").glob("*.parquet"))
    old = set(pd.concat([pd.read_parquet(f, columns=["id"]) for f in shards])["id"]) if shards else set()
    added, removed = sorted(set(ids) - old), sorted(old - set(ids))
    raise ProjectError(
        f"pool.root: expected the {len(old)} images the project's first scan read, got {len(added)} added "
        f"and {len(removed)} removed since (e.g. added {added[:3]}, removed {removed[:3]}); every round scans "
        f"the same pool: put {str(loop.pool.root)!r} back as it was, or start a new project on the new pool "
        "with `blindspots init`")


def pool_class_ranges(table: pd.DataFrame, model: str, num_classes: int,
                      quantiles: tuple[float, float]) -> np.ndarray:
    """[p_k, q_k] per class from a model's own argmax maps on the pool (no labels needed).

    table: a score table with `frac__<model>__<k>` (class k's share of the argmax map) and `status`.
    Per class, the quantiles over the images where the model predicts it at all, exactly as
    `class_area_ranges` does over S0's masks. Returns float64 [C, 2], NaN rows for classes never
    predicted.
    """
    ok = table[table["status"] == "ok"] if "status" in table.columns else table
    out = np.full((num_classes, 2), np.nan)
    for k in range(num_classes):
        col = f"frac__{model}__{k}"
        if col not in ok.columns:
            continue
        v = ok[col].to_numpy(dtype=np.float64)
        v = v[np.isfinite(v) & (v > 0)]
        if len(v):
            out[k] = np.quantile(v, list(quantiles))
    return out


def class_ranges(loop: _Loop) -> np.ndarray:
    """[p_k, q_k] per class for MAD's content constraint, cached in reports/: from S0's masks (the
    paper), or without S0 from the target's (version 0) predictions on the pool (docs/loop.md)."""
    from blindspots.mine.mad import class_area_ranges

    path = loop.project.reports_dir / "class_ranges.json"
    q = list(loop.cfg.mining.quantiles)
    source = "S0" if loop.cfg.data.train else "pool predictions"
    if path.is_file():
        d = json.loads(path.read_text())
        if d.get("quantiles") == q and d.get("source", "S0") == source:
            return np.asarray([[np.nan if v is None else v for v in r] for r in d["ranges"]], dtype=np.float64)
    if source == "S0":
        s0 = loop.labelled_set("train")
        ranges = class_area_ranges((s0.load(i)[1] for i in s0.ids), loop.classes.num_classes,
                                   ignore_index=loop.classes.ignore_index, quantiles=tuple(q))
    else:
        ranges = pool_class_ranges(loop.score_table(0), target_column(loop.project, 0),
                                   loop.classes.num_classes, (q[0], q[1]))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"quantiles": q, "source": source,
                               "ranges": [[None if np.isnan(v) else float(v) for v in r] for r in ranges]}))
    tmp.replace(path)
    return ranges


def make_sampler(loop: _Loop, i: int, strategy: str | None = None) -> Any:
    """The configured sampler (or `strategy`) for round i's target column, from mine's one registry."""
    from blindspots.mine.registry import make_sampler as registered

    m = loop.cfg.mining
    strategy = strategy or m.strategy
    name = target_column(loop.project, i)
    if strategy == "mad":
        ranges = np.array([[np.nan if v is None else v for v in r] for r in class_ranges(loop)], dtype=np.float64)
        return registered("mad", target=name, competitors=[g.name for g in loop.cfg.competitors],
                          distance=m.distance, n3=m.n3, ranges=ranges, classes=loop.classes)
    if strategy == "random":
        return registered("random")
    if strategy == "scenario":
        return _scenario_sampler(loop, i) or make_sampler(loop, i, "mad")
    return registered(strategy, target=name)  # entropy, surprise: read the target's columns


def _scenario_sampler(loop: _Loop, i: int) -> Any:
    """Pool images nearest the failure scenarios of the S of rounds 0..i-1 (None before two failures exist:
    round 0 then mines with MAD)."""
    from blindspots.mine.registry import make_sampler as registered
    from blindspots.scenarios.segmentation import find_scenarios
    from blindspots.scenarios.segmentation_attributes import scan_attributes

    feats = scan_attributes(loop.project.scan_dir)
    fails = sorted({str(x) for r in range(i) for x in loop.project.candidates(r, "S")["id"]} & set(feats.index))
    if len(fails) < 2:
        return None
    return registered("scenario", scenarios=find_scenarios(feats, fails), features=feats)


def run_mine(loop: _Loop, i: int, seed: int) -> dict:
    """M(i+1) from the score table; stored as candidates of kind "M" with their reasons."""
    table = loop.score_table(i)
    if loop.cfg.mining.strategy == "surprise":
        _check_surprise_columns(loop, i, table)
    sampler = make_sampler(loop, i)
    n = loop.cfg.mining.n
    if n is None and loop.cfg.mining.strategy != "mad":
        # Same budget as MAD would use, so baselines compare at equal human effort.
        n = len(make_sampler(loop, i, "mad").select(table, seed=seed))
    sel = sampler.select(table, n, seed=seed)
    if not len(sel):
        log.warning("round %d: %s selected no candidates; the round will have empty M, S and T",
                    i, type(sampler).__name__)
    loop.project.set_candidates(i, "M", sel)
    return {"n": int(len(sel)), "sampler": type(sampler).__name__,
            "params": {k: v for k, v in sampler.get_params().items() if k not in ("ranges", "classes")}}


def _check_surprise_columns(loop: _Loop, i: int, table: pd.DataFrame) -> None:
    """The surprise strategy ranks by columns `blindspots surprise score --scan` adds to the round's
    scan; without them, one ProjectError with the two commands (not the sampler's column list)."""
    name = target_column(loop.project, i)
    if any(str(col).startswith("surprise_") and str(col).endswith(f"__{name}") for col in table.columns):
        return
    p = loop.project
    spec = p.model(loop.cfg.target.name, i).spec
    raise ProjectError(
        f"mining.strategy: 'surprise' expected surprise columns of {name!r} in the project's scan, got none; "
        f"fit an estimator on labelled images (`blindspots surprise fit '{spec}' --images DIR --masks DIR "
        f"--out sa.npz`), add the columns (`blindspots surprise score {loop.pool.root} -e sa.npz --scan "
        f"{p.scan_dir} --name {name}`), then run `blindspots round {p.path}` again")


def ratings_progress(loop: _Loop, i: int) -> tuple[list[str], int, int]:
    """(ids still needing answers, answers in, answers needed) for M(i+1)."""
    ids = list(loop.project.candidates(i, "M")["id"])
    r = loop.project.ratings_for_round(i)
    need = loop.cfg.ratings.raters
    counts = r.groupby("id").size() if len(r) else pd.Series(dtype=int)
    ood = set(r.loc[r["out_of_domain"], "id"]) if len(r) else set()
    missing = [x for x in ids if x not in ood and int(counts.get(x, 0)) < need]
    have = sum(min(int(counts.get(x, 0)), need) if x not in ood else need for x in ids)
    return missing, have, need * len(ids)


def _ground_truth(loop: _Loop, image_id: str) -> np.ndarray:
    from PIL import Image

    root = loop.cfg.simulate.ground_truth
    if not root:
        raise ProjectError("simulate.ground_truth: expected a folder of true masks to simulate humans, got \"\" "
                           "(set it in blindspots.toml, or answer with real people)")
    path = find_artifact(loop.cfg.resolve(root), image_id)
    if path is None:
        raise ProjectError(f"simulate.ground_truth: expected a mask "
                           f"{str(loop.cfg.resolve(root) / artifact_name(image_id))!r} for image {image_id!r}, got none")
    with Image.open(path) as im:
        return np.asarray(im)


def _target_map(loop: _Loop, i: int, image_id: str) -> np.ndarray:
    return _model_map(loop, loop.cfg.target.name, i, image_id)


def _model_map(loop: _Loop, name: str, version: int, image_id: str) -> np.ndarray:
    """int [H, W] class ids of model `name` (the target at `version`, a competitor at 0) on a pool
    image: its saved scan map, else a forward (by id for precomputed outputs)."""
    from PIL import Image

    column = target_column(loop.project, version) if name == loop.cfg.target.name else name
    path = find_artifact(loop.project.scan_dir / "maps" / column, image_id)
    if path is not None:
        with Image.open(path) as im:
            return np.asarray(im)
    proba = predict_one(loop.segmenter(name, version), image_id, loop.pool.load(image_id))
    return proba[0].argmax(0).astype(np.uint8)


def _map_miou(loop: _Loop, i: int, kind: str, name: str, version: int) -> float:
    """mIoU (pixels pooled) of a model's maps against the stored masks of round i's `kind` set."""
    from blindspots.metrics import ConfusionMatrix

    cm = ConfusionMatrix(loop.classes.num_classes, loop.classes.ignore_index)
    for image_id in loop.project.candidates(i, kind)["id"]:
        cm.update(_model_map(loop, name, version, image_id), loop.project.load_mask(i, image_id))
    return cm.mean_iou()


def simulate_ratings(loop: _Loop, i: int, ids: list[str], seed: int) -> int:
    """Simulated raters (`blindspots.human.simulate`) rate f_t^(i) on `ids` from the true IoU."""
    from blindspots.human.simulate import SimulatedRaters, image_miou

    s = loop.cfg.simulate
    raters = SimulatedRaters(loop.cfg.ratings.raters, noise=s.noise, bias_sd=s.bias, ood_share=s.ood_share,
                             seed=seed)
    k, ign = loop.classes.num_classes, loop.classes.ignore_index
    iou = np.array([float(image_miou(_target_map(loop, i, x), _ground_truth(loop, x), k, ignore_index=ign)[0])
                    for x in ids])
    frame = raters.rate(ids, iou).frame
    rows = [(i, x, r, "ood" if np.isinf(v) else int(v)) for x, r, v in zip(frame["image_id"], frame["rater"],
                                                                           frame["score"])]
    return loop.project.add_ratings(rows)


def run_ratings(loop: _Loop, i: int, seed: int) -> dict | Status:
    from blindspots.loop.progress import rating_progress

    missing, have, total = ratings_progress(loop, i)
    if missing and loop.simulate:
        simulate_ratings(loop, i, missing, seed)
        missing, have, total = ratings_progress(loop, i)
    if missing:
        prog = rating_progress(loop.project, i)
        p = loop.project.path
        todo = (f"Rate in the web app (`blindspots serve {p}`) or import a CSV with `blindspots ratings import "
                f"{p} FILE.csv`, then run `blindspots round {p}` again."
                + (f" This round cannot finish as it is: {prog.advice()}." if prog.unreachable else ""))
        return Status("awaiting_ratings", i, "ratings",
                      f"round {i}: waiting for ratings of M({i + 1}) (1-5 or out-of-domain): {prog.counts()}. "
                      + todo, missing, have, total)
    r = loop.project.ratings_for_round(i)
    return {"n_ratings": int(len(r)), "n_raters": int(r["annotator"].nunique()) if len(r) else 0,
            "n_out_of_domain": int(r.loc[r["out_of_domain"], "id"].nunique()) if len(r) else 0}


def _ratings_obj(loop: _Loop, i: int) -> Any:
    from blindspots.human.ratings import Ratings

    r = loop.project.ratings_for_round(i)
    return Ratings(zip(r["id"], r["annotator"], ["ood" if o else int(s) for s, o in zip(r["score"], r["out_of_domain"])]))


def used_for_finetuning(project: Project, before_round: int) -> list[str]:
    """Ids of S(1..i): every counterexample of rounds < before_round."""
    out: list[str] = []
    for j in range(before_round):
        out += list(project.candidates(j, "S")["id"])
    return list(dict.fromkeys(out))


def run_select(loop: _Loop, i: int, seed: int) -> dict:
    from blindspots.mine.testset import build_test_set, main_foreground_class

    p, c = loop.project, loop.cfg
    m = p.candidates(i, "M")
    ratings = _ratings_obj(loop, i)
    # The label plan always forms S: people label it to retrain the target in their own stack.
    last = i >= loop.last_round() and loop.blocker is None
    if last:
        s = pd.DataFrame({"id": pd.Series([], dtype=object), "score": [], "reason": []})
    else:
        worst = ratings.select_worst(c.ratings.n4, candidates=list(m["id"]), min_raters=1)
        s = pd.DataFrame({"id": worst["image_id"], "score": worst["mos"],
                          "reason": [json.dumps({"mos": float(v), "n_ratings": int(k)})
                                     for v, k in zip(worst["mos"], worst["n_ratings"])]})
    table = loop.score_table(i)
    table = table[table["id"].isin(set(m["id"]))]
    bg = [0] if c.testset.background is None else [loop.classes.index(b) for b in c.testset.background]
    main = main_foreground_class(table, [target_column(p, i)] + [g.name for g in c.competitors], background=bg)
    t = build_test_set(m, main_class=main, out_of_domain=ratings.out_of_domain(),
                       exclude=used_for_finetuning(p, i), size=c.testset.size,
                       max_per_class=c.testset.max_per_class, seed=seed)
    p.set_candidates(i, "S", s)
    p.set_candidates(i, "T", t)
    return {"n_S": int(len(s)), "n_T": int(len(t)), "n_out_of_domain": len(ratings.out_of_domain()),
            "last_round": last}


def masks_needed(project: Project, i: int) -> list[str]:
    """S(i+1) ∪ T(i+1), the images that need pixel labels in round i."""
    ids = list(project.candidates(i, "S")["id"]) + list(project.candidates(i, "T")["id"])
    return list(dict.fromkeys(ids))


def run_masks(loop: _Loop, i: int, seed: int) -> dict | Status:
    p = loop.project
    need = masks_needed(p, i)
    have = set(p.masks_for_round(i)["id"])
    missing = [x for x in need if x not in have]
    if missing and loop.simulate:
        from blindspots.human.simulate import SimulatedAnnotator

        s = loop.cfg.simulate
        ann = SimulatedAnnotator(boundary_px=s.boundary_px, drop_below=s.drop_below,
                                 ignore_index=loop.classes.ignore_index, seed=seed)
        for image_id in missing:
            p.add_mask(i, image_id, ann.annotate(image_id, _ground_truth(loop, image_id)),
                       source="simulated", annotator="simulated")
        missing = []
    if missing:
        return Status("awaiting_masks", i, "masks",
                      f"round {i}: waiting for pixel labels of {len(missing)} of {len(need)} images "
                      f"(S({i + 1}) ∪ T({i + 1})). Export them with `blindspots export {p.path} --format cvat` "
                      f"(or labelstudio), then `blindspots masks import {p.path} ...`, or use the web app; "
                      "then run `blindspots round` again.", missing, len(need) - len(missing), len(need))
    return {"n_masks": len(need)}


def _round_set(loop: _Loop, i: int, kind: str, rounds: range | None = None) -> Any:
    """Labelled pairs (pool image, stored mask) of candidates `kind` over `rounds` (default: i only)."""
    from blindspots.training.replay import PairList

    p = loop.project
    ids: list[tuple[int, str]] = []
    for j in (rounds if rounds is not None else [i]):
        ids += [(j, x) for x in p.candidates(j, kind)["id"]]
    lookup = {f"{j}:{x}": (j, x) for j, x in ids}
    return PairList(list(lookup), lambda key: (loop.pool.load(lookup[key][1]), p.load_mask(*lookup[key])))


def run_evaluate(loop: _Loop, i: int, seed: int) -> dict:
    """Table 1, round i: every model's mIoU on T0 (when the project has one) and on T(i+1)."""
    from blindspots.training.replay import evaluate_segmenter

    p, c = loop.project, loop.cfg
    t0 = loop.labelled_set("val") if c.data.val else None  # the label plan may have no T0
    ti = _round_set(loop, i, "T")
    k, ign = loop.classes.num_classes, loop.classes.ignore_index
    out = {}
    models = [(c.target.name, i)] + [(g.name, 0) for g in c.competitors]
    for name, version in models:
        seg = loop.segmenter(name, version) if t0 is not None or loop.blocker is None else None
        by_id = hasattr(seg, "predict_proba_ids")  # precomputed outputs: pool ids only, no pixels
        if by_id and t0 is not None and p.metric(name, version, "T0") is None:
            log.warning("round %d: %r gives precomputed outputs of pool images, so it has no T0 mIoU", i, name)
        elif t0 is not None and p.metric(name, version, "T0") is None:
            p.set_metric(name, version, "T0", evaluate_segmenter(seg, t0, k, ignore_index=ign), len(t0))
        if loop.blocker is None and not by_id:  # the paper's plan: a forward on T(i+1), as Table 1 always was
            miou = evaluate_segmenter(seg, ti, k, ignore_index=ign)
        else:  # label plan: the round's scan maps (any kind, precomputed outputs too; no forward)
            miou = _map_miou(loop, i, "T", name, version)
        p.set_metric(name, version, f"T{i + 1}", miou, len(ti), {"round": i})
        out[name] = {"T0": p.metric(name, version, "T0"), f"T{i + 1}": miou}
    write_leaderboard(p)
    return out


def t_masks_complete(project: Project, i: int) -> bool:
    """Label plan: True once round i's S(i+1) ∪ T(i+1) is exported and every image of a non-empty
    T(i+1) has a mask, so `run_evaluate` can score the models on it."""
    if (project.step(i, "export") or {}).get("status") != "done":
        return False
    t = list(project.candidates(i, "T")["id"])
    have = set(project.masks_for_round(i)["id"])
    return bool(t) and all(x in have for x in t)


def target_kind(spec: str, import_dir: str | None) -> str:
    """The spec kind of a target version ("zoo", "factory", "hf", ...), loading no weights."""
    from blindspots.loop.models import use_import_dir
    from blindspots.models.load import spec_kind

    use_import_dir(spec, import_dir)
    return spec_kind(spec)


def run_finetune(loop: _Loop, i: int, seed: int) -> dict:
    """f_t^(i+1): fine-tune f_t^(i) on S(1..i+1) ∪ S0, LR chosen by T0 mIoU; register it."""
    from blindspots.training.replay import ReplayFinetuner
    from blindspots.models.zoo import load_checkpoint, save_checkpoint

    p, c = loop.project, loop.cfg
    if i >= loop.last_round():
        return {"skipped": "last round: evaluation only"}
    f = c.finetune
    rec = p.model(c.target.name, i)
    kind = target_kind(rec.spec, rec.meta.get("import_dir"))
    adapter: dict[str, Any] = {}
    if kind == "zoo":  # unchanged since the paper's runs: the zoo checkpoint's module, default preprocessing
        module, info = load_checkpoint(rec.path)
    else:  # module:factory or Hugging Face: the adapter's plain nn.Module, with its own preprocessing
        seg = loop.segmenter(c.target.name, i)
        module = seg.module
        adapter = {"preprocess": seg.preprocess, "output_key": seg.output_key}
    s = _round_set(loop, i, "S", range(i + 1))
    ft = ReplayFinetuner(f.lrs, epochs=f.epochs, batch_size=f.batch_size, momentum=f.momentum,
                         weight_decay=f.weight_decay, power=f.power, max_replay=f.max_replay,
                         image_size=f.image_size, seed=seed, work_dir=p.checkpoints_dir / f"finetune-r{i}",
                         device=f.device, ignore_index=loop.classes.ignore_index, progress=loop.progress, **adapter)
    ft.fit(module, s, loop.labelled_set("train"), loop.labelled_set("val"), num_classes=loop.classes.num_classes)
    path = p.checkpoints_dir / f"{c.target.name}-v{i + 1}.pt"
    meta = {"round": i, "parent_version": i, "lr": ft.lr_, "val_miou": ft.val_miou_, "n_S": len(s),
            "grid": [{"lr": r.lr, "val_miou": r.val_miou, "losses": r.losses} for r in ft.runs_], "seed": seed}
    if kind == "zoo":
        save_checkpoint(path, ft.model_, arch=info["arch"], classes=loop.classes, meta=meta)
        p.register_model(c.target.name, i + 1, "target", path, round=i, meta=meta)
    else:
        from blindspots.loop.versions import save_finetuned

        spec = save_finetuned(kind, rec.spec, ft.model_, p.checkpoints_dir / f"{c.target.name}-v{i + 1}")
        path = spec  # type: ignore[assignment]  # reported as the new version's spec
        meta["import_dir"] = rec.meta.get("import_dir")  # a factory imports from where `init` ran
        p.register_model(c.target.name, i + 1, "target", spec, round=i, meta=meta)
    p.set_metric(c.target.name, i + 1, "T0", ft.val_miou_, len(loop.labelled_set("val")))
    return {"version": i + 1, "path": str(path), "lr": ft.lr_, "val_miou": ft.val_miou_, "n_S": len(s)}


def export_dir(project: Project, i: int) -> Path:
    """Where the label plan exports round i's S ∪ T: reports/round-<i>/."""
    return project.reports_dir / f"round-{int(i)}"


def run_export(loop: _Loop, i: int, seed: int) -> dict:
    """Label plan: S(i+1) ∪ T(i+1) for pixel labelling, in reports/round-<i>/: images/ (the pool
    images as PNG), predictions/ (the target's argmax index PNGs, a pre-annotation), S.csv and
    T.csv (id, score, reason), cvat.zip and labelstudio.json (as `blindspots export` writes)."""
    from blindspots.data.formats.masks import write_masks

    p = loop.project
    out = export_dir(p, i)
    (out / "images").mkdir(parents=True, exist_ok=True)
    ids = masks_needed(p, i)
    preds = {x: _target_map(loop, i, x) for x in ids}
    for x in ids:
        dest = out / "images" / artifact_name(x)
        dest.parent.mkdir(parents=True, exist_ok=True)
        _write_rgb(dest, loop.pool.load(x))
    write_masks(out / "predictions", preds, classes=loop.classes)
    for kind in ("S", "T"):
        p.candidates(i, kind).to_csv(out / f"{kind}.csv", index=False)
    files = ["images/", "predictions/", "S.csv", "T.csv"]
    if ids:
        _export(loop, i, "cvat", out / "cvat.zip", ids, preds)
        # Label Studio serves the pool's own files, as `blindspots export` does by default (the bare
        # `?d=<id>` URL is right only when a document root's subfolder path equals the ids)
        try:
            _export(loop, i, "labelstudio", out / "labelstudio.json", ids, preds,
                    image_root=loop.cfg.resolve(loop.cfg.pool.root))
        except ValueError as e:  # e.g. the pool is the document root itself
            log.warning("round %d: labelstudio.json gets bare ?d=<id> image URLs (%s); see "
                        "`blindspots export --image-root/--image-url`", i, e)
            _export(loop, i, "labelstudio", out / "labelstudio.json", ids, preds)
        files += ["cvat.zip", "labelstudio.json", labelstudio_config_path(out / "labelstudio.json").name]
    return {"folder": str(out), "files": files, "n_S": int(len(p.candidates(i, "S"))),
            "n_T": int(len(p.candidates(i, "T")))}


def _write_rgb(path: Path, image: np.ndarray) -> None:
    from PIL import Image

    tmp = path.with_name(path.name + ".tmp")
    Image.fromarray(np.ascontiguousarray(image)).save(tmp, format="PNG")
    tmp.replace(path)


STEP_FUNCS: dict[str, Callable[[_Loop, int, int], dict | Status]] = {
    "scan": run_scan, "mine": run_mine, "ratings": run_ratings, "select": run_select,
    "masks": run_masks, "evaluate": run_evaluate, "finetune": run_finetune, "export": run_export,
}


# ---- Table 1 -----------------------------------------------------------------------------

def leaderboard_frame(project: Project) -> pd.DataFrame:
    """Table 1 of the paper: mIoU on T0 and T(i+1) per round i, competitors then the target
    (version i in round i). Columns: MultiIndex (round, test set); an empty frame before any
    evaluation."""
    from blindspots.mine.testset import leaderboard

    c = project.config
    results: dict[str, dict] = {g.name: {} for g in c.competitors}
    results[c.target.name] = {}
    any_round = False
    for i in range(c.project.rounds + 1):
        st = project.step(i, "evaluate")
        if st is None or st["status"] != "done":
            continue
        any_round = True
        for name, version in [(c.target.name, i)] + [(g.name, 0) for g in c.competitors]:
            for ts in ("T0", f"T{i + 1}") if c.data.val else (f"T{i + 1}",):  # label plan: maybe no T0
                v = project.metric(name, version, ts)
                results[name][(f"round {i}", ts)] = np.nan if v is None else v
    if not any_round:
        return pd.DataFrame()
    return leaderboard(results, target=c.target.name, competitors=[g.name for g in c.competitors])


def write_leaderboard(project: Project) -> Path:
    """reports/leaderboard.csv and .txt from `leaderboard_frame`."""
    from blindspots.mine.testset import format_leaderboard

    df = leaderboard_frame(project)
    out = project.reports_dir / "leaderboard.txt"
    if len(df):
        tmp = out.with_suffix(".tmp")
        tmp.write_text(format_leaderboard(df) + "\n")
        tmp.replace(out)
        df.to_csv(project.reports_dir / "leaderboard.csv")
    return out


def _export(loop: _Loop, i: int, fmt: str, path: Path, ids: list[str], preds: dict[str, np.ndarray],
            **image_location: Any) -> Path:
    """image_location: Label Studio's image_url / image_root / document_root (see task_image_url)."""
    from blindspots.data.formats import export_cvat, export_labelstudio

    if fmt == "cvat":
        return export_cvat(path, preds, loop.classes, images={x: loop.pool.load(x) for x in ids})
    out = export_labelstudio(path, preds, loop.classes, model_version=target_column(loop.project, i),
                             **image_location)
    write_labelstudio_config(Path(path), loop.classes)
    return out


def labelstudio_config_path(tasks: Path) -> Path:
    """Where the labelling config of a Label Studio task file goes: `<name>_config.xml` beside it."""
    return tasks.with_name(tasks.stem + "_config.xml")


def write_labelstudio_config(tasks: Path, classes: Any) -> Path:
    """Label Studio's labelling config (one brush label per class, in the class colours) beside the
    tasks, to paste into the project's *Settings → Labeling Interface* before importing them."""
    from blindspots.data.formats.labelstudio import labeling_config

    path = labelstudio_config_path(tasks)
    path.write_text(labeling_config(classes), encoding="utf-8")
    return path

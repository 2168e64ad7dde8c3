"""What the round page shows, computed once: `RoundView` (numbers, table rows, figure and thumbnail
files written beside the page) for the template `templates/round.html` (`pages/round.py`).

The project is read only through `blindspots.loop` (Project's query methods, `leaderboard_frame`,
`target_column`) and the scan through `blindspots.scan`; a section whose data does not exist yet
carries what to say instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from PIL import Image

from blindspots import ids as id_rules
from blindspots.data.classes import Classes
from blindspots.loop import NextAction, Project, leaderboard_frame, masks_needed, target_column
from blindspots.loop.progress import rating_progress
from blindspots.metrics import confusion_matrix, iou_per_class
from blindspots.mine.reasons import describe
from blindspots.report.drawing import figures
from blindspots.report.viewmodels.agreement import agreement_summary, per_image_agreement
from blindspots.report.pages.gallery import IMAGE_LAYER, gallery_blocks
from blindspots.report.html import rel_url
from blindspots.report.drawing.overlays import overlay, thumbnail
from blindspots.report.viewmodels.ranking import topk_srcc
from blindspots.report.drawing.region_thumbs import region_layer
from blindspots.report.drawing.thumbs import Figure, legend_items, read_image, save_jpeg
from blindspots.report.viewmodels.blocks import Pick, Table
from blindspots.scan import find_map
from blindspots.scan.manifest import scan_pool_source

__all__ = ["Table", "RoundView", "build_round_view", "class_iou_before_after"]


@dataclass
class RoundView:
    """Everything the round page shows. Text parts are (text, is_code) pairs; figures are relative URLs."""

    title: str
    round: int
    target: str
    target_i: str
    target_next: str
    competitors: list[str]
    project: str
    strategy: str
    stage: list[tuple[str, bool]]
    steps: Table | None
    table1: Table | None
    board: pd.DataFrame
    stability: dict
    stability_rows: list[dict]
    n_candidates: int
    n_rated: int
    gallery: list[Pick]  # `gallery_blocks`
    candidates: Table | None  # without a scan: the picks as a table
    mos_figure: str | None
    n_ood: int
    agreement: dict
    agreement_summary: dict
    s_items: list[dict]
    class_iou: dict
    n_masks: int


def _read_map(scan_dir: Path, model: str, image_id: str) -> np.ndarray | None:
    path = find_map(scan_dir, model, image_id)
    if path is None:
        return None
    with Image.open(path) as im:
        return np.asarray(im)


def _mos(ratings: pd.DataFrame) -> pd.DataFrame:
    """Per id: mos (mean of the 1-5 scores), n, ood (out-of-domain flags), text (the ratings)."""
    rows = []
    for image_id, g in ratings.groupby("id", sort=False):
        finite = g["score"][np.isfinite(g["score"])]
        text = ", ".join("OOD" if not np.isfinite(s) else f"{int(s)}" for s in g["score"])
        rows.append({"id": image_id, "mos": float(finite.mean()) if len(finite) else np.nan, "n": len(g),
                     "ood": int((~np.isfinite(g["score"])).sum()), "sd": float(finite.std(ddof=0)) if len(finite) else np.nan,
                     "text": text})
    return pd.DataFrame(rows, columns=["id", "mos", "n", "ood", "sd", "text"]).set_index("id")


def _stability(p: Project, i: int, mos: pd.DataFrame, scan_dir: Path, manifest: dict, classes: Classes | None,
               models: list[str], out: Path) -> tuple[dict, list[dict]]:
    """Appendix C: SRCC of the models' top-k mIoU rankings on T(i+1) against the ranking on all of T
    ({"missing": why} or {"figure", "table", "note"}; rows for summary.json). T is ordered by MOS,
    lowest first; a model counts when the scan holds its map of every used image; an image counts
    when its human mask exists."""
    t_ids = [str(x) for x in p.answers.candidates(i, "T")["id"]]
    have = set(p.answers.masks_for_round(i)["id"])
    labelled = [x for x in t_ids if x in have]
    known = [m for m in dict.fromkeys(models) if m in manifest.get("models", {})]
    if not t_ids or classes is None:
        return {"missing": "no test set T in this round yet."}, []
    if not labelled:
        return {"missing": f"none of the {len(t_ids)} images of T has a human mask yet."}, []
    order = sorted(labelled, key=lambda x: (np.nan_to_num(mos["mos"].get(x, np.nan), nan=np.inf), t_ids.index(x)))
    k = classes.num_classes
    cms: dict[str, list[np.ndarray]] = {m: [] for m in known}
    used, dropped = [], 0
    for image_id in order:
        gt = p.answers.load_mask(i, image_id)
        maps = {m: _read_map(scan_dir, m, image_id) for m in known}
        ok = {m for m, v in maps.items() if v is not None and v.shape == gt.shape}
        if len(ok) < len(known):
            dropped += 1
            continue
        used.append(image_id)
        for m in known:
            cms[m].append(confusion_matrix(maps[m], gt, k, ignore_index=classes.ignore_index))
    if len(known) < 3 or len(used) < 2:
        return {"missing": f"SRCC needs at least 3 models and 2 labelled images of T with every model's map; the "
                           f"scan has {len(known)} model(s) ({', '.join(known)}) and {len(used)} such image(s) "
                           f"({dropped} dropped for a missing map)."}, []
    frame = topk_srcc({m: np.stack(v) for m, v in cms.items()})
    frame.to_csv(out / "ranking_stability.csv", index=False)
    f = figures.line(frame["k"].to_numpy(), frame["srcc"].to_numpy(), out / "figures" / "ranking_stability.png",
                     xlabel="k (top-k images of T, lowest MOS first)", ylabel="SRCC with the top-%d ranking" % len(used),
                     title=f"Ranking stability of {len(known)} models", ylim=(-1.05, 1.05))
    header = ["k", "SRCC"] + [f"mIoU {m}" for m in known]
    rows = [[int(r["k"]), "–" if np.isnan(r["srcc"]) else f"{r['srcc']:.3f}"]
            + [f"{r['miou ' + m]:.3f}" for m in known] for _, r in frame.iterrows()]
    note = f"{len(used)} of {len(t_ids)} images of T used" + (f" ({dropped} lack a model's map)" if dropped else "")
    return ({"figure": rel_url(f, out), "table": Table(header, rows, set(range(len(header)))), "note": note},
            [{"k": int(r["k"]), "srcc": None if np.isnan(r["srcc"]) else float(r["srcc"])} for _, r in frame.iterrows()])


def _agreement(ratings: pd.DataFrame, mos: pd.DataFrame, figs: Path, out: Path) -> tuple[dict, dict]:
    """Rater agreement ({} when no image has two scores, else its figure, numbers and the images raters
    disagreed on most) and the summary numbers."""
    per = per_image_agreement(ratings)
    summ = agreement_summary(per)
    if not summ["n_images"]:
        return {}, summ
    multi = per[per["n_scores"] >= 2]
    spans = np.round(multi["span"].to_numpy(), 2)
    levels = np.union1d(np.arange(0, max(4.0, float(spans.max())) + 1), spans)  # every step 0..4 shown, even empty
    f = figures.bars([f"{v:g}" for v in levels], np.array([(spans == v).sum() for v in levels]),
                     figs / "rating_span.png", ylabel="images", counts=True,
                     title=f"Span of each image's scores (max - min), {len(spans)} images")
    worst = multi.sort_values(["span", "mean_abs_diff"], ascending=False, kind="stable").head(10)
    rows = [[str(x), int(r.n_scores), f"{r.span:.0f}", f"{r.mean_abs_diff:.2f}", mos.loc[x, "text"] if x in mos.index else ""]
            for x, r in zip(worst.index, worst.itertuples(index=False))]
    return ({"figure": rel_url(f, out), "share": summ["share_span_le_1"], "n_images": summ["n_images"],
             "mean_abs_diff": summ["mean_abs_diff"],
             "table": Table(["id", "scores", "span", "mean |difference|", "ratings"], rows, {1, 2, 3})}, summ)


#: the page shows commands (its reader may not run Python); their words come from `loop.NextAction`
_ADVANCE = NextAction("advance").as_command("PROJECT")


def _stage(i: int, steps: pd.DataFrame, rated: str, n_labelled: int, n_st: int,
           next_version: bool = True) -> list[tuple[str, bool]]:
    """Where round i stands (what the loop waits for, or that it is finished), as (text, is_code) parts.
    rated: the ratings' progress in words (`loop.progress.rating_progress`). next_version: whether the
    target's version i+1 exists (a round that exported S ∪ T waits for it: it is not finished before)."""
    go_on = [("then ", False), (_ADVANCE, True), (" goes on.", False)]
    if not len(steps):
        return [(f"Round {i} has not started: ", False), (_ADVANCE, True),
                (" scans the pool and mines it.", False)]
    open_ = steps[steps["status"] != "done"]
    if not len(open_):
        last = str(steps["step"].iloc[-1])
        if last == "finetune" or (last == "export" and next_version):
            return [(f"Round {i} is finished.", False)]
        if last == "export":  # the label plan: people label S ∪ T elsewhere, the user retrains the target
            return [(f"Round {i} exported S({i + 1}) ∪ T({i + 1}) for pixel labelling ({n_labelled} of {n_st} "
                     f"masks in; those of T({i + 1}) score every model on it). It waits for the target retrained "
                     f"on S({i + 1}) in your own stack: ", False),
                    (NextAction("register_version").as_command("PROJECT"), True),
                    (", then ", False), (_ADVANCE, True), (" starts round " + str(i + 1) + ".", False)]
        return [(f"Round {i} stopped after step {last}; ", False), (_ADVANCE, True),
                (" goes on.", False)]
    step, status = str(open_["step"].iloc[0]), str(open_["status"].iloc[0])
    if status == "failed":
        return [(f"Step {step} failed (", False), (NextAction("status").as_command("PROJECT"), True),
                (" says why); ", False),
                (_ADVANCE, True), (" runs it again.", False)]
    if step == "ratings":
        return [(f"Waiting for ratings: {rated} (the app's rate page, or ", False),
                (NextAction("import_ratings").as_command("PROJECT"), True),
                ("); ", False)] + go_on
    if step == "masks":
        return [(f"Waiting for masks: {n_labelled} of the {n_st} images of S and T labelled so far (the app's label "
                 "page, or ", False), (NextAction("import_masks").as_command("PROJECT"), True), ("); ", False)] + go_on
    return [(f"Round {i} is at step {step} ({status}).", False)]


def class_iou_before_after(triples: Iterable[tuple[np.ndarray, np.ndarray | None, np.ndarray | None]],
                           num_classes: int, ignore_index: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-class IoU of the target before and after fine-tuning, pixels pooled over the labelled images.

    triples: (human mask int [H, W], map before, map after) per image; an image lacking a map, or
    with a map of another size, is left out. ignore_index: the project's ignore value (its mask
    pixels count for no class; None: every pixel counts). Returns (before float64 [C], after
    float64 [C], images used); NaN for a class in neither labels nor maps.
    """
    cms = [np.zeros((num_classes, num_classes), np.int64) for _ in range(2)]
    used = 0
    for gt, *maps in triples:
        if any(m is None or m.shape != gt.shape for m in maps):
            continue
        used += 1
        for cm, m in zip(cms, maps):
            cm += confusion_matrix(m, gt, num_classes, ignore_index=ignore_index)
    return iou_per_class(cms[0]), iou_per_class(cms[1]), used


def _candidates(p: Project, i: int, mos: pd.DataFrame, names: list[str], manifest: dict, scan_dir: Path, out: Path,
                target_i: str, comps: list[str], n_gallery: int, max_side: int) -> tuple[list[Pick], Table | None]:
    """The mined candidates, lowest MOS first once rated: gallery blocks (with a scan), else a table."""
    cands = p.answers.candidates(i, "M")
    if not len(cands):
        return [], None
    df = cands.copy()
    df["mos"] = [mos["mos"].get(x, np.nan) for x in df["id"]]
    if df["mos"].notna().any():
        df = df.sort_values("mos", kind="stable", na_position="last")
    df = df.head(n_gallery)
    reasons = []
    for r in df.itertuples(index=False):
        said = (f"MOS {mos.loc[r.id, 'mos']:.2f} from ratings {mos.loc[r.id, 'text']}" if r.id in mos.index
                else "not rated yet")
        why = describe(r.reason, names, shown_as={target_i: p.config.target.name}) if r.reason else "n/a"
        reasons.append(f"{said}. Picked because: {why} (the sampler's #{int(r.rank) + 1})")
    # Numbered in the order shown (lowest MOS first), the sampler's own rank is in the text.
    picks = pd.DataFrame({"id": df["id"].astype(str), "score": df["score"].fillna(np.nan).astype(float),
                          "reason": reasons, "rank": np.arange(1, len(df) + 1)})
    if not manifest:
        return [], Table(["id", "why"], picks[["id", "reason"]].values.tolist())
    scanned = manifest.get("models", {})
    blocks, _ = gallery_blocks(picks, scan_dir, out, target=target_i if target_i in scanned else None,
                               competitors=[g for g in comps if g in scanned], max_side=max_side,
                               score_label=f"{p.config.mining.strategy} score",
                               display={target_i: p.config.target.name}, manifest=manifest)
    return blocks, None


def _s_items(p: Project, i: int, mos: pd.DataFrame, manifest: dict, classes: Classes | None, scan_dir: Path,
             out: Path, target_i: str, target_next: str, max_side: int) -> list[dict]:
    """S(i+1) with the human mask and the target before / after, as thumbnails: {"id", "mos", "figures"
    (HTML of each), "legend" (HTML)} per image."""
    s_ids = [str(x) for x in p.answers.candidates(i, "S")["id"]]
    if not s_ids or classes is None:
        return []
    cfg, thumbs, palette, names = p.config, out / "thumbs", classes.palette, list(classes.names)
    have_masks = set(p.answers.masks_for_round(i)["id"])
    has_after = target_next in manifest.get("models", {})
    pool_root = scan_pool_source(manifest) if "pool_root" in manifest else cfg.resolve(cfg.pool.root)
    items = []
    for image_id in s_ids:
        image, why = read_image(pool_root, image_id)
        small = thumbnail(image, max_side) if image is not None else None
        name = id_rules.artifact_name(image_id, ".jpg")
        figs_s, present = [], set()
        if small is not None:
            save_jpeg(small, thumbs / IMAGE_LAYER / name)
            figs_s.append(Figure("image", rel_url(thumbs / IMAGE_LAYER / name, out)))
        else:
            figs_s.append(Figure("image", None, f"image not readable: {why}"))
        human = p.answers.load_mask(i, image_id) if image_id in have_masks else None
        layers = [("human mask", "_human", human),
                  (f"before ({cfg.target.name} version {i})", target_i, _read_map(scan_dir, target_i, image_id)),
                  (f"after ({cfg.target.name} version {i + 1})", target_next,
                   _read_map(scan_dir, target_next, image_id) if has_after else None)]
        regions = region_layer(p, i, image_id, human, small, palette, classes.ignore_index) \
            if human is not None and small is not None and classes.ignore_index is not None else None
        if regions is not None:  # labelled by region answers: those, outlined, and their cost
            save_jpeg(regions[1], thumbs / "_human" / name)
            figs_s.append(Figure(regions[0], rel_url(thumbs / "_human" / name, out)))
            present |= {int(k) for k in np.unique(human) if k != classes.ignore_index}
            layers = layers[1:]
        for caption, folder, lab in layers:
            if lab is None or small is None:
                figs_s.append(Figure(caption, None, "not labelled yet" if folder == "_human" else "not scanned yet"))
                continue
            # ignore pixels drawn as class 0's colour
            shown = lab if classes.ignore_index is None else np.where(lab == classes.ignore_index, 0, lab)
            present |= {int(k) for k in np.unique(shown)}
            save_jpeg(overlay(small, shown, palette), thumbs / folder / name)
            figs_s.append(Figure(caption, rel_url(thumbs / folder / name, out)))
        items.append({"id": image_id, "mos": mos["mos"].get(image_id, np.nan),
                      "figures": figs_s, "legend": legend_items(present, names, palette)})
    return items


def _class_iou(p: Project, i: int, manifest: dict, classes: Classes | None, scan_dir: Path, out: Path,
               target_i: str, target_next: str) -> dict:
    """Per-class IoU before / after on the round's labelled images: {"ready": bool, "table", "figure"}."""
    labelled = [str(x) for x in p.answers.masks_for_round(i)["id"]]
    if not (labelled and target_next in manifest.get("models", {}) and classes is not None):
        return {"ready": False}
    k, names = classes.num_classes, list(classes.names)
    triples = ((p.answers.load_mask(i, x), _read_map(scan_dir, target_i, x), _read_map(scan_dir, target_next, x))
               for x in labelled)
    before, after, used = class_iou_before_after(triples, k, classes.ignore_index)
    if not used:
        return {"ready": True}
    rows = [[names[c], "–" if np.isnan(before[c]) else f"{before[c]:.3f}",
             "–" if np.isnan(after[c]) else f"{after[c]:.3f}",
             "–" if np.isnan(after[c] - before[c]) else f"{after[c] - before[c]:+.3f}"] for c in range(k)]
    f = figures.bars(names, np.nan_to_num(after - before), out / "figures" / "class_iou_change.png",
                     ylabel="IoU after - before", title=f"Per-class IoU change on {used} labelled images")
    return {"ready": True, "figure": rel_url(f, out),
            "table": Table(["class", f"IoU version {i}", f"IoU version {i + 1}", "change"], rows, {1, 2, 3})}


def build_round_view(p: Project, i: int, out: Path, manifest: dict, *, n_gallery: int, max_side: int) -> RoundView:
    """The view of round i of project `p` (figures, thumbnails and CSV files written under `out`).

    manifest: the project scan's scan.json ({} before any scan)."""
    cfg, scan_dir = p.config, p.scan_dir
    target_i, target_next = target_column(p, i), target_column(p, i + 1)
    comps = [g.name for g in cfg.competitors]
    classes = Classes.from_dict(manifest["classes"]) if isinstance(manifest.get("classes"), dict) else None
    names = list(classes.names) if classes is not None else []

    steps = p.journal.steps()
    steps = steps[steps["round"] == i] if "round" in steps.columns else steps.iloc[0:0]
    ratings = p.answers.ratings_for_round(i)
    prog = rating_progress(p, i)  # the same count as `status`, `round` and the rating page
    rated = prog.counts() + (f"; {prog.advice()}" if prog.unreachable else "")
    n_st = len(masks_needed(p, i))  # S ∪ T: an image in both is labelled once
    n_cands, n_masks = len(p.answers.candidates(i, "M")), len(p.answers.masks_for_round(i))
    stage = _stage(i, steps, rated, n_masks, n_st, next_version=p.target_version() > i)
    cols = [c for c in ("step", "status", "model_version", "seed") if c in steps.columns]
    steps_table = Table(cols, steps[cols].astype(str).values.tolist()) if len(steps) else None

    board = leaderboard_frame(p)
    table1 = None
    if len(board):
        bcols = [c for c in board.columns if not (isinstance(c, tuple) and c[-1] == "role")]
        header = ["model"] + [" ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in bcols]
        rows = [[name] + [("–" if pd.isna(v) else f"{float(v):.3f}") for v in board.loc[name, bcols]]
                for name in board.index]
        table1 = Table(header, rows, set(range(1, len(header))))
        board.to_csv(out / "table1.csv")

    mos = _mos(ratings)
    stability, stability_rows = _stability(p, i, mos, scan_dir, manifest, classes, [target_i, target_next] + comps,
                                           out)
    gallery, cand_table = _candidates(p, i, mos, names, manifest, scan_dir, out, target_i, comps, n_gallery, max_side)
    mos_figure, agreement, summ = None, {}, {}
    if len(mos):
        f = figures.histograms({"MOS": mos["mos"].to_numpy()}, out / "figures" / "mos.png",
                               xlabel="mean opinion score (1-5)", title=f"MOS of the {len(mos)} rated candidates",
                               bins=16, value_range=(1, 5))
        mos_figure = rel_url(f, out)
        agreement, summ = _agreement(ratings, mos, out / "figures", out)
    return RoundView(
        title=cfg.project.name or p.path.name, round=i, target=cfg.target.name, target_i=target_i,
        target_next=target_next, competitors=comps, project=str(p.path), strategy=cfg.mining.strategy,
        stage=stage, steps=steps_table, table1=table1, board=board, stability=stability,
        stability_rows=stability_rows, n_candidates=n_cands, n_rated=len(mos), gallery=gallery,
        candidates=cand_table, mos_figure=mos_figure, n_ood=int(mos["ood"].sum()) if len(mos) else 0,
        agreement=agreement, agreement_summary=summ,
        s_items=_s_items(p, i, mos, manifest, classes, scan_dir, out, target_i, target_next, max_side),
        class_iou=_class_iou(p, i, manifest, classes, scan_dir, out, target_i, target_next), n_masks=n_masks)

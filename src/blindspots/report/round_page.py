"""The round page: `DIR/index.html` for one round of a project, with its figures and thumbnails
beside it (relative links, opens offline).

Sections: where the round stands (its steps); Table 1 (every model's mIoU on T0 and each T(i));
the mined candidates M as a gallery with their MOS and ratings, the MOS histogram and the spread
of ratings per image; S with the human mask and the target's prediction before and after
fine-tuning; per-class IoU changes on the round's labelled images. The project is read only
through `blindspots.loop` (Project's query methods, `leaderboard_frame`, `target_column`) and
the scan through `blindspots.scan`; a section whose data does not exist yet says so.

Imports inside functions: the failure-scenario clustering (torch, scikit-learn), only with scenarios.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
from PIL import Image

from blindspots import ids as id_rules
from blindspots.data.classes import Classes
from blindspots.loop import Project, leaderboard_frame, target_column
from blindspots.metrics import confusion_matrix, iou_per_class
from blindspots.mine.reasons import describe
from blindspots.report import figures
from blindspots.report.agreement import agreement_summary, per_image_agreement
from blindspots.report.engine_sections import engine_sections
from blindspots.report.gallery import IMAGE_LAYER, gallery_blocks
from blindspots.report.html import esc, figure_img, output_folder, rel_url, table, write_index
from blindspots.report.overlays import overlay, thumbnail
from blindspots.report.ranking import topk_srcc
from blindspots.report.scenario_section import scenario_section
from blindspots.report.scenario_votes import scenario_names, vote_prefix
from blindspots.report.thumbs import Figure, figure_html, legend_html, read_image, save_jpeg
from blindspots.scan import find_map
from blindspots.scan.manifest import load_manifest, scan_pool_source

log = logging.getLogger(__name__)


def _open(project: Any) -> Any:
    if isinstance(project, Project):
        return project
    return Project.open(project)


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


def _stability_section(p: Any, i: int, mos: pd.DataFrame, scan_dir: Path, manifest: dict, classes: Any,
                       models: list[str], out: Path) -> tuple[list[str], list[dict]]:
    """Appendix C: SRCC of the models' top-k mIoU rankings on T(i+1) against the ranking on all of T
    (HTML parts, rows for summary.json). T is ordered by MOS, lowest first; a model counts when the
    scan holds its map of every used image; an image counts when its human mask exists."""
    parts = [f'<h2 class="section" id="stability">Ranking stability on T({i + 1}) (Appendix C)</h2>',
             '<p class="meta">The models are ranked by mIoU on the top-k images of T (T ordered by MOS, lowest '
             'first); each ranking is compared with the ranking on all of T by Spearman\'s rank correlation '
             '(SRCC, 1 = same order), for k from half of T to all of it. Computed from the scan\'s saved maps '
             'and the human masks.</p>']
    t_ids = [str(x) for x in p.candidates(i, "T")["id"]]
    have = set(p.masks_for_round(i)["id"])
    labelled = [x for x in t_ids if x in have]
    known = [m for m in dict.fromkeys(models) if m in manifest.get("models", {})]
    if not t_ids or classes is None:
        return parts + ['<p class="note">Not available: no test set T in this round yet.</p>'], []
    if not labelled:
        return parts + [f'<p class="note">Not available: none of the {len(t_ids)} images of T has a human mask '
                        'yet.</p>'], []
    order = sorted(labelled, key=lambda x: (np.nan_to_num(mos["mos"].get(x, np.nan), nan=np.inf), t_ids.index(x)))
    k = classes.num_classes
    cms: dict[str, list[np.ndarray]] = {m: [] for m in known}
    used, dropped = [], 0
    for image_id in order:
        gt = p.load_mask(i, image_id)
        maps = {m: _read_map(scan_dir, m, image_id) for m in known}
        ok = {m for m, v in maps.items() if v is not None and v.shape == gt.shape}
        if len(ok) < len(known):
            dropped += 1
            continue
        used.append(image_id)
        for m in known:
            cms[m].append(confusion_matrix(maps[m], gt, k, ignore_index=classes.ignore_index))
    if len(known) < 3 or len(used) < 2:
        return parts + [f'<p class="note">Not available: SRCC needs at least 3 models and 2 labelled images of T '
                        f'with every model\'s map; the scan has {len(known)} model(s) ({esc(", ".join(known))}) and '
                        f'{len(used)} such image(s) ({dropped} dropped for a missing map).</p>'], []
    frame = topk_srcc({m: np.stack(v) for m, v in cms.items()})
    frame.to_csv(out / "ranking_stability.csv", index=False)
    f = figures.line(frame["k"].to_numpy(), frame["srcc"].to_numpy(), out / "figures" / "ranking_stability.png",
                     xlabel="k (top-k images of T, lowest MOS first)", ylabel="SRCC with the top-%d ranking" % len(used),
                     title=f"Ranking stability of {len(known)} models", ylim=(-1.05, 1.05))
    header = ["k", "SRCC"] + [f"mIoU {m}" for m in known]
    rows = [[int(r["k"]), "–" if np.isnan(r["srcc"]) else f"{r['srcc']:.3f}"]
            + [f"{r['miou ' + m]:.3f}" for m in known] for _, r in frame.iterrows()]
    note = f"{len(used)} of {len(t_ids)} images of T used" + (f" ({dropped} lack a model's map)" if dropped else "")
    parts += [f'<div class="figs">{figure_img(rel_url(f, out), "SRCC of top-k rankings")}</div>',
              table(header, rows, set(range(len(header)))),
              f'<p class="note">{esc(note)}; SRCC "–" where a ranking is all ties.</p>']
    return parts, [{"k": int(r["k"]), "srcc": None if np.isnan(r["srcc"]) else float(r["srcc"])}
                   for _, r in frame.iterrows()]


def _agreement_parts(ratings: pd.DataFrame, mos: pd.DataFrame, figs: Path, out: Path) -> tuple[list[str], dict]:
    """Rater agreement (HTML parts, summary numbers): its definition, the two figures, the spread
    histogram and the images raters disagreed on most."""
    per = per_image_agreement(ratings)
    summ = agreement_summary(per)
    parts = ['<h3>Rater agreement</h3>',
             '<p class="meta">Per image, over its 1-5 scores: span = highest - lowest score; mean |difference| = '
             'the mean absolute difference over all pairs of its scores. Agreement = the share of images rated at '
             'least twice whose scores span at most 1 step; disagreement = the mean of their mean |difference|.</p>']
    if not summ["n_images"]:
        return parts + ['<p class="note">Each image has at most one score: no agreement to measure.</p>'], summ
    multi = per[per["n_scores"] >= 2]
    spans = np.round(multi["span"].to_numpy(), 2)
    levels = np.union1d(np.arange(0, max(4.0, float(spans.max())) + 1), spans)  # every step 0..4 shown, even empty
    f = figures.bars([f"{v:g}" for v in levels], np.array([(spans == v).sum() for v in levels]),
                     figs / "rating_span.png", ylabel="images", counts=True,
                     title=f"Span of each image's scores (max - min), {len(spans)} images")
    worst = multi.sort_values(["span", "mean_abs_diff"], ascending=False, kind="stable").head(10)
    rows = [[str(x), int(r.n_scores), f"{r.span:.0f}", f"{r.mean_abs_diff:.2f}", mos.loc[x, "text"] if x in mos.index else ""]
            for x, r in zip(worst.index, worst.itertuples(index=False))]
    parts += [f'<p>Agreement: <b>{summ["share_span_le_1"]:.0%}</b> of {summ["n_images"]} images rated at least twice '
              f'span at most 1; mean |difference| between two raters of an image: <b>{summ["mean_abs_diff"]:.2f}</b> '
              'steps.</p>',
              f'<div class="figs">{figure_img(rel_url(f, out), "spread of ratings per image")}</div>',
              '<p class="meta">Images with the widest spread:</p>',
              table(["id", "scores", "span", "mean |difference|", "ratings"], rows, {1, 2, 3})]
    return parts, summ


def _stage(i: int, steps: pd.DataFrame, n_cands: int, n_rated: str, n_labelled: int, n_st: int) -> str:
    """One sentence on where round i stands (what the loop waits for, or that it is finished)."""
    if not len(steps):
        return f"Round {i} has not started: <code>blindspots round PROJECT</code> scans the pool and mines it."
    open_ = steps[steps["status"] != "done"]
    if not len(open_):
        last = str(steps["step"].iloc[-1])
        return (f"Round {i} is finished." if last in ("finetune", "export") else
                f"Round {i} stopped after step {esc(last)}; <code>blindspots round PROJECT</code> goes on.")
    step, status = str(open_["step"].iloc[0]), str(open_["status"].iloc[0])
    if status == "failed":
        return (f"Step {esc(step)} failed (<code>blindspots status PROJECT</code> says why); "
                "<code>blindspots round PROJECT</code> runs it again.")
    if step == "ratings":
        return (f"Waiting for ratings: {esc(n_rated)} (the app's rate page, or "
                "<code>blindspots ratings import</code>); then <code>blindspots round PROJECT</code> goes on.")
    if step == "masks":
        return (f"Waiting for masks: {n_labelled} of the {n_st} images of S and T labelled so far (the app's label "
                "page, or <code>blindspots masks import</code>); then <code>blindspots round PROJECT</code> goes on.")
    return f"Round {i} is at step {esc(step)} ({esc(status)})."


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


def default_round(project: Any) -> int:
    """The latest round with mined candidates (0 when nothing was mined yet)."""
    p = _open(project)
    done = [i for i in range(p.config.project.rounds + 1) if len(p.candidates(i, "M"))]
    return max(done) if done else 0


def write_round_report(project: Any, round: int | None = None, out_dir: str | Path | None = None, *,
                       n_gallery: int = 24, max_side: int = 200, scenarios: Any = None,
                       manifest: dict | None = None) -> Path:
    """Write the page of `round` (default: the latest mined) of a project; returns index.html's path.

    project: a `Project` or its folder. out_dir: default `<project>/reports/html/round-<i>`.
    n_gallery: candidates shown (lowest MOS first once rated, else in mining order).
    scenarios: optional failure scenarios (`scenarios.segmentation.find_scenarios`, e.g. from
    `round_scenarios`) shown in their own section.
    manifest: the project scan's scan.json when the caller has read it ({} before any scan; read
    here when None).
    """
    from blindspots.loop import leaderboard_frame, masks_needed, target_column
    from blindspots.loop.progress import rating_progress

    p = _open(project)
    cfg = p.config
    i = default_round(p) if round is None else int(round)
    if not 0 <= i <= cfg.project.rounds:
        raise ValueError(f"round: expected a round in 0..{cfg.project.rounds}, got {round}")
    out = output_folder(out_dir if out_dir is not None else p.reports_dir / "html" / f"round-{i}")
    figs, thumbs = out / "figures", out / "thumbs"
    scan_dir = p.scan_dir
    manifest = (load_manifest(scan_dir) or {}) if manifest is None else manifest
    target_i, target_next = target_column(p, i), target_column(p, i + 1)
    comps = [g.name for g in cfg.competitors]
    classes = Classes.from_dict(manifest["classes"]) if isinstance(manifest.get("classes"), dict) else None
    names = list(classes.names) if classes is not None else []
    engines = engine_sections(p.path, out, n=max(1, n_gallery // 2))  # label issues, surprise, Defuse
    parts = [f"<h1>{esc(cfg.project.name or p.path.name)}: round {i}</h1>",
             '<nav><a href="#table1">Table 1</a><a href="#stability">ranking stability</a>'
             '<a href="#candidates">candidates</a><a href="#mos">MOS</a>'
             '<a href="#s">S before/after</a><a href="#classes">per-class IoU</a><a href="#samplers">samplers</a>'
             + ('<a href="#scenarios">scenarios</a>' if scenarios is not None else "")
             + "".join(f'<a href="#{r["anchor"]}">{esc(r["title"].lower())}</a>' for r in engines[1]) + '</nav>',
             f'<p class="meta">target model: {esc(cfg.target.name)} (version {i} in this round); '
             f'competitors: {esc(", ".join(comps) or "none")}; project: {esc(p.path)}</p>']

    # --- where the round stands
    steps = p.steps()
    steps = steps[steps["round"] == i] if "round" in steps.columns else steps.iloc[0:0]
    prog = rating_progress(p, i)  # the same count as `status`, `round` and the rating page
    n_st = len(masks_needed(p, i))  # S ∪ T: an image in both is labelled once
    rated = prog.counts() + (f"; {prog.advice()}" if prog.unreachable else "")
    stage = _stage(i, steps, len(p.candidates(i, "M")), rated, len(p.masks_for_round(i)), n_st)
    parts.append(f'<p class="stage">{stage}</p>')
    if len(steps):
        cols = [c for c in ("step", "status", "model_version", "seed") if c in steps.columns]
        parts.append(table(cols, steps[cols].astype(str).values.tolist()))

    # --- Table 1
    parts.append('<h2 class="section" id="table1">Table 1: mIoU on T0 and each T(i)</h2>')
    parts.append('<p class="note">A column per evaluation: "round r T0" is the fixed test set T0 and "round r '
                 'T(r+1)" the test set drawn from round r\'s mined candidates (unbiased for the models of that '
                 'round); the target is evaluated at its version of that round.</p>')
    board = leaderboard_frame(p)
    if len(board):
        cols = [c for c in board.columns if not (isinstance(c, tuple) and c[-1] == "role")]
        header = ["model"] + [" ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in cols]
        rows = [[name] + [("–" if pd.isna(v) else f"{float(v):.3f}") for v in board.loc[name, cols]]
                for name in board.index]
        parts.append(table(header, rows, set(range(1, len(header)))))
        board.to_csv(out / "table1.csv")
    else:
        parts.append('<p class="note">No round has been evaluated yet.</p>')
    mos = _mos(p.ratings_for_round(i))
    stability = _stability_section(p, i, mos, scan_dir, manifest, classes, [target_i, target_next] + comps, out)
    parts.extend(stability[0])

    # --- candidates with MOS and ratings
    cands = p.candidates(i, "M")
    parts.append(f'<h2 class="section" id="candidates">Mined candidates M({i + 1}): {len(cands)} images, '
                 f'{len(mos)} rated</h2>')
    if len(cands):
        df = cands.copy()
        df["mos"] = [mos["mos"].get(x, np.nan) for x in df["id"]]
        if df["mos"].notna().any():
            df = df.sort_values("mos", kind="stable", na_position="last")
        df = df.head(n_gallery)
        reasons = []
        for r in df.itertuples(index=False):
            said = (f"MOS {mos.loc[r.id, 'mos']:.2f} from ratings {mos.loc[r.id, 'text']}" if r.id in mos.index
                    else "not rated yet")
            why = describe(r.reason, names, shown_as={target_i: cfg.target.name}) if r.reason else "n/a"
            reasons.append(f"{said}. Picked because: {why} (the sampler's #{int(r.rank) + 1})")
        # Numbered in the order shown (lowest MOS first), the sampler's own rank is in the text.
        picks = pd.DataFrame({"id": df["id"].astype(str), "score": df["score"].fillna(np.nan).astype(float),
                              "reason": reasons, "rank": np.arange(1, len(df) + 1)})
        if manifest:
            blocks, _ = gallery_blocks(picks, scan_dir, out, target=target_i if target_i in manifest.get("models", {})
                                       else None, competitors=[g for g in comps if g in manifest.get("models", {})],
                                       max_side=max_side, score_label=f"{cfg.mining.strategy} score",
                                       display={target_i: cfg.target.name}, manifest=manifest)
            parts.extend(blocks)
        else:
            parts.append(table(["id", "why"], picks[["id", "reason"]].values.tolist()))
    else:
        parts.append('<p class="note">Nothing mined in this round yet.</p>')

    # --- MOS histogram and rater agreement
    parts.append('<h2 class="section" id="mos">MOS and rater agreement</h2>')
    if len(mos):
        f = figures.histograms({"MOS": mos["mos"].to_numpy()}, figs / "mos.png", xlabel="mean opinion score (1-5)",
                               title=f"MOS of the {len(mos)} rated candidates", bins=16, value_range=(1, 5))
        parts.append(f'<div class="figs">{figure_img(rel_url(f, out), "MOS histogram")}</div>'
                     f'<p class="note">{int(mos["ood"].sum())} out-of-domain flags (not scores; left out of MOS '
                     'and of the agreement below).</p>')
        agreement = _agreement_parts(p.ratings_for_round(i), mos, figs, out)
        parts.extend(agreement[0])
    else:
        parts.append('<p class="note">No ratings yet.</p>')
        agreement = ([], {})

    # --- S with human mask, before / after
    parts.append(f'<h2 class="section" id="s">S({i + 1}): human mask, target before and after fine-tuning</h2>')
    parts.append(f'<p class="note">S({i + 1}): the lowest-MOS candidates, labelled by people and used to fine-tune '
                 f'the target; "before" is {esc(cfg.target.name)} version {i}, "after" the fine-tuned version {i + 1}.</p>')
    s_ids = [str(x) for x in p.candidates(i, "S")["id"]]
    masks = p.masks_for_round(i)
    has_after = target_next in manifest.get("models", {})
    palette = classes.palette if classes is not None else None
    if s_ids and palette is not None:
        pool_root = scan_pool_source(manifest) if "pool_root" in manifest else cfg.resolve(cfg.pool.root)
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
            human = p.load_mask(i, image_id) if image_id in set(masks["id"]) else None
            layers = [("human mask", "_human", human),
                      (f"before ({cfg.target.name} version {i})", target_i, _read_map(scan_dir, target_i, image_id)),
                      (f"after ({cfg.target.name} version {i + 1})", target_next, _read_map(scan_dir, target_next, image_id) if has_after else None)]
            for caption, folder, lab in layers:
                if lab is None or small is None:
                    figs_s.append(Figure(caption, None, "not labelled yet" if folder == "_human" else "not scanned yet"))
                    continue
                # ignore pixels drawn as class 0's colour
                shown_lab = lab if classes.ignore_index is None else np.where(lab == classes.ignore_index, 0, lab)
                present |= {int(k) for k in np.unique(shown_lab)}
                save_jpeg(overlay(small, shown_lab, palette), thumbs / folder / name)
                figs_s.append(Figure(caption, rel_url(thumbs / folder / name, out)))
            parts.append(f'<section class="pick"><h2>{esc(image_id)}</h2>'
                         f'<p class="meta">MOS {mos["mos"].get(image_id, np.nan):.2f}</p>'
                         f'<div class="row">{"".join(figure_html(f) for f in figs_s)}</div>{legend_html(present, names, palette)}'
                         f'</section>')
    else:
        parts.append('<p class="note">No S in this round yet (selected after the ratings; the last round forms none).</p>')

    # --- per-class IoU before / after on the round's labelled images
    parts.append('<h2 class="section" id="classes">Per-class IoU on the round\'s labelled images (S ∪ T)</h2>')
    labelled = [str(x) for x in masks["id"]]
    if labelled and has_after and classes is not None:
        k = classes.num_classes
        triples = ((p.load_mask(i, x), _read_map(scan_dir, target_i, x), _read_map(scan_dir, target_next, x))
                   for x in labelled)
        before, after, used = class_iou_before_after(triples, k, classes.ignore_index)
        if used:
            rows = [[names[c], "–" if np.isnan(before[c]) else f"{before[c]:.3f}",
                     "–" if np.isnan(after[c]) else f"{after[c]:.3f}",
                     "–" if np.isnan(after[c] - before[c]) else f"{after[c] - before[c]:+.3f}"] for c in range(k)]
            f = figures.bars(names, np.nan_to_num(after - before), figs / "class_iou_change.png",
                             ylabel="IoU after - before", title=f"Per-class IoU change on {used} labelled images")
            parts.append(table(["class", f"IoU version {i}", f"IoU version {i + 1}", "change"], rows, {1, 2, 3}))
            parts.append(f'<div class="figs">{figure_img(rel_url(f, out), "per-class IoU change")}</div>')
        else:
            parts.append('<p class="note">No labelled image has both maps at the mask\'s size.</p>')
    else:
        parts.append('<p class="note">Shown once the round\'s images are labelled and the fine-tuned target '
                     f'(version {i + 1}) has been scanned (the next round\'s scan).</p>')
    # --- sampler comparison: a project mines with one sampler; the comparison is a benchmark's output
    from blindspots.report.label_efficiency import sampler_comparison_section

    parts.extend(sampler_comparison_section(p.reports_dir, out, cfg.mining.strategy))
    if scenarios is not None:
        parts.append('<h2 class="section" id="scenarios">Failure scenarios</h2>')
        parts.append(f'<p class="note"><code>blindspots report PROJECT --scenarios</code> also writes them as a vote '
                     f'set beside this page (<code>scenario-votes/</code>, items <code>{vote_prefix(i)}-s…</code>) for '
                     'the app\'s vote page: raters choose a generated name, type their own, or say none of the '
                     'above.</p>')
        parts.append(scenario_section(scenarios, out, scan_pool_source(manifest) if "pool_root" in manifest
                                      else cfg.resolve(cfg.pool.root),
                                      names=scenario_names(p.votes(), vote_prefix(i))))
    parts.extend(engines[0])
    summary = {"round": i, "n_candidates": int(len(cands)), "n_rated": int(len(mos)), "n_S": len(s_ids),
               "n_masks": len(labelled), "table1": bool(len(board)), "ranking_stability": stability[1],
               "rater_agreement": agreement[1], "engines": engines[1]}
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    index = write_index(out, f"Round {i} report", parts)
    log.info("round report written to %s", index)
    return index


def round_scenarios(project: Any, round: int | None = None, *, manifest: dict | None = None,
                    **settings: Any) -> Any:
    """Failure scenarios of the confirmed failures so far: S of rounds 0..round (the lowest-MOS
    candidates), over `scan_attributes` of the project's scan; None with fewer than 2 failures.
    manifest: the scan's scan.json when the caller has read it ({} before any scan; read here when
    None). settings: passed to `find_scenarios`."""
    from blindspots.scenarios.segmentation import find_scenarios
    from blindspots.scenarios.segmentation_attributes import scan_attributes

    p = _open(project)
    last = default_round(p) if round is None else int(round)
    failures = sorted({str(x) for r in range(last + 1) for x in p.candidates(r, "S")["id"]})
    manifest = load_manifest(p.scan_dir) if manifest is None else manifest
    if len(failures) < 2 or not manifest:
        return None
    features = scan_attributes(p.scan_dir, manifest=manifest)
    failures = [f for f in failures if f in features.index]
    if len(failures) < 2:
        return None
    settings.setdefault("random_state", p.config.project.seed)
    return find_scenarios(features, failures, **settings)

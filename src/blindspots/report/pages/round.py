"""The round page: `DIR/index.html` for one round of a project, with its figures and thumbnails
beside it (relative links, opens offline).

Sections: where the round stands (its steps); Table 1 (every model's mIoU on T0 and each T(i));
the mined candidates M as a gallery with their MOS and ratings, the MOS histogram and the spread
of ratings per image; S with the human mask and the target's prediction before and after
fine-tuning; per-class IoU changes on the round's labelled images; the failure scenarios and the
engines' sections when there are any. `viewmodels.round.build_round_view` computes what is shown (one
`RoundView`), the Jinja template `templates/round.html` lays it out (autoescaped).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from blindspots.loop import Project
from blindspots.report.pages.engine_sections import engine_sections
from blindspots.report.html import REPORT_CSS, output_folder
from blindspots.report.pages.label_efficiency import sampler_comparison_blocks
from blindspots.report.render import render, write_page
from blindspots.report.viewmodels.round import RoundView, build_round_view, class_iou_before_after
from blindspots.report.pages.scenario_section import scenario_blocks
from blindspots.report.scenario_votes import scenario_names, vote_prefix
from blindspots.scan.manifest import load_manifest, scan_pool_source
from blindspots.scenarios.segmentation import find_scenarios
from blindspots.scenarios.segmentation_attributes import scan_attributes

__all__ = ["write_round_report", "default_round", "round_scenarios", "class_iou_before_after", "RoundView"]

log = logging.getLogger(__name__)

def _open(project: Project | str | Path) -> Project:
    return project if isinstance(project, Project) else Project.open(project)


def default_round(project: Any) -> int:
    """The latest round with mined candidates (0 when nothing was mined yet)."""
    p = _open(project)
    done = [i for i in range(p.config.project.rounds + 1) if len(p.answers.candidates(i, "M"))]
    return max(done) if done else 0


def write_round_report(project: Project | str | Path, round: int | None = None, out_dir: str | Path | None = None,
                       *, n_gallery: int = 24, max_side: int = 200, scenarios: Any = None,
                       manifest: dict | None = None) -> Path:
    """Write the page of `round` (default: the latest mined) of a project; returns index.html's path.

    project: a `Project` or its folder. out_dir: default `<project>/reports/html/round-<i>`.
    n_gallery: candidates shown (lowest MOS first once rated, else in mining order).
    scenarios: optional failure scenarios (`scenarios.segmentation.find_scenarios`, e.g. from
    `round_scenarios`) shown in their own section.
    manifest: the project scan's scan.json when the caller has read it ({} before any scan; read
    here when None).
    """
    p = _open(project)
    cfg = p.config
    i = default_round(p) if round is None else int(round)
    if not 0 <= i <= cfg.project.rounds:
        raise ValueError(f"round: expected a round in 0..{cfg.project.rounds}, got {round}")
    out = output_folder(out_dir if out_dir is not None else p.reports_dir / "html" / f"round-{i}")
    manifest = (load_manifest(p.scan_dir) or {}) if manifest is None else manifest
    engines, engine_links = engine_sections(p.path, out, n=max(1, n_gallery // 2))  # label issues, surprise, Defuse
    view = build_round_view(p, i, out, manifest, n_gallery=n_gallery, max_side=max_side)
    scenario_parts = None
    if scenarios is not None:
        pool = scan_pool_source(manifest) if "pool_root" in manifest else cfg.resolve(cfg.pool.root)
        scenario_parts = scenario_blocks(scenarios, out, pool, names=scenario_names(p.answers.votes(), vote_prefix(i)))
    body = render("round.html", v=view, engines=engines, engine_links=engine_links, scenarios=scenario_parts,
                  vote_prefix=vote_prefix(i),
                  samplers=sampler_comparison_blocks(p.reports_dir, out, cfg.mining.strategy))
    summary = {"round": i, "n_candidates": view.n_candidates, "n_rated": view.n_rated,
               "n_S": len(p.answers.candidates(i, "S")), "n_masks": view.n_masks, "table1": bool(len(view.board)),
               "ranking_stability": view.stability_rows, "rater_agreement": view.agreement_summary,
               "engines": engine_links}
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    index = write_page(out, f"Round {i} report", body, REPORT_CSS)
    log.info("round report written to %s", index)
    return index


def round_scenarios(project: Any, round: int | None = None, *, manifest: dict | None = None,
                    **settings: Any) -> Any:
    """Failure scenarios of the confirmed failures so far: S of rounds 0..round (the lowest-MOS
    candidates), over `scan_attributes` of the project's scan; None with fewer than 2 failures.
    manifest: the scan's scan.json when the caller has read it ({} before any scan; read here when
    None). settings: passed to `find_scenarios`."""
    p = _open(project)
    last = default_round(p) if round is None else int(round)
    failures = sorted({str(x) for r in range(last + 1) for x in p.answers.candidates(r, "S")["id"]})
    manifest = load_manifest(p.scan_dir) if manifest is None else manifest
    if len(failures) < 2 or not manifest:
        return None
    features = scan_attributes(p.scan_dir, manifest=manifest)
    failures = [f for f in failures if f in features.index]
    if len(failures) < 2:
        return None
    settings.setdefault("random_state", p.config.project.seed)
    return find_scenarios(features, failures, **settings)

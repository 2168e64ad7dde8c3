"""The failure-scenario section of a report: per scenario its size, the attributes that set it
apart (Cohen's d against the rest of the pool) and its most typical images as thumbnails."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from markupsafe import Markup

from blindspots import ids as id_rules
from blindspots.report.pages.gallery import IMAGE_LAYER
from blindspots.report.html import rel_url
from blindspots.report.drawing.overlays import thumbnail
from blindspots.report.render import render_blocks
from blindspots.report.drawing.thumbs import Figure, read_image, save_jpeg
from blindspots.report.viewmodels.blocks import Block, ScenarioCard, Table, Text


def scenario_blocks(found: Any, out: Path, pool_root: Path, *, n_effects: int = 5, max_side: int = 160,
                    names: dict[int, dict] | None = None) -> list[Block]:
    """View-model blocks for `found` (a `SegmentationScenarios`); thumbnails go to out/thumbs/_image/.
    names: per scenario index, the names people gave it (`scenario_votes.scenario_names`); None:
    the scenarios were not offered on the vote page (nothing said)."""
    parts: list[Block] = [Text.of(
        f"{len(found.failures)} confirmed failures grouped into {len(found)} scenario(s) (DP-GMM over image "
        "attributes, class mix and object sizes; d = standardized mean difference against the rest of the pool).")]
    for s in found.summaries:
        eff = s.effects.head(n_effects)
        rows = [[r.attribute, f"{r.d:+.2f}", f"{r.scenario_mean:.3g}", f"{r.pool_mean:.3g}"]
                for r in eff.itertuples(index=False)]
        figs = []
        for image_id in s.typical:
            image, why = read_image(pool_root, image_id)
            if image is None:
                figs.append(Figure(image_id, None, f"image not readable: {why}"))
                continue
            path = out / "thumbs" / IMAGE_LAYER / id_rules.artifact_name(image_id, ".jpg")
            save_jpeg(thumbnail(image, max_side), path)
            figs.append(Figure(image_id, rel_url(path, out)))
        n = len(s.members)
        size = f"{n} failure" + ("" if n == 1 else "s") + (" (too few to generalise from)" if n < 3 else "")
        named = None if names is None else names.get(s.index)
        parts.append(ScenarioCard(
            title=f"Scenario {s.index + 1}: {size}", description=s.description,
            names=None if names is None else (named["names"] if named is not None else []),
            n_none=named["none"] if named is not None else 0, voted=named is not None,
            effects=Table(["attribute", "d", "scenario mean", "pool mean"], rows, {1, 2, 3}), figures=figs))
    return parts


def scenario_section(found: Any, out: Path, pool_root: Path, *, n_effects: int = 5, max_side: int = 160,
                     names: dict[int, dict] | None = None) -> Markup:
    """The HTML of `scenario_blocks` (arguments as there)."""
    return render_blocks(scenario_blocks(found, out, pool_root, n_effects=n_effects, max_side=max_side, names=names))

"""The failure-scenario section of a report: per scenario its size, the attributes that set it
apart (Cohen's d against the rest of the pool) and its most typical images as thumbnails."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from blindspots import ids as id_rules
from blindspots.report.gallery import IMAGE_LAYER
from blindspots.report.html import esc, rel_url, table
from blindspots.report.overlays import thumbnail
from blindspots.report.thumbs import Figure, figure_html, read_image, save_jpeg


def _names_line(named: dict | None) -> str:
    """What people called a scenario on the vote page (see `scenario_votes.scenario_names`)."""
    if named is None:
        return '<p class="meta">Names from the vote page: no votes yet.</p>'
    said = ", ".join(f"“{esc(n)}” ({c})" for n, c in named["names"]) or "none"
    return (f'<p class="meta">Names from the vote page: <b>{said}</b>; none of the above: {named["none"]}.</p>')


def scenario_section(found: Any, out: Path, pool_root: Path, *, n_effects: int = 5, max_side: int = 160,
                     names: dict[int, dict] | None = None) -> str:
    """HTML for `found` (a `SegmentationScenarios`); thumbnails go to out/thumbs/_image/.
    names: per scenario index, the names people gave it (`scenario_votes.scenario_names`); None:
    the scenarios were not offered on the vote page (nothing said)."""
    parts = [f'<p class="note">{len(found.failures)} confirmed failures grouped into {len(found)} scenario(s) '
             "(DP-GMM over image attributes, class mix and object sizes; d = standardized mean difference "
             "against the rest of the pool).</p>"]
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
        parts.append(f'<section class="pick"><h2>Scenario {s.index + 1}: {esc(size)}</h2>'
                     f'<p class="reason">{esc(s.description)}</p>'
                     + (_names_line(names.get(s.index)) if names is not None else "")
                     + table(["attribute", "d", "scenario mean", "pool mean"], rows, {1, 2, 3})
                     + f'<p class="meta">most typical:</p><div class="row">{"".join(figure_html(f) for f in figs)}</div>'
                     "</section>")
    return "\n".join(parts)

"""The failure-scenario section of a report: per scenario its size, the attributes that set it
apart (Cohen's d against the rest of the pool) and its most typical images as thumbnails."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from blindspots import ids as id_rules
from blindspots.report.gallery import IMAGE_LAYER, _Figure, _figure, _read_image, _save_jpeg
from blindspots.report.html import esc, rel_url, table
from blindspots.report.overlays import thumbnail


def scenario_section(found: Any, out: Path, pool_root: Path, *, n_effects: int = 5, max_side: int = 160) -> str:
    """HTML for `found` (a `SegmentationScenarios`); thumbnails go to out/thumbs/_image/."""
    parts = [f'<p class="note">{len(found.failures)} confirmed failures grouped into {len(found)} scenario(s) '
             "(DP-GMM over image attributes, class mix and object sizes; d = standardized mean difference "
             "against the rest of the pool).</p>"]
    for s in found.summaries:
        eff = s.effects.head(n_effects)
        rows = [[r.attribute, f"{r.d:+.2f}", f"{r.scenario_mean:.3g}", f"{r.pool_mean:.3g}"]
                for r in eff.itertuples(index=False)]
        figs = []
        for image_id in s.typical:
            image, why = _read_image(pool_root, image_id)
            if image is None:
                figs.append(_Figure(image_id, None, f"image not readable: {why}"))
                continue
            path = out / "thumbs" / IMAGE_LAYER / id_rules.artifact_name(image_id, ".jpg")
            _save_jpeg(thumbnail(image, max_side), path)
            figs.append(_Figure(image_id, rel_url(path, out)))
        n = len(s.members)
        size = f"{n} failure" + ("" if n == 1 else "s") + (" (too few to generalise from)" if n < 3 else "")
        parts.append(f'<section class="pick"><h2>Scenario {s.index + 1}: {esc(size)}</h2>'
                     f'<p class="reason">{esc(s.description)}</p>'
                     + table(["attribute", "d", "scenario mean", "pool mean"], rows, {1, 2, 3})
                     + f'<p class="meta">most typical:</p><div class="row">{"".join(_figure(f) for f in figs)}</div>'
                     "</section>")
    return "\n".join(parts)

"""What a rating costs next to a mask: the app's rating page timed with a scripted annotator.

The same scripted annotator as `benchmarks/labeling.py` (Playwright, Debian's chromium, headless) signs
in to a small sample project (procedural street scenes, briefly trained models) whose round 0 waits
for ratings, and rates every candidate of M on the real rating page: it waits until the image and the
target's prediction are shown, presses the key of its score (1 + 4 x the true mIoU of the target's
prediction, rounded; the simulated raters' rule without noise) and waits for the next image. Then the
loop moves on with those ratings, and the same annotator corrects the masks of the first `--masks`
images of S with the full label editor to mean IoU >= 0.9 (`labeling.label_one`, mode "editor").

Counted per rating: actions (key presses and clicks, as `labeling.py` counts them) and seconds from the
image shown to the next image shown (page, server round trip, image loads; no time for looking: the
scripted annotator decides at once, as it does for masks, where its policy's thinking is reported
apart). Per mask: the same, from the page opened to the mask saved. Printed side by side with the
ratio mask / rating, the CPU model and os.getloadavg().

    PYTHONPATH=src python benchmarks/rating_cost.py [--n 20] [--masks 10] [--out /tmp/rating_cost]
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

import labeling

SHOWN = """() => { const b = document.body;
  if (b.dataset.finished === '1') return 'finished';
  const els = ['img', 'img2', 'overlay'].map((i) => document.getElementById(i));
  return els.every((e) => e.hidden || (e.complete && e.naturalWidth > 0 && !e.classList.contains('loading')))
    ? b.dataset.index : null; }"""


def true_scores(p, items: list[str]) -> dict[str, int]:  # noqa: ANN001
    """The scripted annotator's score per image: round(1 + 4 x true mIoU of the target's prediction)."""
    from PIL import Image

    from blindspots.data.scenes import SCENE_CLASSES
    from blindspots.human.simulate import image_miou
    from blindspots.models.zoo import load_segmenter

    pool = Path(p.config.resolve(p.config.pool.root))
    seg = load_segmenter(pool.parent.parent / "target.pt")  # data/pool/images -> data/target.pt
    out = {}
    for i in items:
        img = np.asarray(Image.open(pool / i).convert("RGB"))[None]
        pred = seg.predict_proba(img).argmax(1)
        truth = np.asarray(Image.open(pool.parent / "masks" / Path(i).with_suffix(".png").name))[None]
        miou = float(image_miou(pred, truth, SCENE_CLASSES.num_classes)[0])
        out[i] = int(np.clip(np.rint(1 + 4 * (0.0 if np.isnan(miou) else miou)), 1, 5))
    return out


def rate_all(page, url: str, scores: dict[str, int]) -> tuple[list[dict], float, float]:  # noqa: ANN001
    """Rate the whole queue on /rate; (per rating {id, actions, seconds}, seconds to the first image
    shown, seconds from the last key press until every answer is saved)."""
    t0 = time.perf_counter()
    page.goto(f"{url}/rate")
    page.wait_for_selector("body[data-ready='1']", state="attached", timeout=60000)
    shown = page.wait_for_function(SHOWN, timeout=60000).json_value()
    first = time.perf_counter() - t0
    rows = []
    while shown != "finished":
        t = time.perf_counter()
        item = page.text_content("#image-id").split(" ", 1)[1]
        page.keyboard.press(str(scores[item]))
        shown = page.wait_for_function(f"() => {{ const s = ({SHOWN})(); return s !== {shown!r} ? s : null; }}",
                                       timeout=60000).json_value()
        rows.append({"id": item, "actions": 1, "seconds": time.perf_counter() - t})
    t = time.perf_counter()
    page.wait_for_selector("body[data-pending='0']", state="attached", timeout=60000)
    return rows, first, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20, help="masks the round asks for (M has n + 4 images to rate)")
    ap.add_argument("--masks", type=int, default=10, help="masks the annotator corrects for the side-by-side")
    labeling.add_project_arguments(ap, "/tmp/rating_cost")
    args = ap.parse_args()
    from blindspots import loop
    from blindspots.loop.project import Project
    from blindspots.machine import cpu_model

    p, token, t = labeling.start_rating_project(args)
    items = [str(i) for i in p.answers.candidate_ids(0, "M")]
    scores = true_scores(p, items)
    print(f"project ready in {time.perf_counter() - t:.0f} s: {len(items)} images to rate (loadavg "
          f"{os.getloadavg()})", flush=True)
    with labeling.served(p.path, token) as (url, api), labeling.signed_in(url, token) as page:
        rows, first, flush = rate_all(page, url, scores)
        got = Project.open(p.path).answers.ratings_for_round(0)
        if len(got) != len(items):
            raise RuntimeError(f"expected {len(items)} saved ratings, got {len(got)}")
        st = loop.advance(Project.open(p.path), progress=False)
        if st.state != "awaiting_masks":
            raise RuntimeError(f"expected the project to wait for masks, got {st.state}: {st.message}")
        p = Project.open(p.path)
        masks = [labeling.label_one(page, url, item, labeling.true_mask(p, item), "editor", api)
                 for item in list(p.answers.candidates(0, "S")["id"])[: args.masks]]
    load = os.getloadavg()
    r_act = np.mean([r["actions"] for r in rows])
    r_sec = np.array([r["seconds"] for r in rows])
    m_act = np.array([m["actions"] for m in masks], float)
    m_sec = np.array([m["seconds"] for m in masks])
    m_pol = np.array([m["policy_seconds"] for m in masks])
    reached = sum(m["iou"] >= labeling.GOAL for m in masks)
    print(f"\n{cpu_model()}, loadavg {load}; {args.size}x{args.size} scenes, Chromium headless")
    print(f"rating: {r_act:.2f} actions/image, {r_sec.mean():.3f} s/image (median {np.median(r_sec):.3f}, "
          f"max {r_sec.max():.3f}) over {len(rows)} ratings; first image shown {first:.2f} s after opening the "
          f"page, every answer saved {flush:.2f} s after the last key")
    print(f"mask (editor): {m_act.mean():.1f} actions/image, {m_sec.mean():.2f} s/image ({m_pol.mean():.2f} s of "
          f"it the policy's thinking) over {len(masks)} masks, goal reached {reached}/{len(masks)}")
    print(f"ratio mask / rating: {m_act.mean() / r_act:.1f}x actions, {m_sec.mean() / r_sec.mean():.1f}x seconds, "
          f"{(m_sec.mean() - m_pol.mean()) / r_sec.mean():.1f}x seconds without the policy's thinking")


if __name__ == "__main__":
    main()

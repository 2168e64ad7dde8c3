"""What a region answer costs next to a mask: the app's region page timed with a scripted annotator.

The same scripted annotator as `benchmarks/labeling.py` and `benchmarks/rating_cost.py` (Playwright,
Debian's chromium, headless) works in a small sample project (procedural street scenes, briefly trained
models) switched to region labels (`blindspots config --labels regions`): round 0's ratings are given, the
masks step asks about the `--k` regions of each image of S where the target disagrees with its competitors
and is least sure. On the real region page the annotator waits until the image and the outlined region are
shown, decides from the true mask (the region's majority class when it covers >= 80% of the region, else
"mixed / unsure": `blindspots.human.regions.simulated_region_answer`) and answers with one key: Enter when
that is the preselected guess, the class's digit otherwise, M for mixed (a class beyond 9 would be one
click on its button: also one action).

Counted per answer: actions (key presses and clicks, as `labeling.py` counts them) and seconds from the
region shown to the next region shown. Then `blindspots round` writes the partial masks; printed beside
them: how often the guess was right, the share of answers "mixed", the share of an image's pixels the
answers label and how many of those are right (against the true mask), the mask cost of
`blindspots.human.cost` (a whole mask with the full editor, measured the same way), CPU model and
os.getloadavg().

    PYTHONPATH=src python benchmarks/region_cost.py [--n 10] [--k 8] [--out /tmp/region_cost]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import labeling

SHOWN = """() => { const b = document.body;
  if (b.dataset.finished === '1') return 'finished';
  const els = ['img', 'outline'].map((i) => document.getElementById(i));
  return els.every((e) => e.complete && e.naturalWidth > 0) ? b.dataset.index + ':' + els[1].src : null; }"""


def answer_all(page, url: str, truth: dict[str, np.ndarray], segments: dict[str, np.ndarray]) -> list[dict]:  # noqa: ANN001
    """Answer every region on /regions; per answer {id, region, guess, answer, actions, seconds}."""
    from blindspots.human.regions import simulated_region_answer

    page.goto(f"{url}/regions")
    page.wait_for_selector("body[data-ready='1']", state="attached", timeout=60000)
    shown = page.wait_for_function(SHOWN, timeout=60000).json_value()
    rows = []
    while shown != "finished":
        t = time.perf_counter()
        image_id, region = page.text_content("#item").split(" · region ")
        region = int(region)
        guess = int(page.get_attribute("#choices button.preselected", "data-label"))
        said = simulated_region_answer(truth[image_id], segments[image_id], region)
        if said == guess:
            page.keyboard.press("Enter")
        elif said is None:
            page.keyboard.press("m")
        elif said < 10:
            page.keyboard.press(str(said))
        else:
            page.click(f"#choices button[data-label='{said}']")
        shown = page.wait_for_function(f"() => {{ const s = ({SHOWN})(); return s !== {shown!r} ? s : null; }}",
                                       timeout=60000).json_value()
        rows.append({"id": image_id, "region": region, "guess": guess, "answer": said, "actions": 1,
                     "seconds": time.perf_counter() - t})
    page.wait_for_selector("body[data-pending='0']", state="attached", timeout=60000)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10, help="images in S (each answered by regions)")
    ap.add_argument("--k", type=int, default=8, help="regions asked about per image")
    labeling.add_project_arguments(ap, "/tmp/region_cost")
    args = ap.parse_args()
    from blindspots import loop
    from blindspots.human.cost import C_MASK_EDITOR
    from blindspots.loop import regions as rq
    from blindspots.loop.project import Project
    from blindspots.machine import cpu_model

    p, token, t = labeling.start_rating_project(args)
    rq.set_labels(p, "regions", args.k)
    rng = np.random.default_rng(args.seed)
    p.answers.add_ratings([(0, i, "helper", int(rng.integers(1, 6))) for i in p.answers.candidate_ids(0, "M")])
    st = loop.advance(Project.open(p.path), progress=False)
    if st.state != "awaiting_masks":
        raise RuntimeError(f"expected the project to wait for region answers, got {st.state}: {st.message}")
    p = Project.open(p.path)
    images = rq.query_images(p, 0)
    truth = {i: labeling.true_mask(p, i) for i in images}
    segments = {i: rq.segments(p, 0, i) for i in images}
    print(f"project ready in {time.perf_counter() - t:.0f} s: {len(images)} images, "
          f"{sum(len(rq.queries(p, 0, i)) for i in images)} regions to answer (loadavg {os.getloadavg()})", flush=True)
    with labeling.served(p.path, token) as (url, api), labeling.signed_in(url, token) as page:
        rows = answer_all(page, url, truth, segments)
        page.screenshot(path=str(args.out / "regions_page.png"), full_page=True)
    # The annotator finished: the masks step writes nothing more for S (its images are done); check them.
    p = Project.open(p.path)
    saved = p.answers.masks_for_round(0).set_index("id")
    missing = [i for i in images if i not in saved.index or saved.loc[i, "source"] != rq.REGION_SOURCE]
    if missing:
        raise RuntimeError(f"expected a region mask of every image, got none for {missing}")
    labelled = right = pixels = 0
    for i in images:
        m = p.answers.load_mask(0, i)
        on = m != 255
        labelled, right, pixels = labelled + int(on.sum()), right + int((m[on] == truth[i][on]).sum()), pixels + m.size
    load = os.getloadavg()
    act = np.array([r["actions"] for r in rows], float)
    sec = np.array([r["seconds"] for r in rows])
    accepted = np.mean([r["answer"] == r["guess"] for r in rows])
    mixed = np.mean([r["answer"] is None for r in rows])
    per_image = act.sum() / len(images)
    print(f"\n{cpu_model()}, loadavg {load}; {args.size}x{args.size} scenes, Chromium headless")
    print(f"region answer: {act.mean():.2f} actions/answer (max {act.max():.0f}), {sec.mean():.3f} s/answer "
          f"(median {np.median(sec):.3f}, max {sec.max():.3f}) over {len(rows)} answers of {len(images)} images")
    print(f"guess accepted {accepted:.1%}, mixed / unsure {mixed:.1%}; the answers label {labelled / pixels:.1%} "
          f"of the pixels of S, {right / max(1, labelled):.1%} of them right")
    print(f"per image: {per_image:.1f} actions for {args.k} regions against {C_MASK_EDITOR} for a whole mask with "
          f"the full editor (blindspots.human.cost): {C_MASK_EDITOR / per_image:.1f}x fewer actions")
    print(f"screenshot: {args.out / 'regions_page.png'}")


if __name__ == "__main__":
    main()

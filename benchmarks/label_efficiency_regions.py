"""Region labels in the label-efficiency benchmark: `label_efficiency.py --labels regions` labels each picked
image by its K regions (the superpixels where the round's target disagrees most with its competitors and is
least sure, `blindspots.mine.regions`) instead of a whole mask, and fine-tunes on the partial masks.

A simulated person answers a region with its true majority class when that covers >= 80% of it, else
"mixed / unsure" (`blindspots.human.regions.simulated_region_answer`); the rest of the image is left out of
the loss (`--region-fill ignore`) or takes the target's label where every model agrees with probability
>= `--agree` (`confident`, the default, as in projects). An image's answers are asked once, when it is
picked, and kept for later rounds.

Cost: a region answer is `C_REGION` actions (1.0, measured on the real page by `benchmarks/region_cost.py`),
so an image costs K x C_REGION instead of a mask's 31.6; each round buys the same budget as before: the
baselines get more images, MAD labels up to `n4 x 31.6 / (K x C_REGION)` of its rated candidates M.

`--compare MASKS.json REGIONS.json` prints the final hard-set, T0 and focus mIoU of both runs side by side
per sampler, the cost at which regions first reach whole masks' round-3 hard-set mIoU, and draws both
curves in one figure (`--figure`).

    PYTHONPATH=src python benchmarks/label_efficiency.py --labels regions --work /tmp/le_regions ...
    PYTHONPATH=src python benchmarks/label_efficiency_regions.py --compare /tmp/le_masks/results.json \
        /tmp/le_regions/results.json --figure /tmp/regions_vs_masks.png
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from blindspots.human.cost import C_MASK_EDITOR, C_REGION, LabelCost


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """--labels, --regions-per-image, --region-fill, --agree of `label_efficiency.py`."""
    ap.add_argument("--labels", choices=("masks", "regions"), default="masks", help="whole masks, or region "
                    "answers (label_efficiency_regions.py)")
    ap.add_argument("--regions-per-image", type=int, default=8, help="regions: K answers per picked image")
    ap.add_argument("--region-fill", choices=("ignore", "confident"), default="confident", help="regions: the "
                    "rest of the image left out of the loss, or the target's label where every model agrees (the "
                    "projects' default)")
    ap.add_argument("--agree", type=float, default=0.9, help="regions, confident fill: each model's probability")


class RegionLabeller:
    """Simulated region answers for the picked images of one seed's pool.

    images: uint8 [N, H, W, 3]; comp_maps: per competitor int [N, H, W] argmax maps; comp_probas: per
    competitor float [N, C, H, W] (only the confident fill reads them); k, fill, agree: as the options.
    """

    def __init__(self, images: np.ndarray, comp_maps: list[np.ndarray], comp_probas: list[np.ndarray], *,
                 k: int, fill: str, agree: float, c_region: float = C_REGION) -> None:
        self.images, self.comp_maps, self.comp_probas = images, comp_maps, comp_probas
        self.k, self.fill, self.agree, self.c_region = k, fill, agree, c_region
        self.cache: dict[str, np.ndarray] = {}
        self.stats = {"images": 0, "answers": 0, "mixed": 0, "labelled": 0, "right": 0, "pixels": 0}

    def cost_model(self, base: LabelCost) -> LabelCost:
        """The cost model with an image's K region answers in place of a mask."""
        return LabelCost(c_rate=base.c_rate, c_mask=self.k * self.c_region)

    def images_for(self, n_masks: int) -> int:
        """How many images region answers label for the cost of `n_masks` whole masks."""
        return int(n_masks * C_MASK_EDITOR // (self.k * self.c_region))

    def annotator(self, proba: np.ndarray, row_of: dict[str, int]) -> Callable[[str, np.ndarray], np.ndarray]:
        """(id, true mask) -> the partial mask of the image's answers; asked with this round's target
        probabilities proba [N, C, H, W] the first time an image is seen, kept afterwards."""
        from blindspots.human.regions import partial_mask, simulated_region_answer
        from blindspots.mine.regions import confident_labels, rank_regions, region_segments

        def label(image_id: str, truth: np.ndarray) -> np.ndarray:
            if image_id not in self.cache:
                r = row_of[image_id]
                seg = region_segments(self.images[r], min_regions=4 * self.k)
                asked = rank_regions(seg, proba[r], [m[r] for m in self.comp_maps], self.k)
                said = {q.region: simulated_region_answer(truth, seg, q.region) for q in asked}
                base = None
                if self.fill == "confident":
                    base = confident_labels([proba[r]] + [p[r] for p in self.comp_probas], self.agree)
                m = partial_mask(seg, said, base=base)
                on = m != 255
                s = self.stats
                s["images"] += 1
                s["answers"] += len(said)
                s["mixed"] += sum(v is None for v in said.values())
                s["labelled"] += int(on.sum())
                s["right"] += int((m[on] == truth[on]).sum())
                s["pixels"] += m.size
                self.cache[image_id] = m
            return self.cache[image_id]

        return label

    def summary(self) -> str:
        s = self.stats
        if not s["images"]:
            return "no image labelled by regions"
        return (f"{s['images']} images, {s['answers']} region answers ({s['mixed'] / s['answers']:.1%} mixed), "
                f"{s['labelled'] / s['pixels']:.1%} of their pixels labelled, {s['right'] / max(1, s['labelled']):.1%}"
                " of those right")


def make_labeller(args: argparse.Namespace, world: dict, pool: tuple, comps: dict) -> RegionLabeller | None:
    """The seed's labeller (None with --labels masks). comps: competitor -> (columns, argmax [N, H, W])."""
    if args.labels != "regions":
        return None
    from blindspots.models.zoo import load_segmenter

    images = pool[1]
    probas = []
    if args.region_fill == "confident":
        for path in world["competitors"].values():
            seg = load_segmenter(path, batch_size=64)
            probas.append(np.concatenate([seg.predict_proba(images[s:s + 64]) for s in range(0, len(images), 64)]))
    return RegionLabeller(images, [m for _, m in comps.values()], probas, k=args.regions_per_image,
                          fill=args.region_fill, agree=args.agree)


# ----------------------------------------------------------------------------- masks beside regions

def final_points(results: dict) -> pd.DataFrame:
    """Per sampler: the last round's mean cost and metrics over seeds."""
    rows = [{"strategy": r["strategy"], "seed": r["seed"], **r["points"][-1]} for r in results["runs"]]
    return pd.DataFrame(rows).groupby("strategy", sort=False).mean(numeric_only=True).drop(columns=["seed", "round"])


def curve(results: dict, strategy: str) -> pd.DataFrame:
    """Mean cost and metrics per round of one sampler over seeds."""
    rows = [{"seed": r["seed"], **p} for r in results["runs"] if r["strategy"] == strategy for p in r["points"]]
    return pd.DataFrame(rows).groupby("round").mean(numeric_only=True).drop(columns=["seed"])


def cost_to_reach(points: pd.DataFrame, goal: float, metric: str = "hard") -> float:
    """The cost of the first round whose mean `metric` is >= goal (NaN if none), linear between rounds."""
    v, c = points[metric].to_numpy(), points["cost"].to_numpy()
    for j in range(1, len(v)):
        if v[j] >= goal:
            if v[j - 1] >= goal:
                return float(c[j - 1])
            return float(c[j - 1] + (goal - v[j - 1]) / (v[j] - v[j - 1]) * (c[j] - c[j - 1]))
    return float("nan")


def compare(masks: dict, regions: dict, figure: Path | None) -> pd.DataFrame:
    """Print whole masks beside region labels per sampler (and the best sampler of each); draw both."""
    focus = next(k for k in masks["runs"][0]["points"][0] if k not in ("round", "cost", "masks", "ratings", "hard", "T0"))
    fm, fr = final_points(masks), final_points(regions)
    rows = []
    for s in [x for x in fm.index if x in fr.index]:
        goal = float(fm.loc[s, "hard"])
        reach = cost_to_reach(curve(regions, s), goal)
        rows.append({"sampler": s, "masks: hard": goal, "regions: hard": fr.loc[s, "hard"],
                     "masks: T0": fm.loc[s, "T0"], "regions: T0": fr.loc[s, "T0"],
                     f"masks: {focus}": fm.loc[s, focus], f"regions: {focus}": fr.loc[s, focus],
                     "masks: cost": fm.loc[s, "cost"], "regions: cost to reach masks' hard": reach,
                     "cost share": reach / fm.loc[s, "cost"]})
    table = pd.DataFrame(rows)
    best_m, best_r = fm["hard"].idxmax(), fr["hard"].idxmax()
    goal = float(fm.loc[best_m, "hard"])
    reach = cost_to_reach(curve(regions, best_r), goal)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    m_cost = float(fm.loc[best_m, "cost"])
    said = "never" if np.isnan(reach) else f"{reach:.0f} = {reach / m_cost:.2f} of masks' cost"
    print(f"\nbest sampler with masks: {best_m} (hard {goal:.3f} at cost {m_cost:.0f}); with regions: "
          f"{best_r} (hard {fr.loc[best_r, 'hard']:.3f}); regions reach {goal:.3f} at cost {said}")
    if figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for k, s in enumerate(fm.index):
            for res, style, name in ((masks, "-", "masks"), (regions, "--", "regions")):
                if s in set(r["strategy"] for r in res["runs"]):
                    c = curve(res, s)
                    ax.plot(c["cost"], c["hard"], style, marker="o", color=f"C{k}", label=f"{s} ({name})")
        ax.set_xlabel("human cost (label-editor actions)")
        ax.set_ylabel("hard-set mIoU")
        ax.set_title(f"{masks.get('dataset', 'scenes')}: whole masks (solid) against region labels (dashed)")
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(figure, dpi=120)
        print(f"figure: {figure}")
    return table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("MASKS_JSON", "REGIONS_JSON"), required=True,
                    help="results.json of a --labels masks run and of a --labels regions run")
    ap.add_argument("--figure", type=Path, default=None)
    args = ap.parse_args(argv)
    masks, regions = (json.loads(p.read_text()) for p in args.compare)
    compare(masks, regions, args.figure)


if __name__ == "__main__":
    main()

"""Save a PNG grid of procedural street scenes, their label masks and their conditions.

Usage: python examples/scenes_gallery.py [OUT.png] [--n 8] [--size 128] [--seed 0] [--distribution broad]
Each column shows a scene, its colour-coded mask and its conditions (hard factors in red).
"""
from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from blindspots.data.scenes import SCENE_CLASSES, render_scene, scene_seeds  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="scenes_gallery.png", help="output PNG path")
    ap.add_argument("--n", type=int, default=8, help="number of scenes")
    ap.add_argument("--size", type=int, default=128, help="scene side in pixels")
    ap.add_argument("--seed", type=int, default=0, help="set seed")
    ap.add_argument("--distribution", default="broad", help="train | broad | pool | hard")
    args = ap.parse_args()

    cols = min(args.n, 8)
    rows = (args.n + cols - 1) // cols
    fig, axes = plt.subplots(2 * rows, cols, figsize=(2.2 * cols, 5.6 * rows), squeeze=False,
                             gridspec_kw={"hspace": 0.05, "height_ratios": [1, 1.45] * rows})
    for ax in axes.ravel():
        ax.axis("off")
    for i, s in enumerate(scene_seeds(args.n, args.seed)):
        sc = render_scene(int(s), args.size, distribution=args.distribution)
        r, c = 2 * (i // cols), i % cols
        axes[r, c].imshow(sc.image)
        axes[r + 1, c].imshow(SCENE_CLASSES.colorize(sc.mask))
        axes[r + 1, c].set_anchor("N")
        cd = sc.conditions
        text = (f"{cd.lighting}  scale {cd.scale:.2f}\nhue {cd.color_shift:+.0f}  occl {cd.occlusion:.2f}\n"
                f"clutter {cd.clutter}  horizon {cd.horizon:.2f}\ntilt {cd.tilt:+.1f}"
                + (f"\nhard: {', '.join(cd.hard_factors)}" if cd.is_hard else ""))
        axes[r + 1, c].text(0.5, -0.04, text, transform=axes[r + 1, c].transAxes, ha="center", va="top",
                            fontsize=7, color="red" if cd.is_hard else "black")
    handles = [plt.Rectangle((0, 0), 1, 1, color=SCENE_CLASSES.palette[k] / 255) for k in range(len(SCENE_CLASSES))]
    fig.legend(handles, SCENE_CLASSES.names, loc="lower center", ncol=len(SCENE_CLASSES), fontsize=8)
    fig.subplots_adjust(left=0.01, right=0.99, top=0.99, bottom=0.04, wspace=0.05)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}\nnext: blindspots demo     # two MAD rounds on these scenes with simulated people")


if __name__ == "__main__":
    main()

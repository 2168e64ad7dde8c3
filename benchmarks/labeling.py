"""How much faster the label editor makes correcting masks.

A scripted annotator drives the real label page in Chromium (Playwright, Debian's chromium) to
correct 20 MAD candidates of a small sample project (procedural street scenes: the ground truth
is known) until the mask's mean IoU with the ground truth is >= 0.9, in three modes:

  (a) brush: the brush alone, from an empty canvas;
  (b) editor: from the target's prediction, with the superpixel brush (coarse and fine), the
      competitors' regions and the brush;
  (c) prediction: from the target's prediction, the brush alone (where (b)'s gain comes from).

The policy is the same greedy one in every mode: each step it takes the action with the most
newly correct pixels per action among the tools the mode offers: one continuous brush stroke
(a scribble over one of the three largest wrong regions with the largest brush that stays inside
its true class, or the brush size it has), a click on one superpixel with one class, or a click
adopting one competitor region. An action that did not help is not repeated. Key presses (class,
tool, superpixel level, next competitor), brush-size changes, clicks and strokes each count as one
action; saving counts 1. The models are trained briefly on the scenes first, so the target's
predictions are plausible (and wrong where a competitor may be right).

    PYTHONPATH=src python benchmarks/labeling.py [--n 20] [--size 64] [--out /tmp/labeling]

Prints actions and seconds per image for every mode, the ratios (target: >= 3x fewer actions
with the editor) and os.getloadavg() beside every figure.
"""
from __future__ import annotations

import argparse
import base64
import os
import secrets
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from scipy import ndimage

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
GOAL, MAX_ACTIONS = 0.9, 400
MODES = ("brush", "prediction", "editor")  # start empty / from the prediction; "editor" adds superpixels, competitors


# ---- the project: sample scenes, briefly trained models, round 0 waiting for 20+ masks ----------------
def train_models(data: Path, size: int, seed: int, epochs: int) -> None:
    """Train the sample's three checkpoints (target, comp_a, comp_b) on fresh training scenes."""
    import torch

    from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set
    from blindspots.models.zoo import build_model, save_checkpoint
    from blindspots.training.segmentation import as_arrays, train_epoch

    x, y = as_arrays(generate_scene_set(data / "bench_train", 96, seed=seed + 7, distribution="train",
                                        size=size, progress=False))
    plan = {"target": ("tiny_unet", epochs), "comp_a": ("small_fcn", epochs), "comp_b": ("tiny_unet", epochs // 2)}
    for k, (name, (arch, n_epochs)) in enumerate(plan.items()):
        torch.manual_seed(seed * 10 + k)
        model = build_model(arch, SCENE_CLASSES.num_classes)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        rng = np.random.default_rng(seed + k)
        for _ in range(n_epochs):
            train_epoch(model, x, y, opt, batch_size=8, rng=rng)
        save_checkpoint(data / f"{name}.pt", model.eval(), arch=arch, classes=SCENE_CLASSES,
                        meta={"sample": True, "trained": True, "epochs": n_epochs})


def make_rating_project(root: Path, n: int, size: int, seed: int, token: str, epochs: int):  # noqa: ANN201
    """A sample project whose round 0 waits for one rating of each of its n + 4 candidates M (one
    annotator "bench" with `token`; the n of lowest MOS then get masks)."""
    from blindspots.app.services import make_sample_project
    from blindspots.config import CONFIG_FILE, load_config, save_config
    from blindspots import loop
    from blindspots.loop.project import Project

    p = make_sample_project(root / "sample", n_pool=3 * n, size=size, seed=seed, n_candidates=n + 4,
                            annotators={"bench": ("annotator", token)}, vote_set=False, review_set=False,
                            advance=False)
    train_models(root / "sample" / "data", size, seed, epochs)
    cfg = load_config(p.path / CONFIG_FILE)
    save_config(replace(cfg, ratings=replace(cfg.ratings, n4=n, raters=1)), p.path / CONFIG_FILE)
    p = Project.open(p.path)
    loop.advance(p, progress=False)  # scan, mine: waits for ratings
    return Project.open(p.path)


def make_project(root: Path, n: int, size: int, seed: int, token: str, epochs: int):  # noqa: ANN201
    """A sample project whose round 0 waits for masks of at least `n` images (S has n)."""
    from blindspots import loop
    from blindspots.loop.project import Project

    p = make_rating_project(root, n, size, seed, token, epochs)
    rng = np.random.default_rng(seed)
    p.answers.add_ratings([(0, i, "helper", int(rng.integers(1, 6))) for i in p.answers.candidate_ids(0, "M")])
    st = loop.advance(Project.open(p.path), progress=False)
    if st.state != "awaiting_masks":
        raise RuntimeError(f"expected the project to wait for masks, got {st.state}: {st.message}")
    return Project.open(p.path)


# ---- scoring and the greedy policy ---------------------------------------------------------------------
def mean_iou(mask: np.ndarray, truth: np.ndarray) -> float:
    """Mean IoU over the classes in the truth or the mask (255 = unlabeled counts as wrong)."""
    ious = []
    for c in np.union1d(np.unique(truth), np.unique(mask[mask != 255])):
        a, b = mask == c, truth == c
        ious.append((a & b).sum() / max(1, (a | b).sum()))
    return float(np.mean(ious))


@dataclass
class Action:
    gain: int
    cost: int
    kind: str  # "stroke", "superpixel", "competitor"
    cls: int = 0
    size: int = 1
    points: list = field(default_factory=list)  # [(x, y)] in mask coordinates
    comp: int = 0
    level: str = ""  # superpixel level ("coarse" / "fine")

    @property
    def rate(self) -> float:
        return self.gain / self.cost

    def key(self) -> tuple:
        return (self.kind, self.cls, self.size, self.comp, self.level, tuple(self.points))


class Policy:
    """Greedy: the action with the most newly correct pixels per action, among the mode's tools."""

    def __init__(self, truth: np.ndarray, segs: dict[str, np.ndarray], comps: list[np.ndarray]) -> None:
        self.truth, self.segs, self.comps = truth, segs, comps
        # Distance to the nearest pixel of another class (the image border is none: padded with True).
        self.dt = {c: ndimage.distance_transform_edt(np.pad(truth == c, 1, constant_values=True))[1:-1, 1:-1]
                   for c in np.unique(truth)}
        self.comp_regions = [self._regions(m) for m in comps]
        self.failed: set = set()

    @staticmethod
    def _regions(m: np.ndarray) -> np.ndarray:
        """int [H, W]: ids of the 4-connected equal-value regions of m (as the page's click finds them)."""
        out, top = np.zeros(m.shape, np.int64), 0
        for v in np.unique(m):
            lab, n = ndimage.label(m == v)
            out[lab > 0] = lab[lab > 0] + top
            top += n
        return out

    def best(self, mask: np.ndarray, tool: str, cls: int, size: int, comp_at: int, level: str) -> Action | None:
        """The action with the most newly correct pixels per action (None: nothing helps); one that
        did not help when tried (`failed`) is not tried again."""
        acts = self.strokes(mask, tool, cls, size)
        for lv in self.segs:
            acts += self.superpixels(mask, tool, cls, lv, level)
        for k in range(len(self.comps)):
            acts += self.competitor(mask, tool, k, comp_at)
        acts = [a for a in acts if a.gain > 0 and a.key() not in self.failed]
        return max(acts, key=lambda a: a.rate) if acts else None

    def strokes(self, mask: np.ndarray, tool: str, cls: int, size: int) -> list[Action]:
        wrong, out = mask != self.truth, []
        lab, n = ndimage.label(wrong)
        if not n:
            return out
        areas = np.bincount(lab.ravel())[1:]
        for comp in np.argsort(-areas)[:3] + 1:  # the three largest wrong regions
            region = lab == comp
            c = int(np.bincount(self.truth[region]).argmax())
            inside = region & (self.truth == c)
            dt = self.dt[c]
            y, x = np.unravel_index(np.argmax(np.where(inside, dt, 0)), dt.shape)
            s_max = int(np.clip(np.floor(2 * dt[y, x] - 1), 1, 32))  # the largest brush that stays in class c
            for s in {s_max, size} if size <= s_max else {s_max}:  # or keep the brush size (no change)
                gain, points = self.scribble(mask, c, dt, x, y, s)
                cost = 1 + (tool != "brush") + (cls != c) + (size != s)
                out.append(Action(gain, cost, "stroke", cls=c, size=s, points=points))
        return out

    def scribble(self, mask: np.ndarray, c: int, dt: np.ndarray, x: int, y: int, s: int) -> tuple[int, list]:
        """One continuous stroke of brush size s from (x, y), as a person scribbles a region: each
        step moves by about the brush radius to where the brush still fits inside class c and
        paints the most new pixels; it ends when a step would paint nothing new."""
        h, w = mask.shape
        r, step = s / 2, max(1, int(s // 2))
        yy, xx = np.mgrid[0:h, 0:w] + 0.5
        useful = (mask != c) & (self.truth == c)
        painted = np.zeros(mask.shape, bool)
        points = [(x + 0.5, y + 0.5)]
        painted |= (xx - x - 0.5) ** 2 + (yy - y - 0.5) ** 2 <= max(r, 0.5) ** 2
        gain = int((painted & useful).sum())
        for _ in range(60):
            best = None
            # Diagonal 1-px steps would paint a pixel of the other class in between (the line between centres).
            dirs = [(1, 0), (-1, 0), (0, 1), (0, -1)] + ([(1, 1), (1, -1), (-1, 1), (-1, -1)] if step > 1 else [])
            for dx, dy in dirs:
                qx, qy = x + dx * step, y + dy * step
                if not (0 <= qx < w and 0 <= qy < h) or dt[qy, qx] < r + 0.5:
                    continue
                disc = (xx - qx - 0.5) ** 2 + (yy - qy - 0.5) ** 2 <= max(r, 0.5) ** 2
                new = int((disc & ~painted & useful).sum())
                if new and (best is None or new > best[0]):
                    best = (new, qx, qy, disc)
            if best is None:
                break
            gain, x, y = gain + best[0], best[1], best[2]
            painted |= best[3]
            points.append((x + 0.5, y + 0.5))
        return gain, points

    def superpixels(self, mask: np.ndarray, tool: str, cls: int, lv: str, level: str) -> list[Action]:
        segs, truth, k = self.segs[lv], self.truth, int(self.truth.max()) + 1
        n = int(segs.max()) + 1
        ok = mask == truth
        fixable = np.zeros((n, k), np.int64)  # pixels of class c in segment s that are not c yet
        np.add.at(fixable, (segs[~ok & (truth < k)], truth[~ok & (truth < k)]), 1)
        right = np.bincount(segs[ok], minlength=n)[:, None]  # correct pixels, lost unless their class is c
        right_c = np.zeros((n, k), np.int64)
        np.add.at(right_c, (segs[ok], truth[ok]), 1)
        gain = fixable - (right - right_c)
        s, c = np.unravel_index(np.argmax(gain), gain.shape)
        ys, xs = np.nonzero(segs == s)
        j = np.argmin((ys - ys.mean()) ** 2 + (xs - xs.mean()) ** 2)  # a pixel near its middle
        cost = 1 + (tool != "superpixel") + (cls != c) + (lv != level)  # G again switches the level
        return [Action(int(gain[s, c]), cost, "superpixel", cls=int(c), level=lv, points=[(xs[j] + 0.5, ys[j] + 0.5)])]

    def competitor(self, mask: np.ndarray, tool: str, k: int, comp_at: int) -> list[Action]:
        other, regions = self.comps[k], self.comp_regions[k]
        n = int(regions.max()) + 1
        good = np.bincount(regions.ravel(), weights=((other == self.truth) & (mask != self.truth)).ravel(), minlength=n)
        bad = np.bincount(regions.ravel(), weights=((other != self.truth) & (mask == self.truth)).ravel(), minlength=n)
        net = good - bad
        net[0] = -np.inf  # id 0 is no region
        r = int(np.argmax(net))
        ys, xs = np.nonzero(regions == r)
        presses = (k - comp_at) % len(self.comps)
        cost = 1 + (tool != "competitor") + presses
        return [Action(int(good[r] - bad[r]), cost, "competitor", comp=k, points=[(xs[0] + 0.5, ys[0] + 0.5)])]


# ---- driving the page ---------------------------------------------------------------------------------
class Page:
    """The label page of one image; performs a policy's actions as a person would (keys, mouse)."""

    TOOL_KEYS = {"brush": "b", "superpixel": "g", "competitor": "c"}

    def __init__(self, page, n_comps: int) -> None:  # noqa: ANN001
        self.page, self.n_comps = page, n_comps
        st = page.evaluate("window.bsLabel.state()")
        self.tool, self.cls, self.size, self.level, self.comp_at, self.actions = \
            st["tool"], st["cls"], st["size"], st["level"], 0, 0
        self.uses: dict[str, int] = {}  # clicks / strokes by tool

    def mask(self, shape: tuple[int, int]) -> np.ndarray:
        return np.frombuffer(base64.b64decode(self.page.evaluate("window.bsLabel.mask()")), np.uint8).reshape(shape)

    def at(self, x: float, y: float) -> tuple[float, float]:
        return tuple(self.page.evaluate(f"window.bsLabel.client({x}, {y})"))

    def key(self, k: str) -> None:
        self.page.keyboard.press(k)
        self.actions += 1

    def do(self, a: Action) -> None:
        tool = {"stroke": "brush"}.get(a.kind, a.kind)
        if tool != self.tool:
            self.key(self.TOOL_KEYS[tool])
            self.tool = tool
        if a.kind == "superpixel" and a.level != self.level:
            self.key("g")  # the superpixel tool's key again: the other level
            self.page.wait_for_selector(f"body[data-level={a.level!r}]", state="attached")
            self.level = a.level
        if a.kind in ("stroke", "superpixel") and a.cls != self.cls:
            self.key(str((a.cls + 1) % 10))
            self.cls = a.cls
        if a.kind == "stroke" and a.size != self.size:
            self.page.evaluate(f"window.bsLabel.setSize({a.size})")  # one slider move
            self.actions += 1
            self.size = a.size
        while a.kind == "competitor" and self.comp_at != a.comp:
            self.key("k")
            self.comp_at = (self.comp_at + 1) % self.n_comps
        pts = [self.at(*p) for p in a.points]
        self.page.mouse.move(*pts[0])
        self.page.mouse.down()
        for p in pts[1:]:
            self.page.mouse.move(*p)
        self.page.mouse.up()
        self.actions += 1
        self.uses[a.kind] = self.uses.get(a.kind, 0) + 1


def label_one(page, url: str, item: str, truth: np.ndarray, mode: str, api) -> dict:  # noqa: ANN001
    """Correct one image in one mode until mean IoU >= GOAL; returns actions, seconds, IoU."""
    t0 = time.perf_counter()
    start = "&start=empty" if mode == "brush" else "&start=prediction"  # not another mode's saved mask
    page.goto(f"{url}/label?kind=round&ref=0&id={item}{start}")
    page.wait_for_selector(f"body[data-loaded={item!r}]", state="attached", timeout=60000)
    q = {"kind": "round", "ref": "0", "id": item}
    segs, comps = {}, None
    if mode == "editor":
        for lv in ("coarse", "fine"):
            sp = api("/api/labels/superpixels", {**q, "level": lv})
            segs[lv] = np.frombuffer(base64.b64decode(sp["labels"]), "<u2").reshape(truth.shape).astype(np.int64)
        comps = [np.frombuffer(base64.b64decode(m["mask"]), np.uint8).reshape(truth.shape)
                 for m in api("/api/labels/competitors", q)["models"]]
    policy = Policy(truth, segs, comps or [])
    drv = Page(page, len(comps or []))
    think = 0.0
    mask = drv.mask(truth.shape)
    start_iou = iou = mean_iou(mask, truth)
    while iou < GOAL and drv.actions < MAX_ACTIONS:
        t = time.perf_counter()
        a = policy.best(mask, drv.tool, drv.cls, drv.size, drv.comp_at, drv.level)
        think += time.perf_counter() - t
        if a is None:
            break
        drv.do(a)
        new = drv.mask(truth.shape)
        if (new == truth).sum() <= (mask == truth).sum():
            policy.failed.add(a.key())  # a person would not repeat what did not help
        mask, iou = new, mean_iou(new, truth)
    drv.key("s")
    page.wait_for_selector(f"body[data-saved={item!r}]", state="attached", timeout=60000)
    secs = time.perf_counter() - t0
    return {"actions": drv.actions, "seconds": secs, "policy_seconds": think, "iou": iou, "start_iou": start_iou,
            "uses": drv.uses}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(project: Path, token: str) -> Iterator[tuple[str, Callable[[str, dict], dict]]]:
    """`blindspots serve PROJECT` on a free 127.0.0.1 port while the block runs: (url, api), where
    api(path, params) GETs a JSON answer as the annotator with `token`."""
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    server = subprocess.Popen([sys.executable, "-m", "blindspots", "serve", str(project), "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL)
    headers = {"Authorization": f"Bearer {token}"}

    def api(path: str, params: dict) -> dict:
        r = httpx.get(url + path, params=params, headers=headers, timeout=60)
        r.raise_for_status()
        return r.json()
    try:
        for _ in range(200):
            try:
                if httpx.get(url + "/signin", timeout=1).status_code < 500:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url, api
    finally:
        server.terminate()
        server.wait(timeout=10)


@contextmanager
def signed_in(url: str, token: str):  # noqa: ANN201
    """A headless Chromium page signed in as the annotator (on the rate page)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
            page.goto(f"{url}/signin#token={token}")
            page.wait_for_url(f"{url}/rate")
            yield page
        finally:
            browser.close()


def add_project_arguments(ap: argparse.ArgumentParser, out: str) -> None:
    """--size, --epochs, --seed and --out of the sample project the scripted annotator works in."""
    ap.add_argument("--size", type=int, default=64, help="scene side in pixels")
    ap.add_argument("--epochs", type=int, default=12, help="training epochs of the target (competitors alike)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(out))


def start_rating_project(args: argparse.Namespace) -> tuple[Any, str, float]:
    """The scripted annotator's project for `args` (add_project_arguments + --n), from scratch: (project,
    its annotator's sign-in token, the perf_counter it started at). Torch on one thread, as in every run."""
    import torch

    torch.set_num_threads(1)
    check_new_folder(args.out)
    token = secrets.token_urlsafe(16)
    t = time.perf_counter()
    return make_rating_project(args.out, args.n, args.size, args.seed, token, args.epochs), token, t


def true_mask(project: Any, image_id: str) -> np.ndarray:
    """The generated scene's true mask of a pool image (masks/ beside the sample project's pool)."""
    from PIL import Image

    root = Path(project.config.resolve(project.config.pool.root)).parent / "masks"
    return np.asarray(Image.open(root / Path(image_id).with_suffix(".png").name))


def check_new_folder(out: Path) -> None:
    """--out must be new or empty: the project is built from scratch."""
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"--out: expected a new or empty folder, got {str(out)!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20, help="images to correct")
    add_project_arguments(ap, "/tmp/labeling_bench")
    args = ap.parse_args()
    import torch
    from PIL import Image

    torch.set_num_threads(1)
    check_new_folder(args.out)
    token = secrets.token_urlsafe(16)
    t = time.perf_counter()
    p = make_project(args.out, args.n, args.size, args.seed, token, args.epochs)
    print(f"project ready in {time.perf_counter() - t:.0f} s (loadavg {os.getloadavg()})", flush=True)
    items = list(p.answers.candidates(0, "S")["id"])[: args.n]
    truth_dir = Path(p.config.resolve(p.config.pool.root)).parent / "masks"
    truths = {i: np.asarray(Image.open(truth_dir / Path(i).with_suffix(".png").name)) for i in items}
    results: dict[str, list[dict]] = {m: [] for m in MODES}
    with served(p.path, token) as (url, api), signed_in(url, token) as page:
        for mode in MODES:
            for item in items:
                r = label_one(page, url, item, truths[item], mode, api)
                results[mode].append(r)
                print(f"{mode:10s} {item}: {r['actions']:3d} actions, {r['seconds']:5.1f} s, "
                      f"mIoU {r['start_iou']:.2f} -> {r['iou']:.2f}", flush=True)
    print(f"\n{len(items)} images of {args.size}x{args.size}, goal mean IoU >= {GOAL} (loadavg {os.getloadavg()})")
    summary = {}
    for mode, rows in results.items():
        acts = np.array([r["actions"] for r in rows])
        secs = np.array([r["seconds"] for r in rows])
        pol = np.array([r["policy_seconds"] for r in rows])
        reached = sum(r["iou"] >= GOAL for r in rows)
        summary[mode] = acts.mean()
        uses = {k: sum(r["uses"].get(k, 0) for r in rows) / len(rows) for k in ("stroke", "superpixel", "competitor")}
        print(f"{mode:10s}: {acts.mean():6.1f} actions/image (median {np.median(acts):.0f}), "
              f"{secs.mean():5.2f} s/image ({pol.mean():.2f} s of it the policy's thinking), "
              f"goal reached {reached}/{len(rows)}; per image " + ", ".join(f"{v:.1f} {k}" for k, v in uses.items())
              + " (the rest: class, tool, size and K keys, save)")
    print(f"ratio brush/editor actions: {summary['brush'] / max(summary['editor'], 1e-9):.1f}x "
          f"(target >= 3x); brush/prediction: {summary['brush'] / max(summary['prediction'], 1e-9):.1f}x "
          f"(loadavg {os.getloadavg()})")


if __name__ == "__main__":
    main()

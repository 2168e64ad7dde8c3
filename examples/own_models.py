"""Use your own models: real pretrained models on real photos -> `blindspots scan` -> `blindspots mine`.

Two pairs of real pretrained models (weights ship inside wheels on PyPI; nothing trained by us):
- text (`--task text`): PP-OCRv4 (target `ocr4`) vs PP-OCRv6 small (competitor `ocr6`) text
  detectors, ONNX files from the `rapidocr-onnxruntime==1.4.4` / `rapidocr==3.10.0` wheels, given
  to blindspots as plain ONNX specs (no wrapper): a one-channel probability map, sides padded to
  multiples of 32, RapidOCR's normalisation (mean = std = 0.5), classes named in a classes file;
- person (`--task person`, the default): MediaPipe's selfie segmenters, general (target `selfie`)
  vs landscape (competitor `landscape`), the `.tflite` files of the `mediapipe==0.10.21` wheel run
  by today's `mediapipe` (1.2.2) through the `module:function` callables of
  `own_models_lib/mediapipe_seg.py` (uint8 [N, H, W, 3] -> p(person) [N, 1, H, W]).
Photos: Debian `opencv-doc` (photos + frames of its videos) and scikit-image's bundled photos,
176 images of 61 sizes with 4 exact duplicates (`own_models_lib/pool.py`).

Set-up (once):  apt-get install opencv-doc ; pip install scikit-image  [; pip install mediapipe==1.2.2]
Run:            python examples/own_models.py --work runs/own_models [--task person|text|all]
                python examples/own_models.py --work runs/own_models --prepare   (pool + model files only)

What it runs, as a user would from the shell (each line is printed before it runs):
  blindspots scan POOL -t NAME=SPEC -c NAME=SPEC --out SCAN
  blindspots mine SCAN --strategy mad -n 20 --out PICKS/mad          (gallery: PICKS/mad/index.html)
  blindspots mine SCAN --strategy random -n 20 --seed 0 --out PICKS/random
then writes one side-by-side PNG per pick (photo | target's class-1 pixels | competitor's) under
JUDGE/{mad,random}/ to judge the picks by eye at full size (docs/own_models.md has the verdicts).
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

HERE = Path(__file__).resolve().parent
# RapidOCR's detector input: sides multiples of 32 (padded), longest side <= 960, x/255 then
# (x - 0.5) / 0.5, channels in OpenCV's BGR order; the output is one sigmoid channel p(text), read as [1 - p, p]
TEXT_OPTIONS = "output=probabilities&pad=32&max_side=960&mean=0.5&std=0.5&channels=bgr"


def task_specs(task: str, models: Path) -> tuple[str, str]:
    """(target, competitor) as `NAME=SPEC` for `blindspots scan`, with absolute paths under `models`."""
    m = models.resolve()
    if task == "text":
        opts = f"{TEXT_OPTIONS}&classes={m / 'text_classes.txt'}"
        return f"ocr4={m / 'ppocr_v4_det.onnx'}?{opts}", f"ocr6={m / 'ppocr_v6_det_small.onnx'}?{opts}"
    if task == "person":
        opts = f"classes={m / 'person_classes.txt'}"
        return (f"selfie=own_models_lib.mediapipe_seg:selfie_general?{opts}",
                f"landscape=own_models_lib.mediapipe_seg:selfie_landscape?{opts}")
    raise ValueError(f"task: expected 'person' or 'text', got {task!r}")


TASK_FILES = {"person": ("selfie_segmentation.tflite", "selfie_segmentation_landscape.tflite"),
              "text": ("ppocr_v4_det.onnx", "ppocr_v6_det_small.onnx")}
TASK_DIRS = {"person": "", "text": "text"}  # sub-folder of --work


def spec_name(spec: str) -> str:
    """'selfie=pkg.mod:fn?x=1' -> 'selfie' (the model's name in the scan)."""
    return spec.partition("=")[0]


def cli_env(models_dir: Path) -> dict[str, str]:
    """The environment of the CLI runs: where the MediaPipe callables find their `.tflite` files
    (callable specs take no options), one thread per library (shared cores)."""
    return dict(os.environ, OWN_MODELS_DIR=str(models_dir.resolve()), OMP_NUM_THREADS="1")


def run_cli(args: list[str], env: dict[str, str]) -> None:
    """`blindspots ARGS` run from `examples/` (where `module:function` specs import from), echoed
    like a shell line; raises CalledProcessError on a non-zero exit."""
    print(f"$ (cd {HERE.name} && blindspots " + " ".join(shlex.quote(a) for a in args) + ")", flush=True)
    subprocess.run([sys.executable, "-m", "blindspots", *args], env=env, cwd=HERE, check=True)


def scan(pool: Path, out: Path, env: dict[str, str], target: str, competitor: str, *,
         progress: bool = True) -> None:
    """`blindspots scan`: the target and the competitor over `pool` into `out` (resumes)."""
    run_cli(["scan", str(pool.resolve()), "-t", target, "-c", competitor, "--out", str(out.resolve()),
             "--progress" if progress else "--no-progress"], env)


def mine(scan_dir: Path, out: Path, env: dict[str, str], *, n: int = 20, seed: int = 0) -> dict[str, pd.DataFrame]:
    """`blindspots mine` with MAD and with random picks (the control) into `out/mad`, `out/random`
    (picks.csv, picks.parquet, index.html); strategy -> the picks (columns rank, id, score, reason, ...)."""
    picks = {}
    for strategy in ("mad", "random"):
        extra = ["--seed", str(seed)] if strategy == "random" else []
        run_cli(["mine", str(scan_dir.resolve()), "--strategy", strategy, "-n", str(n), *extra,
                 "--out", str((out / strategy).resolve())], env)
        picks[strategy] = pd.read_csv(out / strategy / "picks.csv")
    return picks


def _overlay(img: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] with the class-1 pixels (bool [H, W]) tinted red and the rest darkened."""
    out = img.astype(np.float32) * 0.45
    out[positive] = img[positive] * 0.5 + np.array([255, 0, 0]) * 0.5
    return out.clip(0, 255).astype(np.uint8)


def sheet(pool: Path, scan_dir: Path, image_id: str, models: tuple[str, ...], max_side: int = 420) -> Image.Image:
    """photo | overlay of each model's class-1 pixels (person, text; from the scan's argmax maps).

    Why, next to the gallery: the gallery's thumbnails are small; this is each map at full size.
    """
    from blindspots.data import decode_image
    from blindspots.ids import find_artifact

    img = decode_image(pool / image_id)  # as the scan saw it (transparency over white, grey as RGB)
    panels = [img]
    for m in models:
        path = find_artifact(scan_dir / "maps" / m, image_id)
        if path is None:
            raise FileNotFoundError(f"maps: expected a map of {image_id!r} for {m!r} under {scan_dir / 'maps' / m}")
        panels.append(_overlay(img, np.asarray(Image.open(path)) == 1))
    row = Image.fromarray(np.concatenate(panels, axis=1))
    s = max_side / max(img.shape[:2])
    return row.resize((max(1, int(row.width * s)), max(1, int(row.height * s))), Image.BILINEAR) if s < 1 else row


def write_sheets(pool: Path, scan_dir: Path, picks: pd.DataFrame, out: Path, models: tuple[str, ...]) -> list[Path]:
    """One PNG per pick, `out/NN_<id without extension, / as __>.png`, in pick order."""
    from blindspots.ids import stem_key

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, image_id in enumerate(picks["id"]):
        p = out / f"{i:02d}_{stem_key(image_id).replace('/', '__')}.png"
        sheet(pool, scan_dir, image_id, models).save(p)
        paths.append(p)
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=Path("runs/own_models"), help="output folder")
    ap.add_argument("--wheels", type=Path, default=None, help="folder of wheels (default WORK/wheels)")
    ap.add_argument("-n", type=int, default=20, help="picks per strategy")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random picks")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    ap.add_argument("--task", choices=(*TASK_FILES, "all"), default="person",
                    help="person: MediaPipe selfie segmenters; text: PP-OCR text detectors (v4 vs v6)")
    ap.add_argument("--prepare", action="store_true", help="only write the pool and the model files")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(HERE))
    from own_models_lib.models import prepare_models
    from own_models_lib.pool import build_pool

    work = args.work
    models_dir, pool = work / "models", work / "pool"
    ids = build_pool(pool)
    print(f"pool: {len(ids)} photos in {pool}")
    tasks = tuple(TASK_FILES) if args.task == "all" else (args.task,)
    for task in tasks:
        prepare_models(models_dir, args.wheels or work / "wheels", names=TASK_FILES[task])
    print(f"models: {sorted(p.name for p in models_dir.iterdir())} in {models_dir}")
    if args.prepare:
        print("next: " + next_command(tasks[0], work, models_dir, pool, scan_only=True))
        return
    env = cli_env(models_dir)
    for task in tasks:
        target, competitor = task_specs(task, models_dir)
        out = work / TASK_DIRS[task]
        scan(pool, out / "scan", env, target, competitor, progress=not args.no_progress)
        picks = mine(out / "scan", out / "picks", env, n=args.n, seed=args.seed)
        for strategy, p in picks.items():
            paths = write_sheets(pool, out / "scan", p, out / "judge" / strategy,
                                 (spec_name(target), spec_name(competitor)))
            print(f"{task} {strategy}: {len(paths)} sheets in {out / 'judge' / strategy}")
    print("next: " + next_command(tasks[-1], work, models_dir, pool, scan_only=False))


def next_command(task: str, work: Path, models_dir: Path, pool: Path, *, scan_only: bool) -> str:
    """The command a person runs next (printed last): the scan of the README, or a project on that scan."""
    target, competitor = task_specs(task, models_dir)
    q = shlex.quote
    # the MediaPipe callables import from examples/ and find their files through OWN_MODELS_DIR
    where = f"cd {HERE.name} && OWN_MODELS_DIR={q(str(models_dir.resolve()))} " if task == "person" else ""
    # after --prepare the README scans into WORK/scan; a full run of this script scans into WORK/<task dir>/scan
    scan = work.resolve() / "scan" if scan_only else work.resolve() / TASK_DIRS[task] / "scan"
    if scan_only:
        return f"{where}blindspots scan {q(str(pool.resolve()))} -t {q(target)} -c {q(competitor)} --out {q(str(scan))}"
    # a callable has no weights to check, so only file models hand their scan to the project (--scan)
    reuse = f" --scan {q(str(scan))}" if task == "text" else ""
    return (f"{where}blindspots init {q(str(work.resolve() / TASK_DIRS[task] / 'project'))} --pool "
            f"{q(str(pool.resolve()))} -t {q(target)} -c {q(competitor)} --raters 1{reuse}")


if __name__ == "__main__":
    main()

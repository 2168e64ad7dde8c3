"""Use your own models: real pretrained person segmenters on real photos -> scan -> mine -> sheets.

Models (weights ship inside wheels on PyPI; nothing was trained by us):
- target `selfie`: MediaPipe selfie segmentation, general model (256x256), and
- competitor `landscape`: MediaPipe selfie segmentation, landscape model (144x256), both the
  `.tflite` files of the `mediapipe==0.10.21` wheel, run by today's `mediapipe` (1.2.2) through
  the callables in `own_models_lib/mediapipe_seg.py` (uint8 [N, H, W, 3] -> [N, 2, H, W]).
Photos: Debian `opencv-doc` (photos + frames of its videos) and scikit-image's bundled photos,
~180 images of ~60 sizes with a few exact duplicates (`own_models_lib/pool.py`).

Set-up (once):  apt-get install opencv-doc ; pip install mediapipe==1.2.2 scikit-image
Run:            cd examples && python own_models.py --work ../runs/own_models   [--task text|all]
(`--task text`: the same pool through two PP-OCR text detectors, ONNX files from the
`rapidocr-onnxruntime==1.4.4` and `rapidocr==3.10.0` wheels, wrapped in `own_models_lib/ppocr_det.py`.)

What it does, as a user would from the shell (printed as it goes):
  python -m blindspots scan POOL -t selfie=own_models_lib.mediapipe_seg:selfie_general \
      -c landscape=own_models_lib.mediapipe_seg:selfie_landscape --out SCAN
  python -m blindspots mine SCAN --strategy mad -n 20 --out PICKS        (when that command exists;
      until then the same picks come from `MADSampler().select(read_score_table(SCAN), n=20)`)
then writes one side-by-side PNG per pick (photo | target's person mask | competitor's mask) for
the top-20 MAD picks, the top-20 MAD picks with class-size ranges fitted on the target's own
predictions, and 20 random picks, to be judged by eye (docs/own_models.md has the verdicts).
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
TARGET = "selfie=own_models_lib.mediapipe_seg:selfie_general"
COMPETITOR = "landscape=own_models_lib.mediapipe_seg:selfie_landscape"
# task -> (target spec, competitor spec, model files, output sub-folder of --work)
TASKS = {
    "person": (TARGET, COMPETITOR, ("selfie_segmentation.tflite", "selfie_segmentation_landscape.tflite"), ""),
    "text": ("ocr4=own_models_lib.ppocr_det:det_v4", "ocr6=own_models_lib.ppocr_det:det_v6",
             ("ppocr_v4_det.onnx", "ppocr_v6_det_small.onnx"), "text"),
}


def spec_name(spec: str) -> str:
    """'selfie=pkg.mod:fn' -> 'selfie' (the model's name in the scan)."""
    return spec.partition("=")[0]


def _env(models_dir: Path) -> dict[str, str]:
    """The subprocess environment: the callables importable (examples/ on PYTHONPATH), their model folder."""
    env = dict(os.environ, OWN_MODELS_DIR=str(models_dir.resolve()), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    return env


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """`python -m blindspots ARGS`, echoed like a shell line; raises on a non-zero exit."""
    print("$ blindspots " + " ".join(shlex.quote(a) for a in args), flush=True)
    return subprocess.run([sys.executable, "-m", "blindspots", *args], env=env, check=True)


def has_cli_command(name: str, env: dict[str, str]) -> bool:
    """True when this blindspots has the sub-command `name` (e.g. `mine`, being added)."""
    r = subprocess.run([sys.executable, "-m", "blindspots", name, "--help"], env=env,
                       capture_output=True, text=True)
    return r.returncode == 0


def scan(pool: Path, out: Path, env: dict[str, str], *, target: str = TARGET,
         competitor: str = COMPETITOR, progress: bool = True) -> None:
    """Scan `pool` with the target and the competitor into `out` (resumes an existing scan)."""
    run_cli(["scan", str(pool), "-t", target, "-c", competitor, "--out", str(out),
             "--progress" if progress else "--no-progress"], env)


def target_maps(scan_dir: Path, ids, model: str = "selfie"):
    """The scan's argmax maps of `model` (int [H, W] each), in `ids` order."""
    from blindspots.ids import find_artifact

    for image_id in ids:
        path = find_artifact(scan_dir / "maps" / model, image_id)
        if path is None:
            raise FileNotFoundError(f"maps: expected a map of {image_id!r} under {scan_dir / 'maps' / model}")
        yield np.asarray(Image.open(path))


def mine(scan_dir: Path, out: Path, env: dict[str, str], *, n: int = 20, seed: int = 0,
         target: str = "selfie"):
    """Top-n MAD picks, top-n MAD picks with fitted class sizes, n random picks: three DataFrames
    (mad, mad_fitted, random) with columns id, score, reason.

    mad: as `blindspots mine --strategy mad` (no labels, so no class-size ranges: (0, 1]).
    mad_fitted: MAD with [p_k, q_k] = quartiles of each class's area in the *target's own
    predicted maps* (the paper takes them from training labels, which this user does not have).
    Uses `blindspots mine` (which also writes the offline gallery `out/mad/index.html`) when it
    exists; the picks themselves come from the library either way, so they are the same.
    """
    from blindspots.mine import MADSampler, RandomSampler
    from blindspots.scan import read_score_table

    if has_cli_command("mine", env):
        run_cli(["mine", str(scan_dir), "--strategy", "mad", "-n", str(n), "--out", str(out / "mad")], env)
        run_cli(["mine", str(scan_dir), "--strategy", "random", "-n", str(n), "--out", str(out / "random")], env)
    table = read_score_table(scan_dir)
    mad = MADSampler().select(table, n=n)
    num_classes = sum(c.startswith(f"frac__{target}__") for c in table.columns)
    fitted = MADSampler().fit(target_maps(scan_dir, table["id"], target), num_classes, ignore_index=None)
    mad_fitted = fitted.select(table, n=n)
    rnd = RandomSampler().select(table, n=n, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    for name, picks in (("mad", mad), ("mad_fitted", mad_fitted), ("random", rnd)):
        picks.to_csv(out / f"{name}.csv", index=False)
    return mad, mad_fitted, rnd


def _overlay(img: np.ndarray, person: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] with the class-1 pixels (bool [H, W]) tinted red and the rest darkened."""
    out = img.astype(np.float32) * 0.45
    out[person] = img[person] * 0.5 + np.array([255, 0, 0]) * 0.5
    return out.clip(0, 255).astype(np.uint8)


def sheet(pool: Path, scan_dir: Path, image_id: str, models: tuple[str, ...] = ("selfie", "landscape"),
          max_side: int = 420) -> Image.Image:
    """photo | overlay of each model's class-1 pixels (person, text; from the scan's argmax maps)."""
    from blindspots.data.pool import decode_image
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


def write_sheets(pool: Path, scan_dir: Path, picks, out: Path,
                 models: tuple[str, ...] = ("selfie", "landscape")) -> list[Path]:
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
    ap.add_argument("--task", choices=(*TASKS, "all"), default="person",
                    help="person: MediaPipe selfie segmenters; text: PP-OCR text detectors (v4 vs v6)")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(HERE))
    from own_models_lib.models import prepare_models
    from own_models_lib.pool import build_pool

    work = args.work
    models_dir = work / "models"
    pool = work / "pool"
    ids = build_pool(pool)
    print(f"pool: {len(ids)} photos in {pool}")
    env = _env(models_dir)
    for task in TASKS if args.task == "all" else (args.task,):
        target, competitor, files, sub = TASKS[task]
        prepare_models(models_dir, args.wheels or work / "wheels", names=files)
        out = work / sub
        scan(pool, out / "scan", env, target=target, competitor=competitor, progress=not args.no_progress)
        names = (spec_name(target), spec_name(competitor))
        mad, mad_fitted, rnd = mine(out / "scan", out / "picks", env, n=args.n, seed=args.seed, target=names[0])
        for name, picks in (("mad", mad), ("mad_fitted", mad_fitted), ("random", rnd)):
            paths = write_sheets(pool, out / "scan", picks, out / "judge" / name, names)
            print(f"{task} {name}: {len(paths)} sheets in {out / 'judge' / name}")


if __name__ == "__main__":
    main()

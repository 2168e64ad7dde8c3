"""`blindspots demo`: the whole troubleshooting loop on procedural scenes, unattended.

Generates street scenes (the target's training set S0, its validation set T0, an unlabeled
pool D with held-out ground truth), trains the zoo (a target on the narrow "train" slice of
conditions, competitors of other designs on "broad" conditions; `blindspots.training.zoo`),
creates a project and runs Algorithm 1 for two fine-tuning rounds with simulated raters and
annotators, then prints Table 1 and where the files are. Every stage is resumable: run it
again and finished scenes, checkpoints, scans and steps are reused.

Sizes are far below the paper's (which mines 40,000 images with n3 = 25, n4 = 100 and
fine-tunes 80 epochs) so that the whole demo fits in about 15 minutes on 2 CPU cores; the
project's settings say exactly what was used (`runs/demo/project/blindspots.toml`).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import typer

from blindspots.cli.common import progress_wanted
from blindspots.cli.report import write_round_pages
from blindspots.config import (Config, DataSettings, FinetuneSettings, MiningSettings, ModelSettings, PoolSettings,
                               ProjectSettings, RatingSettings, ScanSettings, SimulateSettings, TestSetSettings)
from blindspots.data.scenes import generate_scene_set

# Lazy imports: pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without them).

log = logging.getLogger(__name__)

# Demo sizes (the paper's defaults are in blindspots.config; these fit the CPU budget).
DEMO = {
    # Target: a small UNet trained on the narrow "train" slice; competitors of other designs (FCN,
    # PSPNet-ResNet18) on all conditions. Measured: the target is good in distribution and fails on
    # night/dusk and colour-shifted scenes, where the competitors hold up (see zoo.json).
    "size": 64, "n_train": 600, "n_val": 80, "n_pool": 1000, "zoo_epochs": 8,
    "target": "tiny_unet", "competitors": ("small_fcn", "pspnet_r18"),
    "rounds": 2, "n3": 4, "n4": 30, "raters": 3, "test_size": 30, "max_per_class": 10,
    # Fine-tuning: the paper's SGD + poly + LR grid on T0, but batch 8 and 2 epochs (paper: 2, 80)
    # and LRs for models trained from scratch (paper: {1, 5, 10} x 1e-5 for pretrained VOC models).
    "ft_epochs": 2, "ft_batch": 8, "ft_lrs": [1e-3, 5e-3, 1e-2], "max_replay": 80,
}


def run_demo(out: Path, *, seed: int = 0, pool_size: int | None = None, progress: bool = True,
             echo=print, sizes: dict | None = None, simulate: bool = True) -> dict:  # noqa: ANN001 - echo is print-like
    """Run (or resume) the demo under `out`.

    sizes: overrides of `DEMO` (e.g. smaller sets for a quick check); unknown keys are an error.
    simulate: let simulated raters/annotators answer; False stops at the first step that needs
        people (ratings of M), to be answered in the web app (`blindspots serve`).
    Returns {"project": path, "status": Status, "leaderboard": DataFrame, "zoo": summary, "times": dict}.
    """
    from blindspots.loop import advance, leaderboard_frame, Project
    from blindspots.training import train_zoo

    d = dict(DEMO)
    unknown = sorted(set(sizes or {}) - set(DEMO))
    if unknown:
        raise ValueError(f"sizes: expected keys among {sorted(DEMO)}, got {unknown}")
    d.update(sizes or {})
    if pool_size is not None:
        d["n_pool"] = int(pool_size)
    out = Path(out).resolve()  # the project config resolves relative paths against base_dir
    scenes, zoo_dir, proj_dir = out / "scenes", out / "zoo", out / "project"
    times: dict[str, float] = {}

    t = time.perf_counter()
    echo(f"[1/4] scenes: S0 {d['n_train']}, T0 {d['n_val']}, pool {d['n_pool']} at {d['size']} px -> {scenes}")
    # Same seeds as train_zoo's target data, so S0 on disk is exactly what the target was trained on.
    generate_scene_set(scenes / "train", d["n_train"], seed=seed, distribution="train", size=d["size"],
                       progress=progress)
    generate_scene_set(scenes / "val", d["n_val"], seed=seed + 2, distribution="train", size=d["size"],
                       progress=progress)
    generate_scene_set(scenes / "pool", d["n_pool"], seed=seed + 100, distribution="pool", size=d["size"],
                       progress=progress)
    times["scenes"] = time.perf_counter() - t

    t = time.perf_counter()
    echo(f"[2/4] zoo: target {d['target']} ('train' conditions), competitors {', '.join(d['competitors'])} "
         f"('broad') -> {zoo_dir}")
    summary = train_zoo(zoo_dir, target=d["target"], competitors=d["competitors"], n_train=d["n_train"],
                        n_val=d["n_val"], size=d["size"], epochs=d["zoo_epochs"], seed=seed, progress=progress)
    times["zoo"] = time.perf_counter() - t

    t = time.perf_counter()
    if (proj_dir / "store.sqlite").exists():
        project = Project.open(proj_dir)
        echo(f"[3/4] project: resuming {proj_dir}")
    else:
        cfg = Config(
            pool=PoolSettings(root=str(scenes / "pool" / "images")),
            target=ModelSettings("target", str(zoo_dir / f"{d['target']}.pt")),
            competitors=[ModelSettings(c, str(zoo_dir / f"{c}.pt")) for c in d["competitors"]],
            data=DataSettings(train=str(scenes / "train"), val=str(scenes / "val")),
            project=ProjectSettings(name="demo", seed=seed, rounds=d["rounds"]),
            scan=ScanSettings(batch_size=32, shard_size=256),
            mining=MiningSettings(strategy="mad", n3=d["n3"]),
            ratings=RatingSettings(n4=d["n4"], raters=d["raters"]),
            # Street "stuff" is background: the main foreground object is a vehicle, person or pole;
            # with 3 object classes, 10 per class (paper: 4 of 20 VOC classes) allows |T| = 30.
            testset=TestSetSettings(size=d["test_size"], max_per_class=d["max_per_class"],
                                    background=["sky", "road", "sidewalk", "building", "vegetation"]),
            finetune=FinetuneSettings(lrs=d["ft_lrs"], epochs=d["ft_epochs"], batch_size=d["ft_batch"],
                                      max_replay=d["max_replay"]),
            simulate=SimulateSettings(ground_truth=str(scenes / "pool" / "masks"), ood_share=0.02),
            base_dir=out,
        )
        project = Project.create(proj_dir, cfg)
        echo(f"[3/4] project: created {proj_dir}")
    who = "simulated raters and annotators" if simulate else "people (stops where they are awaited)"
    echo(f"[4/4] Algorithm 1: {d['rounds']} fine-tuning rounds with {who}")
    status = advance(project, simulate=simulate, progress=progress)
    times["loop"] = time.perf_counter() - t
    board = leaderboard_frame(project)
    return {"project": proj_dir, "status": status, "leaderboard": board, "zoo": summary, "times": times}


def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Folder for scenes, zoo, project (reused if present)."),
    seed: int = typer.Option(0, "--seed", help="Seed of scenes, training and every selection."),
    pool_size: int = typer.Option(DEMO["n_pool"], "--pool-size", help="Unlabeled scenes in the pool D."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
    simulate: bool = typer.Option(True, "--simulate/--humans",
                                  help="Simulated humans answer (default), or stop where people are awaited; "
                                       "then `blindspots annotators add`, `blindspots serve` and `blindspots round`."),
) -> None:
    """Two full MAD rounds on procedural scenes with simulated humans; prints Table 1."""
    from blindspots.loop import format_leaderboard

    t0 = time.perf_counter()
    res = run_demo(out, seed=seed, pool_size=pool_size, progress=not quiet and progress_wanted(), echo=typer.echo,
                   simulate=simulate)
    proj = res["project"]
    typer.echo("")
    typer.echo("Zoo (mIoU on in-distribution / hard held-out scenes):")
    for name, m in res["zoo"]["models"].items():
        typer.echo(f"  {name:14s} {m['role']:10s} {m['metrics']['val_in']['miou']:.3f} / "
                   f"{m['metrics']['val_hard']['miou']:.3f}")
    typer.echo("")
    typer.echo("Table 1 — mIoU on T0 and on the unbiased test sets T(i) "
               "(the target row is f_t^(i) in round i):")
    typer.echo(format_leaderboard(res["leaderboard"]) if len(res["leaderboard"]) else "(no round evaluated)")
    typer.echo("")
    typer.echo(res["status"].message)
    write_round_pages(proj, res["status"].round)
    typer.echo(f"files: project {proj} ({project_files(proj)}); scenes {Path(out) / 'scenes'}; zoo {Path(out) / 'zoo'}")
    times = ", ".join(f"{k} {v:.0f} s" for k, v in res["times"].items())
    typer.echo(f"time: {time.perf_counter() - t0:.0f} s ({times})")
    (proj / "reports" / "demo_times.json").write_text(json.dumps(res["times"], indent=2))


#: what the demo's project folder holds, in the order it is listed, once each exists
PROJECT_FILES = (("settings", "blindspots.toml"), ("store", "store.sqlite"), ("", "scans/"), ("", "masks/"),
                 ("", "checkpoints/"), ("Table 1", "reports/leaderboard.txt"))


def project_files(proj: Path) -> str:
    """The project's files that exist now (`demo --humans` stops before any round is scored: no Table 1 yet)."""
    return ", ".join(f"{label} {name}".strip() for label, name in PROJECT_FILES if (Path(proj) / name).exists())


def register(app: typer.Typer) -> None:
    """Add `blindspots demo`."""
    app.command("demo")(demo)

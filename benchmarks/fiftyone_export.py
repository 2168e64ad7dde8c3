"""FiftyOne export benchmark: `export_to_fiftyone` against FiftyOne's own ingestion of the same samples.

A scan of --n procedural scenes (two untrained zoo models, maps kept) is exported into a FiftyOne dataset:

  ours  `export_to_fiftyone(scan, name)`: build the rows, draw the disagreement maps, add the samples,
        then one bulk `set_values` per field; and the re-export that updates the same samples
  peer  FiftyOne's documented way: one `fo.Sample(filepath, **fields, pred_M=fo.Segmentation(...), ...)`
        per image from the same rows, `dataset.add_samples(samples)`; for the update, `iter_samples(autosave=True)`
        setting every field again

Each side in a fresh dataset, interleaved, median of --rounds; the ratio is ours / peer (lower is faster).
FiftyOne runs with its database in a temporary folder, telemetry off. Prints the CPU model and
os.getloadavg(). Run it with the interpreter that has FiftyOne (scripts/test.sh makes .venv/fiftyone/):

    .venv/fiftyone/bin/python benchmarks/fiftyone_export.py --n 1000 --rounds 3 --torch-site .venv/lib/python3.11/site-packages
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from blindspots.machine import cpu_model



def make_scan(root: Path, n: int) -> Path:
    import torch

    from blindspots.data import ImagePool
    from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set
    from blindspots.models.load import load_model
    from blindspots.models.zoo import build_model, save_checkpoint
    from blindspots.scan import scan_pool

    torch.manual_seed(0)
    generate_scene_set(root / "pool", n, seed=1, distribution="pool", size=64, progress=False)
    models = {}
    for name, arch in (("target", "tiny_unet"), ("comp", "small_fcn")):
        save_checkpoint(root / f"{name}.pt", build_model(arch, SCENE_CLASSES.num_classes), arch=arch,
                        classes=SCENE_CLASSES)
        models[name] = load_model(str(root / f"{name}.pt"))
    return scan_pool(ImagePool(root / "pool" / "images"), models, root / "scan", target="target", progress=False)


def peer_add(fo, table, name: str) -> None:
    """FiftyOne's plain ingestion of the same rows: one Sample per image with every set field, add_samples."""
    from blindspots.integrations.fiftyone.samples import plain_value

    ds = fo.Dataset(name)
    samples = []
    for r, path in enumerate(table.filepaths):
        fields = {c: v for c in table.fields.columns if (v := plain_value(table.fields[c].iat[r])) is not None}
        fields.update({f: fo.Segmentation(mask_path=p[r]) for f, p in table.segmentations.items() if p[r]})
        fields.update({f: fo.Heatmap(map_path=p[r], range=list(rng)) for f, (p, rng) in table.heatmaps.items()
                       if p[r]})
        samples.append(fo.Sample(filepath=path, tags=list(table.tags[r]), **fields))
    ds.add_samples(samples, progress=False)
    ds.mask_targets = {f: dict(t) for f, t in table.mask_targets.items()}
    ds.persistent = True


def peer_update(fo, table, name: str) -> None:
    from blindspots.integrations.fiftyone.samples import plain_value

    ds = fo.load_dataset(name)
    row = {p: r for r, p in enumerate(table.filepaths)}
    for s in ds.iter_samples(autosave=True):
        r = row[s.filepath]
        for c in table.fields.columns:
            v = plain_value(table.fields[c].iat[r])
            if v is not None or s.has_field(c):
                s[c] = v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="Scenes in the scan (64x64).")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--torch-site", default=None, help="A site-packages with torch, appended to sys.path when "
                    "this interpreter has none (the scan needs it; FiftyOne's own packages keep precedence).")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_site:
        sys.path.append(os.path.abspath(args.torch_site))
    if args.child:
        run(args, Path(args.child))
        return
    tmp = Path(tempfile.mkdtemp(prefix="fo_bench_"))
    try:  # the measuring runs in a child: its exit stops FiftyOne's mongod before the folder goes
        subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", str(tmp)], check=True)
    finally:
        lock = tmp / "db" / "mongod.lock"
        for _ in range(60):  # a clean mongod shutdown empties its lock file
            if not lock.exists() or lock.stat().st_size == 0:
                break
            time.sleep(0.5)
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, tmp: Path) -> None:
    os.environ.update(FIFTYONE_DO_NOT_TRACK="true", FIFTYONE_DATABASE_DIR=str(tmp / "db"),
                      FIFTYONE_CONFIG_DIR=str(tmp / "cfg"), FIFTYONE_DATABASE_VALIDATION="false")
    t = time.perf_counter()
    scan = make_scan(tmp, args.n)
    print(f"scan of {args.n} images: {time.perf_counter() - t:.1f} s (not measured below)")
    import fiftyone as fo

    from blindspots.integrations.fiftyone import export_samples, export_to_fiftyone

    times: dict[str, list[float]] = {"ours add": [], "peer add": [], "ours update": [], "peer update": []}
    fo.Dataset("warm").delete()  # the database is started before anything is timed
    for k in range(args.rounds):
        t = time.perf_counter()
        export_to_fiftyone(scan, f"ours{k}", progress=False)
        times["ours add"].append(time.perf_counter() - t)
        t = time.perf_counter()
        export_to_fiftyone(scan, f"ours{k}", progress=False)
        times["ours update"].append(time.perf_counter() - t)
        t = time.perf_counter()
        table = export_samples(scan, progress=False)  # the peer gets the same rows (maps already drawn)
        peer_add(fo, table, f"peer{k}")
        times["peer add"].append(time.perf_counter() - t)
        t = time.perf_counter()
        peer_update(fo, export_samples(scan, progress=False), f"peer{k}")
        times["peer update"].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    fields = len(table.fields.columns) + len(table.segmentations) + len(table.heatmaps)
    print(f"FiftyOne {fo.__version__}; {args.n} samples x {fields} fields; CPU {cpu_model()}; "
          f"load {os.getloadavg()}")
    for what in ("add", "update"):
        o, p = med[f"ours {what}"], med[f"peer {what}"]
        print(f"{what:>6}: ours {o:.2f} s, peer {p:.2f} s, ours/peer {o / p:.3f}")


if __name__ == "__main__":
    main()

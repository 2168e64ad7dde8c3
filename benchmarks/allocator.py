"""The forward and the scan with freed memory kept (`blindspots.allocator.keep_freed_memory`, what
the `blindspots` command line and the Ray actors do) against glibc's defaults, side by side.

The setting is process-wide and permanent, so each measurement runs in a fresh interpreter; the two
settings alternate over --rounds rounds (which goes first alternates too). Each child builds the
benchmark's three zoo models (`benchmarks/scan.py`: lraspp_mnv3, pspnet_r18, small_fcn), warms them
up, then times, on --n 128x128 scenes in batches of 16 with torch on --threads threads:
  1. the bare forward (`predict_proba` on preloaded images);
  2. `scan_pool` of the same images into a fresh folder (decode, forwards, statistics, maps, shards).
Printed: seconds, minor page faults, and the medians of the per-round ratios kept / system, with
`os.getloadavg()`. Asserts nothing about time.

Run: ``.venv/bin/python benchmarks/allocator.py [--n 320] [--rounds 3] [--threads 2]``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = r"""
import json, resource, shutil, sys, time
from pathlib import Path
import numpy as np, torch
sys.path.insert(0, BENCH_DIR)
mode, n, threads, workdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
from blindspots.allocator import keep_freed_memory
applied = keep_freed_memory() if mode == "kept" else False
torch.set_num_threads(threads)
import scan as bench
from blindspots.scan import scan_pool
pool = bench.scene_pool(workdir, 2000, 0)
models = bench.zoo_models(None, 16)
ids = sorted(pool.ids)[:n]
images = np.stack([pool.load(i) for i in ids])
batches = [images[b:b + 16] for b in range(0, n, 16)]
bench.bare_forward(models, batches[:2])  # warm-up
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
f0 = faults(); bare, _ = bench.bare_forward(models, batches); f1 = faults()
out = workdir / f"alloc-{mode}"
shutil.rmtree(out, ignore_errors=True)
t = time.perf_counter()
scan_pool(bench.SubPool(pool, ids), models, out, target=next(iter(models)), batch_size=16, shard_size=256,
          progress=False)
scan = time.perf_counter() - t; f2 = faults()
print(json.dumps({"applied": applied, "bare": bare, "scan": scan, "bare_faults": f1 - f0, "scan_faults": f2 - f1}))
"""


def child(mode: str, args: argparse.Namespace) -> dict:
    code = CHILD.replace("BENCH_DIR", repr(str(Path(__file__).resolve().parent)))
    env = {**os.environ, "BLINDSPOTS_MALLOC": ""}
    out = subprocess.run([sys.executable, "-c", code, mode, str(args.n), str(args.threads), str(args.workdir)],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=320)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "blindspots-bench-scan")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    bare, scan = [], []
    for r in range(args.rounds):
        order = ["system", "kept"] if r % 2 == 0 else ["kept", "system"]
        res = {m: child(m, args) for m in order}
        s, k = res["system"], res["kept"]
        if not k["applied"]:
            raise SystemExit("keep_freed_memory() did not apply here (not glibc?): nothing to compare")
        bare.append(k["bare"] / s["bare"])
        scan.append(k["scan"] / s["scan"])
        print(f"round {r}: bare forward system {s['bare']:.2f} s ({s['bare_faults']:,} faults), kept {k['bare']:.2f} s "
              f"({k['bare_faults']:,}); scan system {s['scan']:.2f} s ({s['scan_faults']:,}), kept {k['scan']:.2f} s "
              f"({k['scan_faults']:,}); {load()}", flush=True)
    print(f"{args.n} scenes 128x128, 3 zoo models, batch 16, torch threads {args.threads}, {args.rounds} rounds")
    print(f"time with freed memory kept / glibc defaults (medians of per-round ratios): bare forward "
          f"{np.median(bare):.3f}, scan {np.median(scan):.3f}; {load()}")


if __name__ == "__main__":
    main()

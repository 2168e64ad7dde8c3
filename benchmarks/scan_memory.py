"""Peak memory of `blindspots scan` on a pool of photos: batches sized by a pixel budget (the default)
against batches of an image count only (`--max-pixels 0`, the scan before the budget), side by side.

Each scan runs as a user runs it, in a fresh process (`python -m blindspots scan ...`), and reports
its own peak resident set size (`resource.getrusage(RUSAGE_SELF).ru_maxrss`, read at exit); the
budgets run in alternating order. Printed: peak RSS and wall time per run, the ratio of the peaks
against the count-only peer, the CPU model and `os.getloadavg()`.

Run (the README's own-models example; `examples/own_models.py --task text --prepare` writes it):

    M=runs/own/models; O="output=probabilities&pad=32&max_side=960&mean=0.5&std=0.5&channels=bgr&classes=$M/text_classes.txt"
    .venv/bin/python benchmarks/scan_memory.py runs/own/pool -t "ocr4=$M/ppocr_v4_det.onnx?$O" \\
        -c "ocr6=$M/ppocr_v6_det_small.onnx?$O" [--budgets 1000000 0] [--rounds 1]

Asserts nothing; a shared machine gives noisy times, the peaks are what this measures.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from blindspots.machine import cpu_model

#: runs the CLI and prints this process's peak RSS (KiB on Linux) to stderr when it exits
_RUNNER = ("import atexit, resource, sys\n"
           "atexit.register(lambda: print('PEAK_RSS_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
           " file=sys.stderr))\n"
           "from blindspots.cli import app\n"
           "sys.argv = ['blindspots'] + sys.argv[1:]\n"
           "app()\n")



def scan_once(pool: str, target: str, competitor: str, budget: int, out: Path) -> tuple[float, float]:
    """(peak RSS in MB, wall seconds) of one fresh `blindspots scan` with `--max-pixels budget`."""
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", _RUNNER, "scan", pool, "-t", target, "-c", competitor,
                          "--out", str(out), "--no-progress", "--max-pixels", str(budget)],
                         capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    peak = next(int(x.split()[1]) for x in res.stderr.splitlines() if x.startswith("PEAK_RSS_KIB"))
    return peak / 1024, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pool", help="folder of photos")
    ap.add_argument("-t", "--target", required=True, help="NAME=SPEC, as for `blindspots scan`")
    ap.add_argument("-c", "--competitor", required=True, help="NAME=SPEC")
    ap.add_argument("--budgets", type=int, nargs="+", default=[1_000_000, 0],
                    help="pixel budgets to compare (0: image count only, the peer)")
    ap.add_argument("--rounds", type=int, default=1, help="scans per budget (alternating order)")
    args = ap.parse_args()
    print(f"{cpu_model()}, {os.cpu_count()} cores; load {os.getloadavg()}", flush=True)
    peaks: dict[int, list[float]] = {b: [] for b in args.budgets}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = args.budgets if r % 2 == 0 else args.budgets[::-1]
            for b in order:
                out = Path(tmp) / f"scan-{b}-{r}"
                peak, wall = scan_once(args.pool, args.target, args.competitor, b, out)
                peaks[b].append(peak)
                print(f"round {r}: --max-pixels {b or 'none'}: peak RSS {peak:7.0f} MB, {wall:6.1f} s; "
                      f"load {os.getloadavg()}", flush=True)
    peer = max(peaks[args.budgets[-1]])
    for b in args.budgets:
        print(f"--max-pixels {b or 'none (count only)'}: peak RSS {max(peaks[b]):.0f} MB = "
              f"{max(peaks[b]) / peer:.3f} x the last budget's ({args.budgets[-1] or 'none'})")


if __name__ == "__main__":
    main()

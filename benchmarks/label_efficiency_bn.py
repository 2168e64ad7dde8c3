"""Where the first fine-tuning round's drift comes from: BatchNorm statistics or weights (brain MRI).

Reads two results.json of `label_efficiency.py --bn-probe` with the same samplers, seeds and rounds, one
fine-tuned as default (BN running statistics re-estimated on the fine-tuning batches) and one with
`--freeze-bn-stats`, and prints per sampler, for round `--round`: the hard set, T0 and per-condition mIoU of
the model before fine-tuning and of four variants of the fine-tuned one, and each variant's paired
difference against the default over seeds (mean and 95% t interval):

- default: as fine-tuned (new weights, new statistics);
- start stats: the default's weights with the statistics the round started from;
- S0 stats: the default's weights with statistics re-estimated on S0's images after training;
- frozen: fine-tuned with the statistics held (`ReplayFinetuner(freeze_batchnorm_stats=True)`), its own
  learning rate chosen on T0.

    PYTHONPATH=src python benchmarks/label_efficiency.py --dataset mri --work W1 --samplers mad,entropy \\
        --seeds 0,1,2,3,4 --rounds 1 --bn-probe
    PYTHONPATH=src python benchmarks/label_efficiency.py --dataset mri --work W2 --samplers mad,entropy \\
        --seeds 0,1,2,3,4 --rounds 1 --bn-probe --freeze-bn-stats
    python benchmarks/label_efficiency_bn.py W1/results.json W2/results.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))  # label_efficiency_cost.py beside it

from label_efficiency_cost import mean_interval  # noqa: E402


def scores(run: dict, r: int) -> dict[str, dict[str, float]]:
    """{variant: {metric: mIoU}} of one loop at round r (>= 1); metrics: hard, T0 and each hard condition."""
    def flat(point: dict, conditions: dict) -> dict[str, float]:
        return {"hard": point["hard"], "T0": point["T0"], **conditions}

    probe = run["bn_probe"][r - 1]
    return {"before": flat(run["points"][r - 1], run["conditions"][r - 1]),
            "default": flat(run["points"][r], run["conditions"][r]),
            "start stats": flat(probe["start_stats"], probe["start_stats"]["conditions"]),
            "S0 stats": flat(probe["s0_stats"], probe["s0_stats"]["conditions"])}


def paired(a: np.ndarray, b: np.ndarray) -> str:
    """mean of a - b and its 95% t interval over seeds."""
    mean, low, high = mean_interval(a - b)
    return f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]"


def table(default: dict, frozen: dict, strategy: str, r: int) -> pd.DataFrame:
    """Per metric: mean over seeds of each variant and the paired differences against the default."""
    runs = {x["seed"]: x for x in default["runs"] if x["strategy"] == strategy}
    other = {x["seed"]: x for x in frozen["runs"] if x["strategy"] == strategy}
    seeds = sorted(set(runs) & set(other))
    if not seeds:
        raise SystemExit(f"no seed of {strategy!r} in both results")
    per = [{**scores(runs[s], r), "frozen": scores(other[s], r)["default"]} for s in seeds]
    rows = []
    for metric in per[0]["default"]:
        v = {k: np.array([p[k][metric] for p in per]) for k in per[0]}
        rows.append({"metric": metric, **{k: x.mean() for k, x in v.items()},
                     **{f"{k} - default": paired(v[k], v["default"]) for k in ("start stats", "S0 stats", "frozen")}})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("default", type=Path, help="results.json of the default fine-tuning, with --bn-probe")
    ap.add_argument("frozen", type=Path, help="results.json of the same loops with --freeze-bn-stats")
    ap.add_argument("--round", type=int, default=1)
    args = ap.parse_args(argv)
    default, frozen = (json.loads(p.read_text()) for p in (args.default, args.frozen))
    pd.set_option("display.width", 250)
    for strategy in dict.fromkeys(x["strategy"] for x in default["runs"]):
        t = table(default, frozen, strategy, args.round)
        lrs = [(x["seed"], x["lrs"][args.round - 1]) for d in (default, frozen) for x in d["runs"]
               if x["strategy"] == strategy]
        print(f"\n== {strategy}, round {args.round} (mean mIoU over seeds; learning rates default then frozen: "
              f"{[lr for _, lr in lrs]}) ==")
        print(t.to_string(index=False, float_format=lambda v: f"{v:.4f}"))


if __name__ == "__main__":
    main()

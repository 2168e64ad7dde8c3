"""The honest table's file names, rows and columns, and its text rendering: torch-free, so the report
pages and `defuse table` read a finished evaluation without importing the models that made it
(`blindspots.defuse.evaluation` computes it)."""
from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

__all__ = ["AGREEMENT_FILE", "COLUMNS", "ROW_NAMES", "TABLE_FILE", "format_agreement", "format_table"]

ROW_NAMES: tuple[str, ...] = ("before", "control (λ=0)", "identified examples", "Defuse")
COLUMNS: tuple[str, ...] = ("row", "lambda", "steps", "test_acc", "scenario_acc", "judge_acc")
TABLE_FILE = "honest_table.csv"
AGREEMENT_FILE = "judge_agreement.csv"


def format_table(rows: pd.DataFrame | Sequence[Mapping], *, title: str = "Defuse, measured honestly (accuracy, %)",
                 judge_name: str = "judge") -> str:
    """Render the table (`COLUMNS`) as fixed-width text; accuracies in %. judge_name labels the
    judge column (examples: "simulated judge")."""
    df = pd.DataFrame(list(rows) if not isinstance(rows, pd.DataFrame) else rows)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"rows: expected columns {list(COLUMNS)}, missing {missing}")
    head = f"{'':22s} {'λ':>7s} {'steps':>6s} {'test':>6s} {'scenario (label)':>16s} {f'scenario ({judge_name})':>26s}"
    lines = [title, head]
    for r in df.to_dict("records"):
        lam = "-" if pd.isna(r["lambda"]) else f"{r['lambda']:g}"
        lines.append(f"{str(r['row']):22s} {lam:>7s} {int(r['steps']):6d} {100 * r['test_acc']:6.1f} "
                     f"{100 * r['scenario_acc']:16.1f} {100 * r['judge_acc']:26.1f}")
    return "\n".join(lines)


def format_agreement(agreement: pd.DataFrame, *, judge_name: str = "judge") -> str:
    """Per-scenario judge agreement as text; disputed scenarios marked "DISPUTED"."""
    for col in ("scenario", "n", "label_name", "judge_agreement", "judge_top_name", "disputed"):
        if col not in agreement.columns:
            raise ValueError(f"agreement: expected a {col!r} column (from judge_agreement), got {list(agreement.columns)}")
    rows = [n for n in ROW_NAMES if n in agreement.columns]
    head = f"{'scenario':>8s} {'n':>5s} {'label':>14s} {f'{judge_name} agrees':>20s} {f'{judge_name} says':>20s}"
    width = {n: max(8, len(n)) for n in rows}  # each row's name whole above its column
    head += "".join(f" {n:>{width[n]}s}" for n in rows) + "  flag"
    lines = [head]
    for r in agreement.to_dict("records"):
        line = (f"{r['scenario']:8d} {r['n']:5d} {str(r['label_name'])[:14]:>14s} {100 * r['judge_agreement']:19.1f}% "
                f"{str(r['judge_top_name'])[:20]:>20s}")
        line += "".join(f" {100 * r[n]:{width[n]}.1f}" for n in rows)
        lines.append(line + ("  DISPUTED" if r["disputed"] else ""))
    n_disp = int(agreement["disputed"].sum())
    lines.append(f"{n_disp} of {len(agreement)} scenarios disputed by the {judge_name} "
                 f"(agreement below the threshold); per-row columns: {judge_name}-scored accuracy, %")
    return "\n".join(lines)

"""The `blindspots defuse` options every step shares (`--preset`, `--class-names`); the settings, presets and
held-out split they name are the library's (`blindspots.defuse.settings`)."""
from __future__ import annotations

import typer

from blindspots.defuse import PAPER

PRESET = typer.Option("paper", "--preset",
                      help="Settings for options left unset: 'paper' = the paper's GPU settings (default); "
                           "'cpu' = settings that finish in minutes on a 2-core CPU (measured on MNIST); "
                           "'cpu-fashion' (etc.) = CPU settings measured on that data set. "
                           "`blindspots defuse presets` prints them all.")

CLASS_NAMES = typer.Option(None, "--class-names",
                           help="Text file, one class name per line in id order (IDX data carries no names; "
                                ".npz and class folders do). Votes may then use these names.")


def preset_help(text: str, key: str) -> str:
    """`text` followed by the paper's value (the CPU presets: `blindspots defuse presets`)."""
    paper = "the paper's 17, 1e-10 … 1000" if key == "lambdas" else PAPER[key]
    return f"{text} (--preset paper: {paper}; cpu presets: see `defuse presets`)"

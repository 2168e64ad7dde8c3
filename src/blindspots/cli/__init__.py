"""The `blindspots` command line: thin Typer commands that parse, call the library and print.

One module per command group; each defines `register(app)`. Add a module to COMMAND_GROUPS.
"""
from __future__ import annotations

import importlib
import logging

import typer

from blindspots.allocator import keep_freed_memory
from blindspots.cli.common import set_progress
from blindspots.cli.errors import VERBOSE_KEY
from blindspots.cli.help_panels import PanelGroup, apply_panels

app = typer.Typer(
    cls=PanelGroup,  # ValueError / OSError / sqlite3 errors -> `error: ...`, exit code 2; --help in panels
    name="blindspots",
    help="Find, explain and fix the failures of segmentation and classification models "
    "with the fewest human labels.",
    no_args_is_help=True,
    add_completion=False,
)

# --- command groups (one line each) ---
COMMAND_GROUPS: list[str] = [
    "web",
    "config",
    "defuse",
    "demo",
    "export",
    "fiftyone",
    "init",
    "label_issues",
    "labelstudio",
    "masks",
    "mine",
    "ratings",
    "register",
    "report",
    "round",
    "scan",
    "scenes",
    "surprise",
    "zoo",
]
# --- end command groups ---

#: commands whose process runs model forwards: only these keep freed memory (blindspots.allocator),
#: where it was measured to help; the web server and the bookkeeping commands keep glibc's defaults
MODEL_COMMANDS: frozenset[str] = frozenset({"scan", "round", "demo", "zoo", "surprise", "label-issues", "defuse"})


@app.callback()
def _main(ctx: typer.Context,
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details; show tracebacks. "
                                       "Like --no-progress, any command takes it, before or after its name."),
          no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars.")) -> None:
    ctx.meta[VERBOSE_KEY] = verbose
    set_progress(not no_progress)  # read by the commands without a progress option of their own (cli/common.py)
    if ctx.invoked_subcommand in MODEL_COMMANDS:
        keep_freed_memory()  # our own process: models' large tensors reuse freed memory (blindspots.allocator)
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


for _name in COMMAND_GROUPS:
    importlib.import_module(f"blindspots.cli.{_name}").register(app)
apply_panels(app)  # --help: Start here · Your project · People · Engines · Utilities (cli/help_panels.py)

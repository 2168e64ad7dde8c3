"""`blindspots --help`: commands grouped by what a person does, in workflow order."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.cli.help_panels import ORDER, PANELS


def test_help_lists_every_command_in_its_panel_in_workflow_order() -> None:
    res = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120", "TERMINAL_WIDTH": "120"})
    assert res.exit_code == 0, res.output
    panels = re.findall(r"╭─ (.+?) ─", res.output)
    assert panels == ["Options", "Start here", "Your project", "People", "Engines", "Utilities"]
    listed = re.findall(r"^│ ([a-z][a-z-]+) {2,}", res.output, flags=re.M)
    assert listed == ORDER  # every panel in order, each in workflow order, nothing left out
    commands = set(get_command(app).list_commands(None))  # type: ignore[arg-type]
    assert commands == set(ORDER), "a command missing from cli/help_panels.PANELS"
    assert listed.index("init") < listed.index("round") < listed.index("serve")
    assert PANELS["Start here"][:3] == ("demo", "scan", "mine")


@pytest.mark.parametrize("statement", [
    "from typer.testing import CliRunner; from blindspots.cli import app; "
    "assert CliRunner().invoke(app, ['--help']).exit_code == 0",
    # the bookkeeping commands (status, ratings, masks, export), the web app, the Label Studio commands
    "import blindspots.loop, blindspots.app.main, blindspots.integrations.labelstudio.push",
])
def test_starts_without_the_engines_heavy_packages(statement: str):
    # every command module is imported for --help; what they need from torch, pandas, matplotlib ... is imported
    # inside the commands (tests/test_imports.py checks which function-level imports may stay)
    src = str(Path(__file__).resolve().parents[1] / "src")
    heavy = ("torch", "sklearn", "matplotlib", "skimage", "numba", "duckdb", "ray", "transformers", "onnxruntime")
    heavy += ("pandas", "scipy", "fastapi", "uvicorn", "jinja2", "fsspec") if "--help" in statement else ()
    code = (f"import sys; sys.path.insert(0, {src!r}); {statement}; "
            f"print(sorted(n for n in {heavy!r} if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"

"""`blindspots --help`: commands grouped by what a person does, in workflow order."""
from __future__ import annotations

import re

from typer.main import get_command
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.cli.panels import ORDER, PANELS


def test_help_lists_every_command_in_its_panel_in_workflow_order() -> None:
    res = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120", "TERMINAL_WIDTH": "120"})
    assert res.exit_code == 0, res.output
    panels = re.findall(r"╭─ (.+?) ─", res.output)
    assert panels == ["Options", "Start here", "Your project", "People", "Engines", "Utilities"]
    listed = re.findall(r"^│ ([a-z][a-z-]+) {2,}", res.output, flags=re.M)
    assert listed == ORDER  # every panel in order, each in workflow order, nothing left out
    commands = set(get_command(app).list_commands(None))  # type: ignore[arg-type]
    assert commands == set(ORDER), "a command missing from cli/panels.PANELS"
    assert listed.index("init") < listed.index("round") < listed.index("serve")
    assert PANELS["Start here"][:3] == ("demo", "scan", "mine")

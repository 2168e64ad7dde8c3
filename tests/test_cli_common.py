"""Every command takes the common options (-v, --no-progress) before or after its name, and every usage error
(an unknown option or command, a missing argument) is one line `error: ...` with exit code 2."""
from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.cli.common import hoist_common_options

ROOT = typer.main.get_command(app)


def _leaf_paths(command, path=()):  # noqa: ANN001, ANN202 - click commands
    subs = getattr(command, "commands", None)
    if not subs:
        yield path
        return
    for name, sub in subs.items():
        yield from _leaf_paths(sub, (*path, name))


def test_hoist_moves_common_flags_before_the_command() -> None:
    assert hoist_common_options(ROOT, ["round", "p", "--no-progress", "-v"]) == ["--no-progress", "-v", "round", "p"]
    assert hoist_common_options(ROOT, ["annotators", "add", "p", "alice", "-v"]) == ["-v", "annotators", "add", "p",
                                                                                     "alice"]
    # scan has its own --progress/--no-progress: it stays; -v still moves
    assert hoist_common_options(ROOT, ["scan", "pool", "--no-progress", "-v"]) == ["-v", "scan", "pool",
                                                                                   "--no-progress"]
    assert hoist_common_options(ROOT, ["round", "p", "--", "-v"]) == ["round", "p", "--", "-v"]
    assert hoist_common_options(ROOT, ["nonsense", "-v"]) == ["nonsense", "-v"]


def test_every_command_takes_the_common_options() -> None:
    paths = list(_leaf_paths(ROOT))
    assert len(paths) > 20 and ("round",) in paths and ("scan",) in paths
    for path in paths:
        res = CliRunner().invoke(app, [*path, "--no-progress", "-v", "--help"])
        assert res.exit_code == 0, (path, res.output[-500:])


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    cases = {("round", str(tmp_path), "--bogus"): "error: No such option: --bogus (see '",
             ("scna",): "error: No such command 'scna'. Did you mean 'scan'",
             ("round",): "error: Missing argument",
             ("--bogus",): "error: No such option: --bogus"}
    for args, start in cases.items():
        res = CliRunner().invoke(app, list(args))
        lines = res.output.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith(start), (args, res.output)
        assert "╭" not in res.output


def test_round_accepts_no_progress_like_scan(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["round", str(tmp_path / "missing"), "--no-progress"])
    assert res.exit_code == 2 and res.output.startswith("error: path: expected a project folder"), res.output

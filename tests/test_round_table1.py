"""`round` prints Table 1 when a round has just been scored (not only when the whole loop ends), and the demo
names only the project files that exist (`demo --humans` stops before any Table 1 is written)."""
from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from blindspots import loop as bl
from blindspots.cli import app
from blindspots.cli.demo import project_files
from blindspots.loop.project import Project
from test_rounds import make_config, world  # noqa: F401 - the module-scoped scenes and zoo models


def test_round_prints_table_1_when_a_round_is_scored(world: Path, tmp_path: Path) -> None:  # noqa: F811
    p = Project.create(tmp_path / "p", make_config(world, n_rounds=2))
    res = CliRunner().invoke(app, ["round", str(p.path), "--simulate", "--no-progress",
                                   "--max-steps", str(len(bl.STEPS))])
    assert res.exit_code == 0, res.output
    assert "round 0: evaluate done" in res.output and not bl.status(p).finished
    assert "Table 1" in res.output and "target" in res.output.split("Table 1", 1)[1], res.output
    res = CliRunner().invoke(app, ["round", str(p.path), "--simulate", "--no-progress", "--max-steps", "1"])
    assert res.exit_code == 0 and "evaluate done" not in res.output and "Table 1" not in res.output, res.output


def test_demo_names_only_files_that_exist(tmp_path: Path) -> None:
    (tmp_path / "blindspots.toml").write_text("")
    (tmp_path / "store.sqlite").write_bytes(b"")
    (tmp_path / "reports").mkdir()
    assert project_files(tmp_path) == "settings blindspots.toml, store store.sqlite"
    (tmp_path / "reports" / "leaderboard.txt").write_text("x")
    assert project_files(tmp_path).endswith("Table 1 reports/leaderboard.txt")

"""n4 (masks per round) is checked against the most candidates a round can mine before any round runs: `init`
without --n4 takes a quarter of that bound when the paper's 100 would make every candidate a mask; an explicit
--n4 at or above the bound is kept with a warning."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.loop.budget import PAPER_N4, choose_n4, max_candidates
from blindspots.loop.project import Project
from test_rounds import world  # noqa: F401 - the module-scoped scenes and zoo models


def test_max_candidates_is_mads_budget() -> None:
    assert max_candidates(1, 2, 25) == 100  # one competitor, two classes: the own-models text detectors
    assert max_candidates(3, 21, 25) == 3150  # the paper's PASCAL VOC setting
    assert max_candidates(1, 2, 25, n=40) == 40
    with pytest.raises(ValueError, match="classes: expected an integer >= 1, got 0"):
        max_candidates(1, 0, 25)


def test_choose_n4() -> None:
    assert choose_n4(None, 3150) == (PAPER_N4, None)
    n4, note = choose_n4(None, 100)
    assert n4 == 25 and "every candidate would need a mask" in note and "--n4" in note
    assert choose_n4(None, 2) == (1, choose_n4(None, 2)[1])
    assert choose_n4(10, 100) == (10, None)
    n4, note = choose_n4(100, 100)
    assert n4 == 100 and note.startswith("warning: --n4 100") and "\n" not in note


def test_init_checks_n4_before_any_round(world: Path, tmp_path: Path) -> None:  # noqa: F811
    base = ["--pool", str(world / "pool" / "images"), "--target", f"target={world / 'target.pt'}",
            "--competitor", f"comp_a={world / 'comp_a.pt'}", "--n3", "2"]
    res = CliRunner().invoke(app, ["init", str(tmp_path / "a"), *base])
    assert res.exit_code == 0, res.output
    cfg = Project.open(tmp_path / "a").config  # 8 scene classes, one competitor, n3 = 2: at most 32
    assert cfg.ratings.n4 == 8 and "n4 = 8 masks per round" in res.output, res.output
    res = CliRunner().invoke(app, ["init", str(tmp_path / "b"), *base, "--n4", "40"])
    assert res.exit_code == 0, res.output
    assert Project.open(tmp_path / "b").config.ratings.n4 == 40
    assert "warning: --n4 40 is not less than the at most 32 candidates" in res.output, res.output
    res = CliRunner().invoke(app, ["init", str(tmp_path / "c"), *base[:-2]])
    assert res.exit_code == 0 and Project.open(tmp_path / "c").config.ratings.n4 == PAPER_N4, res.output

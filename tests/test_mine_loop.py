"""The baselines in a project: `init --strategy` values reach the loop; the model-based ones add their
columns to the project's scan; BALD on a target without dropout layers names mining.dropout."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from blindspots import loop as bl
from blindspots.loop.project import Project, ProjectError
from test_rounds import make_config, world  # noqa: F401 - the module-scoped scenes and zoo models

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_bald_in_a_project(world: Path, tmp_path: Path) -> None:  # noqa: F811
    cfg = make_config(world, strategy="bald")
    p = Project.create(tmp_path / "refused", cfg)
    with pytest.raises(ProjectError, match=r"mining.dropout: dropout: expected a model with dropout layers"):
        bl.advance(p, simulate=True, progress=False)
    cfg = replace(cfg, mining=replace(cfg.mining, dropout=0.25, mc_passes=3))
    p = Project.create(tmp_path / "p", cfg)
    st = bl.advance(p, simulate=True, progress=False)
    assert st.finished, st.message
    for i, name in ((0, "target_v0"), (1, "target_v1")):
        m = p.answers.candidates(i, "M")
        assert len(m) and all(json.loads(r)["strategy"] == "bald" for r in m["reason"]), m.head()
        assert (p.scan_dir / "extra" / f"al_bald__{name}").is_dir()


def test_init_strategy_takes_every_registered_sampler(world: Path, tmp_path: Path) -> None:  # noqa: F811
    from typer.testing import CliRunner

    from blindspots.cli import app

    args = ["init", str(tmp_path / "q"), "--pool", str(world / "pool" / "images"), "--target",
            f"target={world / 'target.pt'}", "--competitor", f"comp_a={world / 'comp_a.pt'}",
            "--strategy", "madplus"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert Project.open(tmp_path / "q").config.mining.strategy == "madplus"
    args[1], args[-1] = str(tmp_path / "r"), "bald"
    res = CliRunner().invoke(app, [*args, "--dropout", "1.5"])
    assert res.exit_code == 2 and "mining.dropout" in res.output, res.output


def test_badge_in_a_project(world: Path, tmp_path: Path) -> None:  # noqa: F811
    p = Project.create(tmp_path / "p", make_config(world, strategy="badge"))
    st = bl.advance(p, simulate=True, progress=False)
    assert st.finished, st.message
    for i, name in ((0, "target_v0"), (1, "target_v1")):
        m = p.answers.candidates(i, "M")
        assert len(m) and all(json.loads(r)["strategy"] == "badge" for r in m["reason"]), m.head()
        assert json.loads(m["reason"].iloc[0])["distance"] is None  # the largest gradient first
        assert (p.scan_dir / "extra" / f"al_badge__{name}").is_dir()


def test_coreset_in_a_project_sees_every_earlier_s_and_t_as_centres(world: Path, tmp_path: Path) -> None:  # noqa: F811
    p = Project.create(tmp_path / "p", make_config(world, strategy="coreset"))
    st = bl.advance(p, simulate=True, progress=False)
    assert st.finished, st.message
    labelled = set(p.answers.candidates(0, "S")["id"]) | set(p.answers.candidates(0, "T")["id"])
    assert labelled
    m1 = p.answers.candidates(1, "M")
    assert len(m1) and not labelled & set(m1["id"])
    # round 1's k-center greedy starts from round 0's S and T (their features), not from nothing
    assert {json.loads(r)["n_labelled"] for r in m1["reason"]} == {len(labelled)}, m1["reason"].head()


@pytest.mark.parametrize("strategy", ["qbc", "portfolio"])
def test_qbc_and_portfolio_in_a_project(world: Path, tmp_path: Path, strategy: str) -> None:  # noqa: F811
    p = Project.create(tmp_path / "p", make_config(world, strategy=strategy))
    st = bl.advance(p, simulate=True, progress=False)
    assert st.finished, st.message
    for i in (0, 1):
        m = p.answers.candidates(i, "M")
        assert len(m) and all(json.loads(r)["strategy"] == strategy for r in m["reason"]), m.head()
    if strategy == "portfolio":
        assert {json.loads(r)["proposer"] for r in p.answers.candidates(0, "M")["reason"]} >= {"mad", "margin"}
        state = json.loads((p.reports_dir / "portfolio.json").read_text())
        assert [r["round"] for r in state["rounds"]] == [0, 1]
        r0 = state["rounds"][0]  # round 0 replayed: its M, S and what S bought on T(1)
        assert sum(r0["M"].values()) == len(p.answers.candidates(0, "M")) and sum(r0["S"].values()) == len(p.answers.candidates(0, "S"))
        assert isinstance(r0["gain_T"], float) and set(r0["rewards"]) == set(r0["M"])
        assert sum(state["rounds"][1]["shares"].values()) == pytest.approx(1.0)


def test_round_report_shows_the_portfolio_shares(tmp_path: Path) -> None:
    from blindspots.report.pages.label_efficiency import portfolio_blocks

    assert portfolio_blocks(tmp_path) == []
    (tmp_path / "portfolio.json").write_text(json.dumps({"rounds": [
        {"round": 0, "shares": {"mad": 0.5, "margin": 0.5}, "M": {"mad": 3, "margin": 3}, "S": {"margin": 2},
         "gain_T": 0.01, "rewards": {"mad": 0.0, "margin": 1.0}},
        {"round": 1, "shares": {"mad": 0.3, "margin": 0.7}}]}))
    text, table = portfolio_blocks(tmp_path)
    assert table.header[:3] == ["round", "proposer", "share of M"]
    assert table.rows[1] == [0, "margin", "50%", 3, 2, "+0.0100", "+1.000"] and table.rows[3][2] == "70%"

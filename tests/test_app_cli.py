"""`blindspots annotators add | list | remove`, `blindspots web attach-*`, `blindspots serve --help`
on a light project (no loop run needed)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from blindspots.cli import app as cli
from blindspots.loop.project import Project

from app_project_helpers import minimal_project

runner = CliRunner()


@pytest.fixture()
def project(tmp_path: Path) -> Project:
    return minimal_project(tmp_path, pool_image=True)


def test_annotators_add_list_remove(project: Project) -> None:
    r = runner.invoke(cli, ["annotators", "add", str(project.path), "alice", "--url", "http://host:9000/"])
    assert r.exit_code == 0, r.output
    m = re.search(r"http://host:9000/signin#token=(\S+)", r.output)
    assert m, r.output
    assert project.answers.annotator_for_token(m.group(1)) == {"name": "alice", "role": "annotator"}
    r = runner.invoke(cli, ["annotators", "add", str(project.path), "root", "--admin"])
    assert r.exit_code == 0 and "(admin)" in r.output
    r = runner.invoke(cli, ["annotators", "list", str(project.path)])
    assert r.exit_code == 0 and re.search(r"alice\tannotator", r.output) and re.search(r"root\tadmin", r.output)
    assert m.group(1) not in r.output
    # Re-keying invalidates the old token.
    r2 = runner.invoke(cli, ["annotators", "add", str(project.path), "alice"])
    assert project.answers.annotator_for_token(m.group(1)) is None and r2.exit_code == 0
    r = runner.invoke(cli, ["annotators", "remove", str(project.path), "alice"])
    assert r.exit_code == 0 and "removed alice" in r.output
    r = runner.invoke(cli, ["annotators", "remove", str(project.path), "alice"])
    assert r.exit_code == 2 and "expected a registered annotator" in r.output
    r = runner.invoke(cli, ["annotators", "add", str(project.path), "../evil"])
    assert r.exit_code == 2 and "name" in r.output


def test_bad_project_and_attach_errors(project: Project, tmp_path: Path) -> None:
    r = runner.invoke(cli, ["annotators", "list", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "project folder" in r.output
    r = runner.invoke(cli, ["web", "attach-votes", str(project.path), str(tmp_path)])
    assert r.exit_code == 2 and "items.csv" in r.output
    r = runner.invoke(cli, ["web", "attach-review", str(project.path), str(tmp_path), "--images", str(tmp_path),
                            "--masks", str(tmp_path), "--predictions", str(tmp_path)])
    assert r.exit_code == 2 and "regions.csv" in r.output
    votes = tmp_path / "votes"
    (votes / "images").mkdir(parents=True)
    (votes / "items.csv").write_text("item_id,scenario,prediction\ns000-000,0,1\n")
    (votes / "classes.json").write_text('{"class_names": ["a", "b"], "none_label": "none"}')
    r = runner.invoke(cli, ["web", "attach-votes", str(project.path), str(votes), "--name", "v1"])
    assert r.exit_code == 0 and "1 items" in r.output
    r = runner.invoke(cli, ["web", "attach-votes", str(project.path), str(votes), "--name", "v2"])
    assert r.exit_code == 2 and "shared" in r.output  # same item ids twice would mix the votes
    r = runner.invoke(cli, ["web", "attach-votes", str(project.path), str(votes), "--name", "../x"])
    assert r.exit_code == 2 and "name" in r.output


def test_serve_help() -> None:
    r = runner.invoke(cli, ["serve", "--help"])
    assert r.exit_code == 0 and "--host" in r.output and "127.0.0.1" in r.output and "--port" in r.output

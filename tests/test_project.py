"""The project store and its config: create/open, human answers, audit log, consistency errors."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from blindspots.config import (Config, DataSettings, ModelSettings, PoolSettings, config_from_dict, dumps_config,
                               load_config, save_config)
from blindspots.loop.project import SCHEMA_VERSION, Project, ProjectError, hash_token


def make_config(tmp: Path) -> Config:
    for name in ("target.pt", "comp.pt"):
        (tmp / name).write_bytes(b"checkpoint")
    for d in ("pool", "train/images", "train/masks", "val/images", "val/masks"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    return Config(pool=PoolSettings(root="pool"), target=ModelSettings("target", "target.pt"),
                  data=DataSettings(train="train", val="val"), competitors=[ModelSettings("comp", "comp.pt")],
                  base_dir=tmp)


@pytest.fixture()
def project(tmp_path: Path) -> Project:
    return Project.create(tmp_path / "proj", make_config(tmp_path))


# ---- config ---------------------------------------------------------------------------------

def test_config_round_trip_and_paper_defaults(tmp_path: Path) -> None:
    cfg = make_config(tmp_path)
    path = save_config(cfg, tmp_path / "blindspots.toml")
    back = load_config(path)
    assert back.to_dict() == cfg.to_dict()
    assert back.mining.n3 == 25 and back.ratings.n4 == 100 and back.testset.size == 30
    assert back.testset.max_per_class == 4 and back.project.rounds == 2
    assert back.finetune.lrs == [1e-5, 5e-5, 1e-4] and back.finetune.batch_size == 2
    assert back.finetune.epochs == 80 and back.finetune.momentum == 0.9 and back.finetune.weight_decay == 5e-4
    assert back.resolve("pool") == (tmp_path / "pool").resolve()


@pytest.mark.parametrize("edit, key", [
    (lambda d: d.pop("target"), "target: missing"),
    (lambda d: d["target"].pop("path"), "target.path: missing"),
    (lambda d: d["mining"].__setitem__("n3", 0), "mining.n3"),
    (lambda d: d["mining"].__setitem__("strategy", "best"), "mining.strategy"),
    (lambda d: d["finetune"].__setitem__("lrs", []), "finetune.lrs"),
    (lambda d: d["target"].__setitem__("name", "Bad Name"), "target.name"),
    (lambda d: d["mining"].__setitem__("bogus", 1), "mining.bogus: unknown key"),
    (lambda d: d.__setitem__("competitors", []), "competitors"),
    (lambda d: d["ratings"].__setitem__("n4", "many"), "ratings.n4"),
    (lambda d: d["testset"].__setitem__("background", [0]), "testset.background"),
])
def test_config_errors_name_the_key(tmp_path: Path, edit, key: str) -> None:
    import tomllib

    d = tomllib.loads(dumps_config(make_config(tmp_path)))
    edit(d)
    with pytest.raises(ValueError, match=key.replace("[", r"\[").replace("]", r"\]")):
        config_from_dict(d, tmp_path)


def test_config_syntax_error_is_a_value_error(tmp_path: Path) -> None:
    (tmp_path / "blindspots.toml").write_text("[pool\nroot = 1")
    with pytest.raises(ValueError, match="valid TOML"):
        load_config(tmp_path)


# ---- store ----------------------------------------------------------------------------------

def test_create_layout_and_wal(project: Project) -> None:
    for sub in ("scans", "masks", "checkpoints", "reports"):
        assert (project.path / sub).is_dir()
    assert project.store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [(m.name, m.version, m.role) for m in project.registry.models()] == [("target", 0, "target"), ("comp", 0, "competitor")]
    assert project.target_version() == 0
    reopened = Project.open(project.path)
    assert reopened.config.to_dict() == project.config.to_dict()
    with pytest.raises(ProjectError, match="already holds"):
        Project.create(project.path, project.config)


def test_ratings_are_idempotent_and_durable(project: Project) -> None:
    project.answers.add_rating(0, "a.png", "ann", 2)
    project.answers.add_rating(0, "a.png", "ann", 2)  # a double submission keeps one row
    project.answers.add_rating(0, "a.png", "bob", "ood")
    project.answers.add_rating(0, "b.png", "ann", 5)
    project.answers.add_rating(0, "b.png", "ann", 4)  # a change of mind replaces the answer
    # A fresh connection (another process) sees every answer: each was committed.
    other = sqlite3.connect(project.path / "store.sqlite")
    assert other.execute("SELECT COUNT(*) FROM ratings").fetchone()[0] == 3
    r = project.answers.ratings_for_round(0)
    assert list(r["id"]) == ["a.png", "a.png", "b.png"]
    assert np.isinf(r.loc[r["annotator"] == "bob", "score"]).all() and r["out_of_domain"].sum() == 1
    assert float(r.loc[(r["id"] == "b.png"), "score"].iloc[0]) == 4.0
    for bad in (0, 6, 2.5, "x", True):
        with pytest.raises(ValueError, match="score"):
            project.answers.add_rating(0, "a.png", "ann", bad)
    with pytest.raises(ValueError, match="image_id"):
        project.answers.add_rating(0, "../etc/passwd", "ann", 3)


def test_concurrent_ratings_are_never_lost(project: Project) -> None:
    def work(k: int) -> None:
        for j in range(20):
            project.answers.add_rating(1, f"img{j}.png", f"rater{k}", 1 + (j % 5))
            project.answers.add_rating(1, f"img{j}.png", f"rater{k}", 1 + (j % 5))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(project.answers.ratings_for_round(1)) == 80


def test_masks_candidates_votes_reviews_annotators(project: Project) -> None:
    mask = np.random.default_rng(0).integers(0, 3, (8, 12)).astype(np.uint8)
    mask[0, 0] = 255
    project.answers.add_mask(0, "sub/a.png", mask, source="import", annotator="ann")
    np.testing.assert_array_equal(project.answers.load_mask(0, "sub/a.png"), mask)
    assert list(project.answers.masks_for_round(0)["id"]) == ["sub/a.png"]
    with pytest.raises(ValueError, match="mask"):
        project.answers.add_mask(0, "b.png", np.zeros((2, 2, 3), np.uint8), source="x")
    sel = pd.DataFrame({"id": ["b", "a"], "score": [0.9, 0.5], "reason": ['{"k":1}', '{"k":2}']})
    project.answers.set_candidates(0, "M", sel)
    project.answers.set_candidates(0, "M", sel)
    got = project.answers.candidates(0, "M")
    assert list(got["id"]) == ["b", "a"] and list(got["reason"]) == ['{"k":1}', '{"k":2}']
    project.answers.add_vote("scenario-1", "ann", "cat")
    project.answers.add_vote("scenario-1", "ann", None)  # none of the above replaces the first vote
    v = project.answers.votes()
    assert len(v) == 1 and v["label"].iloc[0] is None
    project.answers.add_review("a.png", 3, "error", "ann")
    project.answers.add_review("a.png", 3, "fine", "ann")
    assert list(project.answers.reviews()["verdict"]) == ["fine"]
    with pytest.raises(ValueError, match="verdict"):
        project.answers.add_review("a.png", 3, "maybe", "ann")
    project.answers.add_annotator("ann", "secret-token-123", "admin")
    assert project.answers.annotator_for_token("secret-token-123") == {"name": "ann", "role": "admin"}
    assert project.answers.annotator_for_token("wrong-token-123") is None
    stored = project.store.db.execute("SELECT token_hash FROM annotators").fetchone()[0]
    assert stored == hash_token("secret-token-123") and "secret" not in stored


def test_steps_are_an_audit_log(project: Project) -> None:
    project.journal.begin_step(0, "mine", {"n3": 25}, model_version=0, seed=7)
    assert project.journal.step(0, "mine")["status"] == "running"
    project.journal.end_step(0, "mine", {"n": 10})
    st = project.journal.step(0, "mine")
    assert st["status"] == "done" and st["settings"] == {"n3": 25} and st["seed"] == 7 and st["result"] == {"n": 10}
    kinds = list(project.journal.events()["kind"])
    assert kinds[-2:] == ["step-start", "step-done"]


def test_inconsistent_projects_raise_clear_errors(project: Project, tmp_path: Path) -> None:
    path = project.path
    project.close()
    # checkpoint file missing
    (tmp_path / "comp.pt").unlink()
    with pytest.raises(ProjectError, match="checkpoint"):
        Project.open(path)
    (tmp_path / "comp.pt").write_bytes(b"checkpoint")
    # schema version mismatch
    db = sqlite3.connect(path / "store.sqlite")
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(ProjectError, match="schema version"):
        Project.open(path)
    db = sqlite3.connect(path / "store.sqlite")
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
    db.commit()
    db.close()
    Project.open(path)
    # config missing a key
    text = (path / "blindspots.toml").read_text()
    (path / "blindspots.toml").write_text(text.replace('[data]\ntrain', '[data]\nxtrain'))
    with pytest.raises(ProjectError, match="data"):
        Project.open(path)
    (path / "blindspots.toml").unlink()
    with pytest.raises(ProjectError, match="blindspots.toml"):
        Project.open(path)
    with pytest.raises(ProjectError, match="not a folder"):
        Project.open(tmp_path / "nowhere")

"""The loop with `labels.kind = "regions"`: S is labelled by region answers (simulated, or stored through
the project's API), T by whole masks; the masks of S are partial and fine-tuning learns from them."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from blindspots import loop as bl
from blindspots.config import LabelSettings
from blindspots.loop import regions as rq
from blindspots.loop.project import Project
from test_rounds import make_config, world  # noqa: F401 - the scenes and models fixture


def _regions_config(world: Path, **labels):  # noqa: ANN202, F811
    return dataclasses.replace(make_config(world), labels=LabelSettings(kind="regions", regions_per_image=3, **labels))


def test_simulated_region_labels_make_partial_masks_and_fine_tune(world: Path, tmp_path: Path) -> None:  # noqa: F811
    p = Project.create(tmp_path / "p", _regions_config(world, fill="ignore"))
    st = bl.advance(p, simulate=True, progress=False)
    assert st.finished, st.message
    t = set(p.answers.candidate_ids(0, "T"))
    by_region = [x for x in p.answers.candidate_ids(0, "S") if x not in t]
    assert by_region
    masks = p.answers.masks_for_round(0).set_index("id")
    for x in by_region:
        assert masks.loc[x, "source"] == rq.REGION_SOURCE
        q = rq.queries(p, 0, x)
        assert 1 <= len(q) <= 3 and [a.score for a in q] == sorted((a.score for a in q), reverse=True)
        m, seg = p.answers.load_mask(0, x), rq.segments(p, 0, x)
        asked = np.isin(seg, [a.region for a in q])
        assert (m[~asked] == 255).all()  # fill "ignore": nothing outside the asked regions
        assert m.shape == seg.shape
    for x in t:
        assert masks.loc[x, "source"] == "simulated" and (p.answers.load_mask(0, x) != 255).any()
    res = p.journal.step(0, "masks")["result"]
    assert res["n_region_images"] == len(by_region) and 0 < res["region_pixel_share"] < 0.5
    assert p.registry.model("target").version == 1  # fine-tuned on the partial masks of S


def test_confident_fill_takes_the_models_agreement_outside_the_asked_regions(world: Path,  # noqa: F811
                                                                             tmp_path: Path) -> None:
    from blindspots.loop.steps.region_labels import finish_images, make_queries, simulate_answers

    cfg = _regions_config(world, fill="confident", agree=0.05)
    same = [dataclasses.replace(c, path=cfg.target.path) for c in cfg.competitors]  # every model agrees
    p = Project.create(tmp_path / "c", dataclasses.replace(cfg, competitors=same))
    ctx = bl.LoopContext(p, simulate=True, progress=False)
    ids = sorted(x.name for x in (world / "pool" / "images").iterdir())[:2]
    assert make_queries(ctx, 0, ids) == 2 and make_queries(ctx, 0, ids) == 0  # made once
    simulate_answers(ctx, 0, ids)
    assert finish_images(ctx, 0, ids, set()) == []
    for x in ids:
        target = ctx.segmenter("target", 0).predict_proba(ctx.pool.load(x)[None])[0].argmax(0)
        seg, m = rq.segments(p, 0, x), p.answers.load_mask(0, x)
        outside = ~np.isin(seg, [a.region for a in rq.queries(p, 0, x)])
        assert outside.any() and (m[outside] == target[outside]).all()  # all agree and are >= 5% sure


def test_people_answer_regions_and_the_round_goes_on(world: Path, tmp_path: Path) -> None:  # noqa: F811
    p = Project.create(tmp_path / "h", _regions_config(world))
    assert bl.advance(p, progress=False).state == "awaiting_ratings"
    ids = list(p.answers.candidates(0, "M")["id"])
    bl.import_ratings(p, _csv(tmp_path, [(x, f"a{r}", 1 + k % 5) for k, x in enumerate(ids) for r in range(2)]))
    st = bl.advance(p, progress=False)
    assert st.state == "awaiting_masks" and "region labels" in st.message
    n = rq.answer_count(p, 0)[1]
    assert n > 0 and f"region answers 0/{n} in" in bl.status(p).message
    t = set(p.answers.candidate_ids(0, "T"))
    by_region = rq.query_images(p, 0)
    assert by_region and not t & set(by_region)
    x = by_region[0]
    q = rq.queries(p, 0, x)
    with pytest.raises(ValueError, match="region: expected one of the regions asked about"):
        rq.add_region_answer(p, 0, x, 9999, "ann", 1)
    with pytest.raises(ValueError, match="label: expected a class id"):
        rq.add_region_answer(p, 0, x, q[0].region, "ann", 255)
    for k, a in enumerate(q):  # the guess, another class, "mixed / unsure"
        rq.add_region_answer(p, 0, x, a.region, "ann", [a.guess, (a.guess + 1) % 4, None][k % 3])
    assert rq.unanswered(p, 0, x) == [] and rq.answer_count(p, 0)[0] == len(q)
    for y in by_region[1:]:
        for a in rq.queries(p, 0, y):
            rq.add_region_answer(p, 0, y, a.region, "ann", a.guess)
    folder = tmp_path / "t"
    folder.mkdir()
    for y in t:
        Image.open(world / "pool" / "masks" / y).save(folder / y)
    bl.import_masks(p, folder, annotator="ann")
    assert bl.advance(p, progress=False, max_steps=1).state == "paused"
    assert p.journal.step(0, "masks")["status"] == "done"
    m, seg = p.answers.load_mask(0, x), rq.segments(p, 0, x)
    assert (m[seg == q[0].region] == q[0].guess).all()
    if len(q) > 2:
        assert (m[seg == q[2].region] == 255).all()  # mixed / unsure: left out


def _csv(tmp_path: Path, rows: list[tuple]) -> Path:
    path = tmp_path / "ratings.csv"
    pd.DataFrame(rows, columns=["image_id", "rater", "score"]).to_csv(path, index=False)
    return path


def test_config_command_switches_to_region_labels(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app_project_helpers import minimal_project
    from blindspots.cli import app

    p = minimal_project(tmp_path)
    run = CliRunner()
    res = run.invoke(app, ["config", str(p.path), "--labels", "regions", "--regions-per-image", "4"])
    assert res.exit_code == 0, res.output
    assert "labels.kind: masks -> regions" in res.output and "labels.regions_per_image: 8 -> 4" in res.output
    again = Project.open(p.path)
    assert again.config.labels.kind == "regions" and again.config.labels.regions_per_image == 4
    assert "labels: regions" in run.invoke(app, ["config", str(p.path)]).output
    bad = run.invoke(app, ["config", str(p.path), "--labels", "pixels"])
    assert bad.exit_code == 2 and "--labels: expected one of ['masks', 'regions'], got 'pixels'" in bad.output


def test_round_page_shows_the_region_answers_and_their_cost(world: Path, tmp_path: Path) -> None:  # noqa: F811
    from blindspots.report.pages.round import write_round_report

    p = Project.create(tmp_path / "r", _regions_config(world))
    assert bl.advance(p, simulate=True, progress=False).finished
    page = Path(write_round_report(p, 0)).read_text()
    import re

    said = re.findall(r"<figcaption>region answers: (\d+) of (\d+) regions \((\d+) mixed / unsure\), "
                      r"([\d.]+) actions, (\d+)% of the pixels labelled</figcaption>", page)
    images = rq.query_images(p, 0)
    assert len(said) == len(images) > 0
    for (done, asked, mixed, actions, _), x in zip(said, images):
        n = len(rq.queries(p, 0, x))
        assert int(done) == int(asked) == n and float(actions) == n  # one action an answer
        assert int(mixed) == sum(v is None for v in rq.answers(p, 0, x).values())

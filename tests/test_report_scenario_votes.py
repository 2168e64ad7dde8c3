"""Segmentation failure scenarios offered on the app's vote page: export as a vote set, attach,
vote a name or none of the above through the API, tally."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from fastapi.testclient import TestClient

from blindspots.app import create_app
from blindspots.app.tables import AppStore
from blindspots import loop
from blindspots.loop.project import Project
from blindspots.report.pages.round import round_scenarios
from blindspots.report import write_round_report
from blindspots.report.scenario_votes import (PROMPT, export_scenario_votes, scenario_name, scenario_names,
                                              tally_scenario_votes, vote_prefix)
from test_rounds import make_config, world  # noqa: F401  (the module-scoped scenes + models fixture)

torch.set_num_threads(1)
TOKEN = "segvotetoken-001"


def test_scenario_name_from_effects():
    eff = pd.DataFrame({"attribute": ["brightness", "class_vehicle", "size"], "d": [-2.0, 1.1, 0.2]})
    assert scenario_name(eff) == "brightness low; class_vehicle high"
    assert scenario_name(eff.iloc[2:]) == ""


def test_scenarios_on_the_vote_page(world: Path, tmp_path: Path) -> None:  # noqa: F811
    p = Project.create(tmp_path / "p", make_config(world))
    assert loop.advance(p, simulate=True, progress=False).finished
    found = round_scenarios(p, 0)
    assert found is not None and len(found)
    folder = export_scenario_votes(found, p.config.resolve(p.config.pool.root), tmp_path / "votes",
                                   prefix=vote_prefix(0))
    items = pd.read_csv(folder / "items.csv", dtype={"item_id": str})
    classes = json.loads((folder / "classes.json").read_text())
    assert len(items) == len(found) and all((folder / "images" / f"{x}.png").is_file() for x in items["item_id"])
    assert classes["prompt"] == PROMPT and len(set(classes["class_names"])) == len(classes["class_names"])

    p.answers.add_annotator("ann", TOKEN, "annotator")
    AppStore(p).attach_set("vote", "seg", folder)
    client = TestClient(create_app(p.path))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    q = client.get("/api/votes/queue", headers=auth).json()
    (s,) = q["sets"]
    assert s["prompt"] == PROMPT and s["classes"] == classes["class_names"] and q["total"] == len(found)
    assert client.get("/api/images/vote", params={"set": "seg", "id": items["item_id"][0]}, headers=auth).status_code == 200
    first, label = items["item_id"][0], (classes["class_names"] or ["none"])[0]
    assert client.post("/api/votes", json={"set": "seg", "item_id": first, "label": label}, headers=auth).json()["ok"]
    if len(items) > 1:
        client.post("/api/votes", json={"set": "seg", "item_id": items["item_id"][1], "label": "none"}, headers=auth)
    tally = tally_scenario_votes(items, p.answers.votes()).set_index("item_id")
    assert tally.loc[first, "n_votes"] == 1 and tally.loc[first, "name"] == ("" if label == "none" else label)
    if len(items) > 1:
        assert tally.loc[items["item_id"][1], "n_none"] == 1 and tally.loc[items["item_id"][1], "name"] == ""
    # A name of one's own (the set is free-text): white space folded, stored as the vote's label.
    assert classes["free_text"] is True and s["free_text"] is True
    r = client.post("/api/votes", json={"set": "seg", "item_id": first, "label": "  made-up \n name "}, headers=auth)
    assert r.status_code == 200 and r.json()["label"] == "made-up name"
    for bad in (" ", "None"):
        assert client.post("/api/votes", json={"set": "seg", "item_id": first, "label": bad},
                           headers=auth).status_code == 422
    p.answers.add_annotator("bob", TOKEN + "b", "annotator")
    client.post("/api/votes", json={"set": "seg", "item_id": first, "label": "made-up name"},
                headers={"Authorization": f"Bearer {TOKEN}b"})
    found_names = scenario_names(p.answers.votes(), vote_prefix(0))
    assert found_names[0] == {"names": [("made-up name", 2)], "none": 0}
    # A set without free_text (e.g. Defuse's) still takes only its class names.
    cj = json.loads((folder / "classes.json").read_text())
    (folder / "classes.json").write_text(json.dumps({**cj, "free_text": False}))
    assert client.post("/api/votes", json={"set": "seg", "item_id": first, "label": "another name"},
                       headers=auth).status_code == 422
    # The round page shows the names people gave.
    html = write_round_report(p, 0, tmp_path / "page", scenarios=found).read_text(encoding="utf-8")
    assert "Names from the vote page: <b>“made-up name” (2)</b>" in html
    with pytest.raises(ValueError, match="found"):
        export_scenario_votes(type("Empty", (), {"__len__": lambda self: 0, "summaries": []})(), ".", tmp_path / "x")

"""`blindspots defuse ...` end to end on scikit-learn digits with tiny settings, and its one-line errors."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from blindspots.cli import app

torch.set_num_threads(1)

NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def run(args):
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def one_line_error(args, *needles):
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_cli_pipeline(tmp_path):
    d = ["--data", "sklearn-digits", "--limit", "200"]
    clf, vae = tmp_path / "clf.pt", tmp_path / "vae.pt"
    (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n")
    out = run(["defuse", "train-classifier", *d, "--out", str(clf), "--epochs", "2", "--width", "8",
               "--class-names", str(tmp_path / "names.txt")])
    assert "held-out accuracy" in out and "on 20 images" in out and "zero, one" in out
    out = run(["defuse", "train-vae", *d, "--out", str(vae), "--epochs", "2", "--batch-size", "64", "--width", "8",
               "--latent-dim", "4", "--beta", "1", "--anneal-steps", "5", "--grids", str(tmp_path / "grids")])
    assert vae.is_file() and (tmp_path / "grids" / "samples.png").is_file() and "wrote" in out
    out = run(["defuse", "identify", *d, "--vae", str(vae), "--classifier", str(clf), "--out", str(tmp_path / "id"),
               "--q", "6", "--a", "2", "--b", "2", "--max-per-source", "2", "--recon-min-proba", "0",
               "--all-sources"])
    assert "identified" in out and (tmp_path / "id" / "identified.npz").is_file()
    # A 2-epoch classifier and VAE: source filters off (defuse's own tests cover them).
    assert "(0 skipped: misclassified; 0 skipped: reconstruction" in out
    assert "180 images of sklearn-digits (the 20 that train-classifier held out are left out)" in out
    run(["defuse", "distill", "--identified", str(tmp_path / "id"), "--out", str(tmp_path / "sc.npz"),
         "--n-components", "6", "--max-iter", "50"])
    out = run(["defuse", "export-review", "--scenarios", str(tmp_path / "sc.npz"), "--vae", str(vae), "--classifier",
               str(clf), "--out", str(tmp_path / "rev"), "--n-per", "3", "--identified", str(tmp_path / "id"),
               "--n-identified", "12"])
    assert "12 identified failures" in out and "zero, one" in out
    items = pd.read_csv(tmp_path / "rev" / "items.csv", dtype={"item_id": str})
    id_items = pd.read_csv(tmp_path / "rev" / "identified_items.csv", dtype={"item_id": str})
    template = pd.read_csv(tmp_path / "rev" / "votes_template.csv", dtype={"item_id": str})
    assert len(template) == len(items) + 12 and template["item_id"].str.startswith("id-").sum() == 12
    # One person, no annotator column, votes by class NAME in any case: every image is a class f did not predict.
    by_name = pd.DataFrame({"item_id": list(items["item_id"]) + list(id_items["item_id"]),
                            "label": [NAMES[(p + 1) % 10].upper() if i % 2 else NAMES[(p + 1) % 10]
                                      for i, p in enumerate(list(items["prediction"]) + list(id_items["prediction"]))]})
    by_name.to_csv(tmp_path / "votes_by_name.csv", index=False)
    out = run(["defuse", "import-votes", "--review", str(tmp_path / "rev"), "--votes",
               str(tmp_path / "votes_by_name.csv")])
    dec = pd.read_csv(tmp_path / "rev" / "decisions.csv")
    assert dec["is_failure"].all() and set(dec["label_name"]) <= set(NAMES)
    assert "12 identified failures voted on, 12 labelled" in out
    # People say every image is one class the classifier did not predict (so every scenario fails).
    votes = pd.DataFrame([{"item_id": r.item_id, "annotator": f"p{k}", "label": str((r.prediction + 1) % 10)}
                          for r in items.itertuples() for k in range(3)])
    votes.to_csv(tmp_path / "votes.csv", index=False)
    out = run(["defuse", "import-votes", "--review", str(tmp_path / "rev"), "--votes", str(tmp_path / "votes.csv")])
    dec = pd.read_csv(tmp_path / "rev" / "decisions.csv")
    assert dec["is_failure"].all() and "Failure Scenario" in out
    out = run(["defuse", "import-votes", "--review", str(tmp_path / "rev"), "--simulate", str(clf)])
    assert "SIMULATED" in out
    # The simulated oracle here is the classifier itself, so it agrees with it: no failures. Restore people's votes.
    out = run(["defuse", "import-votes", "--review", str(tmp_path / "rev"), "--votes",
               str(tmp_path / "votes_by_name.csv"), "--judge", str(clf)])
    # The judge here is the classifier itself: it disputes every label people gave against it.
    assert pd.read_csv(tmp_path / "rev" / "decisions.csv")["judge_disputed"].all() and "SIMULATION" in out
    out = run(["defuse", "correct", *d, "--classifier", str(clf), "--vae", str(vae), "--scenarios",
               str(tmp_path / "sc.npz"), "--review", str(tmp_path / "rev"), "--out", str(tmp_path / "cor"),
               "--lambdas", "1e-10,10", "--n-per", "8", "--epochs", "1"])
    assert (tmp_path / "cor" / "corrected.pt").is_file() and "best λ" in out
    # correct validates on the 20 images train-classifier held out, and says so.
    assert "validation: 20 images of sklearn-digits held out by train-classifier" in out
    assert (tmp_path / "cor" / "control.pt").is_file() and (tmp_path / "cor" / "baseline.pt").is_file()
    out = run(["defuse", "report", *d, "--classifier", str(clf), "--vae", str(vae), "--identified",
               str(tmp_path / "id"), "--scenarios", str(tmp_path / "sc.npz"), "--review", str(tmp_path / "rev"),
               "--out", str(tmp_path / "fig"), "--correct", str(tmp_path / "cor"), "--test", "sklearn-digits",
               "--judge", str(clf)])
    for name in ("fig2_tsne.png", "fig3_scenarios.png", "fig5_tradeoff.png", "fig6_nearest.png"):
        assert (tmp_path / "fig" / name).is_file(), name
    # The report prints every row and every column.
    rows = [line for line in out.splitlines() if line.startswith(("before ", "control ", "identified ", "Defuse "))]
    assert [r.split()[0] for r in rows] == ["before", "control", "identified", "Defuse"], out
    assert all(len(r.split()) >= 4 and "-" not in r.split()[-3:] for r in rows), out
    assert "scenario (label)" in out and "scenario (judge, simulated)" in out and "SIMULATION" in out
    assert "judge test accuracy" in out
    table = pd.read_csv(tmp_path / "fig" / "table.csv")
    assert len(table) == 4 and table[["test_acc", "scenario_acc", "judge_acc"]].notna().all().all()

    # the same workflow from Python: the review folder in, the honest table out (what `report` printed)
    from blindspots.data.classsets import load_classification_set
    from blindspots.defuse import ReviewFolder

    folder = ReviewFolder(tmp_path / "rev")
    pd.testing.assert_frame_equal(folder.decisions, pd.read_csv(tmp_path / "rev" / "decisions.csv"))
    images, labels = folder.labelled_identified()
    assert len(images) == len(labels) == 12
    rows, _, text = folder.honest_table(clf, tmp_path / "cor", load_classification_set("sklearn-digits"), clf)
    pd.testing.assert_frame_equal(rows, table, check_dtype=False)
    assert text.splitlines()[0] in out
    again = ReviewFolder.export(tmp_path / "sc.npz", vae, clf, tmp_path / "rev2", class_names=NAMES, n_per=3)
    with pytest.raises(ValueError, match="decisions.csv from import_votes"):
        again.honest_table(clf, tmp_path / "cor", load_classification_set("sklearn-digits"), clf)
    res = again.import_votes(simulate=clf, annotators=3)
    assert res.simulated and len(res.decisions) == again.review.items["scenario"].nunique()


@pytest.fixture()
def review(tmp_path):
    from blindspots.scenarios.review_set import ReviewSet, export_review

    items = pd.DataFrame({"item_id": ["s000-000", "s000-001"], "scenario": [0, 0], "prediction": [0, 0]})
    rs = ReviewSet(items, np.zeros((2, 8, 8, 1), np.uint8), np.zeros((2, 2), np.float32), ("T-shirt", "Trouser", "Bag"))
    return export_review(rs, tmp_path / "rev")


@pytest.mark.parametrize("content, needles", [
    ("item_id,label\ns000-000,bag\ns000-001,Sneaker\n", ["row 3", "'Sneaker'", "'T-shirt', 'Trouser', 'Bag'"]),
    ("item_id,label\ns000-000,Bag\nzzz,Bag\n", ["unknown ids", "zzz"]),
    ("item_id;label\ns000-000;Bag\n", ["expected columns", "votes.csv"]),
    (b"\x00\xff\x81garbage", ["votes.csv"]),
])
def test_bad_vote_file_is_one_line(review, tmp_path, content, needles):
    p = tmp_path / "votes.csv"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    one_line_error(["defuse", "import-votes", "--review", str(review), "--votes", str(p)], *needles)


def test_votes_by_name_one_voter(review, tmp_path):
    p = tmp_path / "votes.csv"
    p.write_text("item_id,label\ns000-000,bag\ns000-001,TROUSER\n")
    out = run(["defuse", "import-votes", "--review", str(review), "--votes", str(p)])
    dec = pd.read_csv(review / "decisions.csv")
    assert dec["is_failure"].tolist() == [True] and dec["label_name"].isin(["Bag", "Trouser"]).all() and "100.0" in out


def test_cli_errors_and_presets(review, tmp_path):
    from blindspots.defuse import preset_table as presets

    one_line_error(["defuse", "import-votes", "--review", str(review)], "--votes", "--simulate")
    one_line_error(["defuse", "import-votes", "--review", str(review), "--votes", str(tmp_path / "missing.csv")],
                   "missing.csv")
    (tmp_path / "names.txt").write_text("a\nb\n")
    one_line_error(["defuse", "train-classifier", "--data", "sklearn-digits", "--limit", "30", "--out",
                    str(tmp_path / "c.pt"), "--class-names", str(tmp_path / "names.txt")], "at least 10 names")
    one_line_error(["defuse", "train-vae", "--data", "sklearn-digits", "--limit", "8", "--out", str(tmp_path / "v.pt"),
                    "--preset", "gpu"], "preset", "'paper', 'cpu', 'cpu-fashion'")
    def help_text(command):  # wide terminal: one help text per line, no wrapping inside the box
        res = CliRunner().invoke(app, ["defuse", command, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
        return " ".join(res.output.split())

    assert "'cpu' = settings that finish in minutes" in help_text("train-vae")
    assert "--preset paper: 800" in help_text("train-vae") and "75 off MNIST" in help_text("identify")
    table = run(["defuse", "presets"]).splitlines()
    assert table[0].split() == ["option", "paper", "cpu", "cpu-fashion"]
    values = presets()
    assert next(r for r in table if r.startswith("vae_epochs")).split()[1:3] == [
        str(values["paper"]["vae_epochs"]), str(values["cpu"]["vae_epochs"])]
    assert values["paper"]["vae_epochs"] == 800 and values["cpu"]["vae_epochs"] < 100


def test_correct_validation_without_recorded_holdout():
    from blindspots.defuse import holdout_record, load_data, recorded_holdout, validation_split

    d = load_data("sklearn-digits", 100)
    keep, rec = holdout_record(d, "sklearn-digits", 0.2, seed=3)
    assert len(rec["holdout_index"]) == 20 and not set(keep) & set(rec["holdout_index"])
    info = {"meta": {"trained_on": rec}}
    np.testing.assert_array_equal(recorded_holdout(info, d), rec["holdout_index"])
    train, val, said = validation_split(info, d, "digits", None, None, 0.1, 0)
    assert len(val) == 20 and len(train) == 80 and "never trained on" in said
    np.testing.assert_array_equal(val.images, d.images[rec["holdout_index"]])
    assert recorded_holdout(info, load_data("sklearn-digits", 99)) is None  # other data: not recognised
    train, val, said = validation_split({"meta": {}}, d, "digits", None, None, 0.1, 0)
    assert len(val) == 10 and "NOT known to be held out" in said

"""`blindspots defuse ...` end to end on scikit-learn digits with tiny settings."""
from __future__ import annotations

import pandas as pd
import torch
from typer.testing import CliRunner

from blindspots.cli import app

torch.set_num_threads(1)


def run(args):
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_cli_pipeline(tmp_path):
    d = ["--data", "sklearn-digits", "--limit", "200"]
    clf, vae = tmp_path / "clf.pt", tmp_path / "vae.pt"
    run(["defuse", "train-classifier", *d, "--out", str(clf), "--epochs", "2", "--width", "8"])
    out = run(["defuse", "train-vae", *d, "--out", str(vae), "--epochs", "2", "--batch-size", "64", "--width", "8",
               "--latent-dim", "4", "--beta", "1", "--anneal-steps", "5", "--grids", str(tmp_path / "grids")])
    assert vae.is_file() and (tmp_path / "grids" / "samples.png").is_file() and "wrote" in out
    out = run(["defuse", "identify", *d, "--vae", str(vae), "--classifier", str(clf), "--out", str(tmp_path / "id"),
               "--q", "6", "--a", "2", "--b", "2", "--max-per-source", "2"])
    assert "identified" in out and (tmp_path / "id" / "identified.npz").is_file()
    run(["defuse", "distill", "--identified", str(tmp_path / "id"), "--out", str(tmp_path / "sc.npz"),
         "--n-components", "6", "--max-iter", "50"])
    run(["defuse", "export-review", "--scenarios", str(tmp_path / "sc.npz"), "--vae", str(vae), "--classifier",
         str(clf), "--out", str(tmp_path / "rev"), "--n-per", "3"])
    items = pd.read_csv(tmp_path / "rev" / "items.csv", dtype={"item_id": str})
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
    run(["defuse", "import-votes", "--review", str(tmp_path / "rev"), "--votes", str(tmp_path / "votes.csv")])
    out = run(["defuse", "correct", *d, "--classifier", str(clf), "--vae", str(vae), "--scenarios",
               str(tmp_path / "sc.npz"), "--review", str(tmp_path / "rev"), "--out", str(tmp_path / "cor"),
               "--lambdas", "1e-10,10", "--n-per", "8", "--epochs", "1"])
    assert (tmp_path / "cor" / "corrected.pt").is_file() and "best λ" in out
    run(["defuse", "report", *d, "--classifier", str(clf), "--vae", str(vae), "--identified", str(tmp_path / "id"),
         "--scenarios", str(tmp_path / "sc.npz"), "--review", str(tmp_path / "rev"), "--out", str(tmp_path / "fig"),
         "--correct", str(tmp_path / "cor"), "--test", "sklearn-digits"])
    for name in ("fig2_tsne.png", "fig3_scenarios.png", "fig5_tradeoff.png", "fig6_nearest.png"):
        assert (tmp_path / "fig" / name).is_file(), name

"""The label-efficiency benchmark on brain MRI slices (`benchmarks/label_efficiency.py --dataset mri`), run
tiny (--quick: 32 px, a 24-image pool, one round), and the MRI volumes it cuts slices from."""
from __future__ import annotations

import json
import runpy
from pathlib import Path

import numpy as np
import pytest

from blindspots.data.mri import DEFAULT_ROOT, MRI_CLASSES, MriVolumes

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "label_efficiency.py"
needs_mricron = pytest.mark.skipif(
    not all((Path(DEFAULT_ROOT) / f"{n}.nii.gz").is_file() for n in ("ch2", "ch2bet", "ch2better", "aal")),
    reason="Debian package mricron-data not installed (apt-get install -y mricron-data)")


@needs_mricron
def test_three_cuts_and_three_scans_of_one_head():
    vols = MriVolumes.load()
    shapes = {o: vols.slice(o, int(vols.indices(o)[len(vols.indices(o)) // 2]))[0].shape
              for o in ("axial", "coronal", "sagittal")}
    assert shapes == {"axial": (217, 181), "coronal": (181, 181), "sagittal": (181, 217)}
    assert 120 < len(vols.indices("axial")) < 160 and len(vols.indices("coronal")) > len(vols.indices("axial"))
    z = int(vols.indices("axial")[70])
    t1, lab = vols.slice("axial", z)
    stripped, sharp = vols.slice("axial", z, "skullstrip")[0], vols.slice("axial", z, "sharp")[0]
    brain = lab >= 2
    assert lab.max() < MRI_CLASSES.num_classes and stripped[lab == 0].mean() < 0.02 < t1[lab == 0].mean()
    # the 0.5 mm scan, resampled through the affines, lies on the same anatomy as the 1 mm one
    assert np.corrcoef(t1[brain], sharp[brain])[0, 1] > 0.8
    # min-max normalised: without the scalp, the brain comes out brighter
    assert np.median(stripped[brain]) > 1.5 * np.median(t1[brain])
    with pytest.raises(ValueError, match="orientation"):
        vols.slice("oblique", 3)
    with pytest.raises(ValueError, match="name"):
        vols.scan("t2")


@needs_mricron
def test_quick_mri_run_makes_curves_and_recall(tmp_path: Path):
    bench = runpy.run_path(str(BENCH), run_name="label_efficiency")
    out = bench["main"](["--dataset", "mri", "--quick", "--work", str(tmp_path), "--samplers",
                         "random,entropy,coreset,mad,madplus"])
    assert out["dataset"] == "mri" and (tmp_path / "results.json").is_file()
    assert (tmp_path / "label_efficiency.png").stat().st_size > 1000
    assert [r["strategy"] for r in out["runs"]] == ["random", "entropy", "coreset", "mad", "madplus"]
    import label_efficiency_mri as mri

    counts = out["pool_counts"]["0"]
    assert sum(counts.values()) == 24 and counts["in slice"] == 24 - round(24 * mri.HARD_SHARE)
    assert set(counts) <= {"in slice", *mri.CONDITIONS}
    for run in out["runs"]:
        first, last = run["points"]
        rated = run["strategy"] in ("mad", "madplus")
        # a rated round: 2 masks and 6 ratings; a baseline's: what that costs at rating:mask 1:3, 4 masks
        assert first["masks"] == first["ratings"] == 0 and last["masks"] == (2 if rated else 4)
        assert sum(run["picked"].values()) == last["masks"] and len(run["lrs"]) == 1
        assert {"hard", "T0", "shared"} <= set(last) and all(0 <= last[m] <= 1 for m in ("hard", "T0", "shared"))
        # people rate MAD's candidates first: its round costs ratings besides the masks
        assert (last["ratings"] > 0) == rated
    assert {"hard@1:32", "hard@1:10", "hard@1:3", "hard@seconds", "shared@1:3"} <= set(out["cost_sweep"])
    sweep = out["cost_sweep"]["hard@1:3"]
    assert len(sweep["checkpoints"]) == 1 and 2 < sweep["checkpoints"][0] <= 4 and set(sweep["mean"]) == {"random", "entropy", "coreset", "mad", "madplus"}
    models = {r["condition"]: r for r in out["models"]}
    assert list(models) == ["T0 (in slice)", *mri.CONDITIONS]
    assert all(0 <= r["target"] <= 1 and 0 <= r["d pspnet_r18"] <= 1 for r in models.values())
    recall, avail = bench["recall_table"](out["runs"], out["pool_counts"], bench["recall_view"]("mri"))
    assert list(recall.columns[:3]) == ["shared", "in slice", "hard"]
    assert avail["shared"] == sum(counts.get(c, 0) for c in mri.SHARED)
    assert avail["hard"] == sum(n for c, n in counts.items() if c != "in slice")


@needs_mricron
def test_quick_mri_bald_on_the_dropout_target_a_second_rater_and_merged_reports(tmp_path: Path, capsys):
    bench = runpy.run_path(str(BENCH), run_name="label_efficiency")
    a = bench["main"](["--dataset", "mri", "--quick", "--work", str(tmp_path / "a"), "--samplers", "mad,mad_2r"])
    # BALD's target is the dropout-trained variant on the same S0, beside the plain one
    assert {"tiny_unet.pt", "tiny_unet_dropout.pt"} <= {p.name for p in (tmp_path / "a" / "zoo_mri_32").iterdir()}
    mad, two = ({p["round"]: p for p in r["points"]} for r in a["runs"])
    assert two[1]["ratings"] == 2 * mad[1]["ratings"] > 0 and two[1]["masks"] == mad[1]["masks"] == 2
    # the cost checkpoints are the one-rater rounds: 2 masks + the ratings x ratio
    assert a["cost_sweep"]["hard@1:3"]["checkpoints"] == [pytest.approx(2 + mad[1]["ratings"] / 3)]
    run = a["runs"][0]
    import label_efficiency_mri as mri

    # the hard set per condition before and after the round, and what the round labelled per condition
    assert len(run["conditions"]) == 2 and all(list(c) == list(mri.CONDITIONS) for c in run["conditions"])
    assert sum(run["picked_rounds"][0].values()) == 2
    b = bench["main"](["--dataset", "mri", "--quick", "--work", str(tmp_path / "b"), "--samplers", "bald,mad"])
    assert b["runs"][0]["strategy"] == "bald" and len(b["runs"][0]["points"]) == 2
    # results.json is written after every loop; --resume keeps the finished loops and runs only the others
    again = bench["main"](["--dataset", "mri", "--quick", "--work", str(tmp_path / "b"), "--samplers", "bald,mad",
                           "--resume"])
    assert again["runs"] == json.loads(json.dumps(b["runs"], default=float)) and again["complete"]
    capsys.readouterr()
    merged = bench["main"](["--dataset", "mri", "--report-only", "--work", str(tmp_path / "a"), "--merge",
                            str(tmp_path / "b" / "results.json"), "--figure", str(tmp_path / "merged.png")])
    assert (tmp_path / "merged.png").stat().st_size > 1000
    # a (strategy, seed) already in the first file is kept from it: mad once, from a
    assert [r["strategy"] for r in merged["runs"]] == ["mad", "mad_2r", "bald"]
    assert merged["runs"][0] == a["runs"][0]
    assert "bald" in capsys.readouterr().out
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_text((tmp_path / "b" / "results.json").read_text()
                                                  .replace('"dataset": "mri"', '"dataset": "scenes"'))
    with pytest.raises(SystemExit, match="--merge: .* is a run of dataset 'scenes', expected 'mri'"):
        bench["main"](["--report-only", "--work", str(tmp_path / "a"), "--merge", str(tmp_path / "c" / "results.json")])


def test_quick_scenes_run_keeps_the_planted_blind_spot(tmp_path: Path):
    bench = runpy.run_path(str(BENCH), run_name="label_efficiency")
    out = bench["main"](["--quick", "--work", str(tmp_path), "--samplers", "margin,badge,qbc,mad,portfolio"])
    assert out["dataset"] == "scenes" and out["models"] is None
    folio = next(r for r in out["runs"] if r["strategy"] == "portfolio")["portfolio"]
    assert len(folio) == 1 and sum(folio[0]["M"].values()) == 6 and sum(folio[0]["S"].values()) == 2
    assert sum(folio[0]["shares"].values()) == pytest.approx(1.0) and set(folio[0]["rewards"]) == set(folio[0]["M"])
    counts = out["pool_counts"]["0"]
    assert sum(counts.values()) == 24 and counts["planted"] == round(24 * 0.08)
    for run in out["runs"]:
        assert {"hard", "T0", "planted"} <= set(run["points"][-1])
        assert run["points"][-1]["masks"] == (2 if run["strategy"] in ("mad", "portfolio") else 4)
    recall, _ = bench["recall_table"](out["runs"], out["pool_counts"])
    assert list(recall.columns[:3]) == ["planted", "in slice", "hard"]


def test_mri_without_the_templates_is_one_error_line(tmp_path: Path, capsys):
    bench = runpy.run_path(str(BENCH), run_name="label_efficiency")
    with pytest.raises(SystemExit) as stop:
        bench["main"](["--dataset", "mri", "--quick", "--work", str(tmp_path / "work"), "--mri-root", str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: root:") and "mricron-data" in err[0]


DEFAULTS_BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "portfolio_defaults.py"


def test_quick_scenes_pool_with_a_hard_share_and_portfolio_settings(tmp_path: Path):
    bench = runpy.run_path(str(BENCH), run_name="label_efficiency")
    out = bench["main"](["--quick", "--work", str(tmp_path), "--samplers", "portfolio", "--hard-share", "0.5",
                         "--portfolio-prior", "mad=1,qbc=3", "--teach-weights", "0,1,0"])
    counts = out["pool_counts"]["0"]
    shifted = sum(v for c, v in counts.items() if c not in ("in slice", "planted"))
    assert counts["planted"] == round(24 * 0.08) and counts.get("in slice", 0) == 24 - 12 - counts["planted"]
    assert shifted >= 12  # 12 scenes drawn shifted (one with two factors counts twice)
    folio = out["runs"][0]["portfolio"][0]
    assert set(folio["shares"]) == {"mad", "qbc"} and folio["shares"]["qbc"] > folio["shares"]["mad"]
    with pytest.raises(SystemExit, match="--portfolio-prior"):
        bench["main"](["--quick", "--work", str(tmp_path / "b"), "--samplers", "portfolio",
                       "--portfolio-prior", "badge=1"])


@needs_mricron
def test_portfolio_defaults_quick_run_prints_the_rule_and_its_choice(tmp_path: Path, capsys):
    bench = runpy.run_path(str(DEFAULTS_BENCH), run_name="portfolio_defaults")
    bench["main"](["--quick", "--work", str(tmp_path), "--datasets", "mri", "--seeds", "100",
                   "--variants", "current,no_rating"])
    out = capsys.readouterr().out
    assert "chosen by the rule:" in out and "no_rating" in out
    saved = json.loads((tmp_path / "mri" / "defaults.json").read_text())
    assert {r["variant"] for r in saved["runs"]} == {"current", "no_rating"}
    bench["main"](["--work", str(tmp_path), "--datasets", "mri", "--report-only"])
    assert "chosen by the rule:" in capsys.readouterr().out

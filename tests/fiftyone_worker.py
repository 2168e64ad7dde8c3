"""Runs inside the interpreter that has FiftyOne (tests/test_fiftyone.py starts it in a subprocess).

    python fiftyone_worker.py export SCAN PROJECT PICKS ISSUES SA  export both (CLI and library), tag, re-export
    python fiftyone_worker.py dump OUT.json NAME...              reload datasets, write what they hold as JSON,
                                                                 run the plugin's operator on a view of the first
    python fiftyone_worker.py walk WORKDIR PHOTO...              a dataset of the photos, scanned and mined by the
                                                                 `blindspots` command installed beside FiftyOne

Each prints one JSON line on stdout; every FiftyOne setting comes from the environment the test sets.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def export(scan: str, project: str, picks: str, issues: str, sa_maps: str) -> dict:
    import fiftyone as fo
    from typer.testing import CliRunner

    from blindspots.cli import app
    from blindspots.integrations.fiftyone import export_to_fiftyone
    from blindspots.loop import Project

    res = CliRunner().invoke(app, ["fiftyone", scan, "--dataset", "bs_scan", "--picks", picks,
                                   "--label-issues", issues, "--surprise-maps", sa_maps])
    assert res.exit_code == 0, res.output
    first = export_to_fiftyone(project, "bs_proj", progress=False)
    # a person tags a sample in FiftyOne; the project changes (one more rating); the export runs again
    ds = fo.load_dataset("bs_proj")
    sample = ds.match_tags("S1").first()
    sample.tags.append("checked_by_alice")
    sample.save()
    p = Project.open(project)
    p.answers.add_rating(0, sample["blindspots_id"], "carol", 5)
    p.close()
    again = export_to_fiftyone(project, "bs_proj", progress=False)
    # the project's scan with its picks exported onto the project's dataset: M/S/T and the ids stay
    export_to_fiftyone(Path(project) / "scans", "bs_proj", picks=[picks], progress=False)
    scan_again = export_to_fiftyone(scan, "bs_scan", picks=[picks], label_issues=issues, surprise_maps=sa_maps,
                                    progress=False)
    return {"cli": res.output, "first": first, "again": again, "scan_again": scan_again,
            "alice_sample": sample.filepath, "version": fo.__version__}


def dump(out: str, scan_out: str, target: str, competitor: str, *names: str) -> dict:
    import fiftyone as fo

    data = {}
    for name in names:
        ds = fo.load_dataset(name)
        schema = ds.get_field_schema()
        samples = []
        for s in ds.iter_samples():
            row: dict = {"filepath": s.filepath, "tags": list(s.tags), "fields": {}, "seg": {}, "heat": {}}
            for f in schema:
                v = s[f]
                if isinstance(v, fo.Segmentation):
                    row["seg"][f] = v.mask_path
                elif isinstance(v, fo.Heatmap):
                    row["heat"][f] = [v.map_path, list(v.range)]
                elif f not in ("id", "filepath", "tags", "metadata", "created_at", "last_modified_at") and \
                        (v is None or isinstance(v, (int, float, str, bool, list))):
                    row["fields"][f] = v
            samples.append(row)
        scheme = ds.app_config.color_scheme
        data[name] = {"samples": samples, "persistent": ds.persistent, "info": ds.info,
                      "mask_targets": {f: {str(k): v for k, v in t.items()} for f, t in ds.mask_targets.items()},
                      "colors": {f["path"]: f.get("maskTargetsColors") for f in (scheme.fields or [])} if scheme else {},
                      "color_by": scheme.color_by if scheme else None,
                      "schema": {f: type(t).__name__ for f, t in schema.items()}}
    with open(out, "w") as fh:
        json.dump(data, fh)
    # the plugin's operator, as the App runs it: mine the first 8 samples of the scan dataset
    import fiftyone.operators as foo

    view = fo.load_dataset(names[0]).sort_by("filepath").limit(8)
    res = foo.execute_operator("@blindspots/mine/mine_with_blindspots", ctx={
        "view": view, "params": {"strategy": "random", "n": 3, "seed": 1}})
    tagged = fo.load_dataset(names[0]).match_tags("mined:random")
    # the dataset and a saved view of it as pools (ids: FiftyOne's filepaths), scanned like any pool
    fo.load_dataset(names[0]).save_view("first8", view)
    scanned = scan_fiftyone(scan_out, target, competitor, names[0])
    return {"datasets": list(names), "version": fo.__version__, "view_ids": view.values("blindspots_id"),
            "scanned": scanned,
            "operator": res.result, "tagged": sorted(tagged.values("blindspots_id")),
            "ranks": dict(zip(tagged.values("blindspots_id"), tagged.values("picks_random_rank")))}


def scan_fiftyone(out: str, target: str, competitor: str, name: str) -> dict:
    """Scan `fiftyone://name` and `fiftyone://name?view=first8` with two models (torch installed beside FiftyOne)."""
    import torch

    torch.set_num_threads(1)
    from blindspots.data.sources import open_pool
    from blindspots.models.load import load_model
    from blindspots.scan import scan_pool

    models = {"target": load_model(target), "comp_a": load_model(competitor)}
    done = {}
    for key, uri in (("all", f"fiftyone://{name}"), ("first8", f"fiftyone://{name}?view=first8")):
        pool = open_pool(uri)
        scan_pool(pool, models, f"{out}/{key}", target="target", progress=False)
        done[key] = {"root": pool.root, "describe": pool.describe(), "n": len(pool)}
    for bad in ("fiftyone://no_such_dataset", f"fiftyone://{name}?view=no_such_view", f"fiftyone://{name}?views=x"):
        try:
            open_pool(bad).ids
        except ValueError as exc:
            done[bad] = str(exc)
    return done


def walk(work: str, *photos: str) -> dict:
    """The own-models path in FiftyOne's environment: a FiftyOne dataset of `photos` (copies at most 64 px on a
    side, so the scan stays quick), scanned as `fiftyone://walk` with two `module:factory?weights=` torch models and
    mined with MAD, by the `blindspots` console script of this interpreter's environment (no PYTHONPATH: the test
    starts this worker without one, so blindspots and torch come from what pip installed). Then a command whose
    extra is not installed here, which must fail in one line."""
    import os
    import subprocess

    import fiftyone as fo
    import torch
    from core_walk import MODEL_SRC  # the core install's small segmenter (tests/ is this script's folder)
    from PIL import Image

    root = Path(work)
    (root / "images").mkdir(parents=True)
    (root / "walk_models.py").write_text(MODEL_SRC)
    sys.path.insert(0, str(root))
    import walk_models

    for seed, name in ((0, "target.pt"), (1, "rival.pt")):
        torch.manual_seed(seed)
        torch.save(walk_models.build(3).state_dict(), root / name)
    paths = []
    for src in photos:
        with Image.open(src) as im:
            im = im.convert("RGB")
            im.thumbnail((64, 64))
            paths.append(str(root / "images" / (Path(src).stem + ".png")))
            im.save(paths[-1])
    ds = fo.Dataset("walk", persistent=True)
    ds.add_samples([fo.Sample(filepath=p) for p in paths])

    exe = str(Path(sys.executable).with_name("blindspots"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([exe, *args], cwd=root, env=env, capture_output=True, text=True, timeout=180)

    scan = run("scan", "fiftyone://walk", "-t", "tgt=walk_models:build?weights=target.pt",
               "-c", "rival=walk_models:build?weights=rival.pt", "--out", "scan", "--no-progress")
    mine = run("mine", "scan", "--strategy", "mad", "-n", "3", "--out", "picks")
    missing = run("scan", "fiftyone://walk", "-t", "tgt=walk_models:build?weights=target.pt", "--engine", "ray",
                  "--out", "rayscan", "--no-progress")  # Ray is in no extra installed here
    import blindspots

    return {"paths": paths, "blindspots_file": blindspots.__file__, "torch": torch.__version__,
            "fiftyone": fo.__version__,
            "scan": [scan.returncode, scan.stdout[-2000:], scan.stderr[-2000:]],
            "mine": [mine.returncode, mine.stdout[-2000:], mine.stderr[-2000:]],
            "missing": [missing.returncode, missing.stdout[-2000:], missing.stderr[-2000:]]}


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    result = {"export": export, "dump": dump, "walk": walk}[cmd](*args)
    print("RESULT " + json.dumps(result))

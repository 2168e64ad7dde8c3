"""`init --scan DIR`: a new project takes a scan the user already made (`blindspots scan`) instead of
scanning the pool again in its first `round`.

A scan fits when it read the same pool (the same sorted ids) at native size and holds every model of
the project made with the same weights and the same spec options (the scan's fingerprints and
settings, `blindspots.scan.fingerprint`). Anything else is refused with the reason, since a project
mixing two pools or two versions of a model would compare things that are not comparable.

The scan is copied into the project's `scans/` (maps hard-linked when the file system allows), with
the target renamed `<target>_v0`, the project's name for the target's first version.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Mapping

import pyarrow.parquet as pq

from blindspots.scan.fingerprint import model_fingerprint, model_settings
from blindspots.scan.manifest import ids_digest, load_manifest, save_manifest
from blindspots.scan.plan import scan_ids

__all__ = ["check_scan_fits", "adopt_scan"]


def check_scan_fits(scan_dir: str | Path, pool: Any, models: Mapping[str, Any], target: str,
                    shard_size: int) -> dict:
    """The scan's manifest when `scan_dir` fits a project of `pool` and `models` (name -> loaded
    model; `target` among them); ValueError naming `--scan` and the reason otherwise."""
    scan_dir = Path(scan_dir)
    man = load_manifest(scan_dir)
    if man is None:
        raise ValueError(f"--scan: expected a scan folder (with scan.json, written by `blindspots.scan`), got "
                         f"{str(scan_dir)!r}")
    if man.get("ids_sha256") != ids_digest(scan_ids(pool)):
        raise ValueError(f"--scan: expected a scan of the project's pool {str(pool.root)!r} "
                         f"({len(pool.ids)} images), got a scan of {man.get('pool_root')!r} "
                         f"({man.get('n_images')} images, another set of files)")
    if man.get("resize"):
        raise ValueError(f"--scan: expected a scan at the images' own sizes (a project scans without --resize), "
                         f"got one resized to {man['resize']}")
    if int(man.get("shard_size", -1)) != int(shard_size):
        raise ValueError(f"--scan: expected shards of {shard_size} images (the project's scan.shard_size), got "
                         f"{man.get('shard_size')}; scan again with --shard-size {shard_size}")
    scanned = man.get("models", {})
    for name, model in models.items():
        rec = scanned.get(name)
        if rec is None:
            raise ValueError(f"--scan: expected the model {name!r} in the scan (the project's names must be the "
                             f"scan's), got models {sorted(scanned)}")
        fp, settings = model_fingerprint(model), model_settings(model)
        if fp is None or rec.get("fingerprint") != fp:
            raise ValueError(f"--scan: expected {name!r} with the same weights as in the scan, got another model "
                             f"(fingerprint {str(fp)[:18]}… vs the scan's {str(rec.get('fingerprint'))[:18]}…)"
                             if fp is not None else
                             f"--scan: expected {name!r} to be a model whose weights can be checked, got one that "
                             "cannot (a plain callable); let the project scan it")
        if rec.get("settings") != settings:
            raise ValueError(f"--scan: expected {name!r} with the scan's spec options ({rec.get('settings')}), got "
                             f"({settings}): its maps would differ")
    if man.get("target") != target:
        raise ValueError(f"--scan: expected a scan whose target is {target!r}, got target {man.get('target')!r}")
    names = getattr(getattr(models[target], "classes", None), "names", None)
    scanned_names = (man.get("classes") or {}).get("names")
    if names is not None and scanned_names is not None and list(names) != list(scanned_names):
        # the project's classes are the scan's from here on (`loop.context.LoopContext.classes`)
        raise ValueError(f"--scan: expected the target's classes {list(names)}, got a scan that names them "
                         f"{list(scanned_names)}; give both the same classes= file")
    return man


def _rename(name: str, old: str, new: str) -> str:
    """A scan column or folder name with the model component `old` replaced (split on '__')."""
    return "__".join(new if part == old else part for part in name.split("__"))


def _link_tree(src: Path, dst: Path) -> None:
    """Copy a folder, hard-linking files where possible (maps: many files, never changed in place)."""
    def link(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link, dirs_exist_ok=True)


def adopt_scan(scan_dir: str | Path, project_scan_dir: str | Path, target: str, column: str) -> None:
    """Copy a fitting scan into the project's scan folder, the target `target` renamed `column`."""
    src, dst = Path(scan_dir), Path(project_scan_dir)
    man = load_manifest(src)
    for top in ("meta", "models", "pairs", "extra"):
        if not (src / top).is_dir():
            continue
        for part in sorted(p for p in (src / top).iterdir() if p.is_dir()) if top != "meta" else [src / top]:
            out = dst / top / (_rename(part.name, target, column) if top != "meta" else "")
            out.mkdir(parents=True, exist_ok=True)
            for f in sorted(part.glob("*.parquet")):
                table = pq.read_table(f)
                table = table.rename_columns([_rename(c, target, column) for c in table.column_names])
                pq.write_table(table, out / f.name)
    for maps in sorted((src / "maps").iterdir()) if (src / "maps").is_dir() else []:
        _link_tree(maps, dst / "maps" / _rename(maps.name, target, column))
    man = dict(man or {})
    man["models"] = {_rename(k, target, column): v for k, v in man.get("models", {}).items()}
    man["target"] = column
    save_manifest(dst, man)

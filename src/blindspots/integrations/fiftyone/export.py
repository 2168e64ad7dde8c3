"""`export_to_fiftyone`: a scan folder or a project folder to a FiftyOne dataset, in one call."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from blindspots.config import CONFIG_FILE
from blindspots.integrations.fiftyone.dataset import import_fiftyone, write_dataset
from blindspots.integrations.fiftyone.project import project_samples
from blindspots.integrations.fiftyone.samples import SampleTable, add_picks, scan_samples
from blindspots.loop import Project
from blindspots.scan.layout import MANIFEST


def is_project(path: str | Path) -> bool:
    """A project folder (`blindspots init`: its blindspots.toml) rather than a scan folder."""
    return (Path(path) / CONFIG_FILE).is_file()


def check_source(source: str | Path) -> Path:
    """`source` as a Path if it is a project folder or a scan folder; else a ValueError saying what it is."""
    source = Path(source)
    if not source.is_dir():
        raise ValueError(f"source: expected a scan folder or a project folder, got {str(source)!r} (not a folder)")
    if not is_project(source) and not (source / MANIFEST).is_file():
        raise ValueError(f"source: expected a scan folder (with {MANIFEST}) or a project folder (with {CONFIG_FILE}), "
                         f"got {str(source)!r} without either")
    return source


def export_samples(source: str | Path, *, pool_root: str | Path | None = None, maps_dir: str | Path | None = None,
                   picks: Sequence[str | Path] = (), label_issues: str | Path | None = None,
                   surprise_maps: str | Path | None = None, progress: bool = True) -> SampleTable:
    """The `SampleTable` of a scan folder (`scan_samples`) or of a project (`project_samples`)."""
    source = check_source(source)
    if is_project(source):
        project = Project.open(source, check_files=False)
        try:
            table = project_samples(project, pool_root=pool_root, maps_dir=maps_dir, label_issues=label_issues,
                                    surprise_maps=surprise_maps, progress=progress)
        finally:
            project.close()
        for folder in picks:
            add_picks(table, table.fields["blindspots_id"].tolist(), folder)
        return table
    return scan_samples(source, pool_root=pool_root, maps_dir=maps_dir, picks=picks, label_issues=label_issues,
                        surprise_maps=surprise_maps, progress=progress)


def export_to_fiftyone(source: str | Path, dataset: str, *, pool_root: str | Path | None = None,
                       maps_dir: str | Path | None = None, picks: Sequence[str | Path] = (),
                       label_issues: str | Path | None = None, surprise_maps: str | Path | None = None,
                       overwrite: bool = False, progress: bool = True) -> dict:
    """Export a scan or a project folder into the FiftyOne dataset `dataset` (created, or updated in
    place: one sample per pool image, keyed by filepath). Returns `write_dataset`'s counts.

    pool_root: where the pool's images are now (default: the folder that was scanned).
    maps_dir: where the drawn disagreement maps go (default: `<scan>/fiftyone`, `<project>/reports/fiftyone`).
    picks: `blindspots mine --out` folders to tag. label_issues: a `blindspots label-issues --out` folder.
    surprise_maps: per-pixel SA maps of the pool's images (`blindspots surprise view --maps`).
    """
    check_source(source)
    import_fiftyone()  # fail before any work when FiftyOne is missing
    table = export_samples(source, pool_root=pool_root, maps_dir=maps_dir, picks=picks, label_issues=label_issues,
                           surprise_maps=surprise_maps, progress=progress)
    return write_dataset(table, dataset, overwrite=overwrite, progress=progress)

"""`blindspots fiftyone`: a scan or a project as a FiftyOne dataset (needs `blindspots[fiftyone]`)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

# Lazy imports: pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without them).


def fiftyone(
    source: Path = typer.Argument(..., help="A scan folder (`blindspots scan --out`) or a project folder."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="FiftyOne dataset name (created, or updated in place: "
                                "one sample per pool image, no duplicates)."),
    pool: Optional[Path] = typer.Option(None, help="Where the pool's images are now (default: the folder that "
                                        "was scanned)."),
    picks: Optional[List[Path]] = typer.Option(None, "--picks", help="A `blindspots mine --out` folder: its picks "
                                               "are tagged mined:<folder name> (repeatable)."),
    label_issues: Optional[Path] = typer.Option(None, "--label-issues", help="A `blindspots label-issues --out` "
                                                "folder: its issue maps as a heatmap, its scores as fields."),
    surprise_maps: Optional[Path] = typer.Option(None, "--surprise-maps", help="Per-pixel surprise maps of the pool "
                                                 "(`blindspots surprise view --maps`): a heatmap per image."),
    maps_dir: Optional[Path] = typer.Option(None, "--maps-dir", help="Where the disagreement maps are drawn "
                                            "and the surprise maps converted (default: SCAN/fiftyone or PROJECT/reports/fiftyone)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete the dataset first (loses what people added "
                                   "to it in FiftyOne)."),
) -> None:
    """Export SOURCE into the FiftyOne dataset --dataset: scores as fields, predictions as segmentations,
    disagreement / label-issue maps as heatmaps, mined picks and a project's M, S, T as tags."""
    from blindspots.integrations.fiftyone import export_to_fiftyone

    counts = export_to_fiftyone(source, dataset, pool_root=pool, maps_dir=maps_dir, picks=picks or (),
                                label_issues=label_issues, surprise_maps=surprise_maps, overwrite=overwrite)
    typer.echo(f"FiftyOne dataset {counts['dataset']!r}: {counts['samples']} samples ({counts['added']} added, "
               f"{counts['updated']} updated" + (f", {counts['not_in_source']} no longer in the pool kept"
                                                 if counts["not_in_source"] else "") + ")")
    typer.echo(f"look at it: python -c \"import fiftyone as fo; fo.launch_app(fo.load_dataset('{dataset}')).wait()\"")


def register(app: typer.Typer) -> None:
    """Add the `fiftyone` command."""
    app.command("fiftyone")(fiftyone)

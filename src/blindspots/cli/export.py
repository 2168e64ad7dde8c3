"""`blindspots export`: the images awaiting masks, with the target's prediction as a pre-annotation, for a
labelling tool (CVAT, Label Studio)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from blindspots.cli.project_folder import open_project

# Lazy imports: jinja2, matplotlib, pandas, scipy, sklearn, threadpoolctl, torch (`blindspots --help` starts without
# them).


def export(
    project: Path = typer.Argument(..., help="Project folder."),
    format: str = typer.Option(..., "--format", help="cvat (zip) or labelstudio (JSON)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output file (default: reports/round-<i>-...)."),
    round: Optional[int] = typer.Option(None, "--round", help="Round (default: the current one)."),
    image_root: Optional[Path] = typer.Option(
        None, "--image-root", help="labelstudio: the pool folder as Label Studio's machine sees it (default: the "
        "project's pool); task URLs become /data/local-files/?d=<path relative to --document-root>."),
    document_root: Optional[Path] = typer.Option(
        None, "--document-root", help="labelstudio: LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT (default: that "
        "variable, else the parent of --image-root; see docs/annotation_tools.md)."),
    image_url: Optional[str] = typer.Option(
        None, "--image-url", help="labelstudio: image URL template with {id} or an http(s)/s3/gs base URL "
        "(beats --image-root)."),
) -> None:
    """Export the images awaiting masks with the target's prediction as a pre-annotation (labelstudio: and
    the labelling config beside the tasks); `--round N` exports a past round's S ∪ T again."""
    from blindspots.loop import export_for_annotation

    path = export_for_annotation(open_project(project), format, out, round=round, image_url=image_url,
                                 image_root=image_root, document_root=document_root)
    typer.echo(f"wrote {path}")
    if format == "labelstudio":
        from blindspots.loop import labelstudio_config_path

        typer.echo(f"wrote {labelstudio_config_path(path)} (paste it into the Label Studio project's Settings → "
                   "Labeling Interface, then import the tasks; docs/annotation_tools.md)")


def register(app: typer.Typer) -> None:
    """Add `export` to the root `blindspots` app."""
    app.command("export")(export)

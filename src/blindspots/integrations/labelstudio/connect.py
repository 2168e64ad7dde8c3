"""`connect`: link a project to a Label Studio server, create or check its two Label Studio projects
(masks: brush + polygon labels of the classes; ratings: 1-5 + out-of-domain), and let Label Studio
serve the pool (a Local Files storage under its document root, or image URLs of the pool's store)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from blindspots.data.classes import Classes
from blindspots.data.formats.labelstudio import DOCUMENT_ROOT_ENV, task_image_url
from blindspots.data.formats.labelstudio_config import RATING_CHOICES, labeling_config, rating_config, read_config
from blindspots.integrations.labelstudio.client import LabelStudio, read_token
from blindspots.integrations.labelstudio.connection import Connection, connection_path, load_connection, save_connection

# Lazy imports: pandas, pyarrow.parquet (the Label Studio commands start without them).


def project_classes(project: Any) -> Classes:
    """The loop's label space (the target's classes)."""
    from blindspots.loop import LoopContext

    return LoopContext(project, simulate=False, progress=False).classes


def check_config(xml: str, classes: Classes, kind: str, pid: int) -> None:
    """ValueError unless Label Studio project `pid`'s config can hold our `kind` of answers: masks need an
    Image with BrushLabels or PolygonLabels naming every class; ratings need Choices with RATING_CHOICES."""
    tags = read_config(xml)
    option = f"--{kind}-project"
    if kind == "masks":
        if tags.image is None or not (tags.brush or tags.polygon):
            raise ValueError(f"{option}: expected Label Studio project {pid} to label images with BrushLabels or "
                             f"PolygonLabels, got a labelling config with {config_summary(tags)}; pick a segmentation "
                             f"project or leave {option} out to create one")
        have = {v for labels in list(tags.brush.values()) + list(tags.polygon.values()) for v in labels}
        missing = [n for n in classes.names if n not in have]
        if missing:
            raise ValueError(f"{option}: expected every class as a label of Label Studio project {pid}, got "
                             f"{missing} missing; add them in Label Studio (Settings -> Labeling Interface) or "
                             "pass --update-config to write the generated config")
        return
    values = {v for choices in tags.choices.values() for v in choices}
    if tags.image is None or not set(RATING_CHOICES) <= values:
        raise ValueError(f"{option}: expected Label Studio project {pid} to rate images with the choices "
                         f"{list(RATING_CHOICES)}, got a labelling config with {config_summary(tags)}; pass "
                         f"--update-config or leave {option} out to create one")


def config_summary(tags: Any) -> str:
    """A labelling config's tags in words (`read_config`'s ConfigTags), for error messages."""
    parts = [f"{k} {list(v)}" for k, v in (("BrushLabels", tags.brush), ("PolygonLabels", tags.polygon),
                                            ("Choices", tags.choices)) if v]
    return ", ".join(parts) or ("an Image only" if tags.image else "no Image and no labels")


def _ensure_project(client: LabelStudio, kind: str, pid: int | None, config: str, classes: Classes, *,
                    title: str, update_config: bool, settings: dict[str, Any], created: list[int]) -> int:
    """The Label Studio project for `kind`: `pid` checked (or its config updated), else a new one, whose id is
    appended to `created` (so that a `connect` failing later removes it again)."""
    if pid is None:
        new = int(client.create_project(title, config, **settings)["id"])
        created.append(new)
        return new
    info = client.project(pid)
    if update_config and info.get("label_config") != config:
        client.update_project(pid, label_config=config)
    else:
        check_config(str(info.get("label_config") or ""), classes, kind, pid)
    return int(pid)


def _serve_pool(client: LabelStudio, conn: Connection, pool_root: Path) -> None:
    """Local files: the pool must be a strict subfolder of the document root; one Local Files storage
    per Label Studio project with the pool's path (Label Studio serves no file outside a storage)."""
    if conn.image_url is not None:
        task_image_url("x.png", image_url=conn.image_url)  # a bad template fails here, not at push
        return
    doc = conn.document_root or os.environ.get(DOCUMENT_ROOT_ENV)
    if not doc:
        raise ValueError(f"document_root: expected Label Studio's {DOCUMENT_ROOT_ENV} (a parent folder of the pool "
                         f"{str(pool_root)!r}) or --image-url, got neither")
    conn.document_root = str(Path(os.path.abspath(doc)))
    task_image_url("x.png", image_root=pool_root, document_root=conn.document_root)  # strict subfolder
    for kind in ("masks", "ratings"):
        pid = conn.ls_project(kind)
        paths = {os.path.abspath(str(s.get("path") or "")) for s in client.local_storages(pid)}
        if str(pool_root) not in paths:
            client.add_local_storage(pid, str(pool_root), title="blindspots pool")


def connect(project: Any, url: str, *, token_env: str | None = None, token_file: str | Path | None = None,
            masks_project: int | None = None, ratings_project: int | None = None, image_url: str | None = None,
            document_root: str | Path | None = None, update_config: bool = False) -> Connection:
    """Connect `project` (a loop Project) to Label Studio at `url`; returns the saved Connection.

    Re-running keeps the pushed/pulled ledger and the Label Studio projects made before (unless other
    ids are given). masks_project / ratings_project: use these existing Label Studio projects (their
    labelling configs are checked; update_config writes the generated ones instead).
    """
    old = load_connection(project.path) if connection_path(project.path).is_file() else None
    conn = Connection(url=url.rstrip("/"), token_env=token_env, token_file=None if token_file is None
                      else str(Path(token_file).resolve()),
                      image_url=image_url, document_root=None if document_root is None else str(document_root))
    if old is not None:
        conn.tasks, conn.pulled, conn.webhook_url = old.tasks, old.pulled, old.webhook_url
    client = LabelStudio(conn.url, read_token(conn.token_env, conn.token_file))
    client.whoami()  # wrong URL or token: one line now
    created: list[int] = []
    try:
        _connect(project, client, conn, old, masks_project, ratings_project, update_config, created)
    except BaseException as e:
        # nothing half-made stays behind: the next `connect` would otherwise create two more projects
        left = [pid for pid in created if not _delete_quietly(client, pid)]
        if left and isinstance(e, ValueError):
            raise ValueError(f"{e} (and the Label Studio project(s) {left} it created could not be deleted)") from None
        raise
    save_connection(project.path, conn)
    return conn


def _delete_quietly(client: LabelStudio, pid: int) -> bool:
    try:
        client.delete_project(pid)
        return True
    except Exception:  # noqa: BLE001 - the original error is the one to report
        return False


def _connect(project: Any, client: LabelStudio, conn: Connection, old: Connection | None,
             masks_project: int | None, ratings_project: int | None, update_config: bool,
             created: list[int]) -> None:
    """connect's work after the sign-in: the two Label Studio projects and the pool's storage."""
    classes = project_classes(project)
    name = project.config.project.name or project.path.name
    conn.masks_project = _ensure_project(
        client, "masks", masks_project if masks_project is not None else (old and old.masks_project),
        labeling_config(classes), classes, title=f"{name}: masks"[:50], update_config=update_config, created=created,
        settings={"maximum_annotations": 1, "show_collab_predictions": True,
                  "description": "Pixel labels of S and T of the round (blindspots); the target's prediction is "
                                 "pre-annotated: correct it and submit. Region tasks (polygons): relabel a wrong "
                                 "polygon, delete one that is mixed or unsure."})
    conn.ratings_project = _ensure_project(
        client, "ratings", ratings_project if ratings_project is not None else (old and old.ratings_project),
        rating_config(classes), classes, title=f"{name}: ratings"[:50], update_config=update_config, created=created,
        settings={"maximum_annotations": int(project.config.ratings.raters), "show_collab_predictions": True,
                  "description": "Rate the target's segmentation of each mined candidate (M): 1 = bad, "
                                 "5 = excellent, or out-of-domain."})
    root = str(project.config.pool.root)
    if conn.image_url is None and re.match(r"^[a-z][a-z0-9+.-]*://", root):
        conn.image_url = root.rstrip("/") + "/{id}"  # an object-store pool: Label Studio reads the store itself
    pool_root = Path(project.config.resolve(root)).resolve() if conn.image_url is None else Path(root)
    _serve_pool(client, conn, pool_root)

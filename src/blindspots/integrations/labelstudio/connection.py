"""A project's link to Label Studio: `PROJECT/labelstudio.json` (URL, where the token is read from,
the two Label Studio projects, how images are served) and the ledger of pushed tasks and pulled
annotations. The token itself is never written.

Ledger keys are "<Label Studio project id>:<task id>":
- tasks[key] = {"kind": "masks" | "ratings", "round": i, "id": image id}: what push created;
- pulled[key] = a signature of the annotations stored from that task (re-pulling the same is a no-op).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from blindspots.atomic import write_atomic
from blindspots.integrations.labelstudio.client import LabelStudio, read_token

CONNECTION_FILE = "labelstudio.json"
KINDS = ("masks", "ratings")


@dataclass
class Connection:
    """Where a project meets Label Studio (see the module docstring)."""

    url: str
    token_env: str | None = None
    token_file: str | None = None
    masks_project: int | None = None
    ratings_project: int | None = None
    image_url: str | None = None          # a template with {id} or a base URL (object store, image host)
    document_root: str | None = None      # Label Studio's LOCAL_FILES_DOCUMENT_ROOT (local files serving)
    webhook_url: str | None = None
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    pulled: dict[str, str] = field(default_factory=dict)

    def client(self) -> LabelStudio:
        return LabelStudio(self.url, read_token(self.token_env, self.token_file))

    def ls_project(self, kind: str) -> int:
        pid = self.masks_project if kind == "masks" else self.ratings_project
        if pid is None:
            raise ValueError(f"{kind}: expected a Label Studio project for {kind}, got none (connect the project "
                             "to Label Studio again)")
        return int(pid)

    def pushed(self, kind: str) -> dict[int, dict[str, Any]]:
        """task id -> record, of the tasks push created in the current `kind` project."""
        pid = self.ls_project(kind)
        return {int(k.split(":")[1]): v for k, v in self.tasks.items()
                if v.get("kind") == kind and int(k.split(":")[0]) == pid}


def connection_path(project_path: Path) -> Path:
    return Path(project_path) / CONNECTION_FILE


def load_connection(project_path: Path) -> Connection:
    """The project's connection; a ValueError telling how to make one when there is none."""
    path = connection_path(project_path)
    if not path.is_file():
        raise ValueError(f"project: expected a Label Studio connection ({CONNECTION_FILE}) in {str(project_path)!r}, "
                         f"got none; connect it first (`blindspots.integrations.labelstudio.connect(project, url)`, the "
                         "`labelstudio connect` command)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return Connection(**{f.name: raw[f.name] for f in fields(Connection) if f.name in raw})
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{CONNECTION_FILE}: expected the JSON that connecting to Label Studio writes, "
                         f"got {e}") from None


def save_connection(project_path: Path, conn: Connection) -> Path:
    """Write atomically (a crash leaves the old file or the new one, never half of one)."""
    text = json.dumps(asdict(conn), indent=1, sort_keys=True)
    return write_atomic(connection_path(project_path), lambda t: t.write_text(text, encoding="utf-8"))

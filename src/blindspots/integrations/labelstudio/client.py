"""A connection to a running Label Studio through its official SDK (`label-studio-sdk`), with every
failure turned into one-line ValueErrors that name the URL or the token.

Why a wrapper: the SDK raises httpx transport errors and `ApiError(status_code, body)`; a user needs
"wrong URL", "wrong token" or "connection lost" in one line, and the calls we make stay in one place.
The API token is read from an environment variable or a file (`read_token`), never taken from the
command line, so it stays out of shell histories and process lists.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

from blindspots.extras import require

# Lazy imports: httpx (the Label Studio commands start without them); label_studio_sdk (optional: only the call that
# uses it needs it).

#: the environment variable the SDK and Label Studio's docs use for the API token
TOKEN_ENV = "LABEL_STUDIO_API_KEY"


def read_token(token_env: str | None = None, token_file: str | Path | None = None) -> str:
    """The API token: the first line of `token_file`, else the environment variable `token_env`
    (default LABEL_STUDIO_API_KEY); a ValueError saying where it was looked for."""
    if token_file is not None:
        path = Path(token_file)
        if not path.is_file():
            raise ValueError(f"token_file: expected a file holding the Label Studio API token, got {str(path)!r} "
                             "(no such file)")
        token = path.read_text(encoding="utf-8").strip().splitlines()[0:1]
        if not token or not token[0].strip():
            raise ValueError(f"token_file: expected the Label Studio API token in {str(path)!r}, got an empty file")
        return token[0].strip()
    name = token_env or TOKEN_ENV
    token = os.environ.get(name, "").strip()
    if not token:
        raise ValueError(f"token: expected the Label Studio API token in the environment variable {name} (or a "
                         f"--token-file), got none (Label Studio: Account & Settings -> Access Token)")
    return token


def _plain(obj: Any) -> Any:
    """SDK models -> plain dicts (recursively)."""
    if hasattr(obj, "dict") and callable(obj.dict):
        return obj.dict()
    if isinstance(obj, list):
        return [_plain(o) for o in obj]
    return obj


class LabelStudio:
    """One Label Studio server: `url` (http://host:port) and an API token (legacy or personal)."""

    def __init__(self, url: str, token: str, *, timeout: float = 60.0) -> None:
        Sdk = require("label_studio_sdk.client", "talking to Label Studio").LabelStudio
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"url: expected the Label Studio address as http(s)://host:port, got {url!r}")
        self.url = url.rstrip("/")
        self.sdk = Sdk(base_url=self.url, api_key=token, timeout=timeout)

    # ---- errors ------------------------------------------------------------------------------
    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs) with the SDK's and httpx's errors as one-line ValueErrors."""
        import httpx
        from label_studio_sdk.core.api_error import ApiError

        try:
            return fn(*args, **kwargs)
        except ApiError as e:
            body = e.body if isinstance(e.body, dict) else {"detail": str(e.body)[:200]}
            detail = " ".join(str(body[k]) for k in ("detail", "validation_errors") if body.get(k)) or body
            if e.status_code in (401, 403):
                raise ValueError(f"token: Label Studio at {self.url} refused the API token ({e.status_code}: "
                                 f"{detail}); expected a valid token of a user of that server") from None
            if e.status_code == 404:
                raise ValueError(f"{what}: Label Studio at {self.url} has no such object (404: {detail})") from None
            raise ValueError(f"{what}: Label Studio at {self.url} answered {e.status_code}: "
                             f"{' '.join(str(detail).split())[:400]}") from None
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            raise ValueError(f"url: expected a Label Studio server at {self.url}, got no answer ({e})") from None
        except httpx.TransportError as e:
            raise ValueError(f"{what}: the connection to Label Studio at {self.url} was lost ({type(e).__name__}: "
                             f"{e}); nothing was written, run it again") from None
        except ValueError as e:  # a server that is not Label Studio: HTML where JSON was expected
            raise ValueError(f"url: expected a Label Studio API at {self.url}, got an answer that is not one "
                             f"({what}: {e})") from None

    # ---- the calls we make --------------------------------------------------------------------
    def whoami(self) -> dict:
        """The token's user (checks URL and token at once; a server that is not Label Studio is a `url` error)."""
        try:
            user = _plain(self.call("whoami", self.sdk.users.whoami))
        except ValueError as e:
            if str(e).startswith(("url:", "token:")):
                raise
            raise ValueError(f"url: expected a Label Studio API at {self.url}, got another server ({e})") from None
        if not isinstance(user, dict) or "id" not in user:
            raise ValueError(f"url: expected a Label Studio API at {self.url}, got {str(user)[:200]!r}")
        return user

    def users(self) -> dict[int, str]:
        """user id -> e-mail (annotations name their author by id)."""
        return {int(u["id"]): str(u.get("email") or u.get("username") or u["id"])
                for u in _plain(self.call("users", self.sdk.users.list))}

    def project(self, project_id: int) -> dict:
        return _plain(self.call(f"project {project_id}", self.sdk.projects.get, int(project_id)))

    def create_project(self, title: str, label_config: str, **settings: Any) -> dict:
        return _plain(self.call("create project", self.sdk.projects.create, title=title, label_config=label_config,
                                **settings))

    def delete_project(self, project_id: int) -> None:
        self.call(f"project {project_id}", self.sdk.projects.delete, int(project_id))

    def update_project(self, project_id: int, **fields: Any) -> dict:
        return _plain(self.call(f"project {project_id}", self.sdk.projects.update, int(project_id), **fields))

    def import_tasks(self, project_id: int, tasks: list[dict]) -> list[int]:
        """Create tasks (with their predictions); returns the new task ids in order."""
        r = _plain(self.call(f"import tasks into project {project_id}", self.sdk.projects.import_tasks,
                             int(project_id), request=tasks, return_task_ids=True))
        ids = r.get("task_ids") if isinstance(r, dict) else None
        if ids is None or len(ids) != len(tasks):
            raise ValueError(f"import tasks into project {project_id}: expected {len(tasks)} task ids from "
                             f"Label Studio at {self.url}, got {r}")
        return [int(x) for x in ids]

    def tasks(self, project_id: int, *, page_size: int = 100) -> Iterator[dict]:
        """Every task of the project with its annotations and predictions (paged)."""
        pager = self.call(f"tasks of project {project_id}", self.sdk.tasks.list, project=int(project_id),
                          fields="all", page_size=page_size)
        it = iter(pager)
        while True:
            item = self.call(f"tasks of project {project_id}", next, it, None)
            if item is None:
                return
            yield _plain(item)

    def task(self, task_id: int) -> dict:
        return _plain(self.call(f"task {task_id}", self.sdk.tasks.get, str(int(task_id))))

    def local_storages(self, project_id: int) -> list[dict]:
        return _plain(self.call(f"storages of project {project_id}", self.sdk.import_storage.local.list,
                                project=int(project_id)))

    def add_local_storage(self, project_id: int, path: str, title: str) -> dict:
        return _plain(self.call(f"local files storage {path!r}", self.sdk.import_storage.local.create,
                                project=int(project_id), path=path, title=title, use_blob_urls=False))

    def webhooks(self, project_id: int) -> list[dict]:
        return _plain(self.call("webhooks", self.sdk.webhooks.list, project=str(int(project_id))))

    def add_webhook(self, project_id: int, url: str) -> dict:
        return _plain(self.call(f"webhook {url}", self.sdk.webhooks.create, url=url, project=int(project_id),
                                send_payload=True, send_for_all_actions=False,
                                actions=["ANNOTATION_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_DELETED",
                                         "TASKS_DELETED"]))

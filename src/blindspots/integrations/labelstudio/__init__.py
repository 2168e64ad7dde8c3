"""Label Studio, live: connect a project to a Label Studio server, push a round's images as tasks with
the target's prediction pre-annotated (region questions as polygons, `regions.py`), pull the finished
annotations into the project's masks, region answers and ratings, and serve any registered model as a
Label Studio ML backend.

Public API:
- `connect(project, url, *, token_env=None, token_file=None, masks_project=None, ratings_project=None,
  image_url=None, document_root=None, update_config=False) -> Connection`
- `push(project, *, round=None, kind="masks"|"ratings", progress=True) -> PushReport`
- `pull(project, *, kind="masks"|"ratings", ignore_other=False) -> PullReport`
- `create_backend(project, *, model=None, version=None) -> FastAPI` (the ML backend protocol)
- `LabelStudio(url, token)`, `read_token(token_env, token_file)`, `load_connection(project_path)`
"""
from blindspots.integrations.labelstudio.backend import create_backend as make
from blindspots.integrations.labelstudio.client import TOKEN_ENV, LabelStudio, read_token
from blindspots.integrations.labelstudio.connect import connect
from blindspots.integrations.labelstudio.connection import Connection, load_connection
from blindspots.integrations.labelstudio.pull import PullReport, pull
from blindspots.integrations.labelstudio.push import PushReport, push


def create_backend(project, *, model=None, version=None):  # noqa: ANN001, ANN201 - FastAPI, imported lazily
    """The ML backend app for `project` (see `blindspots.integrations.labelstudio.backend`)."""
    return make(project, model=model, version=version)


__all__ = ["connect", "push", "pull", "create_backend", "Connection", "load_connection", "PushReport",
           "PullReport", "LabelStudio", "read_token", "TOKEN_ENV"]

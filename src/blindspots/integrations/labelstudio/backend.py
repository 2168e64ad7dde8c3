"""A Label Studio ML backend (the protocol of `label-studio-ml-backend`: GET /health, POST /setup,
POST /predict, POST /webhook) that answers with a registered model's prediction as brush regions, so
labellers get a start on any task, also on images they add to Label Studio themselves.

Where the pixels come from, per task: a pool image (`data.blindspots_id`, as push writes it), a Local
Files URL (`/data/local-files/?d=...`, read under the connection's document root), else the image URL
fetched from Label Studio with the connection's token (uploads). Pool images use the model's saved scan
map when there is one (what push pre-annotated), else a forward.
"""
from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import numpy as np
from PIL import Image

from blindspots.data.formats.labelstudio_config import BRUSH_NAME, IMAGE_NAME, read_config
from blindspots.integrations.labelstudio.client import read_token
from blindspots.integrations.labelstudio.connection import connection_path, load_connection
from blindspots.integrations.labelstudio.tasks import brush_prediction

# Lazy imports: fastapi, httpx, pandas, pyarrow.parquet (the Label Studio commands start without them).

log = logging.getLogger(__name__)


class _Predictor:
    """The model and the ways to find a task's image."""

    def __init__(self, project: Any, model: str | None, version: int | None) -> None:
        from blindspots.loop import LoopContext

        self.project = project
        self.loop = LoopContext(project, simulate=False, progress=False)
        self.name = model or project.config.target.name
        if not project.registry.is_registered(self.name):
            names = sorted({m.name for m in project.registry.models()})
            raise ValueError(f"model: expected a model registered in the project ({names}), got {self.name!r}")
        self.version = project.registry.model(self.name).version if version is None else int(version)
        project.registry.model(self.name, self.version)  # an unknown version fails now
        self.model_version = f"{self.name}_v{self.version}"
        self._conn: Any = None

    @property
    def conn(self) -> Any:
        if self._conn is None and connection_path(self.project.path).is_file():
            self._conn = load_connection(self.project.path)
        return self._conn

    def image(self, task: dict) -> tuple[str, np.ndarray, bool]:
        """(key, uint8 [H, W, 3], is a pool image) of a task."""
        data = task.get("data") or {}
        pool = self.loop.pool
        bid = data.get("blindspots_id")
        if bid is not None and str(bid) in pool:
            return str(bid), pool.load(str(bid)), True
        url = str(data.get("image") or next((v for v in data.values() if isinstance(v, str) and "/" in v), ""))
        if not url:
            raise ValueError(f"task {task.get('id')}: expected data.image, got keys {sorted(data)}")
        query = parse_qs(urlparse(url).query)
        doc = getattr(self.conn, "document_root", None)
        if "d" in query and doc:
            path = (Path(doc) / query["d"][0]).resolve()
            try:
                rel = path.relative_to(Path(pool.root).resolve()).as_posix()
            except ValueError:
                rel = None
            if rel is not None and rel in pool:
                return rel, pool.load(rel), True
            if path.is_file():
                return str(path), _decode(path.read_bytes()), False
        return url, self._fetch(url), False

    def _fetch(self, url: str) -> np.ndarray:
        import httpx

        if self.conn is None:
            raise ValueError(f"image: expected a pool image or a Label Studio connection to fetch {url!r}, got neither")

        full = url if urlparse(url).scheme else self.conn.url + "/" + url.lstrip("/")
        headers = {"Authorization": f"Token {read_token(self.conn.token_env, self.conn.token_file)}"}
        r = httpx.get(full, headers=headers, timeout=60, follow_redirects=True)
        r.raise_for_status()
        return _decode(r.content)

    def labels(self, key: str, image: np.ndarray, in_pool: bool) -> np.ndarray:
        from blindspots.loop.maps import model_map
        from blindspots.loop.models import predict_one

        if in_pool:
            return model_map(self.loop, self.name, self.version, key)
        proba = predict_one(self.loop.segmenter(self.name, self.version), key, image)
        return proba[0].argmax(0).astype(np.uint8)

    def predict(self, task: dict, config: str | None) -> dict[str, Any]:
        tags = read_config(config) if config else None
        brush = next(iter(tags.brush), BRUSH_NAME) if tags else BRUSH_NAME
        image_tag = (tags.image if tags and tags.image else IMAGE_NAME)
        key, image, in_pool = self.image(task)
        return brush_prediction(self.labels(key, image, in_pool), self.loop.classes, from_name=brush,
                                to_name=image_tag, model_version=self.model_version)


def _decode(content: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(content)) as im:
        return np.asarray(im.convert("RGB"))


def create_backend(project: Any, *, model: str | None = None, version: int | None = None) -> Any:
    """FastAPI app speaking Label Studio's ML backend protocol for `project`'s model `model` (default: the
    target) at `version` (default: its latest). Bind it to 127.0.0.1 unless Label Studio runs elsewhere."""
    from fastapi import Body, FastAPI, HTTPException

    predictor = _Predictor(project, model, version)
    app = FastAPI(title="blindspots Label Studio ML backend")

    @app.get("/health")
    @app.get("/")
    def health() -> dict:
        return {"status": "UP", "model_class": "blindspots", "model_version": predictor.model_version}

    @app.post("/setup")
    def setup(body: dict = Body(default={})) -> dict:
        return {"model_version": predictor.model_version}

    @app.post("/predict")
    def predict(body: dict = Body(...)) -> dict:
        tasks = body.get("tasks")
        if not isinstance(tasks, list):
            raise HTTPException(422, "expected a JSON body with a list 'tasks'")
        config = body.get("label_config")
        results = []
        for task in tasks:
            try:
                results.append(predictor.predict(task, config))
            except Exception as e:  # noqa: BLE001 - one bad task must not fail the others; Label Studio logs it
                log.warning("task %s: no prediction (%s)", task.get("id"), e)
                results.append({"model_version": predictor.model_version, "result": []})
        return {"results": results, "model_version": predictor.model_version}

    @app.post("/webhook")
    def webhook(body: dict = Body(default={})) -> dict:
        return {"status": "ok"}  # nothing to train: the loop fine-tunes the target itself

    @app.get("/versions")
    def versions() -> dict:
        return {"versions": [predictor.model_version]}

    return app

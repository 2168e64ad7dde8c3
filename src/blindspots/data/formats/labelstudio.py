"""Label Studio brush tasks: export S with the target's prediction as a pre-annotation,
import the annotators' brush masks back.

Label Studio stores a brush stroke layer as its own run-length code (not COCO RLE): the
RGBA layer [H, W, 4] is flattened and bit-packed (the thi.ng `rle-pack` scheme used by
`label_studio_converter.brush`): 32 bits value count, 5 bits word size - 1, four 4-bit run
length field sizes - 1, then per chunk: 1 flag bit (1 = repeated value, 0 = literals), 2 bits
selecting the length field size, the length - 1, then one word (repeat) or `length` words.
Re-implemented here (no label-studio dependency); `encode_rle` writes word size 8 and length
field sizes (3, 4, 8, 16) like Label Studio's own encoder.

Public API (stable):
- `encode_rle(values: uint8 [N]) -> list[int]`, `decode_rle(rle: list[int]) -> uint8 [N]`,
  `mask_to_rle(binary [H, W]) -> list[int]`, `rle_to_mask(rle, height, width) -> bool [H, W]`.
- `labeling_config(classes, *, from_name="tag", to_name="image") -> str` (the XML to paste
  into the Label Studio project; from `labelstudio_config`, brush and polygon tools).
- `export_labelstudio(path, masks, classes, *, image_url=None, image_root=None, document_root=None,
  model_version="target") -> Path`: a JSON list of tasks, each with `data.image` (a URL Label Studio
  can serve, see `task_image_url`), `data.blindspots_id` and a `predictions` entry holding one brush
  result per class present.
- `import_labelstudio(path_or_tasks, classes, *, ids=None, fill_value=None) -> dict[id, uint8 [H, W]]`:
  a JSON or JSON_MIN export; the latest non-cancelled annotation of each task; pixels no brush
  covers get `fill_value` (default: classes.ignore_index); later results paint over earlier ones.
  Tasks created in Label Studio itself (no `data.blindspots_id`) are matched to `ids` by the image's
  path or file name.
- `annotation_mask(results, classes, *, fill_value=None) -> uint8 [H, W] | None`: one annotation's brush
  and polygon results painted into a class-id mask.

Serving the images: Label Studio serves local files only from a Local Files storage whose path is a
strict subfolder of `LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT`; a task's URL is then
`/data/local-files/?d=<image path relative to the document root>` (docs/annotation_tools.md).
"""
from __future__ import annotations

import json
import logging
import os
import re
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Sequence
from urllib.parse import parse_qs, quote, unquote, urlparse

import numpy as np
from PIL import Image, ImageDraw

from blindspots.data.classes import Classes
from blindspots.data.classsets import IMAGE_EXTENSIONS
from blindspots.data.formats.labelstudio_config import labeling_config  # noqa: F401 - re-exported
from blindspots.data.formats.masks import check_mask

log = logging.getLogger(__name__)

_RLE_SIZES = (3, 4, 8, 16)
#: the default task URL before a user says where Label Studio finds the images
DEFAULT_IMAGE_URL = "/data/local-files/?d={id}"
DOCUMENT_ROOT_ENV = "LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT"
_UPLOAD_PREFIX = re.compile(r"^[0-9a-f]{8}-(.+)$")  # Label Studio renames uploads "<8 hex>-<name>"
_MAX_CHUNK = 1 << 16


class _Bits:
    """Reads big-endian bit fields from a byte list."""

    def __init__(self, data: Sequence[int]) -> None:
        self.bits = "".join(f"{int(b) & 0xFF:08b}" for b in data)
        self.i = 0

    def read(self, n: int) -> int:
        if self.i + n > len(self.bits):
            raise ValueError("rle: expected more bits, got a truncated Label Studio RLE")
        out = int(self.bits[self.i:self.i + n], 2)
        self.i += n
        return out


def decode_rle(rle: Sequence[int]) -> np.ndarray:
    """Label Studio brush RLE (list of byte values) -> uint8 [N] (N = H * W * 4 for a brush layer)."""
    if not isinstance(rle, (list, tuple, np.ndarray)) or len(rle) < 7:
        raise ValueError(f"rle: expected a list of byte values (Label Studio brush RLE), got {type(rle).__name__}")
    src = _Bits(rle)
    num = src.read(32)
    word = src.read(5) + 1
    sizes = [src.read(4) + 1 for _ in range(4)]
    if word > 8:
        raise ValueError(f"rle: expected word size <= 8 bits for a brush layer, got {word}")
    out = np.zeros(num, dtype=np.uint8)
    i = 0
    while i < num:
        repeat = src.read(1)
        j = i + 1 + src.read(sizes[src.read(2)])
        if j > num:
            raise ValueError(f"rle: expected runs within {num} values, got a run ending at {j}")
        if repeat:
            out[i:j] = src.read(word)
        else:
            out[i:j] = [src.read(word) for _ in range(j - i)]
        i = j
    return out


def _len_field(length: int) -> tuple[str, int]:
    """(2-bit size selector, field width) for a chunk of `length` values."""
    for sel, width in enumerate(_RLE_SIZES):
        if length - 1 < (1 << width):
            return f"{sel:02b}", width
    raise AssertionError("chunk longer than 2**16")


def encode_rle(values: np.ndarray) -> list[int]:
    """uint8 [N] -> Label Studio brush RLE (list of byte values); runs of >= 2 equal values are
    repeat chunks, other values are grouped into literal chunks."""
    arr = np.asarray(values).ravel()
    if arr.size and (arr.min() < 0 or arr.max() > 255):
        raise ValueError("values: expected uint8 values 0..255")
    arr = arr.astype(np.uint8)
    n = arr.size
    parts = [f"{n:032b}", f"{8 - 1:05b}", "".join(f"{s - 1:04b}" for s in _RLE_SIZES)]
    if n:
        change = np.flatnonzero(arr[1:] != arr[:-1]) + 1
        starts = np.concatenate([[0], change])
        lengths = np.diff(np.concatenate([starts, [n]]))
        literal: list[int] = []

        def flush() -> None:
            for a in range(0, len(literal), _MAX_CHUNK):
                block = literal[a:a + _MAX_CHUNK]
                sel, width = _len_field(len(block))
                parts.append("0" + sel + f"{len(block) - 1:0{width}b}" + "".join(f"{v:08b}" for v in block))
            literal.clear()

        for s, ln in zip(starts.tolist(), lengths.tolist()):
            v = int(arr[s])
            if ln == 1:
                literal.append(v)
                continue
            flush()
            while ln > 0:
                chunk = min(ln, _MAX_CHUNK)
                sel, width = _len_field(chunk)
                parts.append("1" + sel + f"{chunk - 1:0{width}b}" + f"{v:08b}")
                ln -= chunk
        flush()
    bits = "".join(parts)
    bits += "0" * (-len(bits) % 8)
    return [int(bits[k:k + 8], 2) for k in range(0, len(bits), 8)]


def mask_to_rle(mask: np.ndarray) -> list[int]:
    """bool/int [H, W] (nonzero = painted) -> brush RLE of the RGBA layer (255 on all channels)."""
    m = np.asarray(mask)
    if m.ndim != 2:
        raise ValueError(f"mask: expected a 2-D binary mask [H, W], got shape {m.shape}")
    return encode_rle(np.repeat((m != 0).astype(np.uint8) * 255, 4))


def rle_to_mask(rle: Sequence[int], height: int, width: int) -> np.ndarray:
    """Brush RLE -> bool [H, W] (painted where the layer's alpha channel is > 0)."""
    flat = decode_rle(rle)
    if flat.size != height * width * 4:
        raise ValueError(f"rle: expected {height}x{width}x4 = {height * width * 4} values, got {flat.size}")
    return flat.reshape(height, width, 4)[:, :, 3] > 0


def brush_results(mask: np.ndarray, classes: Classes, *, from_name: str = "tag", to_name: str = "image",
                  key: str = "") -> list[dict[str, Any]]:
    """One Label Studio brushlabels result per class present in `mask` (int [H, W])."""
    m = check_mask(mask, classes)
    h, w = m.shape
    out = []
    for k in np.unique(m):
        if k >= classes.num_classes:
            continue  # ignore pixels stay unpainted
        name = classes.names[int(k)]
        out.append({
            "id": f"{zlib.crc32(f'{key}/{name}'.encode()):08x}",
            "type": "brushlabels", "from_name": from_name, "to_name": to_name,
            "original_width": int(w), "original_height": int(h), "image_rotation": 0,
            "value": {"format": "rle", "rle": mask_to_rle(m == k), "brushlabels": [name]},
        })
    return out


def _image_name(root: Path, image_id: str) -> str:
    """The file name under `root` of `image_id`: the id itself when it is a file, else the id plus its image
    extension when one such file exists (labelled sets' ids have no extension: `cat` for `cat.jpg`);
    several candidates are a ValueError; nothing found (root on another machine) keeps the id."""
    if (root / image_id).is_file() or not root.is_dir():
        return image_id
    found = [image_id + e for e in {x for ext in IMAGE_EXTENSIONS for x in (ext, ext.upper())}
             if (root / (image_id + e)).is_file()]
    if len(found) > 1:
        raise ValueError(f"image_root: expected one image file for id {image_id!r} in {str(root)!r}, "
                         f"got {len(found)}: {sorted(found)}")
    return found[0] if found else image_id


def task_image_url(image_id: str, *, image_url: str | None = None, image_root: str | Path | None = None,
                   document_root: str | Path | None = None) -> str:
    """The URL Label Studio loads the image of `image_id` from.

    image_url: a template with `{id}` ("http://host/imgs/{id}"), or an http(s)/s3/gs base URL the id is
        appended to (quoted); wins over image_root.
    image_root: the folder holding the images (the pool root) on the Label Studio machine: the URL becomes
        `/data/local-files/?d=<path relative to document_root>`; an id without extension (a labelled
        set's `cat` for `cat.jpg`) gets the extension of its file when image_root is readable here.
    document_root: Label Studio's LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT (default: that environment
        variable, else image_root's parent — a Local Files storage must be a strict subfolder of it).
    Neither: the old default `/data/local-files/?d=<id>` (only right when the document root is the pool).
    """
    if image_url is not None:
        if "{id}" in image_url:
            return image_url.replace("{id}", str(image_id))
        if re.match(r"^(https?|s3|gs|azure-blob)://", image_url):
            return image_url.rstrip("/") + "/" + quote(str(image_id), safe="/")
        raise ValueError(f"image_url: expected a template containing '{{id}}' or an http(s):// base URL, "
                         f"got {image_url!r}")
    if image_root is None:
        return DEFAULT_IMAGE_URL.replace("{id}", str(image_id))
    root = Path(os.path.abspath(image_root))
    doc = document_root if document_root is not None else os.environ.get(DOCUMENT_ROOT_ENV) or root.parent
    doc = Path(os.path.abspath(doc))
    if root == doc or doc not in root.parents:
        raise ValueError(f"image_root: expected a strict subfolder of Label Studio's document root {str(doc)!r} "
                         f"({DOCUMENT_ROOT_ENV}), got {str(root)!r}")
    rel = (root / _image_name(root, str(image_id))).relative_to(doc).as_posix()
    return "/data/local-files/?d=" + quote(rel, safe="/")


def export_labelstudio(path: str | Path, masks: Mapping[str, np.ndarray], classes: Classes, *,
                       image_url: str | None = None, image_root: str | Path | None = None,
                       document_root: str | Path | None = None, model_version: str = "target",
                       from_name: str = "tag", to_name: str = "image",
                       image_urls: Mapping[str, str] | None = None) -> Path:
    """Write Label Studio tasks (JSON list) with `masks` as predictions (pre-annotations).

    masks: image id -> int [H, W] (the target's prediction for S).
    image_url / image_root / document_root: where Label Studio finds the images (`task_image_url`).
    image_urls: id -> the image's own URL (e.g. the s3:// URL of an object-store pool's image, which Label
        Studio's S3 / GCS / Azure cloud storage serves); wins over the others for the ids it holds.
    """
    if not masks:
        raise ValueError("masks: expected at least one mask, got none")
    tasks = []
    for image_id, mask in masks.items():
        url = (image_urls or {}).get(str(image_id)) or task_image_url(
            str(image_id), image_url=image_url, image_root=image_root, document_root=document_root)
        tasks.append({
            "data": {"image": url, "blindspots_id": str(image_id)},
            "predictions": [{"model_version": model_version,
                             "result": brush_results(mask, classes, from_name=from_name, to_name=to_name,
                                                     key=str(image_id))}],
        })
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(tasks), encoding="utf-8")
    return path


def _when(ann: Mapping[str, Any]) -> str:
    return str(ann.get("updated_at") or ann.get("created_at") or "")


def _latest_annotation(task: Mapping[str, Any]) -> Mapping[str, Any] | None:
    anns = [a for a in task.get("annotations") or [] if not (a.get("was_cancelled") or a.get("skipped"))]
    if not anns:
        return None
    return max(enumerate(anns), key=lambda t: (_when(t[1]), t[0]))[1]


def _is_brush(v: Any) -> bool:
    return isinstance(v, Mapping) and ("brushlabels" in v or v.get("format") == "rle")


def _min_results(record: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """JSON_MIN record -> its brush results in the JSON export's shape, or None if it holds none."""
    found = None
    for key, value in record.items():
        if isinstance(value, list) and value and all(_is_brush(v) for v in value):
            found = (found or []) + [{"type": "brushlabels", "from_name": key, "value": dict(v),
                                      "original_width": v.get("original_width"),
                                      "original_height": v.get("original_height")} for v in value]
    return found


def _normalise(tasks: Any) -> list[tuple[int, dict[str, Any], list[dict[str, Any]] | None]]:
    """JSON (tasks with data + annotations) or JSON_MIN (one flat record per annotation) ->
    [(task number, data, results of the latest annotation or None)]; unknown shapes raise."""
    if isinstance(tasks, Mapping) and "data" in tasks:
        tasks = [tasks]  # one task exported alone
    if not isinstance(tasks, list):
        keys = sorted(tasks)[:6] if isinstance(tasks, Mapping) else type(tasks).__name__
        hint = " (a COCO export? export JSON or JSON_MIN instead)" if isinstance(tasks, Mapping) and \
            {"images", "annotations", "categories"} <= set(tasks) else ""
        raise ValueError(f"source: expected a Label Studio JSON or JSON_MIN export (a list of tasks), got {keys}{hint}")
    out: list[tuple[int, dict[str, Any], list[dict[str, Any]] | None]] = []
    latest_min: dict[Any, tuple[str, int]] = {}
    for t, task in enumerate(tasks):
        if not isinstance(task, Mapping):
            raise ValueError(f"source: task {t}: expected a JSON object, got {type(task).__name__}")
        if isinstance(task.get("data"), Mapping):
            ann = _latest_annotation({"annotations": task.get("annotations", task.get("completions"))})
            out.append((t, dict(task.get("data") or {}), None if ann is None else list(ann.get("result") or [])))
            continue
        results = _min_results(task)
        data = {k: v for k, v in task.items() if not isinstance(v, list)}
        if results is None and not any(isinstance(v, str) for v in data.values()):
            raise ValueError(f"source: task {t}: expected a Label Studio JSON task ('data', 'annotations') or a "
                             f"JSON_MIN record (the image and brush results under the tag name), got keys "
                             f"{sorted(task)[:8]}")
        key = task.get("id", t)  # JSON_MIN: one record per annotation; keep each task's latest
        when = (_when(task), t)
        if key in latest_min and latest_min[key][0] >= when[0]:
            continue
        if key in latest_min:
            out = [o for o in out if o[0] != latest_min[key][1]]
        latest_min[key] = (when[0], t)
        out.append((t, data, results))
    return out


def image_path_of(url: str) -> str:
    """The file path a task's image URL points to: the `d=` of a local-files URL, the path of an http/s3
    URL, or the string itself; a Label Studio upload's "<8 hex>-" prefix is dropped from the name."""
    parsed = urlparse(url)
    if "d" in parse_qs(parsed.query):
        path = parse_qs(parsed.query)["d"][0]
    elif parsed.scheme or url.startswith("/"):
        path = unquote(parsed.path)
    else:
        path = url
    p = PurePosixPath(path.replace("\\", "/"))
    m = _UPLOAD_PREFIX.match(p.name) if "/upload/" in "/" + path else None
    return str(p.with_name(m.group(1))) if m else str(p)


def _matcher(ids: Sequence[str]) -> Any:
    """url -> the id whose path the URL ends with (at a '/' boundary), else the one with its file name;
    then the same with the image extension cut (`cat.jpg` -> id `cat`, as a labelled set names it)."""
    by_name: dict[str, list[str]] = {}
    for i in ids:
        by_name.setdefault(PurePosixPath(i).name, []).append(i)

    def find(path: str) -> list[str]:
        hits = [i for i in ids if path == i or path.endswith("/" + i)]
        return hits or by_name.get(PurePosixPath(path).name, [])

    def match(url: str, where: str) -> str | None:
        path = image_path_of(url)
        hits = find(path)
        if not hits and PurePosixPath(path).suffix.lower() in IMAGE_EXTENSIONS:
            hits = find(str(PurePosixPath(path).with_suffix("")))  # ids without extension (labelled sets)
        if len(hits) > 1:
            hits = sorted(hits, key=len, reverse=True)
            raise ValueError(f"source: {where}: expected the image {url!r} to name one image id, got several: "
                             f"{hits[:5]}")
        return hits[0] if hits else None

    return match


def import_labelstudio(source: str | Path | Sequence[Mapping[str, Any]], classes: Classes, *,
                       ids: Sequence[str] | None = None, fill_value: int | None = None) -> dict[str, np.ndarray]:
    """Label Studio JSON or JSON_MIN export (path or parsed list) -> {id: uint8 [H, W]}.

    The id is `data.blindspots_id` (written by `export_labelstudio`). Without it (tasks created in Label
    Studio from the same images): with `ids`, the id whose path or file name the task's image URL ends
    with (tasks matching none are logged and skipped); without `ids`, `data.image` itself.
    Tasks without a non-cancelled annotation are skipped. Brush labels must be class names.
    """
    tasks = json.loads(Path(source).read_text(encoding="utf-8")) if isinstance(source, (str, Path)) else source
    fill = classes.ignore_index if fill_value is None else int(fill_value)
    if fill is None:
        raise ValueError("fill_value: expected a value for unpainted pixels (classes have no ignore_index)")
    match = _matcher(list(ids)) if ids is not None else None
    out: dict[str, np.ndarray] = {}
    unmatched: list[str] = []
    for t, data, results in _normalise(tasks):
        image = data.get("image") or next((v for v in data.values() if isinstance(v, str) and "/" in v), None)
        image_id = data.get("blindspots_id")
        if not image_id and image and match is not None:
            image_id = match(str(image), f"task {t}")
            if image_id is None:
                unmatched.append(str(image))
                continue
        image_id = image_id or image
        if not image_id:
            raise ValueError(f"source: task {t}: expected data.blindspots_id or data.image, got {sorted(data)}")
        if results is None:
            continue
        mask = _paint(results, classes, fill, f"task {t} ({image_id})")
        if mask is not None:
            out[str(image_id)] = mask
    if unmatched:
        log.warning("Label Studio import: %d task(s) match no image id and were skipped, e.g. %s",
                    len(unmatched), unmatched[:3])
    return out


def annotation_mask(results: Sequence[Mapping[str, Any]], classes: Classes, *, fill_value: int | None = None,
                    where: str = "annotation") -> np.ndarray | None:
    """The brush and polygon results of one Label Studio annotation -> uint8 [H, W] class ids, later
    results painting over earlier ones; unpainted pixels get `fill_value` (default: ignore_index).
    None when it holds no brush or polygon result. A label that is not a class is a ValueError."""
    fill = classes.ignore_index if fill_value is None else int(fill_value)
    if fill is None:
        raise ValueError("fill_value: expected a value for unpainted pixels (classes have no ignore_index)")
    return _paint(results, classes, fill, where)


def _paint(results: Sequence[Mapping[str, Any]], classes: Classes, fill: int, where: str) -> np.ndarray | None:
    """Brush results of one annotation -> uint8 [H, W] (None when it holds no brush result)."""
    mask = None
    for r in results:
        kind = str(r.get("type", "")).lower()
        if kind == "polygonlabels":
            mask = _paint_polygon(mask, r, classes, fill, where)
            continue
        if kind != "brushlabels":
            continue
        value = r.get("value") or {}
        rle = value.get("rle", r.get("rle"))
        labels = value.get("brushlabels") or r.get("brushlabels") or []
        if rle is None or value.get("format", "rle") != "rle":
            raise ValueError(f"source: {where}: expected brush results in 'rle' format")
        if len(labels) != 1:
            raise ValueError(f"source: {where}: expected one brush label per result, got {labels}")
        k = classes.index(labels[0])
        if r.get("original_height") is None or r.get("original_width") is None:
            raise ValueError(f"source: {where}: expected original_width and original_height in each brush result")
        h, w = int(r["original_height"]), int(r["original_width"])
        if mask is None:
            mask = np.full((h, w), fill, dtype=np.uint8)
        elif mask.shape != (h, w):
            raise ValueError(f"source: {where}: expected one image size, got {mask.shape} and {(h, w)}")
        mask[rle_to_mask(rle, h, w)] = k
    return mask


def _paint_polygon(mask: np.ndarray | None, r: Mapping[str, Any], classes: Classes, fill: int,
                   where: str) -> np.ndarray:
    """Fill one polygonlabels result (points in percent of the image's width and height) into `mask`."""
    value = r.get("value") or {}
    labels = value.get("polygonlabels") or []
    points = value.get("points") or []
    if len(labels) != 1:
        raise ValueError(f"source: {where}: expected one polygon label per result, got {labels}")
    if r.get("original_height") is None or r.get("original_width") is None:
        raise ValueError(f"source: {where}: expected original_width and original_height in each polygon result")
    k = classes.index(labels[0])
    h, w = int(r["original_height"]), int(r["original_width"])
    if mask is None:
        mask = np.full((h, w), fill, dtype=np.uint8)
    elif mask.shape != (h, w):
        raise ValueError(f"source: {where}: expected one image size, got {mask.shape} and {(h, w)}")
    if len(points) >= 3:
        canvas = Image.new("L", (w, h), 0)
        ImageDraw.Draw(canvas).polygon([(float(x) * w / 100.0, float(y) * h / 100.0) for x, y in points],
                                       fill=1, outline=1)
        mask[np.asarray(canvas) > 0] = k
    return mask

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
  into the Label Studio project).
- `export_labelstudio(path, masks, classes, *, image_url="/data/local-files/?d={id}",
  model_version="target") -> Path`: a JSON list of tasks, each with `data.image`,
  `data.blindspots_id` and a `predictions` entry holding one brush result per class present.
- `import_labelstudio(path_or_tasks, classes, *, fill_value=None) -> dict[id, uint8 [H, W]]`:
  the latest non-cancelled annotation of each task; pixels no brush covers get `fill_value`
  (default: classes.ignore_index); later results paint over earlier ones.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from blindspots.data.classes import Classes
from blindspots.data.formats.masks import check_mask

_RLE_SIZES = (3, 4, 8, 16)
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


def _hex(c: np.ndarray) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(x) for x in c))


def labeling_config(classes: Classes, *, from_name: str = "tag", to_name: str = "image") -> str:
    """Label Studio labeling config (XML) with one brush label per class."""
    from xml.sax.saxutils import quoteattr

    labels = "\n".join(f"    <Label value={quoteattr(n)} background={quoteattr(_hex(classes.palette[k]))}/>"
                       for k, n in enumerate(classes.names))
    return (f"<View>\n  <Image name={quoteattr(to_name)} value=\"$image\" zoom=\"true\"/>\n"
            f"  <BrushLabels name={quoteattr(from_name)} toName={quoteattr(to_name)}>\n{labels}\n"
            f"  </BrushLabels>\n</View>\n")


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


def export_labelstudio(path: str | Path, masks: Mapping[str, np.ndarray], classes: Classes, *,
                       image_url: str = "/data/local-files/?d={id}", model_version: str = "target",
                       from_name: str = "tag", to_name: str = "image") -> Path:
    """Write Label Studio tasks (JSON list) with `masks` as predictions (pre-annotations).

    masks: image id -> int [H, W] (the target's prediction for S).
    image_url: task image URL, `{id}` is replaced by the image id (default: Label Studio's
        local-files storage URL).
    """
    if not masks:
        raise ValueError("masks: expected at least one mask, got none")
    if "{id}" not in image_url:
        raise ValueError(f"image_url: expected a template containing '{{id}}', got {image_url!r}")
    tasks = []
    for image_id, mask in masks.items():
        tasks.append({
            "data": {"image": image_url.replace("{id}", str(image_id)), "blindspots_id": str(image_id)},
            "predictions": [{"model_version": model_version,
                             "result": brush_results(mask, classes, from_name=from_name, to_name=to_name,
                                                     key=str(image_id))}],
        })
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(tasks), encoding="utf-8")
    return path


def _latest_annotation(task: Mapping[str, Any]) -> Mapping[str, Any] | None:
    anns = [a for a in task.get("annotations") or [] if not a.get("was_cancelled")]
    if not anns:
        return None
    return max(enumerate(anns), key=lambda t: (str(t[1].get("updated_at") or t[1].get("created_at") or ""), t[0]))[1]


def import_labelstudio(source: str | Path | Sequence[Mapping[str, Any]], classes: Classes, *,
                       fill_value: int | None = None) -> dict[str, np.ndarray]:
    """Label Studio JSON export (path or parsed list of tasks) -> {id: uint8 [H, W]}.

    The id is `data.blindspots_id` (written by `export_labelstudio`), else `data.image`.
    Tasks without a non-cancelled annotation are skipped. Brush labels must be class names.
    """
    tasks = json.loads(Path(source).read_text(encoding="utf-8")) if isinstance(source, (str, Path)) else source
    if not isinstance(tasks, list):
        raise ValueError(f"source: expected a JSON list of Label Studio tasks, got {type(tasks).__name__}")
    fill = classes.ignore_index if fill_value is None else int(fill_value)
    if fill is None:
        raise ValueError("fill_value: expected a value for unpainted pixels (classes have no ignore_index)")
    out: dict[str, np.ndarray] = {}
    for t, task in enumerate(tasks):
        data = task.get("data") or {}
        image_id = data.get("blindspots_id") or data.get("image")
        if not image_id:
            raise ValueError(f"source: task {t}: expected data.blindspots_id or data.image, got {sorted(data)}")
        ann = _latest_annotation(task)
        if ann is None:
            continue
        mask = None
        for r in ann.get("result") or []:
            if str(r.get("type", "")).lower() != "brushlabels":
                continue
            value = r.get("value") or {}
            rle = value.get("rle", r.get("rle"))
            labels = value.get("brushlabels") or r.get("brushlabels") or []
            if rle is None or value.get("format", "rle") != "rle":
                raise ValueError(f"source: task {t} ({image_id}): expected brush results in 'rle' format")
            if len(labels) != 1:
                raise ValueError(f"source: task {t} ({image_id}): expected one brush label per result, got {labels}")
            k = classes.index(labels[0])
            h, w = int(r["original_height"]), int(r["original_width"])
            if mask is None:
                mask = np.full((h, w), fill, dtype=np.uint8)
            elif mask.shape != (h, w):
                raise ValueError(f"source: task {t} ({image_id}): expected one image size, got {mask.shape} and {(h, w)}")
            mask[rle_to_mask(rle, h, w)] = k
        if mask is not None:
            out[str(image_id)] = mask
    return out

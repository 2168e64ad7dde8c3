"""Label page (MAD Figure 9): a mask editor that starts from the model's prediction; saves index
PNGs into the store. Also mask file upload and the CVAT / Label Studio export for other tools."""
from __future__ import annotations

import base64
import binascii
import io
import zlib
from typing import Literal

import numpy as np
from fastapi import APIRouter, Depends, File, Form, HTTPException, Query, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, Response
from PIL import Image
from pydantic import Field

from blindspots.app import deps
from blindspots.app.deps import page
from blindspots.app.quote import quote
from blindspots.app.routers.bodies import Body
from blindspots.app.security import Principal, page_user, require_user
from blindspots.app.services import competitor_maps, review_prediction, slic_segments
from blindspots.app.project_view import read_index_png
from blindspots.data.formats.masks import check_mask, read_mask
from blindspots.loop import export_for_annotation

router = APIRouter()
MAX_UPLOAD_BYTES = 8 * 1024 * 1024
# The routes whose bodies are masks (the app's large body limit); every other route takes a few KiB.
LARGE_BODY_PATHS = ("/api/labels", "/api/labels/upload")
UPLOAD_MODES = ("L", "P", "RGB")  # 8-bit index, palette or colour-coded; not 16-bit, RGBA or 1-bit
COMPRESS = Query(False, description="zlib-compress the arrays before base64 (`encoding`: 'deflate').")


class MaskIn(Body):
    kind: Literal["round", "fix"] = Field(description="'round': S ∪ T of the loop; 'fix': a confirmed label error.")
    ref: str = Field(min_length=1, max_length=64, description="The round number, or the review set's name.")
    image_id: str = Field(min_length=1, max_length=1024)
    width: int = Field(gt=0, le=16384)
    height: int = Field(gt=0, le=16384)
    mask: str = Field(description="base64 of the uint8 [height, width] class ids, row-major (255 = ignore).")


def _target(request: Request, kind: str, ref: str, image_id: str) -> tuple[int, int]:
    """Check that (kind, ref, image_id) awaits a mask; returns the image's (height, width)."""
    view = deps.view(request)
    if kind == "round":
        try:
            rnd = int(ref)
        except ValueError:
            raise HTTPException(400, f"ref: expected a round number for kind 'round', got {quote(ref)}") from None
        if view.mask_round() != rnd:
            raise HTTPException(409, f"ref: expected the round now taking masks ({view.mask_round()}), got {rnd}")
        if image_id not in view.masks_needed(rnd):
            raise HTTPException(404, f"image_id: expected an image of S ∪ T of round {rnd}, got {quote(image_id)}")
        return view.pool_image(image_id).shape[:2]
    if kind == "fix":
        if (ref, image_id) not in set(view.confirmed_errors()):
            raise HTTPException(404, f"image_id: expected an image with a confirmed label error in set {quote(ref)}, "
                                f"got {quote(image_id)}")
        return view.review_layer(ref, image_id, "image").shape[:2]
    raise HTTPException(400, f"kind: expected 'round' or 'fix', got {kind!r}")


def _check_values(request: Request, mask: np.ndarray, name: str = "mask") -> np.ndarray:
    """The mask if every value is a class id (or ignore); else 422 naming the first bad value."""
    try:
        return check_mask(mask, deps.view(request).classes, name=name)
    except ValueError as e:
        raise HTTPException(422, str(e)) from None


def _check_png(data: bytes, h: int, w: int) -> None:
    """422 unless `data` is an 8-bit PNG (mode L, P or RGB) of w x h; reads the header only."""
    try:  # the declared size and mode before decoding pixels (no decompression bombs)
        with Image.open(io.BytesIO(data)) as im:
            fmt, mode, size = im.format, im.mode, im.size
    except Exception:  # noqa: BLE001 - Pillow raises many types for junk
        raise HTTPException(422, "file: expected a PNG mask image, got unreadable data") from None
    if fmt != "PNG":
        raise HTTPException(422, f"file: expected a PNG mask image, got {fmt or 'an unknown format'}")
    depth = data[24] if len(data) > 25 and data[12:16] == b"IHDR" else 0  # IHDR's bit depth: Pillow hides 16-bit RGB
    if mode not in UPLOAD_MODES or depth > 8:
        what = f"a {depth}-bit PNG" if depth > 8 else "a PNG"
        raise HTTPException(422, f"file: expected an 8-bit PNG of mode L, P or RGB, got {what} of mode {mode!r}")
    if size != (w, h):
        raise HTTPException(422, f"file: expected a {w}x{h} (width x height) mask like the image, "
                            f"got {size[0]}x{size[1]}")


def _save(request: Request, kind: str, ref: str, image_id: str, mask: np.ndarray, who: Principal,
          source: str) -> dict:
    if kind == "round":
        with deps.store(request).write_lock:
            deps.project(request).answers.add_mask(int(ref), image_id, mask, source=source, annotator=who.name)
    else:
        deps.store(request).add_fix(ref, image_id, mask, who.name)
    counts = np.bincount(mask.ravel(), minlength=256)
    return {"ok": True, "kind": kind, "ref": ref, "image_id": image_id,
            "pixels": {str(k): int(c) for k, c in enumerate(counts) if c}}


@router.get("/label", response_class=HTMLResponse, include_in_schema=False)
def label_page(request: Request, who: Principal = Depends(page_user)) -> Response:
    return page(request, "label.html", who)


@router.get("/api/labels/queue", tags=["labels"])
def label_queue(request: Request, who: Principal = Depends(require_user)) -> dict:
    """Images awaiting pixel labels: S ∪ T of the round in its masks step, and confirmed label errors."""
    out = deps.view(request).label_queue()
    out["classes"] = deps.view(request).classes_json()
    return out


@router.get("/api/labels/start", tags=["labels"])
def label_start(request: Request, kind: Literal["round", "fix"], ref: str = Query(max_length=64),
                image_id: str = Query(alias="id", min_length=1, max_length=1024),
                start: Literal["auto", "prediction", "empty"] = "auto", compress: bool = COMPRESS,
                who: Principal = Depends(require_user)) -> dict:
    """The mask to start editing from: the stored one if any, else the target's prediction (round)
    or the given label (fix); base64 uint8 [height, width]. start: "prediction" skips the stored
    mask (revert), "empty" gives an all-unlabeled (255) mask."""
    view = deps.view(request)
    h, w = _target(request, kind, ref, image_id)
    mask, source = None, "empty"
    if start == "empty":
        pass
    elif kind == "round":
        mask = None if start == "prediction" else view.stored_mask(int(ref), image_id)
        source = "stored" if mask is not None else "prediction"
        if mask is None:
            mask = view.prediction(int(ref), image_id)
    else:
        fixes = {f["id"]: f["path"] for f in deps.store(request).fixes(ref)}
        if start == "auto" and image_id in fixes and fixes[image_id].is_file():
            mask, source = read_index_png(fixes[image_id]), "stored"
        else:
            mask, source = view.review_layer(ref, image_id, "given"), "given"
    if mask is None or mask.shape != (h, w):
        mask, source = np.full((h, w), 255, np.uint8), "empty"
    return {"kind": kind, "ref": ref, "image_id": image_id, "width": w, "height": h, "source": source,
            "encoding": "deflate" if compress else "raw", "mask": _b64(mask.astype(np.uint8), compress)}


def _b64(a: np.ndarray, compress: bool = False) -> str:
    """base64 of the array's bytes; compress: zlib'd first (level 1: label maps of a 1280x1024 photo
    shrink ~25x, 2.6 MB -> ~0.1 MB, in ~10 ms; the page inflates them with DecompressionStream)."""
    raw = np.ascontiguousarray(a).tobytes()
    if compress:
        raw = zlib.compress(raw, 1)
    return base64.b64encode(raw).decode("ascii")



def _image(request: Request, kind: str, ref: str, image_id: str) -> np.ndarray:
    """uint8 [H, W, 3] (or [H, W]) of an image awaiting a mask."""
    view = deps.view(request)
    return view.pool_image(image_id) if kind == "round" else view.review_layer(ref, image_id, "image")


@router.get("/api/labels/superpixels", tags=["labels"])
def superpixels(request: Request, kind: Literal["round", "fix"], ref: str = Query(max_length=64),
                image_id: str = Query(alias="id", min_length=1, max_length=1024),
                level: Literal["coarse", "fine"] = "coarse", compress: bool = COMPRESS,
                who: Principal = Depends(require_user)) -> dict:
    """SLIC superpixels of the image (regions that snap to its edges) for the superpixel brush, at
    `level` (coarse ~8x8 px, fine ~4x4 px): `labels` is base64 of uint16 little-endian
    [height, width] segment ids 0..n-1. Computed once per image and level (cached)."""
    h, w = _target(request, kind, ref, image_id)
    key = (kind, ref if kind == "fix" else "", image_id, level)  # one cache per app, so per project

    def make() -> np.ndarray:  # kept as uint16 (half the cache memory); segment counts are capped far below 65536
        return slic_segments(_image(request, kind, ref, image_id), level=level).astype("<u2")

    labels = deps.segments(request).get(key, make)
    if labels.shape != (h, w):
        raise HTTPException(500, f"superpixels: expected {h}x{w} labels, got {labels.shape}")
    return {"width": w, "height": h, "level": level, "n": int(labels.max()) + 1,
            "encoding": "deflate" if compress else "raw", "labels": _b64(labels, compress)}


@router.get("/api/labels/competitors", tags=["labels"])
def competitors(request: Request, kind: Literal["round", "fix"], ref: str = Query(max_length=64),
                image_id: str = Query(alias="id", min_length=1, max_length=1024), compress: bool = COMPRESS,
                who: Principal = Depends(require_user)) -> dict:
    """The other models' argmax maps of the image, to adopt a region from with one click: the
    competitors' (round; the one disagreeing most with the target first) or the review set's
    prediction (fix). Each `mask` is base64 uint8 [height, width]."""
    h, w = _target(request, kind, ref, image_id)
    view = deps.view(request)
    maps = competitor_maps(view, int(ref), image_id) if kind == "round" else review_prediction(view, ref, image_id)
    return {"width": w, "height": h, "encoding": "deflate" if compress else "raw",
            "models": [{"name": n, "mask": _b64(m.astype(np.uint8), compress)} for n, m in maps if m.shape == (h, w)]}


@router.post("/api/labels", tags=["labels"])
def save_mask(body: MaskIn, request: Request, who: Principal = Depends(require_user)) -> dict:
    """Save a painted mask as an index PNG (committed before the answer returns; saving again replaces it)."""
    h, w = _target(request, body.kind, body.ref, body.image_id)
    if (body.height, body.width) != (h, w):
        raise HTTPException(422, f"mask: expected {h}x{w} (height x width, the image's size), "
                            f"got {body.height}x{body.width}")
    try:
        raw = base64.b64decode(body.mask, validate=True)
    except (binascii.Error, ValueError):
        raise HTTPException(422, "mask: expected base64 of the raw uint8 class ids, got invalid base64") from None
    if len(raw) != h * w:
        raise HTTPException(422, f"mask: expected {h * w} bytes ({h}x{w}), got {len(raw)}")
    mask = _check_values(request, np.frombuffer(raw, np.uint8).reshape(h, w))
    return _save(request, body.kind, body.ref, body.image_id, mask, who, "app")


@router.post("/api/labels/upload", tags=["labels"])
async def upload_mask(request: Request, kind: Literal["round", "fix"] = Form(...), ref: str = Form(max_length=64),
                      image_id: str = Form(min_length=1, max_length=1024), file: UploadFile = File(...),
                      who: Principal = Depends(require_user)) -> dict:
    """Upload a mask file of the image's size: an 8-bit PNG, index (L), palette (P) or RGB in the
    class palette. 422 for anything else (JPEG, GIF, 16-bit, RGBA) or a value that is no class; 413 if too big."""
    data = await file.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        raise HTTPException(413, f"file: expected at most {MAX_UPLOAD_BYTES} bytes, got more")
    if not data:
        raise HTTPException(422, "file: expected a PNG mask, got an empty file")
    h, w = _target(request, kind, ref, image_id)
    _check_png(data, h, w)
    try:
        mask = read_mask(data, classes=deps.view(request).classes)
    except ValueError as e:
        raise HTTPException(422, f"file: {e}") from None
    return _save(request, kind, ref, image_id, mask, who, "upload")


@router.get("/api/labels/export", tags=["labels"])
def export(request: Request, format: Literal["cvat", "labelstudio"],
           who: Principal = Depends(require_user)) -> FileResponse:
    """The images awaiting masks with the target's prediction as a pre-annotation, for CVAT (zip)
    or Label Studio (JSON) (`blindspots export`)."""
    view = deps.view(request)
    rnd = view.mask_round()
    if rnd is None:
        raise HTTPException(409, "round: expected a round awaiting masks, got none")
    path = export_for_annotation(deps.project(request), format, round=rnd)
    return FileResponse(path, filename=path.name,
                        media_type="application/zip" if format == "cvat" else "application/json")

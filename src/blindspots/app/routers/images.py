"""Images by id only: pool images, prediction and mask overlays, vote and review images, report
figures. Every id is looked up in a list the app built itself; no request text becomes a path."""
from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, Response

from blindspots.app import deps
from blindspots.app.quote import quote
from blindspots.app.security import Principal, require_admin, require_user
from blindspots.app.project_view import NotFound, inside, overlay_rgba, png_bytes

router = APIRouter(tags=["images"])
FIGURE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".html": "text/html",
                ".txt": "text/plain", ".csv": "text/csv", ".mp4": "video/mp4", ".gif": "image/gif"}
ID = Query(alias="id", min_length=1, max_length=1024, description="An image id (path relative to the pool root).")


def _png(data: bytes, media_type: str = "image/png") -> Response:
    return Response(data, media_type=media_type, headers={"Cache-Control": "private, max-age=600"})


@router.get("/api/images/pool")
def pool_image(request: Request, image_id: str = ID, who: Principal = Depends(require_user)) -> Response:
    """A pool image (decoded, EXIF-rotated, re-encoded): JPEG when the file is a JPEG, else PNG."""
    return _png(*deps.view(request).pool_encoded(image_id))


@router.get("/api/images/prediction")
def prediction(request: Request, round: int = Query(ge=0), image_id: str = ID,
               who: Principal = Depends(require_user)) -> Response:
    """The target f_t^(round)'s prediction in the class palette (RGBA, ignore transparent)."""
    return _png(deps.view(request).prediction_png(round, image_id))


@router.get("/api/images/mask")
def stored_mask(request: Request, round: int = Query(ge=0), image_id: str = ID,
                who: Principal = Depends(require_user)) -> Response:
    """A stored pixel label in the class palette (RGBA)."""
    view = deps.view(request)
    m = view.stored_mask(round, image_id)
    if m is None:
        raise NotFound(f"id: expected an image with a stored mask in round {round}, got {quote(image_id)}")
    return Response(png_bytes(overlay_rgba(m, view.classes)), media_type="image/png",
                    headers={"Cache-Control": "no-store"})


@router.get("/api/images/vote")
def vote_image(request: Request, set: str = Query(max_length=64), image_id: str = ID,
               who: Principal = Depends(require_user)) -> Response:
    """A generated image of a vote set."""
    return _png(deps.view(request).vote_png(set, image_id))


@router.get("/api/images/review")
def review_image(request: Request, set: str = Query(max_length=64), image_id: str = ID,
                 layer: Literal["image", "given", "pred"] = "image",
                 who: Principal = Depends(require_user)) -> Response:
    """A layer of a label-issue review image: the image, the given mask or the predicted mask."""
    return _png(deps.view(request).review_png(set, image_id, layer))


def figure_files(request: Request) -> dict[str, object]:
    """Report files by name (the reports folder's top level; links leaving it are skipped)."""
    root = deps.project(request).reports_dir
    out = {}
    if root.is_dir():
        for p in sorted(root.iterdir()):
            if p.suffix.lower() in FIGURE_TYPES and p.is_file() and inside(p, root):
                out[p.name] = p
    return out


@router.get("/api/figures")
def figures(request: Request, who: Principal = Depends(require_admin)) -> list[str]:
    """Names of the report files (figures, tables, leaderboards) in the project's reports folder."""
    return list(figure_files(request))


@router.get("/reports/{name}")
def figure(name: str, request: Request, who: Principal = Depends(require_admin)) -> FileResponse:
    """One report file, by its name in the listing."""
    files = figure_files(request)
    if name not in files:
        raise NotFound(f"name: expected a file listed by /api/figures, got {quote(name)}")
    p = files[name]
    return FileResponse(p, media_type=FIGURE_TYPES[p.suffix.lower()])

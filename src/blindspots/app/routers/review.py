"""Review page (label issues): image, given mask, predicted mask, flagged regions outlined;
per region *confirm error* or *label is fine*; confirmed errors open the label page."""
from __future__ import annotations

from typing import Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import Field

from blindspots.app import deps
from blindspots.app.deps import page
from blindspots.app.quote import quote
from blindspots.app.routers.bodies import Body
from blindspots.app.security import Principal, page_user, require_user

router = APIRouter()


class ReviewIn(Body):
    set: str = Field(min_length=1, max_length=64)
    image_id: str = Field(min_length=1, max_length=1024)
    region: str = Field(min_length=1, max_length=32, description="The region number from regions.csv.")
    verdict: Literal["error", "fine"] = Field(description="'error': the label is wrong here; 'fine': it is right.")


@router.get("/review", response_class=HTMLResponse, include_in_schema=False)
def review_page(request: Request, who: Principal = Depends(page_user)) -> Response:
    return page(request, "review.html", who)


@router.get("/api/reviews/queue", tags=["reviews"])
def review_queue(request: Request, who: Principal = Depends(require_user)) -> dict:
    """Images of every attached review set with their flagged regions and the caller's verdicts."""
    out = deps.view(request).review_queue(who.name)
    out["classes"] = deps.view(request).classes_json()
    return out


@router.post("/api/reviews", tags=["reviews"])
def submit_review(body: ReviewIn, request: Request, who: Principal = Depends(require_user)) -> dict:
    """Record the caller's verdict on one region (stored with image id '<set>/<image id>');
    again replaces it. For 'error' the answer carries the label page's URL to fix the mask."""
    view = deps.view(request)
    view.review_set(body.set)
    if body.image_id not in set(view.review_images(body.set)):
        raise HTTPException(404, f"image_id: expected an image of review set {quote(body.set)}, "
                            f"got {quote(body.image_id)}")
    if not view.has_region(body.set, body.image_id, body.region):
        raise HTTPException(404, f"region: expected a flagged region of {quote(body.image_id)}, "
                            f"got {quote(body.region)}")
    with deps.store(request).write_lock:
        deps.project(request).answers.add_review(f"{body.set}/{body.image_id}", body.region, body.verdict, who.name)
    out = {"ok": True, "set": body.set, "image_id": body.image_id, "region": body.region, "verdict": body.verdict}
    if body.verdict == "error":
        out["fix_url"] = "/label?" + urlencode({"kind": "fix", "ref": body.set, "id": body.image_id})
    return out

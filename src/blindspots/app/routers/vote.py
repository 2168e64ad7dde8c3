"""Vote page (Defuse workshop Figure 15): one generated image, a button per class and *none of
the above*; the classifier's prediction stays hidden."""
from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field

from blindspots.app.auth import Principal, page_user, require_user
from blindspots.app import deps
from blindspots.app.deps import page

router = APIRouter()
NONE_LABEL = "none"


class VoteIn(BaseModel):
    set: str = Field(min_length=1, max_length=64, description="The attached vote set.")
    item_id: str = Field(min_length=1, max_length=256)
    label: str = Field(min_length=1, max_length=128, description="A class name of the set, or 'none' "
                       "(none of the above).")


@router.get("/vote", response_class=HTMLResponse, include_in_schema=False)
def vote_page(request: Request, who: Principal = Depends(page_user)) -> Response:
    return page(request, "vote.html", who)


@router.get("/api/votes/queue", tags=["votes"])
def vote_queue(request: Request, who: Principal = Depends(require_user)) -> dict:
    """Items of every attached vote set with the caller's vote (no predictions, no scenario ids)."""
    return deps.view(request).vote_queue(who.name)


@router.post("/api/votes", tags=["votes"])
def submit_vote(body: VoteIn, request: Request, who: Principal = Depends(require_user)) -> dict:
    """Record the caller's vote (a class name or 'none'); voting again replaces it."""
    view = deps.view(request)
    names = view.vote_class_names(body.set)
    if body.item_id not in set(view.vote_items(body.set)["item_id"]):
        raise HTTPException(404, f"item_id: expected an item of vote set {body.set!r}, got {body.item_id!r}")
    if body.label != NONE_LABEL and body.label not in names:
        raise HTTPException(422, f"label: expected one of {names} or 'none', got {body.label!r}")
    with deps.store(request).write_lock:
        deps.project(request).add_vote(body.item_id, who.name, None if body.label == NONE_LABEL else body.label)
    q = view.vote_queue(who.name)
    return {"ok": True, "item_id": body.item_id, "label": body.label, "done": q["done"], "total": q["total"]}

"""Vote page (Defuse workshop Figure 15): one generated image, a button per class and *none of
the above*; the classifier's prediction stays hidden.

A set whose classes.json says `"free_text": true` (the segmentation failure scenarios of
`report.scenario_votes`) also takes a name the rater types ("one failure mode? give it a name"):
it is stored as the vote's label, like a chosen name, so the tally and the report see both alike.
"""
from __future__ import annotations

import json
import re

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import Field

from blindspots.app import deps
from blindspots.app.deps import page
from blindspots.app.quote import quote
from blindspots.app.routers.bodies import Body
from blindspots.app.security import Principal, page_user, require_user
from blindspots.app.project_view import ProjectView

router = APIRouter()
NONE_LABEL = "none"
MAX_NAME = 128


class VoteIn(Body):
    set: str = Field(min_length=1, max_length=64, description="The attached vote set.")
    item_id: str = Field(min_length=1, max_length=256)
    label: str = Field(min_length=1, max_length=MAX_NAME, description="A class name of the set, 'none' (none "
                       "of the above), or in a free-text set any name the rater typed.")


def _free_text(view: ProjectView, name: str) -> bool:
    """Whether vote set `name` takes typed names (classes.json "free_text": true)."""
    path = view.vote_set(name)["path"] / "classes.json"
    return bool(json.loads(path.read_text(encoding="utf-8")).get("free_text", False))


def clean_name(text: str) -> str:
    """A typed name as stored: white space folded to single spaces, trimmed."""
    return re.sub(r"\s+", " ", text).strip()


@router.get("/vote", response_class=HTMLResponse, include_in_schema=False)
def vote_page(request: Request, who: Principal = Depends(page_user)) -> Response:
    return page(request, "vote.html", who)


@router.get("/api/votes/queue", tags=["votes"])
def vote_queue(request: Request, who: Principal = Depends(require_user)) -> dict:
    """Items of every attached vote set with the caller's vote (no predictions, no scenario ids);
    per set `free_text`: whether a typed name is taken."""
    view = deps.view(request)
    q = view.vote_queue(who.name)
    for s in q["sets"]:
        s["free_text"] = _free_text(view, s["set"])
    return q


@router.post("/api/votes", tags=["votes"])
def submit_vote(body: VoteIn, request: Request, who: Principal = Depends(require_user)) -> dict:
    """Record the caller's vote (a class name, 'none', or a typed name in a free-text set); voting
    again replaces it."""
    view = deps.view(request)
    names = view.vote_class_names(body.set)
    if body.item_id not in set(view.vote_items(body.set)["item_id"]):
        raise HTTPException(404, f"item_id: expected an item of vote set {quote(body.set)}, got {quote(body.item_id)}")
    label = body.label
    if label != NONE_LABEL and label not in names:
        if not _free_text(view, body.set):
            raise HTTPException(422, f"label: expected one of {names} or 'none', got {quote(label)}")
        label = clean_name(label)
        if not label or label.lower() == NONE_LABEL:
            raise HTTPException(422, f"label: expected a name with letters (or 'none' for none of the above), "
                                f"got {quote(body.label)}")
    with deps.store(request).write_lock:
        deps.project(request).answers.add_vote(body.item_id, who.name, None if label == NONE_LABEL else label)
    q = view.vote_queue(who.name)
    return {"ok": True, "item_id": body.item_id, "label": label, "done": q["done"], "total": q["total"]}

"""Region page: one region of an image of S highlighted at a time, the target's guess preselected; one key
or click accepts it, names another class, or says "mixed / unsure" (`blindspots.loop.regions`).

Every answer is committed before it is acknowledged; the image's partial mask is written as soon as its
last region is answered, so `blindspots round` finds it like any mask.
"""
from __future__ import annotations

from typing import Union

import numpy as np
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import Field, StrictInt, StrictStr
from scipy import ndimage

from blindspots.app import deps
from blindspots.app.deps import page
from blindspots.app.quote import quote
from blindspots.app.routers.bodies import Body
from blindspots.app.security import Principal, page_user, require_user
from blindspots.app.project_view import NotFound, png_bytes
from blindspots.loop import regions as rq
from blindspots.loop.project import Project

router = APIRouter()
MIXED = "mixed"


class RegionAnswerIn(Body):
    round: int = Field(ge=0, description="The loop round i whose S(i+1) is labelled.")
    image_id: str = Field(min_length=1, max_length=1024)
    region: int = Field(ge=0, description="A region id asked about in that image.")
    label: Union[StrictInt, StrictStr] = Field(description="A class id of the target, or 'mixed' (mixed / unsure).")


def _open_round(request: Request, round: int | None = None) -> int:
    """The round now taking region answers (409 if none, or if `round` is another)."""
    rnd = deps.view(request).mask_round()
    if rnd is None or (round is not None and round != rnd):
        raise HTTPException(409, f"round: expected the round now taking labels ({rnd}), got {round}")
    return rnd


@router.get("/regions", response_class=HTMLResponse, include_in_schema=False)
def regions_page(request: Request, who: Principal = Depends(page_user)) -> Response:
    return page(request, "regions.html", who)


@router.get("/api/regions/queue", tags=["regions"])
def region_queue(request: Request, who: Principal = Depends(require_user)) -> dict:
    """Every region asked about in the open round, image by image in S's order and best first within an
    image: {image_id, region, guess, answer (this caller's: a class id, 'mixed' or null)}; done / total;
    the label space."""
    view = deps.view(request)
    rnd = view.mask_round()
    if rnd is None:
        return {"round": None, "items": [], "done": 0, "total": 0, "classes": None}
    p: Project = deps.project(request)
    mine = rq.answers_of(p, rnd, who.name)
    items = []
    for image_id in rq.query_images(p, rnd):
        for q in rq.queries(p, rnd, image_id):
            items.append({"image_id": image_id, "region": q.region, "guess": q.guess,
                          "answer": _said(mine.get((image_id, q.region), False))})
    return {"round": rnd, "items": items, "done": sum(x["answer"] is not None for x in items),
            "total": len(items), "classes": view.classes_json()}


def _said(answer: int | None | bool) -> int | str | None:
    """An answer as the page shows it: a class id, 'mixed', or None (not answered: False)."""
    return None if answer is False else (MIXED if answer is None else answer)


@router.get("/api/images/region", tags=["regions"])
def region_overlay(request: Request, round: int = Query(ge=0), region: int = Query(ge=0),
                   image_id: str = Query(alias="id", min_length=1, max_length=1024),
                   who: Principal = Depends(require_user)) -> Response:
    """RGBA [H, W] overlay of one region: the rest of the image dimmed, the region's outline drawn."""
    p: Project = deps.project(request)
    if region not in {q.region for q in rq.queries(p, round, image_id)}:
        raise NotFound(f"region: expected a region asked about in {quote(image_id)} (round {round}), got {region}")
    inside = rq.segments(p, round, image_id) == region
    edge = inside & ~ndimage.binary_erosion(inside, border_value=0)
    ring = ndimage.binary_dilation(edge, iterations=1) & ~inside  # a second line outside: visible on any colour
    rgba = np.zeros(inside.shape + (4,), dtype=np.uint8)
    rgba[~inside] = (0, 0, 0, 120)
    rgba[ring] = (0, 0, 0, 255)
    rgba[edge] = (255, 230, 0, 255)
    return Response(png_bytes(rgba), media_type="image/png", headers={"Cache-Control": "private, max-age=600"})


@router.post("/api/regions", tags=["regions"])
def submit_region(body: RegionAnswerIn, request: Request, who: Principal = Depends(require_user)) -> dict:
    """Record the caller's answer for one region (committed before this returns; answering again replaces
    it). When it was the image's last open region, the image's partial mask is written too."""
    rnd = _open_round(request, body.round)
    view = deps.view(request)
    if isinstance(body.label, str):
        if body.label != MIXED:
            raise HTTPException(422, f"label: expected a class id or {MIXED!r}, got {quote(body.label)}")
        label: int | None = None
    else:
        n = len(view.classes.names)
        if not 0 <= body.label < n:
            raise HTTPException(422, f"label: expected a class id 0..{n - 1} or {MIXED!r}, got {body.label}")
        label = body.label
    p: Project = deps.project(request)
    with deps.store(request).write_lock:
        try:
            rq.add_region_answer(p, rnd, body.image_id, body.region, who.name, label)
        except ValueError as e:
            raise HTTPException(404, str(e)) from None
        finished = rq.finish_image(p, rnd, body.image_id, ignore_index=view.classes.ignore_index, annotator=who.name)
    done, total = rq.answer_count(p, rnd)
    return {"ok": True, "round": rnd, "image_id": body.image_id, "region": body.region,
            "label": MIXED if label is None else label, "image_done": finished, "done": done, "total": total}

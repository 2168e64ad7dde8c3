"""Rate page (MAD Figure 8): the image beside the target's prediction, ACR 1-5 or out-of-domain."""
from __future__ import annotations

from typing import Union

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import Field, StrictInt, field_validator

from blindspots.app import deps
from blindspots.app.deps import page
from blindspots.app.quote import json_type, quote
from blindspots.app.routers.bodies import Body
from blindspots.app.security import Principal, page_user, require_user
from blindspots.human.ratings import ACR_LABELS
from blindspots.human.scores import OOD_WORDS, rating_answer
from blindspots.loop.progress import rating_progress

router = APIRouter()


class RatingIn(Body):
    round: int = Field(ge=0, description="The loop round i whose candidates M(i+1) are rated.")
    image_id: str = Field(min_length=1, max_length=1024)
    score: Union[StrictInt, str] = Field(description="1..5 (bad, poor, fair, good, excellent) or 'ood'.")

    @field_validator("score", mode="before")  # before the union: one error naming the field, not one per type
    @classmethod
    def _score(cls, v: object) -> int | str:
        # JSON has numbers: text is only an out-of-domain answer here, and no other type is converted
        if (isinstance(v, str) and v.strip().lower() in OOD_WORDS) or (isinstance(v, int) and not isinstance(v, bool)):
            try:
                return rating_answer(v)  # the one rule (and synonyms) every rating entry point reads
            except ValueError:
                pass
        raise ValueError(f"expected an integer 1..5 or 'ood', got {quote(v)} ({json_type(v)})")


class RatingKey(Body):
    round: int = Field(ge=0)
    image_id: str = Field(min_length=1, max_length=1024)


def _check_open(request: Request, round: int, image_id: str) -> None:
    view = deps.view(request)
    open_round = view.rating_round()
    if open_round is None or round != open_round:
        raise HTTPException(409, f"round: expected the round now taking ratings ({open_round}), got {round}")
    if not view.is_candidate(round, image_id):
        raise HTTPException(404, f"image_id: expected a candidate of M({round + 1}), got {quote(image_id)}")


@router.get("/rate", response_class=HTMLResponse, include_in_schema=False)
def rate_page(request: Request, who: Principal = Depends(page_user)) -> Response:
    return page(request, "rate.html", who, labels=ACR_LABELS)


@router.get("/api/ratings/queue", tags=["ratings"])
def rating_queue(request: Request, who: Principal = Depends(require_user)) -> dict:
    """The caller's rating queue: round, every candidate of M in rank order with the caller's
    answer (or null), done / total, and the label space for the overlay legend."""
    out = deps.view(request).rate_queue(who.name)
    out["classes"] = deps.view(request).classes_json() if out["round"] is not None else None
    out["progress"] = _round_progress(request, out["round"])
    return out


def _round_progress(request: Request, round: int | None) -> dict | None:
    """The round's count for everyone (`loop.progress`): images rated by enough people, answers in
    hand, and, when fewer people than the quota can rate, what to do."""
    if round is None:
        return None

    return rating_progress(deps.view(request).project, round).to_dict()


@router.post("/api/ratings", tags=["ratings"])
async def submit_rating(body: RatingIn, request: Request, who: Principal = Depends(require_user)) -> dict:
    """Record the caller's rating; committed before the answer returns. Sending it again (or a
    new score) replaces the earlier answer: one rating per annotator and candidate."""
    _check_open(request, body.round, body.image_id)
    # Committed (group commit with other raters' answers) before this returns; awaited on the
    # event loop, so the hot path holds no worker thread.
    await deps.writer(request).commit((body.round, body.image_id, who.name, body.score))
    done = deps.view(request).rating_count(body.round, who.name)
    return {"ok": True, "round": body.round, "image_id": body.image_id, "score": body.score, "done": done,
            "progress": _round_progress(request, body.round)}


@router.post("/api/ratings/undo", tags=["ratings"])
def undo_rating(body: RatingKey, request: Request, who: Principal = Depends(require_user)) -> dict:
    """Withdraw the caller's rating of one candidate (the U key)."""
    _check_open(request, body.round, body.image_id)
    removed = deps.store(request).delete_rating(body.round, body.image_id, who.name)
    return {"ok": True, "removed": removed, "done": deps.view(request).rating_count(body.round, who.name)}

"""Dashboard (admin): round status and what the loop waits for, per-annotator progress, rater
agreement, the Table 1 leaderboard and links to the report figures."""
from __future__ import annotations

import math

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from blindspots.app import deps
from blindspots.app.deps import page
from blindspots.app.routers.images import figure_files
from blindspots.app.security import Principal, page_admin, require_admin
from blindspots.human.ratings import Ratings
from blindspots.loop import leaderboard_frame

router = APIRouter()


def _num(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def dashboard_data(request: Request) -> dict:
    """Everything the dashboard shows, as JSON-able data."""
    project, view, store = deps.project(request), deps.view(request), deps.store(request)
    status = view.status()
    rnd = view.rating_round()
    if rnd is None:  # ratings closed: show the latest round that had candidates
        rnd = project.answers.last_mined_round()
    r = project.answers.ratings_for_round(rnd) if rnd is not None else None
    n_m = len(project.answers.candidates(rnd, "M")) if rnd is not None else 0
    people = []
    votes, reviews = project.answers.votes(), project.answers.reviews()
    vq_total = view.vote_queue("")["total"]
    for a in project.answers.annotators().itertuples():
        mine = r[r["annotator"] == a.name] if r is not None else None
        people.append({"name": a.name, "role": a.role,
                       "ratings": int(len(mine)) if mine is not None else 0, "ratings_total": n_m,
                       "votes": int((votes["annotator"] == a.name).sum()), "votes_total": vq_total,
                       "reviews": int((reviews["annotator"] == a.name).sum())})
    agreement = None
    if r is not None and len(r):
        agr = Ratings(zip(r["id"], r["annotator"], ["ood" if o else int(s) for s, o in
                                                      zip(r["score"], r["out_of_domain"])])).agreement()
        agreement = {k: _num(v) for k, v in agr.items()}
    board = leaderboard_frame(project)
    board_html = board.to_html(classes="board", na_rep="—", float_format=lambda v: f"{v:.4f}") if len(board) else ""
    lq = view.label_queue()
    return {"status": {"state": status.state, "round": status.round, "step": status.step,
                       "message": status.message, "done": status.done, "total": status.total,
                       "awaited": list(status.awaited)[:50], "n_awaited": len(status.awaited),
                       "next": [a.as_command(project.path) for a in status.next]},
            "rating_round": rnd, "candidates": n_m, "annotators": people, "agreement": agreement,
            "masks": {"done": lq["done"], "total": lq["total"]},
            "leaderboard_html": board_html, "figures": list(figure_files(request)),
            "vote_sets": [s["name"] for s in store.sets("vote")],
            "review_sets": [s["name"] for s in store.sets("review")]}


@router.get("/dashboard", response_class=HTMLResponse, include_in_schema=False)
def dashboard_page(request: Request, who: Principal = Depends(page_admin)) -> Response:
    return page(request, "dashboard.html", who, d=dashboard_data(request),
                docs=bool(getattr(request.app.state, "has_docs", False)))


@router.get("/api/dashboard", tags=["dashboard"])
def dashboard(request: Request, who: Principal = Depends(require_admin)) -> dict:
    """Round status, per-annotator progress, rater agreement (Spearman, Kendall, Krippendorff's
    alpha), the Table 1 leaderboard (HTML) and the report figures."""
    return dashboard_data(request)

"""What the routers depend on: the app's shared objects and page rendering.

`create_app` (app/main.py) puts the project, its `ProjectView`, the `AppStore`, the group-commit
writer, the superpixel cache and the templates on `app.state` (nothing lives in module globals, so
two apps in one process share nothing); routers read them only through these functions, so they
never import main.py (which imports them).
"""
from __future__ import annotations

from typing import Any

from fastapi import Request

from blindspots.app.batching import GroupWriter
from blindspots.app.services import SegmentCache
from blindspots.app.project_view import ProjectView
from blindspots.app.tables import AppStore
from blindspots.loop.project import Project


def project(request: Request) -> Project:
    """The project the app serves."""
    return request.app.state.project


def view(request: Request) -> ProjectView:
    """Read access for the pages (ids -> pixels, queues)."""
    return request.app.state.view


def store(request: Request) -> AppStore:
    """The app's own tables (sessions, attached sets, fixes) and its write lock."""
    return request.app.state.store


def writer(request: Request) -> GroupWriter:
    """Group commit of ratings."""
    return request.app.state.writer


def segments(request: Request) -> SegmentCache:
    """The label editor's superpixels, computed once per image and level (shared by request threads)."""
    return request.app.state.segments


def secure_cookies(request: Request) -> bool:
    """Whether the session cookie is marked Secure (served over HTTPS)."""
    return bool(request.app.state.secure_cookies)


def page(request: Request, template: str, who: Any, **context: Any) -> object:
    """Render a page with the signed-in principal, its CSRF token and the project name."""
    return request.app.state.templates.TemplateResponse(
        request, template, {"who": who, "csrf": who.csrf if who else "",
                            "project": project(request).config.project.name, **context})

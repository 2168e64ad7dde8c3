"""API docs served by the app itself (offline): Swagger UI from the `swagger-ui-bundle-v2` package.

Why: FastAPI's default /api/docs loads Swagger UI from a CDN with an inline script, which the
app's CSP (script-src 'self') blocks and which fails offline, so the page was blank. Here the
assets come from the installed package and the start-up script from /static. Without the
package there are no docs pages (and no docs link); /api/openapi.json is always there.
Swagger UI 5 or later is needed: FastAPI writes OpenAPI 3.1, which Swagger UI 4 (the older
`swagger-ui-bundle` package, same module name) refuses to render.
"""
from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

# Lazy imports: swagger_ui_bundle (optional: only the call that uses it needs it).

DOCS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>blindspots API</title>
<link rel="icon" href="/favicon.ico">
<link rel="stylesheet" href="/api/docs/assets/swagger-ui.css"></head>
<body><div id="swagger-ui" data-openapi="/api/openapi.json"></div>
<script src="/api/docs/assets/swagger-ui-bundle.js"></script>
<script src="/static/docs_init.js"></script></body></html>"""


def swagger_assets() -> Path | None:
    """The folder of the installed Swagger UI (>= 5) assets, or None without `swagger-ui-bundle-v2`."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    p = Path(str(swagger_ui_path))
    m = re.fullmatch(r"swagger-ui-(\d+)\..*", p.name)  # the vendored folder is named by version
    if m is None or int(m.group(1)) < 5:
        return None
    return p if (p / "swagger-ui-bundle.js").is_file() else None


def add_docs(app: FastAPI) -> bool:
    """Serve /api/docs from local assets; False (no docs) when the assets are not installed."""
    assets = swagger_assets()
    if assets is None:
        return False
    app.mount("/api/docs/assets", StaticFiles(directory=str(assets)), name="swagger-assets")

    @app.get("/api/docs", response_class=HTMLResponse, include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(DOCS_PAGE)

    return True

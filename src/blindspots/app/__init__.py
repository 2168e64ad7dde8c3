"""blindspots.app: the web app for ratings, pixel labels, scenario votes and label-issue review.

`create_app(project_path)` builds the FastAPI app; `blindspots serve PROJECT` runs it.
"""
from blindspots.app.main import create_app

__all__ = ["create_app"]

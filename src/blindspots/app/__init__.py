"""blindspots.app: the web app for ratings, pixel labels, scenario votes and label-issue review.

`create_app(project_path)` builds the FastAPI app; `blindspots serve PROJECT` runs it. The name loads on first
use, so that the app's store (`blindspots.app.store`, used by `blindspots annotators add`) works in a core
install without the `[app]` extra's web stack.
"""
from blindspots._lazy import lazy_names

__all__ = ["create_app"]
__getattr__, __dir__ = lazy_names(__name__, {"create_app": "blindspots.app.main"}, globals())

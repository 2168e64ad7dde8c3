"""blindspots.app: the web app for ratings, pixel labels, scenario votes and label-issue review.

`create_app(project_path)` builds the FastAPI app (`bind_port` / `serve_on`: its port, taken before anything loads); `blindspots serve PROJECT` runs it. The name loads on first
use, so that the app's tables (`blindspots.app.tables`, used by `blindspots annotators add`) works in a core
install without the `[app]` extra's web stack.
"""
from blindspots._lazy import lazy_names

__all__ = ["bind_port", "create_app", "serve_on"]
__getattr__, __dir__ = lazy_names(__name__, {"create_app": "blindspots.app.main", "bind_port": "blindspots.app.port",
                                             "serve_on": "blindspots.app.port"}, globals())

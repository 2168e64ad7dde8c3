"""blindspots: find, explain and fix the failures of segmentation and classification models.

The names a notebook starts from load on first use (PEP 562), so `import blindspots` stays cheap (no torch):

    import blindspots
    scan = blindspots.scan("pool/", target={"t": "target.onnx"}, competitors={"c": "comp.pt"}, out="scan/")
    picks = scan.mine("mad", 20)
    project = blindspots.Project.create("proj/", pool="pool/", target={"t": "target.onnx"},
                                        competitors={"c": "comp.pt"}, scan=scan)
    print(project.advance().next)

Engines are packages of their own (`blindspots.surprise.score_pool`, `blindspots.labels`, `blindspots.defuse`,
...); docs/python.md walks through them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from blindspots._lazy import lazy_names

__version__ = "0.1.0"

#: public name -> the module that defines it
_SOURCES = {
    **dict.fromkeys(["Project", "Scan", "open_scan"], "blindspots.workflows"),
    **dict.fromkeys(["NextAction", "ProjectBusy", "Status"], "blindspots.loop"),
    "keep_freed_memory": "blindspots.allocator",
}

#: subpackages that attribute access imports; `scan` is also the front door's function (the package is callable)
_SUBPACKAGES = ("defuse", "labels", "loop", "mine", "report", "scan", "surprise")

__all__ = ["__version__", "scan", *sorted(_SOURCES)]
__getattr__, __dir__ = lazy_names(__name__, _SOURCES, globals(), _SUBPACKAGES)  # PEP 562: loads on first use

if TYPE_CHECKING:  # what type checkers and the import-graph test see
    from blindspots.allocator import keep_freed_memory
    from blindspots.loop import NextAction, ProjectBusy, Status
    from blindspots.workflows import Project, Scan, open_scan

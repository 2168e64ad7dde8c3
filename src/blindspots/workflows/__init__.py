"""The Python front door: the objects a notebook starts from, re-exported by `blindspots` itself.

`scan(pool, target=..., competitors=..., out=...)` / `open_scan(folder)` -> `Scan` (score table, maps,
mining, surprise columns, the scan page, FiftyOne); `Project.create(...)` / `Project.open(folder)` -> the
troubleshooting loop over a project folder (`advance`, `status`, `leaderboard`, `report`, people's answers).
Each method calls the library function the command line calls, so both give the same results."""
from blindspots.workflows.project import Project
from blindspots.workflows.scan import Scan, open_scan, scan

__all__ = ["Project", "Scan", "open_scan", "scan"]

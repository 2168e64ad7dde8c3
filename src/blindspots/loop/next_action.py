"""What a person does next with a project, as data: the loop's `Status` carries `NextAction`s, and each
face phrases them its own way (the command line as a `blindspots ...` command, a notebook as a call on
`blindspots.Project`), so that library messages never tell a notebook user to run a shell command."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: kind -> (the command, with {project}; the call on a `blindspots.Project` named `project`)
_PHRASES: dict[str, tuple[str, str]] = {
    "advance": ("blindspots round {project}", "project.advance()"),
    "rate": ("blindspots serve {project}", "# people rate on the web app's /rate page (`blindspots serve`)"),
    "import_ratings": ("blindspots ratings import {project} FILE.csv", "project.import_ratings('FILE.csv')"),
    "export_masks": ("blindspots export {project} --format cvat", "project.export('cvat')"),
    "import_masks": ("blindspots masks import {project} FOLDER", "project.import_masks('FOLDER')"),
    "register_version": ("blindspots register {project} SPEC", "project.register_version('SPEC')"),
    "leaderboard": ("blindspots leaderboard {project}", "project.leaderboard()"),
    "status": ("blindspots status {project}", "project.status()"),
}
KINDS = frozenset(_PHRASES)


@dataclass(frozen=True)
class NextAction:
    """One thing to do next. kind: one of `KINDS`; why: a few words on what it achieves, shown beside
    the action."""

    kind: str
    why: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {sorted(KINDS)}, got {self.kind!r}")

    def as_command(self, project: str | Path) -> str:
        """The action as a `blindspots` command for the project folder `project`."""
        return _PHRASES[self.kind][0].format(project=project)

    def as_call(self) -> str:
        """The action as a call on a `blindspots.Project` named `project`."""
        return _PHRASES[self.kind][1]


#: what the loop waiting for ratings asks for: people rate (app or CSV), then the loop goes on
RATE_ACTIONS = (NextAction("rate", "people rate each candidate 1-5 or out-of-domain on its /rate page"),
                NextAction("import_ratings", "columns image_id,rater,score"),
                NextAction("advance", "once the ratings are in"))
#: what the loop waiting for pixel labels asks for: masks drawn elsewhere (or in the app), then the loop goes on
MASK_ACTIONS = (NextAction("export_masks", "or labelstudio; or draw them in the web app"),
                NextAction("import_masks", "index PNGs, a CVAT zip or Label Studio JSON"),
                NextAction("advance", "once the masks are in"))


def phrase_commands(actions: tuple[NextAction, ...], project: str | Path) -> str:
    """'next: CMD (why); or CMD2 (why)' for the command line ('' when there is nothing to do)."""
    parts = [a.as_command(project) + (f"  ({a.why})" if a.why else "") for a in actions]
    return ("next: " + "\n  or: ".join(parts)) if parts else ""

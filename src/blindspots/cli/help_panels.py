"""`blindspots --help` grouped by what a person does, each group in workflow order.

Why here and not in each command module: the order is a property of the whole command line (what a
newcomer reads first), not of one command; one table keeps it in one place, and a command missing
from it fails `tests/test_cli_help.py`.
"""
from __future__ import annotations

import click
import typer

from blindspots.cli.errors import ErrorHandlingGroup

#: panel -> its commands, in the order a person uses them.
PANELS: dict[str, tuple[str, ...]] = {
    "Start here": ("demo", "scan", "mine", "report"),
    "Your project": ("init", "config", "round", "status", "export", "masks", "ratings", "register", "leaderboard"),
    "People": ("annotators", "serve", "labelstudio", "labelstudio-backend", "fiftyone", "web"),
    "Engines": ("label-issues", "surprise", "defuse"),
    "Utilities": ("scenes", "zoo"),
}
ORDER = [name for names in PANELS.values() for name in names]


def apply_panels(app: typer.Typer) -> None:
    """Put every registered command and command group of `app` in its panel (`rich_help_panel`)."""
    panel_of = {name: panel for panel, names in PANELS.items() for name in names}
    for info in [*app.registered_commands, *app.registered_groups]:
        name = info.name if info.name else getattr(info.callback, "__name__", "")
        info.rich_help_panel = panel_of.get(name, "Utilities")


class PanelGroup(ErrorHandlingGroup):
    """The root group: commands listed in workflow order (`ORDER`), then any other by name."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))

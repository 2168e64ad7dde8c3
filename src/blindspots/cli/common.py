"""Options every command takes, anywhere on the line: `-v/--verbose` and `--no-progress`.

They are options of the root command (`blindspots -v round P`); `hoist_common_options` moves them from after a
command to before it (`blindspots round P -v --no-progress`), unless that command defines the option itself
(`scan` and `label-issues` have their own `--progress/--no-progress`). Why hoisting and not one option per
command: the commands stay as they are, and a new command takes the common options without doing anything.
The root callback records the choice each run; `progress_wanted()` reads it.
"""
from __future__ import annotations

from typing import Any, Sequence

#: the flags every command accepts
COMMON_FLAGS: frozenset[str] = frozenset({"-v", "--verbose", "--no-progress"})

_state = {"progress": True}


def set_progress(on: bool) -> None:
    """Record `--no-progress` for this run (the root callback calls it on every run)."""
    _state["progress"] = bool(on)


def progress_wanted() -> bool:
    """False when this run was given `--no-progress`."""
    return _state["progress"]


def _own_flags(command: Any) -> set[str]:
    return {o for p in getattr(command, "params", []) for o in (*p.opts, *p.secondary_opts)}


def hoist_common_options(group: Any, args: Sequence[str]) -> list[str]:
    """`args` with each common flag that follows the command moved in front of it, where the root takes it.

    group: the root click group (its `.commands`: name -> command; a sub-group's too). A flag the command
    defines itself stays where it is, and so does everything after `--`.
    """
    args = list(args)
    pos = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if pos is None or args[pos] not in getattr(group, "commands", {}):
        return args  # no command (or an unknown one: the usual error says so)
    command = group.commands[args[pos]]
    rest = args[pos + 1:]
    while getattr(command, "commands", None) and rest and rest[0] in command.commands:
        command, rest = command.commands[rest[0]], rest[1:]  # `annotators add ...`: the innermost command
    own = _own_flags(command)
    moved, kept, literal = [], [], False
    for a in args[pos:]:
        literal = literal or a == "--"
        (moved if not literal and a in COMMON_FLAGS and a not in own else kept).append(a)
    return args[:pos] + moved + kept

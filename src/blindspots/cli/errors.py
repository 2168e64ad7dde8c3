"""The one CLI error handler: a ValueError / OSError / sqlite3.DatabaseError escaping a command becomes a
one-line `error: <message>` on stderr and exit code 2; `blindspots -v ...` shows the traceback instead.

Why one handler: commands stay thin (parse, call, print) and every library error reads the same way,
instead of a `try/except ValueError` block in each command.
"""
from __future__ import annotations

import sqlite3
from typing import Any

import click
from typer.core import TyperGroup

#: Errors a user can cause (bad arguments, missing or unreadable files, a broken database): not bugs.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, sqlite3.DatabaseError)

#: ctx.meta key where the root callback records `--verbose`.
VERBOSE_KEY = "blindspots.verbose"

EXIT_CODE = 2


def one_line(error: BaseException) -> str:
    """`error` as one line: an OSError names its file, newlines are folded, an empty message gives the type."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        msg = f"{error.filename}: {error.strerror}"
        if error.filename2 is not None:
            msg += f" (and {error.filename2})"
    else:
        msg = str(error)
    msg = " ".join(msg.split())
    return msg or type(error).__name__


class ErrorHandlingGroup(TyperGroup):
    """The root command group: runs the command and turns a user error into `error: ...` and exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except USER_ERRORS as e:
            if ctx.meta.get(VERBOSE_KEY):
                raise  # -v: the full traceback
            click.echo(f"error: {one_line(e)}", err=True)
            ctx.exit(EXIT_CODE)

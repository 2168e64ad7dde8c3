"""The one CLI error handler: a ValueError / OSError / sqlite3.DatabaseError escaping a command becomes a
one-line `error: <message>` on stderr and exit code 2; `blindspots -v ...` shows the traceback instead. A usage
error (an unknown option or command, a missing argument) is the same one line, naming the `--help` to read,
instead of the framework's boxed message.

Why one handler: commands stay thin (parse, call, print) and every library error reads the same way,
instead of a `try/except ValueError` block in each command.
"""
from __future__ import annotations

import sqlite3
import sys
from typing import Any, Sequence

import click
import typer
import typer.core
from typer.core import TyperGroup

from blindspots.cli.common import hoist_common_options

#: Errors a user can cause (bad arguments, missing or unreadable files, a broken database): not bugs.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, sqlite3.DatabaseError)

#: ctx.meta key where the root callback records `--verbose`.
VERBOSE_KEY = "blindspots.verbose"

EXIT_CODE = 2

# Typer 0.2x raises the usage errors of its own copy of click; older Typer raises click's.
USAGE_ERRORS: tuple[type[BaseException], ...] = tuple(
    {getattr(typer.core, "_click", click).exceptions.UsageError, click.exceptions.UsageError})


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


def usage_line(error: BaseException) -> str:
    """A usage error as one line: its message and the `--help` of the command it concerns."""
    ctx = getattr(error, "ctx", None)
    fmt = getattr(error, "format_message", None)
    msg = " ".join((fmt() if fmt else str(error)).split())
    return f"error: {msg} (see '{ctx.command_path} --help')" if ctx is not None else f"error: {msg}"


class ErrorHandlingGroup(TyperGroup):
    """The root command group: runs the command and turns a user error into `error: ...` and exit code 2."""

    def main(self, args: Sequence[str] | None = None, *a: Any, **kw: Any) -> Any:
        # -v and --no-progress after the command: moved to the root, which takes them (cli/common.py)
        return super().main(hoist_common_options(self, sys.argv[1:] if args is None else args), *a, **kw)

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except USAGE_ERRORS as e:  # the root's own options (`blindspots --bogus`)
            click.echo(usage_line(e), err=True)
            raise typer.Exit(EXIT_CODE) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except USAGE_ERRORS as e:  # a command's options and arguments, an unknown command
            click.echo(usage_line(e), err=True)
            ctx.exit(EXIT_CODE)
        except USER_ERRORS as e:
            if ctx.meta.get(VERBOSE_KEY):
                raise  # -v: the full traceback
            click.echo(f"error: {one_line(e)}", err=True)
            ctx.exit(EXIT_CODE)

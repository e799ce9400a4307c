"""The exit-code exceptions: raised deep, rendered once by the CLI group.

Each type is one exit code of SPEC section 4. They subclass click's ClickException only for
its `exit_code` and `show()` protocol; the library never imports the CLI.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterable

import click


class VolumetoolError(click.ClickException):
    """A failure a user can act on; `message` is one line, `hint` says what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def format_message(self) -> str:
        text = " ".join(self.message.split("\n"))
        return f"{text} — {self.hint}" if self.hint else text

    def show(self, file=None) -> None:  # type: ignore[override]
        from volumetool.render import escape_control

        # Messages quote volume text (a migration name, a key, an SQLite message).
        text = escape_control(self.format_message())
        click.echo(f"volumetool: {text}", file=file or sys.stderr)


class ProblemsFound(VolumetoolError):
    """Exit 1: the command ran and found problems (failed check, conflict, absent key…)."""

    exit_code = 1


class UnusableInput(VolumetoolError):
    """Exit 2: missing or unreadable file, not SQLite, not an agent file, malformed input."""

    exit_code = 2


class SchemaMismatch(VolumetoolError):
    """Exit 3: the file needs `volumetool migrate`, or was written by a newer version."""

    exit_code = 3


class Busy(VolumetoolError):
    """Exit 4: locked past the busy timeout, or another volumetool holds the volume lock."""

    exit_code = 4


# When a command's parts end differently (volumes, threads), its exit code tells the most
# serious: unusable input, then a schema mismatch, then problems found, then busy (retry later).
EXIT_PRECEDENCE = (2, 3, 1, 4)


def worst_exit_code(codes: Iterable[int]) -> int:
    found = set(codes)
    return next((code for code in EXIT_PRECEDENCE if code in found), 0)


def from_sqlite(exc: sqlite3.Error, path: object) -> VolumetoolError:
    """Translate an SQLite error met while using `path` into its exit-code exception."""
    text = str(exc)
    lowered = text.lower()
    if "locked" in lowered or "busy" in lowered:
        return Busy(
            f"{path}: the database is locked by another process",
            "retry later, or raise --busy-timeout",
        )
    if "not a database" in lowered or "malformed" in lowered or "disk image" in lowered:
        return UnusableInput(f"{path}: the file is damaged or not an SQLite database ({text})")
    if "unable to open" in lowered or "readonly" in lowered or "read-only" in lowered:
        return UnusableInput(f"{path}: cannot open the file for this operation ({text})")
    if "disk is full" in lowered or "disk i/o" in lowered:
        return ProblemsFound(
            f"{path}: the write failed ({text}); nothing was changed",
            "free disk space and retry",
        )
    return ProblemsFound(f"{path}: SQLite error: {text}")

"""The exit-code exceptions: raised deep, rendered once by the CLI group (`volumetool.cli`).

Each type is one exit code of SPEC section 4. They are plain exceptions: the library imports
nothing of the CLI, and the group turns them into one line on stderr and the exit code.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite3


class VolumetoolError(Exception):
    """A failure a user can act on; `message` is one line, `hint` says what to do."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def format_message(self) -> str:
        """The message and its hint. A line break in it (a file name can hold one) stays: it is
        escaped where the line is shown (`\\n`), so that `x\\ny` never reads as `x y`."""
        return f"{self.message} — {self.hint}" if self.hint else self.message

    def __str__(self) -> str:
        return self.format_message()


class ProblemsFound(VolumetoolError):
    """Exit 1: the command ran and found problems (failed check, conflict, absent key…)."""

    exit_code = 1


class UnusableInput(VolumetoolError):
    """Exit 2: missing or unreadable file, not SQLite, not an agent file, malformed input."""

    exit_code = 2


class Damaged(UnusableInput):
    """Exit 2: an SQLite file whose pages cannot be read as they should (zeroed, truncated,
    overwritten). Only `check` goes on, reporting it as an `integrity` finding."""

    def __init__(self, path: object, what: str) -> None:
        super().__init__(
            f"{path}: the file is damaged ({what})",
            "restore it from a backup; `volumetool check` lists what it can read",
        )
        self.what = what


class SchemaMismatch(VolumetoolError):
    """Exit 3: the file needs `volumetool migrate`, was written by a newer version, or holds
    schema objects the format does not define."""

    exit_code = 3


class Busy(VolumetoolError):
    """Exit 4: locked past the busy timeout, or another volumetool holds the volume lock."""

    exit_code = 4


class Interrupted(VolumetoolError):
    """Exit 130 (SIGINT: Ctrl-C) or 143 (SIGTERM: `timeout`, systemd, Kubernetes): 128 and the
    signal that came (`by`, which the CLI sets when SIGTERM comes; both are handled alike).
    The message says what is committed and what became of a write that was under way."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    by = signal.SIGINT

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return 128 + int(Interrupted.by)

    @classmethod
    def between_volumes(
        cls, exc: BaseException, finished: Sequence[str], rest: Sequence[str]
    ) -> Interrupted:
        """`exc` (Ctrl-C, SIGTERM, or the Interrupted it became) of a command over several
        volumes: its line goes on to say which volumes were finished and which were not
        (SPEC 13)."""
        what = exc.message if isinstance(exc, Interrupted) else "interrupted"
        hint = exc.hint if isinstance(exc, Interrupted) else None
        return cls(f"{what}; finished: {_counted(finished)}; not finished: {_counted(rest)}", hint)


def _counted(arguments: Sequence[str]) -> str:
    return f"{len(arguments)} ({', '.join(arguments)})" if arguments else "none"


class UntrustedSchemaWarning(UserWarning):
    """A read command opened a file whose schema the format does not define: it reads on,
    and the CLI shows the warning as one line on stderr."""


# When a command's parts end differently (volumes, threads), its exit code tells the most
# serious: an interruption (SIGTERM, SIGINT: the command stopped), then unusable input, then a
# schema mismatch, then problems found, then busy (retry later).
EXIT_PRECEDENCE = (143, 130, 2, 3, 1, 4)


def worst_exit_code(codes: Iterable[int]) -> int:
    found = set(codes)
    return next((code for code in EXIT_PRECEDENCE if code in found), 0)


def error_with_code(code: int, message: str, hint: str | None = None) -> VolumetoolError:
    """The exception of exit code `code` (1 to 4), for a command that fails as a whole for
    its parts' reasons (every volume unreadable: the most serious of theirs)."""
    kinds = (ProblemsFound, UnusableInput, SchemaMismatch, Busy)
    kind = next((kind for kind in kinds if kind.exit_code == code), ProblemsFound)
    return kind(message, hint)


# SQLite's primary result codes (the extended ones, SQLITE_IOERR_SHORT_READ say, share the
# prefix), by what they mean for the user.
_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}
_DAMAGED = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}
_CANNOT_OPEN = {"SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH"}
_WRITE_FAILED = {"SQLITE_FULL", "SQLITE_IOERR"}
# A truncated file reads short: that is damage, not a failing disk.
_DAMAGED_EXTENDED = {"SQLITE_IOERR_SHORT_READ"}
# Raised by Python's sqlite3 module, not by SQLite, when stored text is not UTF-8: in an agent
# file that only happens when pages were overwritten.
NOT_UTF8 = "Could not decode to UTF-8"


def _primary(name: str) -> str:
    return "_".join(name.split("_")[:2])


def from_sqlite(exc: sqlite3.Error, path: object) -> VolumetoolError:
    """Translate an SQLite error met while using `path` into its exit-code exception."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    text = str(exc)
    if not name and text.startswith(NOT_UTF8):
        return Damaged(path, "text that is not UTF-8")
    primary = _primary(name)
    if primary in _BUSY:
        return Busy(
            f"{path}: the database is locked by another process",
            "retry later, or raise --busy-timeout",
        )
    if primary in _DAMAGED or name in _DAMAGED_EXTENDED:
        return Damaged(path, text)
    if primary in _CANNOT_OPEN:
        return UnusableInput(f"{path}: cannot open the file for this operation ({text})")
    if primary in _WRITE_FAILED:
        return ProblemsFound(
            f"{path}: the write failed ({text}); nothing was changed",
            "free disk space and retry",
        )
    return ProblemsFound(f"{path}: SQLite error: {text}")

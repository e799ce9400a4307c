"""What a terminal gets that a pipe does not: colour, a pager, text wrapped to the screen, times
and figures for people. None of it happens when stdout is not a terminal (unless asked for with
`--color always`), so scripts see exactly what they saw before.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import click

from volumetool.text import escape_control

DEFAULT_PAGER = "less -FRX"
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def terminal_options(f: Callable) -> Callable:
    """--color and --no-pager."""
    f = click.option(
        "--no-pager", is_flag=True, help="Never page (a terminal's long output goes to less)."
    )(f)
    return click.option(
        "--color",
        type=click.Choice(["auto", "always", "never"]),
        default="auto",
        show_default=True,
        help="Colour by role; auto: on a terminal, unless NO_COLOR is set.",
    )(f)


def stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stdout
        return False


def use_color(choice: str, tty: bool, env: Mapping[str, str] = os.environ) -> bool:
    """--color: `always` and `never` as said; `auto` on a terminal, unless NO_COLOR is set to
    anything (no-color.org) or the terminal is dumb."""
    if choice != "auto":
        return choice == "always"
    return tty and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


def screen_size() -> os.terminal_size:
    """The terminal's columns and lines ($COLUMNS and $LINES first; 80x24 for a pipe)."""
    return shutil.get_terminal_size()


def pager_command(env: Mapping[str, str] = os.environ) -> str | None:
    """The pager as git chooses it: $VOLUMETOOL_PAGER, else $PAGER, else `less -FRX`; set to
    "" or `cat`, none."""
    for name in ("VOLUMETOOL_PAGER", "PAGER"):
        if name in env:
            command = env[name].strip()
            break
    else:
        usable = env.get("TERM") != "dumb" and shutil.which("less")
        command = DEFAULT_PAGER if usable else ""
    return command if command and command != "cat" else None


def screen_rows(text: str, columns: int) -> int:
    """How many terminal lines `text` fills at `columns` wide."""
    from volumetool.conversation import display_width

    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    columns = max(columns, 1)
    return sum(max(1, math.ceil(display_width(_SGR.sub("", line)) / columns)) for line in lines)


def show(text: str, page: bool, env: Mapping[str, str] = os.environ) -> None:
    """Write text to stdout; with `page`, through the pager when it is longer than the screen."""
    command = pager_command(env) if page else None
    size = screen_size()
    if command is None or screen_rows(text, size.columns) < size.lines:
        _write(text)
    elif _program_missing(command):
        _unpaged(command, "not found", text)
    else:
        status = _run_pager(command, text, env)
        if status in _COULD_NOT_START:
            _unpaged(command, f"exit status {status}", text)


# What the shell returns when the pager's program cannot run (not executable, not found).
_COULD_NOT_START = (126, 127)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _program(command: str) -> str | None:
    """The program a pager command runs, when it is one simple command (`less -R`), else
    None (a pipeline, variables set first: the shell's to make sense of)."""
    import shlex

    if re.search(r"[|&;<>()$`]", command):
        return None
    try:
        program = shlex.split(command)[0]
    except (ValueError, IndexError):
        return None
    return None if "=" in program else program


def _program_missing(command: str) -> bool:
    """Whether the pager command's program is nowhere on $PATH (`VOLUMETOOL_PAGER=lss`)."""
    program = _program(command)
    return program is not None and shutil.which(program) is None


def _unpaged(command: str, why: str, text: str) -> None:
    """A pager that cannot start: the text unpaged, and one line on stderr saying so."""
    click.echo(
        f"volumetool: warning: the pager {escape_control(command)!r} could not start ({why});"
        " the text follows unpaged (set VOLUMETOOL_PAGER, or pass --no-pager)",
        err=True,
    )
    _write(text)


def _run_pager(command: str, text: str, env: Mapping[str, str]) -> int:
    """The pager's exit status, once it has ended."""
    import subprocess

    pager_env = {"LESS": "FRX", "LV": "-c", **env}
    sys.stdout.flush()
    pager = subprocess.Popen(
        # One simple command replaces the shell, so that ending it (SIGTERM) ends the pager.
        f"exec {command}" if _program(command) else command,
        shell=True,
        stdin=subprocess.PIPE,
        env=pager_env,
        encoding=sys.stdout.encoding or "utf-8",
        errors="replace",
    )
    # Ctrl-C belongs to the pager while it runs (less uses it to stop a search), as with git.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with contextlib.suppress(BrokenPipeError):  # the reader quit before the end: fine
            assert pager.stdin is not None
            pager.stdin.write(text)
        with contextlib.suppress(BrokenPipeError):
            pager.stdin.close()
        return pager.wait()
    except KeyboardInterrupt:  # SIGTERM (Ctrl-C is the pager's): the pager ends with us
        pager.terminate()
        raise
    finally:
        signal.signal(signal.SIGINT, previous)


# --- sessions on a terminal -----------------------------------------------------------------

_AGO = ((60, 1, "s"), (3600, 60, "min"), (48 * 3600, 3600, "h"), (60 * 86400, 86400, "d"))
SESSION_COUNTS = ("turns", "messages", "last_input_tokens", "compactions")


def ago(stamp: str | None, now: datetime) -> str | None:
    """A volume timestamp as a person reads it: `3 h ago`, `12 d ago`, a date when older."""
    if stamp is None:
        return None
    try:
        moment = datetime.fromisoformat(str(stamp))
    except ValueError:
        return escape_control(str(stamp))
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    seconds = (now - moment).total_seconds()
    for below, unit_seconds, unit in _AGO:
        if 0 <= seconds < below:
            return f"{int(seconds // unit_seconds)} {unit} ago"
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def humane_session(row: dict, now: datetime) -> dict:
    """A `sessions` row for the terminal table: relative times, counts with separators."""
    out = dict(row)
    for name in ("conversation_key", "channel"):
        if isinstance(row.get(name), str):
            out[name] = escape_control(row[name])
    for name in ("created_at", "updated_at"):
        out[name] = ago(row.get(name), now)
    for name in SESSION_COUNTS:
        value = row.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            out[name] = f"{value:,}"
    return out

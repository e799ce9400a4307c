"""What volumetool says to people on stderr when something goes wrong: an error's one line,
a warning's. The group (`cli/__init__.py`) ends a command with them; a command that goes on
after one volume's error (`migrate`, `check`, `report`, `compact --metrics-file`) shows that
error the same way. Its own module, so that the command modules the group loads lazily need
not import the group back."""

from __future__ import annotations

import click

from volumetool.errors import VolumetoolError


def show_error(exc: VolumetoolError) -> None:
    """An error as the user sees it: one line on stderr, control characters escaped."""
    click.echo(f"volumetool: {escaped(exc.format_message())}", err=True)


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning (`warnings.showwarning`'s signature): one line on stderr, escaped."""
    click.echo(f"volumetool: warning: {escaped(str(message))}", err=True)


def escaped(text: str) -> str:
    """`text` with control characters escaped (SPEC 4): messages quote volumes and paths."""
    from volumetool.text import escape_control

    return escape_control(text)

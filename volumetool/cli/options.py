"""Options shared by the commands: the VOLUME argument, the busy timeout, the listing formats."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence

import click

from volumetool.render import OutputFormat, render

DEFAULT_LIMIT = 100
# Out-of-range numbers are usage errors (exit 2), never an overflow deep in SQLite or datetime.
MAX_LIMIT = 1_000_000_000  # rows a listing shows; 0 shows all
MAX_SECONDS = 86_400.0  # a day: the longest wait for a lock that still makes sense


class Seconds(click.FloatRange):
    """A duration in seconds, 0 to MAX_SECONDS; `nan` and `inf` are usage errors."""

    name = "seconds"

    def __init__(self) -> None:
        super().__init__(min=0, max=MAX_SECONDS)

    def convert(self, value, param, ctx) -> float:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):  # nan passes every range comparison
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds


def busy_timeout_option(f: Callable) -> Callable:
    return click.option(
        "--busy-timeout",
        type=Seconds(),
        default=5.0,
        show_default=True,
        metavar="SECONDS",
        help="How long to wait for a lock held by the agent before giving up (exit 4).",
    )(f)


def wait_option(f: Callable) -> Callable:
    return click.option(
        "--wait",
        type=Seconds(),
        default=0.0,
        metavar="SECONDS",
        help="Wait this long for another volumetool's volume lock (else exit 4).",
    )(f)


def volume_argument(f: Callable) -> Callable:
    return click.argument("volume", required=False, metavar="[VOLUME]")(f)


def shift_volume(*positional: str | None) -> tuple[str | None, ...]:
    """VOLUME may be omitted in favour of $VOLUMETOOL_VOLUME: when the arguments after it come
    one short, every value moves one place right and VOLUME is left to the environment."""
    if positional[-1] is None and positional[0] is not None:
        return (None, *positional[:-1])
    return positional


def require(value: str | None, name: str) -> str:
    if value is None:
        raise click.UsageError(f"Missing argument '{name}'.")
    return value


def since_option(what: str) -> Callable:
    return click.option(
        "--since",
        metavar="WHEN",
        help=f"Only {what} since an ISO date/time (2026-11-30, 2026-11-30T05:00Z) or a "
        "duration ago (90m, 12h, 7d).",
    )


def parse_since(value: str | None) -> str | None:
    if value is None:
        return None
    from volumetool.timefmt import parse_since as parse

    try:
        return parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--since'") from None


def output_options(f: Callable) -> Callable:
    """--table/--json/--nl/--csv/--tsv/--fmt and -n/--limit, for every listing."""
    for decorator in reversed(
        [
            click.option(
                "--table", "output", flag_value="table", default=True, help="A table (the default)."
            ),
            click.option("--json", "output", flag_value="json", help="One JSON array."),
            click.option("--nl", "output", flag_value="nl", help="Newline-delimited JSON."),
            click.option("--csv", "output", flag_value="csv", help="CSV with a header row."),
            click.option("--tsv", "output", flag_value="tsv", help="TSV with a header row."),
            click.option(
                "--fmt",
                "tablefmt",
                metavar="NAME",
                help="A table in any tabulate format (github, grid, psql…).",
            ),
            click.option(
                "-n",
                "--limit",
                type=click.IntRange(min=0, max=MAX_LIMIT),
                default=DEFAULT_LIMIT,
                show_default=True,
                help="Show at most N rows; 0 shows all.",
            ),
        ]
    ):
        f = decorator(f)
    return f


def output_format(output: str, tablefmt: str | None) -> OutputFormat:
    if tablefmt:
        from volumetool.render import table_formats

        if tablefmt not in table_formats():
            raise click.BadParameter(
                f"unknown table format {tablefmt!r}; one of: {', '.join(table_formats())}",
                param_hint="'--fmt'",
            )
        return OutputFormat("table", tablefmt)
    return OutputFormat(output or "table")


def emit(
    rows: Iterable[dict],
    columns: Sequence[str],
    output: str,
    tablefmt: str | None,
    limit: int,
    what: str = "rows",
) -> None:
    """Render a listing to stdout, with a note on stderr when the limit cut it."""
    fmt = output_format(output, tablefmt)
    if render(rows, columns, fmt, sys.stdout, limit or None):
        note_cut(limit, what)


def note_cut(limit: int, what: str) -> None:
    """The note on stderr when -n cut a listing."""
    click.echo(f"volumetool: showing the first {limit} {what}; -n 0 shows all", err=True)


def listing_limit(limit: int) -> int | None:
    """The SQL limit of a listing: one row more than shown, to know whether it was cut."""
    return None if limit == 0 else limit + 1

"""Options shared by the commands: the VOLUME argument, the busy timeout, the listing formats."""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence

import click

from volumetool import VOLUME_ENV
from volumetool.cli.docs import Documented
from volumetool.errors import ProblemsFound, UnusableInput
from volumetool.render import Listing, OutputFormat, render

DEFAULT_LIMIT = 100
# Out-of-range numbers are usage errors (exit 2), never an overflow deep in SQLite or datetime.
MAX_LIMIT = 1_000_000_000  # rows a listing shows; 0 shows all
MAX_SECONDS = 86_400.0  # a day: the longest wait for a lock that still makes sense


class _OnceEach:
    """The parsing every volumetool command shares: an option that takes one value, given twice,
    is a usage error naming it (exit 2), never the last one winning (SPEC 13). Options meant to
    repeat say so (`multiple=True`: erase's --key); a flag given twice is still that flag.
    And VOLUME swapped with a later argument is a usage error saying VOLUME comes first."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)  # type: ignore[misc]
        if not ctx.resilient_parsing:
            _volume_first(self, ctx)  # type: ignore[arg-type]
        return rest

    def make_parser(self, ctx: click.Context):
        parser = super().make_parser(ctx)  # type: ignore[misc]
        parse = parser.parse_args

        def parse_args(args: list[str]):
            opts, rest, order = parse(args)
            if not ctx.resilient_parsing:  # shell completion
                _given_once(order, ctx)
            return opts, rest, order

        parser.parse_args = parse_args
        return parser


def _given_once(order: Sequence[click.Parameter], ctx: click.Context) -> None:
    seen: set[click.Parameter] = set()
    for param in order:
        single = isinstance(param, click.Option) and not (
            param.is_flag or param.multiple or param.count
        )
        if single and param in seen:
            raise click.UsageError(f"{'/'.join(param.opts)} given twice; it takes one value", ctx)
        seen.add(param)


def _volume_first(command: click.Command, ctx: click.Context) -> None:
    """`transcript KEY ./vol`: the advice "no such file — create one with init" would make a
    file named after the key. When VOLUME is no SQLite file and a later argument is one, the
    arguments were swapped."""
    volume = ctx.params.get("volume")
    if not isinstance(volume, str) or not volume:
        return
    from volumetool.text import escape_control
    from volumetool.volume import is_sqlite_file

    later = [
        ctx.params.get(param.name)
        for param in command.params
        if isinstance(param, click.Argument) and param.name != "volume"
    ]
    found = next((v for v in later if isinstance(v, str) and v and is_sqlite_file(v)), None)
    if found is not None and not is_sqlite_file(volume):
        raise click.UsageError(
            f"VOLUME comes first: '{escape_control(volume)}' is not an agent file, "
            f"'{escape_control(found)}' is",
            ctx,
        )


class Command(_OnceEach, Documented, click.Command):
    """Every volumetool command: `@click.command(cls=Command)`. `verdict=True` for a command
    whose exit code says what it found (validate, compact, check, migrate, …): stdout closed
    by its reader does not end it (`output.VerdictStdout`). Listings stop there, exit 0."""

    def __init__(self, *args, verdict: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.verdict = verdict

    def invoke(self, ctx: click.Context):
        if not self.verdict:
            return super().invoke(ctx)
        from volumetool.output import verdict_stdout

        with verdict_stdout():
            return super().invoke(ctx)


class Group(_OnceEach, Documented, click.Group):
    """Every group of commands below the top (memories, thread, config)."""

    command_class = Command
    group_class = type  # a group in it is a Group too


class Finite(click.FloatRange):
    """A number in a range; `nan` and `inf` are usage errors (nan passes every comparison)."""

    name = "number"

    def convert(self, value, param, ctx) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class Seconds(Finite):
    """A duration in seconds, `minimum` to MAX_SECONDS."""

    name = "seconds"

    def __init__(self, minimum: float = 0) -> None:
        super().__init__(min=minimum, max=MAX_SECONDS)


# A row id as SQLite stores it: larger numbers would overflow, not just find nothing.
ROW_ID = click.IntRange(min=1, max=2**63 - 1)


def busy_timeout_option(f: Callable | None = None, **extra) -> Callable:
    """--busy-timeout; `extra`, more of click.option's settings (used as
    `@busy_timeout_option(envvar=...)`), the same for the options below."""
    if f is None:
        return functools.partial(busy_timeout_option, **extra)
    return click.option(
        "--busy-timeout",
        type=Seconds(),
        default=5.0,
        show_default=True,
        metavar="SECONDS",
        help="How long to wait for a lock held by the agent before giving up (exit 4).",
        **extra,
    )(f)


def wait_option(f: Callable | None = None, **extra) -> Callable:
    if f is None:
        return functools.partial(wait_option, **extra)
    return click.option(
        "--wait",
        type=Seconds(),
        default=0.0,
        metavar="SECONDS",
        help="Wait this long for another volumetool's volume lock (else exit 4).",
        **extra,
    )(f)


class _Volume(click.ParamType):
    name = "volume"

    def get_missing_message(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return f"Name an agent file or a volume directory, or set ${VOLUME_ENV}."


class _AfterVolume(click.ParamType):
    """An argument that follows VOLUME (KEY, VALUE, FILE, DEST)."""

    name = "text"

    def get_missing_message(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        if os.environ.get(VOLUME_ENV):
            return (
                f"${VOLUME_ENV} stands in for VOLUME only when a command is given no argument "
                "at all: name the volume too."
            )
        return ""


AFTER_VOLUME = _AfterVolume()


def key_argument(f: Callable) -> Callable:
    """KEY, after VOLUME: a conversation or memory key (text: bytes that are not UTF-8 are a
    usage error naming KEY)."""
    return click.argument("key", type=AFTER_VOLUME, callback=key_text)(f)


def volume_argument(f: Callable) -> Callable:
    """VOLUME, the first positional argument. $VOLUMETOOL_VOLUME stands in for it only when no
    positional argument at all is given, and nothing is ever shifted: with more arguments the
    first is always VOLUME, so a missing one is a usage error naming it, never a key or a value
    taken for another (SPEC: arguments that cannot write to the wrong place)."""
    return click.argument("volume", envvar=VOLUME_ENV, type=_Volume(), metavar="VOLUME")(f)


def volumes_argument(f: Callable) -> Callable:
    """VOLUME... of the commands that take many (migrate, compact, status, report):
    $VOLUMETOOL_VOLUME when none is given. Each is checked before any is worked on: a `-` or
    an empty name after a good volume must not stop the command only once it has spent model
    calls on, or written, the first."""

    def from_environment(ctx: click.Context, param: click.Parameter, value: tuple) -> tuple:
        from volumetool.volume import check_argument

        if not value and os.environ.get(VOLUME_ENV):
            value = (os.environ[VOLUME_ENV],)
        if not value:
            raise click.MissingParameter(ctx=ctx, param=param)
        if not ctx.resilient_parsing:  # shell completion
            for argument in value:
                check_argument(argument)
        return value

    return click.argument(
        "volumes", nargs=-1, type=_Volume(), metavar="VOLUME...", callback=from_environment
    )(f)


class ShardParam(click.ParamType):
    """`--shard I/N`: shard I of N, counted from 0 (volumetool.shard)."""

    name = "I/N"

    def convert(self, value, param, ctx):
        from volumetool.shard import Shard, parse_shard

        if isinstance(value, Shard):
            return value
        try:
            return parse_shard(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def shard_option(f: Callable | None = None, **extra) -> Callable:
    """--shard I/N, for the commands that take many volumes."""
    if f is None:
        return functools.partial(shard_option, **extra)
    return click.option(
        "--shard",
        type=ShardParam(),
        metavar="I/N",
        help="Only the volumes whose path hashes to shard I of N (0 <= I < N): N workers split "
        "the volumes given with no coordinator. A shard with none succeeds, doing nothing.",
        **extra,
    )(f)


def shard_volumes(volumes: Sequence[str], shard) -> list[str]:
    """The VOLUME arguments of --shard (all without it), with a note on stderr when the shard
    got none."""
    from volumetool.shard import note_empty
    from volumetool.volume import select

    selected = select(volumes, shard)
    note = note_empty(volumes, shard, selected)
    if note:
        say(note)
    return selected


class VolumeByVolume:
    """The VOLUME arguments of a command that takes many, one after the other:
    `with VolumeByVolume(volumes) as each: for argument in each: …`. Ctrl-C or SIGTERM stops
    it there: no next volume starts, and the one line (exit 130 or 143) says which volumes
    were finished and which were not (SPEC 13)."""

    def __init__(self, volumes: Sequence[str]) -> None:
        self.volumes = list(volumes)
        self.finished = 0

    def __iter__(self) -> Iterator[str]:
        for argument in self.volumes:
            yield argument
            self.finished += 1  # asked for the next: this one ended, however it did

    def __enter__(self) -> VolumeByVolume:
        return self

    def __exit__(self, kind, exc, traceback) -> None:
        from volumetool.errors import Interrupted

        if not isinstance(exc, KeyboardInterrupt | Interrupted) or len(self.volumes) < 2:
            return
        finished, rest = self.volumes[: self.finished], self.volumes[self.finished :]
        raise Interrupted.between_volumes(exc, finished, rest) from None


def utf8_text(ctx: click.Context, param: click.Parameter, value):
    """A callback for a text argument (a word, key or prefix; or each of a repeated option's):
    a shell hands bytes that are not UTF-8 over as lone surrogates, which no text in a volume
    holds, so they are a usage error naming the argument (not an encoding error deep in
    SQLite)."""
    from volumetool.text import SURROGATES, escape_control

    for text in value if isinstance(value, tuple) else [value]:
        if text is not None and re.search(f"[{SURROGATES}]", text):
            raise click.BadParameter(
                f"'{escape_control(text[:60])}' holds bytes that are not UTF-8"
            )
    return value


def key_text(ctx: click.Context, param: click.Parameter, value):
    """utf8_text for a conversation or memory key (or glob): an empty one names nothing, so it
    is unusable input (exit 2), never "no thread under key ''" or a thread made under it."""
    for text in value if isinstance(value, tuple) else [value]:
        if text == "":
            raise UnusableInput(f"{_named(param)} is empty", "name a key")
    return utf8_text(ctx, param, value)


def name_text(ctx: click.Context, param: click.Parameter, value):
    """utf8_text for an agent's name, which must show something: not empty, not blanks."""
    if value is not None and not value.strip():
        raise UnusableInput(f"{_named(param)} {value!r} is blank", "give the agent a name")
    return utf8_text(ctx, param, value)


def _named(param: click.Parameter) -> str:
    return param.opts[0] if isinstance(param, click.Option) else param.human_readable_name


def say(message: str) -> None:
    """A note for people on stderr, `volumetool: …`. Paths, keys and names in it come from the
    user, the file system or a volume: control characters are escaped (SPEC 4)."""
    from volumetool.text import escape_control

    click.echo(f"volumetool: {escape_control(message)}", err=True)


def show(line: str) -> None:
    """A line of a report for people on stdout, control characters escaped (SPEC 4)."""
    from volumetool.text import escape_control

    click.echo(escape_control(line))


def ask(question: str) -> None:
    """Ask on stderr whether to go on; stop (exit 1, "nothing was changed") unless the answer
    is yes. No answer is no: stdin at its end, or closed (a job started with no stdin at all).
    The prompt's line is ended, so the error line stands on its own; Ctrl-C or SIGTERM while
    it waits is 130 or 143, nothing changed."""
    from volumetool.errors import Interrupted
    from volumetool.text import escape_control

    question = escape_control(question)  # it names a key or a path
    unanswered = ProblemsFound("no answer; nothing was changed", "pass --yes to go on unasked")
    if sys.stdin is None or sys.stdin.closed or getattr(sys.stdin, "name", None) == os.devnull:
        click.echo(f"{question} [y/N]: no answer (stdin is closed)", err=True)
        raise unanswered
    try:  # a signal's handler may run as soon as the question is out, before its answer
        click.echo(f"{question} [y/N]: ", nl=False, err=True)
        answer = _answer()
    except KeyboardInterrupt:
        click.echo(err=True)  # the prompt's line ends before the message
        raise Interrupted("interrupted at the question; nothing was changed") from None
    if answer is None:
        click.echo("no answer (stdin at its end)", err=True)
        raise unanswered
    if not sys.stdin.isatty():  # a piped answer is not echoed: end the prompt's line
        click.echo(err=True)
    if answer.strip().lower() not in ("y", "yes"):
        raise ProblemsFound("declined; nothing was changed")


def _answer() -> str | None:
    """A line from stdin, None at its end. The wait is select()'s, which a signal's handler
    ends: a blocking read would not notice Ctrl-C or SIGTERM that came just before it began
    (the handler would run only once a line came, so `timeout` could not stop the question)."""
    import select

    try:
        stdin = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's, a wrapper's): read
        stdin = None
    if stdin is not None and sys.platform != "win32":
        while not select.select([stdin], [], [], 0.1)[0]:
            pass
    line = sys.stdin.readline()
    return line or None


def since_option(what: str) -> Callable:
    return click.option(
        "--since",
        metavar="WHEN",
        help=f"Only {what} since an ISO date/time (2026-11-30, 2026-11-30T05:00Z; UTC unless "
        "it names an offset) or a duration ago (30s, 90m, 12h, 7d, 2w).",
    )


def parse_since(value: str | None, option: str = "--since") -> str | None:
    if value is None:
        return None
    from volumetool.timefmt import parse_since as parse

    try:
        return parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'{option}'") from None


# The listing formats (SPEC 4), each a flag of its own: two of them exclude each other.
FORMAT_FLAGS = {
    "table": "A table (the default).",
    "json": "One JSON array.",
    "nl": "Newline-delimited JSON.",
    "csv": "CSV with a header row.",
    "tsv": "TSV with a header row, one row a line: backslash, tab, newline and CR in a cell "
    "written as \\\\, \\t, \\n, \\r.",
}


def output_options(f: Callable | None = None, *, help_for: dict[str, str] | None = None):
    """--table/--json/--nl/--csv/--tsv/--fmt and -n/--limit, for every listing. The command
    gets `output`, the format flag given (table when none is); two of them, or --fmt with any
    but --table, are a usage error. `format_given()` tells whether a flag was given.
    `help_for` replaces a flag's help where the command writes it otherwise (prune's --json:
    one object). Used bare (`@output_options`) or called (`@output_options(help_for=...)`)."""
    if f is None:
        return functools.partial(output_options, help_for=help_for)
    texts = FORMAT_FLAGS | (help_for or {})

    @functools.wraps(f)
    def command(*args, **kwargs):
        chosen = [name for name in FORMAT_FLAGS if kwargs.pop(f"format_{name}")]
        given = [f"--{name}" for name in chosen]
        if kwargs.get("tablefmt") is not None and chosen != ["table"]:
            given.append("--fmt")
        only_one(given)
        check_tablefmt(kwargs.get("tablefmt"))  # before any volume is read
        click.get_current_context().meta[_FORMAT_GIVEN] = bool(chosen)
        return f(*args, output=chosen[0] if chosen else "table", **kwargs)

    flags = [
        click.option(f"--{name}", f"format_{name}", is_flag=True, help=text)
        for name, text in texts.items()
    ]
    for decorator in reversed(
        [
            *flags,
            click.option(
                "--fmt",
                "tablefmt",
                metavar="NAME",
                help="A table in any tabulate format (github, grid, psql, html…) but unsafehtml.",
            ),
            click.option(
                "-n",
                "--limit",
                type=click.IntRange(min=0, max=MAX_LIMIT),
                default=DEFAULT_LIMIT,
                show_default=True,
                callback=lambda ctx, param, value: value or None,  # 0: all, None from here on
                help="Show at most N rows; 0 shows all.",
            ),
        ]
    ):
        command = decorator(command)
    return command


_FORMAT_GIVEN = "volumetool.format_given"


def only_one(given: Sequence[str]) -> None:
    """A usage error when more than one of these options, which exclude each other, was given."""
    if len(given) > 1:
        raise click.UsageError(f"{', '.join(given[:-1])} and {given[-1]} exclude each other")


def stdin_once(files: Sequence[tuple[str, str | None]]) -> None:
    """A usage error when more than one of these (option, file) pairs is `-`: stdin can be read
    only once, and the second would read nothing. Checked before either is read."""
    dashes = [option for option, file in files if file == "-"]
    if len(dashes) > 1:
        raise click.UsageError(
            f"stdin can be read by only one of {', '.join(dashes[:-1])} and {dashes[-1]}; "
            "give the other a file"
        )


def format_given() -> bool:
    """Whether the command line named a listing format (--table/--json/--nl/--csv/--tsv)."""
    return bool(click.get_current_context().meta.get(_FORMAT_GIVEN))


def check_tablefmt(tablefmt: str | None) -> None:
    """A usage error for a --fmt that is no tabulate format, or one that would pass raw HTML
    from a volume (`unsafehtml`)."""
    from volumetool.render import RAW_HTML_FORMATS, table_formats

    if tablefmt in RAW_HTML_FORMATS:
        raise click.BadParameter(
            f"{tablefmt!r} would pass HTML from the volume unescaped; use --fmt html",
            param_hint="'--fmt'",
        )
    if tablefmt and tablefmt not in table_formats():
        raise click.BadParameter(
            f"unknown table format {tablefmt!r}; one of: {', '.join(table_formats())}",
            param_hint="'--fmt'",
        )


def output_format(output: str, tablefmt: str | None) -> OutputFormat:
    if tablefmt:
        check_tablefmt(tablefmt)
        return OutputFormat("table", tablefmt)
    return OutputFormat(output or "table")


def emit(
    rows: Iterable[dict],
    columns: Sequence[str],
    output: str | None,
    tablefmt: str | None,
    limit: int | None = None,
    what: str = "row",
) -> None:
    """Render a listing to stdout in the chosen format, with a note on stderr when the limit
    (None: all) cut it. Every command that lists rows ends here."""
    listing = Listing(rows, columns, limit)
    render(listing, output_format(output, tablefmt), sys.stdout)
    if listing.truncated and limit is not None:
        note_cut(limit, what)


def note_cut(limit: int, what: str) -> None:
    """The note on stderr when -n cut a listing of `what`s (a noun in the singular)."""
    from volumetool.text import plural

    say(f"showing the first {plural(limit, what)}; -n 0 shows all")

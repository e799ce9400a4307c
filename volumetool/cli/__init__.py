"""The `volumetool` command group: lazy subcommands, `--debug`, and the one place where errors
become a line on stderr and an exit code.

Subcommand modules are imported only when their command runs (or when help lists them), and
they import the library lazily too, so `volumetool --version` costs little more than click.
"""

from __future__ import annotations

import atexit
import errno
import importlib
import os
import signal
import sys
import threading
import traceback
import warnings
from typing import NoReturn

import click

from volumetool import __version__
from volumetool.cli.docs import Documented
from volumetool.cli.messages import escaped, show_error, show_warning
from volumetool.errors import (
    Interrupted,
    ProblemsFound,
    UntrustedSchemaWarning,
    UnusableInput,
    VolumetoolError,
    from_sqlite,
)

COMMANDS = {
    "init": "volumetool.cli.create:init",
    "demo": "volumetool.cli.create:demo",
    "status": "volumetool.cli.inspect:status",
    "sessions": "volumetool.cli.inspect:sessions",
    "transcript": "volumetool.cli.inspect:transcript",
    "runs": "volumetool.cli.inspect:runs",
    "audit": "volumetool.cli.inspect:audit",
    "memories": "volumetool.cli.memories:memories",
    "thread": "volumetool.cli.threads:thread",
    "validate": "volumetool.cli.validate:validate",
    "config": "volumetool.cli.config:config",
    "compact": "volumetool.cli.compact:compact",
    "migrate": "volumetool.cli.upgrade:migrate",
    "backup": "volumetool.cli.maintenance:backup",
    "check": "volumetool.cli.maintenance:check",
    "report": "volumetool.cli.report:report",
    "search": "volumetool.cli.search:search",
    "prune": "volumetool.cli.lifecycle:prune",
    "erase": "volumetool.cli.lifecycle:erase",
}


class LazyGroup(Documented, click.Group):
    """A group whose subcommands live in modules imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, _, attribute = COMMANDS[cmd_name].partition(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        """The group's own --help and --version print here, before `invoke`: a closed or full
        stdout ends them as it ends every command (click exited 1 on a closed pipe, and let
        any other error out as a traceback)."""
        debug = "--debug" in args  # (read first: click's parser consumes `args`)
        try:
            return super().make_context(info_name, args, parent, **extra)
        except OSError as exc:
            _fail(_translate(exc), debug)

    def invoke(self, ctx: click.Context):
        debug = bool(ctx.params.get("debug"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always", UntrustedSchemaWarning)
                warnings.showwarning = show_warning
                result = super().invoke(ctx)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
            return result
        except click.Abort as exc:
            if isinstance(exc.__context__, KeyboardInterrupt):  # Ctrl-C at a prompt
                _fail(Interrupted("interrupted"), debug)
            raise
        except (click.exceptions.Exit, click.ClickException):
            raise
        except KeyboardInterrupt:
            _fail(Interrupted("interrupted"), debug)
        except VolumetoolError as exc:
            _fail(exc, debug)
        except Exception as exc:
            _fail(_translate(exc), debug)


def _translate(exc: Exception) -> VolumetoolError:
    """What an exception that no layer below translated means for the user."""
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        # stdout closed early (`volumetool runs … --json | head -1`): the reader has what it
        # wanted. A listing, in every format, ends quietly, exit 0. (A command whose exit
        # code is a verdict never gets here: `Command(verdict=True)` finishes it.)
        from volumetool.output import discard_stdout

        discard_stdout()
        raise click.exceptions.Exit(0)
    if isinstance(exc, OSError):
        return ProblemsFound(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
    if isinstance(exc, ValueError) and "null byte" in str(exc):
        # Only an API caller (no shell) can pass one; no file can be named with it.
        return UnusableInput("a path holds a NUL character; no file can have that name")
    if isinstance(exc, UnicodeEncodeError) and "surrogate" in str(exc):
        # Lone surrogates that are not a shell's undecodable bytes: no file name holds them.
        return UnusableInput("a path holds characters no file name can have (lone surrogates)")
    if isinstance(exc, UnicodeEncodeError):  # PYTHONIOENCODING=ascii, an ASCII-only locale
        return UnusableInput(
            f"the output's encoding ({exc.encoding}) cannot hold the text to write",
            "use a UTF-8 locale, or set PYTHONIOENCODING=utf-8",
        )
    sqlite3 = sys.modules.get("sqlite3")
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        return from_sqlite(exc, "database")
    return ProblemsFound(
        f"internal error: {type(exc).__name__}: {exc}",
        "run with --debug for the traceback, and please report it",
    )


def _fail(exc: VolumetoolError, debug: bool) -> NoReturn:
    """The one place an error ends a command: its line, and its exit code; the traceback
    first with --debug."""
    if debug:  # its messages may quote the volume too: escaped line by line
        lines = traceback.format_exc().splitlines()
        click.echo("\n".join(escaped(line) for line in lines), err=True)
    show_error(exc)
    raise click.exceptions.Exit(exc.exit_code)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="volumetool")
@click.option("--debug", is_flag=True, help="Show the traceback of an error.")
def cli(debug: bool) -> None:
    """Inspect, validate, compact, migrate and move the SQLite data volumes of AI agents.

    VOLUME is an agent file or a directory holding agent.db. $VOLUMETOOL_VOLUME stands in
    for it when a command is given no argument at all; name the volume whenever you pass more.

    \b
    Exit codes: 0 ok · 1 problems found · 2 usage error or unusable input
                3 schema mismatch (run `volumetool migrate`) · 4 busy, retry later
                130 interrupted (Ctrl-C), 143 terminated (SIGTERM): a write under way
                is rolled back, nothing more starts, the message says what is committed

    \b
    Example:
      volumetool demo ./vol --config-out agent.yaml && volumetool status ./vol
    """


def _terminated(signum: int, frame) -> None:
    """SIGTERM (`timeout`, systemd, Kubernetes) is taken as Ctrl-C is, wherever it comes: by
    the SIGINT handler in place, else as KeyboardInterrupt. Only the exit code differs (143:
    `Interrupted.by`). While a compaction's calls run, `compaction.run.run_until_stopped`
    takes SIGTERM itself: it cancels the calls, which are then recorded as failed runs."""
    Interrupted.by = signal.SIGTERM
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:  # SIGINT ignored (a background job without job control), or the pager has it
        raise KeyboardInterrupt


def main() -> NoReturn:
    signal.signal(signal.SIGTERM, _terminated)
    # Started with fd 0, 1 or 2 closed (`>&-`, some job runners): each is /dev/null for the
    # life of the process, as if redirected there, so that a command runs whole; and no file
    # opened later (a volume) can take one of those numbers and receive what is written there.
    if sys.stdin is None:
        sys.stdin = open(os.devnull)  # noqa: SIM115
    if sys.stdout is None:
        from volumetool import output

        output.stdout_closed_at_start = True  # a file's data written there is lost: exit 1
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    try:
        cli.main(prog_name="volumetool")
    except SystemExit as done:
        end(done)
    raise AssertionError("click's standalone mode always exits")  # pragma: no cover


def end(done: SystemExit) -> NoReturn:
    """End the process as the interpreter would, without its teardown of every module and
    object, which takes 20-70 ms once a command has run on an idle machine, and after a
    compaction of 217 threads 110-440 ms on a loaded one (BENCHMARKS.md, issue 32): the exit
    handlers run and the output is flushed, then the process exits with the same code. A thread
    still running, an exit that is not a number, or output that cannot be flushed take the
    interpreter's own way."""
    code = 0 if done.code is None else done.code
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if not isinstance(code, int) or any(t.is_alive() and not t.daemon for t in others):
        raise done
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None when the process started with the fd closed
                stream.flush()
    except (OSError, ValueError):
        raise done from None
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()

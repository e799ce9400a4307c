"""The `volumetool` command group: lazy subcommands, `--debug`, and the one place where errors
become a line on stderr and an exit code.

Subcommand modules are imported only when their command runs (or when help lists them), and
they import the library lazily too, so `volumetool --version` costs little more than click.
"""

from __future__ import annotations

import errno
import importlib
import sqlite3
import sys
import traceback

import click

from volumetool import __version__
from volumetool.errors import ProblemsFound, from_sqlite

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
    "config": "volumetool.cli.validate:config",
    "compact": "volumetool.cli.compact:compact",
    "migrate": "volumetool.cli.maintenance:migrate",
    "backup": "volumetool.cli.maintenance:backup",
    "check": "volumetool.cli.maintenance:check",
}


class LazyGroup(click.Group):
    """A group whose subcommands live in modules imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, _, attribute = COMMANDS[cmd_name].partition(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):
        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort):
            raise
        except click.ClickException:
            if debug:
                traceback.print_exc()
            raise
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise  # click quiets a closed pipe (`volumetool runs … | head`)
            if debug:
                raise
            raise ProblemsFound(
                f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")
            ) from exc
        except sqlite3.Error as exc:
            if debug:
                raise
            raise from_sqlite(exc, "database") from exc
        except Exception as exc:
            if debug:
                raise
            raise ProblemsFound(
                f"internal error: {type(exc).__name__}: {exc}",
                "run with --debug for the traceback, and please report it",
            ) from exc


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, "--version", prog_name="volumetool")
@click.option("--debug", is_flag=True, help="Show the traceback of an error.")
def cli(debug: bool) -> None:
    """Inspect, validate, compact, migrate and move the SQLite data volumes of AI agents.

    VOLUME is an agent file or a directory holding agent.db; when omitted, $VOLUMETOOL_VOLUME.

    \b
    Exit codes: 0 ok · 1 problems found · 2 usage error or unusable input
                3 schema mismatch (run `volumetool migrate`) · 4 busy, retry later

    \b
    Example:
      volumetool demo ./vol --config-out agent.yaml && volumetool status ./vol
    """


def main() -> None:
    cli.main(prog_name="volumetool")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

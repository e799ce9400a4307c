"""The command group: help with examples, --version, --debug, and a light start-up."""

from __future__ import annotations

import subprocess
import sys

import pytest

from volumetool.cli import COMMANDS, cli


def leaf_commands():
    import click

    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        if isinstance(command, click.Group):
            for sub in command.commands:
                yield [name, sub]
        else:
            yield [name]


@pytest.mark.parametrize("command", list(leaf_commands()), ids=" ".join)
def test_every_command_has_help_with_an_example(run_cli, command):
    result = run_cli(*command, "--help")
    assert result.exit_code == 0, result
    assert "Example" in result.stdout, command


def test_version(run_cli):
    result = run_cli("--version")
    assert result.exit_code == 0
    assert "volumetool" in result.stdout


def test_unexpected_errors_are_one_line_without_debug_and_a_traceback_with_it(tmp_path, run_cli):
    # A directory named agent.db is not a file: a clean error either way.
    (tmp_path / "agent.db").mkdir()
    result = run_cli("status", tmp_path / "agent.db")
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "volumetool", "--debug", "status", str(tmp_path / "nope.db")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert "no such file" in result.stderr


LIGHT = """
import sys
from volumetool.cli import cli
try:
    cli.main({args!r}, prog_name="volumetool", standalone_mode=False)
except SystemExit:
    pass
heavy = [m for m in ("httpx", "hypothesis", "sqlite_utils", "yaml", "tabulate")
         if m in sys.modules]
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["status", "--help"]])
def test_start_up_does_not_import_heavy_libraries(args):
    """Heavy libraries load only in the commands that need them."""
    result = subprocess.run(
        [sys.executable, "-c", LIGHT.format(args=args)], capture_output=True, text=True, check=True
    )
    assert "HEAVY=\n" in result.stderr, result.stderr


def test_read_commands_do_not_import_sqlite_utils_or_httpx(tmp_path):
    from volumetool.create import create_volume

    path = create_volume(tmp_path / "agent.db", "a")
    code = LIGHT.format(args=["status", str(path), "--json"]).replace(
        '("httpx", "hypothesis", "sqlite_utils", "yaml", "tabulate")',
        '("httpx", "hypothesis", "sqlite_utils", "yaml")',
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "HEAVY=\n" in result.stderr, result.stderr

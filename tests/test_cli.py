"""The command group: help with examples, --version, --debug, and a light start-up."""

from __future__ import annotations

import subprocess
import sys

import pytest

from volumetool.cli import COMMANDS, cli


def command_tree():
    """Every command and group under `volumetool`, as its path of names, walked from
    COMMANDS (the lazy group's own table) down through each group."""
    import click

    def walk(command: click.Command, path: list[str]):
        yield path
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                yield from walk(command.get_command(ctx, name), [*path, name])

    ctx = click.Context(cli)
    yield []
    for name in COMMANDS:
        yield from walk(cli.get_command(ctx, name), [name])


@pytest.mark.parametrize("command", list(command_tree()), ids=lambda c: " ".join(c) or "(group)")
def test_every_command_and_group_has_help_with_an_example(run_cli, command):
    result = run_cli(*command, "--help")
    assert result.exit_code == 0, result
    lines = result.stdout.splitlines()
    heading = next((n for n, line in enumerate(lines) if line.strip() == "Example:"), None)
    assert heading is not None, f"no Example section in `volumetool {' '.join(command)} --help`"
    invocation = " ".join(["volumetool", *command])
    examples = [line.strip() for line in lines[heading + 1 :] if line.startswith("  ")]
    assert any(e.startswith(invocation) for e in examples), (invocation, examples)


def test_the_tree_reaches_every_subcommand():
    paths = [" ".join(p) for p in command_tree()]
    assert {"memories import", "thread reset", "config show", "backup"} <= set(paths)


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

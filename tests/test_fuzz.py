"""Every command against random arguments and hostile files (issue 12: proving it in general).

Hypothesis draws a command from the whole command tree, then an argument list mixing that
command's own options, paths to real and broken files (a volume, a truncated one, zeroed
pages, a foreign SQLite file, random bytes, random JSONL and YAML, a directory, nothing),
numbers at their limits, unicode and empty strings, in any order. Whatever it draws:
no traceback, no "internal error", an exit code the SPEC defines, and a read command leaves
the volume's logical content as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.support.volumes import table_dump
from volumetool.cli import COMMANDS, cli

EXIT_CODES = {0, 1, 2, 3, 4}
# `python -m tests.fuzz_report` sets this: each example's verdict is appended there as a line
# of JSON, for RELIABILITY.md's table.
REPORT = os.environ.get("FUZZ_REPORT")
# Commands that only read: the volume must be logically unchanged after them.
READS = {
    "status",
    "sessions",
    "transcript",
    "runs",
    "audit",
    "memories list",
    "memories get",
    "memories export",
    "validate",
    "config show",
    "check",
    "search",
    "report",
}
NUMBERS = [
    "0",
    "-1",
    "1",
    "9223372036854775807",
    "-9223372036854775809",
    "1e309",
    "nan",
    "inf",
    "0.0",
    "007",
    "1_000",
    "99999999999w",
    "800000d",
    "90m",
    "2026-02-30",
    "3/2",
    "0/0",
]
TEXTS = [
    "",
    " ",
    "k",
    "discord:1",
    "é",
    "\u202e",
    "\x00",
    "\x1b[2J",
    "a\nb",
    "-",
    "--",
    "*",
    "'; DROP TABLE memories; --",
    "日本語",
    "\ud83d\ude00",
    "x" * 300,
]


def leaves(
    group: click.Group, prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            found.extend(leaves(command, (*prefix, name)))
        elif command is not None:
            found.append(((*prefix, name), command))
    return found


COMMAND_LEAVES = [(path, cmd) for path, cmd in leaves(cli) if path[0] in COMMANDS]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Real and broken files, built once; each example works on copies."""
    base = tmp_path_factory.mktemp("fuzz-files")
    runner = CliRunner()
    vol = base / "vol" / "agent.db"
    assert runner.invoke(cli, ["demo", str(vol), "--sessions", "6"]).exit_code == 0
    conn = sqlite3.connect(vol)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    data = vol.read_bytes()
    (base / "truncated.db").write_bytes(data[: len(data) // 3])
    zeroed = bytearray(data)
    zeroed[4096 : 4096 * 3] = bytes(4096 * 2)
    (base / "zeroed.db").write_bytes(bytes(zeroed))
    foreign = sqlite3.connect(base / "foreign.db")
    foreign.execute("CREATE TABLE t (x)")
    foreign.commit()
    foreign.close()
    (base / "random.bin").write_bytes(bytes(range(256)) * 40)
    (base / "empty").write_bytes(b"")
    (base / "memories.jsonl").write_text('{"key": "a", "value": "b"}\n{"key": 1}\nnot json\n')
    (base / "agent.yaml").write_text("memory:\n  scope: thread\n  compact_at_tokens: 0\n&a [*a]\n")
    (base / "dir").mkdir()
    return {
        "vol": vol,
        "truncated": base / "truncated.db",
        "zeroed": base / "zeroed.db",
        "foreign": base / "foreign.db",
        "random": base / "random.bin",
        "empty": base / "empty",
        "jsonl": base / "memories.jsonl",
        "yaml": base / "agent.yaml",
        "dir": base / "dir",
    }


@st.composite
def invocations(draw, files: dict[str, Path], work: Path):
    """A command, its positional arguments (a path first, most often the good volume), then
    options in any order, each with a value drawn from the pools when it takes one."""
    path, command = draw(st.sampled_from(COMMAND_LEAVES))
    paths = [str(work / name) for name in files] + [str(work / "new" / "x.db"), str(work / "nope")]
    value = st.one_of(
        st.sampled_from(paths),
        st.sampled_from(NUMBERS),
        st.sampled_from(TEXTS),
        st.text(max_size=8),
    )
    args: list[str] = []
    for param in command.params:
        if isinstance(param, click.Argument):
            count = 1 if param.nargs == 1 else draw(st.integers(0, 2))
            for _ in range(count):
                pool = st.sampled_from(paths[:1] * 4 + paths) if not args else value
                if draw(st.integers(0, 9)):  # now and then an argument is missing
                    args.append(draw(pool))
    options = [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]
    for option in draw(st.lists(st.sampled_from(options), max_size=4)) if options else []:
        args.append(draw(st.sampled_from(option.opts)))
        if not option.is_flag and not option.count:
            if isinstance(option.type, click.Choice) and draw(st.booleans()):
                args.append(draw(st.sampled_from(list(option.type.choices))))
            else:
                args.append(draw(value))
    if draw(st.integers(0, 4)) == 0:
        args.insert(draw(st.integers(0, len(args))), draw(value))  # a stray argument
    event(" ".join(path))
    return path, args


def run(args: list[str]):
    result = CliRunner().invoke(
        cli,
        args,
        input="",
        env={"VOLUMETOOL_VOLUME": "", "GITHUB_ACTIONS": "", "OPENAI_API_KEY": "", "COLUMNS": "80"},
        catch_exceptions=True,
    )
    return result


@settings(
    max_examples=examples(int(os.environ.get("FUZZ_EXAMPLES", 500))),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_command_crashes_or_exits_with_a_code_the_spec_does_not_define(
    files, tmp_path_factory, data
):
    work = tmp_path_factory.mktemp("fuzz")
    for name, source in files.items():
        target = work / name
        if source.is_dir():
            target.mkdir()
        elif name == "vol":
            shutil.copytree(source.parent, work / "vol-dir")
            (work / "vol-dir" / "agent.db").rename(target)
        else:
            shutil.copyfile(source, target)
    path, args = data.draw(invocations(files, work))
    before = table_dump(work / "vol")
    here = os.getcwd()
    os.chdir(work)  # a drawn relative path lands in the example's own directory
    try:
        result = run([*path, *args])
    finally:
        os.chdir(here)
    event(f"exit {result.exit_code}")
    output = result.stdout + result.stderr
    verdict = {
        "command": " ".join(path),
        "exit": result.exit_code,
        "crash": "Traceback" in output
        or "internal error" in output
        or not (result.exception is None or isinstance(result.exception, SystemExit)),
        "wrong_exit": result.exit_code not in EXIT_CODES,
        "changed": " ".join(path) in READS and table_dump(work / "vol") != before,
    }
    if REPORT:
        with open(REPORT, "a") as out:
            out.write(json.dumps(verdict) + "\n")
    assert not verdict["wrong_exit"], result
    assert not verdict["crash"], (output[-2000:], repr(result.exception))
    assert not verdict["changed"]

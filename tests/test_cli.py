"""The command group: help with examples, --version, --debug, and a light start-up."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.volumes import VolumeWriter, table_dump
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


@pytest.mark.parametrize("command", list(command_tree())[1:], ids=" ".join)
def test_every_option_says_what_it_does(command):
    """`runs --status` had no help text; no option goes without one."""
    import click

    bare = [p.opts for p in resolved(command).params if isinstance(p, click.Option) and not p.help]
    assert bare == [], f"volumetool {' '.join(command)}: options without help: {bare}"


def test_since_help_names_every_duration_it_takes(run_cli):
    """`--since 2w` works; the help says so, and so does the error for a wrong one."""
    from volumetool.timefmt import parse_since

    for unit in ("30s", "90m", "12h", "7d", "2w"):
        parse_since(unit)
        assert unit in " ".join(run_cli("runs", "--help").stdout.split())
    assert "2w" in run_cli("audit", "VOL", "--since", "fortnight").stderr


def test_counts_agree_with_their_nouns():
    from volumetool.text import plural

    assert [plural(n, "thread") for n in (0, 1, 2)] == ["0 threads", "1 thread", "2 threads"]
    assert plural(1, "summary") == "1 summary" and plural(3, "summary") == "3 summaries"
    assert plural(2, "kept summary") == "2 kept summaries" and plural(2, "day") == "2 days"
    assert plural(1_200, "memory") == "1,200 memories"
    sources = Path(__file__).parent.parent / "volumetool"
    hedged = [
        f"{path.relative_to(sources)}:{n}: {line.strip()}"
        for path in sources.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\}[ \w]*[a-z]\((s|es|ies)\)", line)  # `{count} thread(s)`
    ]
    assert hedged == [], "a count with a hedged plural: use text.plural"


def test_the_tree_reaches_every_subcommand():
    paths = [" ".join(p) for p in command_tree()]
    assert {"memories import", "thread reset", "config show", "backup"} <= set(paths)


def resolved(command: list[str]):
    import click

    found = cli
    for name in command:
        found = found.get_command(click.Context(found), name)
    return found


@pytest.mark.parametrize("command", list(command_tree())[1:], ids=" ".join)
def test_every_command_parses_its_options_the_one_way(command):
    """An option given twice is refused in every command (`Command`, `Group`: SPEC 13)."""
    from volumetool.cli.options import Command, Group

    assert isinstance(resolved(command), Command | Group)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["status", "VOL", "--json", "--busy-timeout", "1", "--busy-timeout", "2"], "--busy"),
        (["runs", "VOL", "-n", "1", "--limit", "2"], "-n/--limit"),
        (["sessions", "VOL", "--status", "all", "--status", "active"], "--status"),
        (["audit", "VOL", "--since", "7d", "--since=1d"], "--since"),
        (["memories", "list", "VOL", "--prefix", "a", "--prefix", "b"], "--prefix"),
        (["search", "VOL", "refund", "--role", "user", "--role", "tool"], "--role"),
        (["erase", "VOL", "--key", "k", "--wait", "1", "--wait", "1", "--dry-run"], "--wait"),
        (["prune", "VOL", "--archived-before", "9d", "--archived-before", "3d"], "--archived"),
        (["compact", "VOL", "--config", "a.yaml", "--config", "b.yaml"], "--config"),
        (["validate", "-", "--format", "json", "--format", "text"], "--format"),
        (["thread", "new", "VOL", "k", "--busy-timeout", "1", "--busy-timeout", "1"], "--busy"),
    ],
    ids=lambda v: " ".join(a for a in v if a != "VOL") if isinstance(v, list) else "",
)
def test_an_option_that_takes_one_value_given_twice_is_a_usage_error(
    tmp_path, run_cli, args, named
):
    """Never last-wins (`--since 7d --since=1d` would silently read one of them), whatever the
    command and even with the same value twice; nothing is done."""
    from tests.conftest import assert_clean_error

    w = VolumeWriter(tmp_path / "agent.db")
    w.message(w.thread("k"), "user", "hello")
    w.close()
    before = table_dump(w.path)
    result = run_cli(*[w.path if a == "VOL" else a for a in args], input="")
    assert_clean_error(result, 2, f"Error: {named}", "given twice")
    assert table_dump(w.path) == before


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
    from volumetool.atomic import create_volume

    path = create_volume(tmp_path / "agent.db", "a")
    code = LIGHT.format(args=["status", str(path), "--json"]).replace(
        '("httpx", "hypothesis", "sqlite_utils", "yaml", "tabulate")',
        '("httpx", "hypothesis", "sqlite_utils", "yaml")',
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert "HEAVY=\n" in result.stderr, result.stderr


# -- Ctrl-C and a closed stdout -----------------------------------------------------------

VT = [sys.executable, "-m", "volumetool"]


def many_rows(path: Path, memories: int = 0, runs: int = 0) -> Path:
    w = VolumeWriter(path)
    s = w.thread("k1")
    w.conn.execute("BEGIN")
    for n in range(runs):
        w.run(s, model=f"model-{n}")
    for n in range(memories):
        w.memory(f"m{n:06}", "value " * 10)
    w.conn.execute("COMMIT")
    w.close()
    return path


def holds_open(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open (Linux /proc)."""
    with contextlib.suppress(FileNotFoundError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    return True
    return False


def wait_for(condition, process: subprocess.Popen | None = None) -> None:
    """Wait until `condition()` holds; fail at once if `process` ended before it did. No
    deadline: a hang is pytest-timeout's to end (pyproject), never a time this test asserts."""
    while not condition():
        if process is not None:
            assert process.poll() is None, f"the process ended first: exit {process.returncode}"
        time.sleep(0.01)


# SIGTERM (`timeout`, systemd, Kubernetes) is handled as Ctrl-C is; only the exit code differs.
SIGNALS = pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)


@SIGNALS
def test_ctrl_c_during_an_import_from_a_slow_pipe_writes_nothing_and_exits_130(
    tmp_path, signum, code
):
    path = many_rows(tmp_path / "agent.db", memories=10)
    before = table_dump(path)
    proc = subprocess.Popen(
        [*VT, "memories", "import", str(path), "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    for n in range(200):  # then the pipe stays open: the import waits for more
        proc.stdin.write(json.dumps({"key": f"new.{n}", "value": "x"}).encode() + b"\n")
    proc.stdin.flush()
    wait_for(lambda: holds_open(proc.pid, path), proc)
    time.sleep(0.2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert err.decode().splitlines() == [f"volumetool: {path}: interrupted; nothing was written"], (
        err
    )
    assert table_dump(path) == before


def test_ctrl_c_inside_the_write_transaction_rolls_it_back_and_exits_130(tmp_path):
    path = many_rows(tmp_path / "agent.db", memories=10)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")  # the -journal shows the transaction under way
    conn.close()
    with open(tmp_path / "in.jsonl", "w") as out:
        for n in range(200_000):
            out.write(json.dumps({"key": f"new.{n:07}", "value": "fact " * 8}) + "\n")
    before = table_dump(path)
    journal = Path(f"{path}-journal")
    proc = subprocess.Popen(
        [*VT, "memories", "import", str(path), str(tmp_path / "in.jsonl")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(journal.exists, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted; nothing was written" in err.decode()
    assert len(err.decode().splitlines()) == 1, err
    assert table_dump(path) == before
    assert not journal.exists() or journal.stat().st_size == 0


@SIGNALS
def test_ctrl_c_in_a_read_exits_130_in_one_line(tmp_path, signum, code):
    path = many_rows(tmp_path / "agent.db", runs=20_000)
    proc = subprocess.Popen(
        [*VT, "runs", str(path), "-n", "0", "--nl"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.readline()  # it is writing rows: stdout is full until we read on
    proc.send_signal(signum)
    proc.stdout.read()
    proc.wait(timeout=30)
    err = proc.stderr.read().decode()
    assert proc.returncode == code, err
    assert err.splitlines() == ["volumetool: interrupted"], err


@pytest.mark.parametrize(
    "command",
    [
        ["runs", "VOL", "-n", "0"],
        ["runs", "VOL", "-n", "0", "--fmt", "grid"],
        ["runs", "VOL", "-n", "0", "--json"],
        ["runs", "VOL", "-n", "0", "--nl"],
        ["runs", "VOL", "-n", "0", "--csv"],
        ["runs", "VOL", "-n", "0", "--tsv"],
        ["memories", "list", "VOL", "-n", "0", "--json"],
    ],
    ids=" ".join,
)
def test_a_closed_stdout_ends_every_format_quietly_with_exit_0(tmp_path, command):
    path = many_rows(tmp_path / "agent.db", memories=5_000, runs=5_000)
    proc = subprocess.Popen(
        [*VT, *[str(path) if a == "VOL" else a for a in command]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    proc.wait(timeout=60)
    assert proc.stderr.read() == b""
    assert proc.returncode == 0


_COPIES = [
    (["backup", "VOL", "-"], "database"),
    (["memories", "export", "VOL"], "memories export"),
    (["memories", "export", "VOL", "--format", "json", "-o", "-"], "memories export"),
    (["report", "VOL", "-o", "-"], "report page"),
]


@pytest.mark.parametrize(
    ("command", "what", "read"),
    [
        (command, what, read)
        for command, what in _COPIES
        for read in (1000, 0)
        # The report page fits in the pipe's buffer: written whole before `head` quits.
        if not (read and command[0] == "report")
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_a_data_copy_cut_off_by_a_closed_stdout_is_exit_1_saying_it_is_incomplete(
    tmp_path, command, what, read
):
    """`backup VOL - | head -c 1000`: a copy of a file's data that the reader cut short must
    not pass for a whole one (a listing's `| head` still ends quietly)."""
    path = many_rows(tmp_path / "agent.db", memories=5_000, runs=5_000)
    proc = subprocess.Popen(
        [*VT, *[str(path) if a == "VOL" else a for a in command]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert len(proc.stdout.read(read)) == read
    proc.stdout.close()
    proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    assert proc.returncode == 1, err
    assert err.splitlines() == [
        f"volumetool: the {what} written to stdout is incomplete: the reader closed the pipe"
        " before its end — do not use what it read; write to a file, or read the pipe to its end"
    ], err


@pytest.mark.parametrize("option", ["--help", "--version"])
def test_the_groups_own_options_end_as_every_command_does_on_a_closed_or_full_stdout(option):
    """`volumetool --help | true` exits 0 quietly, as `volumetool status … | head` does (they
    print before any command runs, where click exited 1); `volumetool --version >/dev/full`
    is one line and exit 1, not a traceback."""
    closed = subprocess.Popen([*VT, option], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    closed.stdout.close()  # before it writes: the reader is gone
    assert closed.stderr.read() == b""
    assert closed.wait(timeout=60) == 0
    if not os.path.exists("/dev/full"):
        return
    with open("/dev/full", "w") as full:
        done = subprocess.run([*VT, option], stdout=full, stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == ["volumetool: No space left on device"]
    with open("/dev/full", "w") as full:
        debug = subprocess.run([*VT, "--debug", option], stdout=full, stderr=subprocess.PIPE)
    assert debug.returncode == 1
    *traceback, last = debug.stderr.decode().splitlines()
    assert traceback[0] == "Traceback (most recent call last):"
    assert last == "volumetool: No space left on device"


@pytest.mark.parametrize(
    "command",
    [["status", "VOL"], ["memories", "list", "VOL", "--json"]],
    ids=" ".join,
)
def test_a_command_started_with_stdout_closed_runs_as_if_to_dev_null(tmp_path, command):
    """`volumetool … >&-` (some job runners start a process so): the command runs whole, as
    with >/dev/null, instead of an internal error; and fd 1 is /dev/null, so no file the
    command opens (the volume) can be given that number. (A file's data copied there, as by
    `backup VOL -`, is lost: exit 1, tests/test_closed_stdout.py.)"""
    path = many_rows(tmp_path / "agent.db", memories=50, runs=50)
    done = subprocess.run(
        [*VT, *[str(path) if a == "VOL" else a for a in command]],
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(1),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert b"internal error" not in done.stderr and b"Traceback" not in done.stderr


def test_an_error_line_escapes_a_line_break_in_a_file_name(tmp_path):
    """`x<newline>y` must never read as a file `x y`."""
    done = subprocess.run([*VT, "status", str(tmp_path / "x\ny")], capture_output=True)
    assert done.returncode == 2
    assert b"x\\ny: no such file" in done.stderr and b"x y" not in done.stderr


def test_an_output_encoding_that_cannot_hold_the_text_is_one_clear_line(tmp_path):
    writer = VolumeWriter(tmp_path / "agent.db")
    writer.memory("café", "naïve")
    writer.close()
    done = subprocess.run(
        [*VT, "memories", "list", str(writer.path), "--json"],
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode().startswith("volumetool: the output's encoding (ascii) cannot")
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["backup", "VOL", "OUT"],
        ["memories", "export", "VOL", "-o", "OUT"],
        ["report", "VOL", "-o", "OUT"],
    ],
    ids=lambda c: c[0] if c[0] != "memories" else "export",
)
def test_an_output_file_named_with_a_trailing_slash_is_refused(tmp_path, command):
    """`-o newdir/` wrote a file `newdir` for export and report (backup refused it): every
    writer now reads a trailing slash as a directory, which is no file to write."""
    path = many_rows(tmp_path / "agent.db", memories=3, runs=3)
    for out, says in (
        (f"{tmp_path}/newdir/", b"names a directory"),
        (f"{tmp_path}/{'n' * 300}", b"File name too long"),  # exit 2 too, not an OS error's 1
    ):
        done = subprocess.run(
            [*VT, *[str(path) if a == "VOL" else out if a == "OUT" else a for a in command]],
            capture_output=True,
        )
        assert done.returncode == 2 and says in done.stderr, done.stderr
    assert not (tmp_path / "newdir").exists()


def test_a_new_volumes_directories_are_not_writable_by_others_whatever_the_umask(tmp_path):
    done = subprocess.run(
        [*VT, "init", f"{tmp_path}/a/b/"],
        capture_output=True,
        preexec_fn=lambda: os.umask(0),
    )
    assert done.returncode == 0, done.stderr
    for directory in (tmp_path / "a", tmp_path / "a" / "b"):
        assert directory.stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "a" / "b" / "agent.db").stat().st_mode & 0o777 == 0o600


# The end of a command: the interpreter's teardown is skipped, nothing else is. `main` exits the
# process, so each case runs in a child that records what a normal exit would have done.
ENDING = """
import atexit, sys, threading
from volumetool.cli import main

class Teardown:
    def __del__(self):
        sys.stderr.write("TEARDOWN\\n")  # runs only when the interpreter tears modules down

kept_until_teardown = Teardown()
atexit.register(lambda: sys.stderr.write("ATEXIT\\n"))
atexit.register(lambda: sys.stdout and sys.stdout.write("BUFFERED"))  # no newline: not flushed
if "--thread" in sys.argv:
    sys.argv.remove("--thread")
    def late():
        import time
        time.sleep(0.3)
        sys.stderr.write("THREAD DONE\\n")
    threading.Thread(target=late).start()
sys.argv[0] = "volumetool"
main()
"""


# The children's stdout is a pipe or a file, block-buffered as a user's would be.
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def ending(*args: str, script: str = ENDING) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=BUFFERED,
    )


def test_a_command_ends_without_the_interpreters_teardown_but_runs_exit_handlers():
    done = ending("--version")
    assert done.returncode == 0
    assert done.stdout == "volumetool, version 0.1.0\nBUFFERED"  # flushed before the exit
    assert "ATEXIT" in done.stderr
    assert "TEARDOWN" not in done.stderr


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (["status", "NOPE"], 2, "nope.db: no such file"),
        (["--bogus"], 2, "No such option '--bogus'"),
        (["runs", "NOPE"], 2, "nope.db: no such file"),
    ],
)
def test_the_exit_code_and_the_error_line_survive_the_fast_end(tmp_path, args, code, line):
    done = ending(*[str(tmp_path / "nope.db") if a == "NOPE" else a for a in args])
    assert done.returncode == code
    *_, error, last = done.stderr.splitlines()
    assert line in error
    assert last == "ATEXIT"
    assert "TEARDOWN" not in done.stderr


def test_a_process_started_without_stdout_ends_cleanly():
    """A job runner may start the command with fd 1 closed: Python's stdout is then None."""
    done = ending("--version", script="import os, sys\nos.close(1)\nsys.stdout = None\n" + ENDING)
    assert done.returncode == 0
    assert done.stderr == "ATEXIT\n"


def test_a_thread_still_running_at_the_end_is_waited_for():
    """Only a process with nothing left running skips the teardown: a live thread is joined
    as the interpreter always does."""
    done = ending("--thread", "--version")
    assert done.returncode == 0
    assert "THREAD DONE" in done.stderr
    assert "TEARDOWN" in done.stderr


def test_long_output_to_a_pipe_and_a_file_arrives_whole_with_the_fast_end(tmp_path):
    path = many_rows(tmp_path / "agent.db", memories=5_000, runs=5_000)
    piped = subprocess.run(
        [*VT, "runs", str(path), "-n", "0", "--nl"], capture_output=True, timeout=60, env=BUFFERED
    )
    assert piped.returncode == 0
    assert len(piped.stdout.splitlines()) == 5_000
    assert json.loads(piped.stdout.splitlines()[-1])
    out = tmp_path / "runs.jsonl"
    with out.open("wb") as file:
        written = subprocess.run(
            [*VT, "runs", str(path), "-n", "0", "--nl"], stdout=file, env=BUFFERED
        )
    assert written.returncode == 0
    assert out.read_bytes() == piped.stdout


def test_an_exit_that_is_not_a_number_or_a_live_thread_takes_the_interpreters_way():
    from volumetool.cli import end

    message = SystemExit("a message, not a code")
    with pytest.raises(SystemExit) as raised:
        end(message)
    assert raised.value is message
    release = threading.Event()
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        with pytest.raises(SystemExit) as raised:
            end(SystemExit(0))
        assert raised.value.code == 0
    finally:
        release.set()
        worker.join()


SWAPPED = [
    ["transcript", "KEY", "VOL"],
    ["thread", "new", "KEY", "VOL"],
    ["thread", "reset", "KEY", "VOL", "--yes"],
    ["thread", "undo", "KEY", "VOL", "--yes"],
    ["memories", "get", "KEY", "VOL"],
    ["memories", "remember", "KEY", "VOL", "a fact"],
    ["memories", "remember", "KEY", "a fact", "VOL"],
    ["memories", "forget", "KEY", "VOL"],
    ["search", "refund", "VOL"],
    ["backup", "copy.db", "VOL"],
]


@pytest.mark.parametrize("args", SWAPPED, ids=" ".join)
def test_volume_given_after_another_argument_is_advice_that_volume_comes_first(
    tmp_path, run_cli, monkeypatch, args
):
    """`transcript KEY ./vol` must not advise `volumetool init`, which would make a file named
    after the key: the advice is that VOLUME comes first."""
    from tests.conftest import assert_clean_error

    w = VolumeWriter(tmp_path / "vol" / "agent.db")
    w.message(w.thread("discord:1"), "user", "hello")
    w.close()
    monkeypatch.chdir(tmp_path)
    before = table_dump(w.path)
    result = run_cli(*[{"KEY": "discord:1", "VOL": "vol"}.get(a, a) for a in args])
    assert_clean_error(result, 2, "VOLUME comes first", "is not an agent file, 'vol' is")
    assert "init" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vol"]
    assert table_dump(w.path) == before


@pytest.mark.parametrize(
    "args",
    [
        ["transcript", "VOL", "KEY"],
        ["thread", "new", "VOL", "KEY"],
        ["thread", "undo", "VOL", "KEY", "--yes"],
        ["memories", "get", "VOL", "KEY"],
        ["memories", "remember", "VOL", "KEY", "a fact"],
        ["memories", "remember", "VOL", "ok", "KEY"],
        ["memories", "forget", "VOL", "KEY"],
    ],
    ids=" ".join,
)
def test_a_key_whose_bytes_are_not_utf8_is_called_a_key_not_a_path(tmp_path, run_cli, args):
    from tests.conftest import assert_clean_error

    w = VolumeWriter(tmp_path / "agent.db")
    w.message(w.thread("discord:1"), "user", "hello")
    w.close()
    before = table_dump(w.path)
    result = run_cli(*[{"KEY": "discord:\udcff", "VOL": w.path}.get(a, a) for a in args])
    named = "VALUE" if args[-1] == "KEY" and args[1] == "remember" and args[3] == "ok" else "KEY"
    assert_clean_error(result, 2, f"'{named}'", "not UTF-8")
    assert "path" not in result.stderr
    assert table_dump(w.path) == before


@pytest.mark.parametrize("command", [["status", "--nl"], ["check"]], ids=" ".join)
@SIGNALS
def test_an_interrupted_status_or_check_of_many_volumes_says_which_were_read(
    tmp_path, signum, code, command
):
    """Ctrl-C (or SIGTERM) while `status a b c` waits for b's lock: it stops there, and says
    which volumes were read and which were not. (SQLite takes the signal when its wait for
    the lock ends: a short busy timeout keeps the test short.)"""
    paths = [many_rows(tmp_path / f"{name}.db", memories=5) for name in "abc"]
    holder = sqlite3.connect(paths[1], isolation_level=None)
    holder.execute("PRAGMA journal_mode = DELETE")
    holder.execute("BEGIN EXCLUSIVE")  # the agent mid-write: readers wait for it
    proc = subprocess.Popen(
        [*VT, command[0], *map(str, paths), *command[1:], "--busy-timeout", "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(lambda: holds_open(proc.pid, paths[1]), proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    holder.execute("ROLLBACK")
    assert proc.returncode == code, err
    assert err.decode().splitlines()[-1] == (
        f"volumetool: interrupted; finished: 1 ({paths[0]}); not finished: 2 ({paths[1]},"
        f" {paths[2]})"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["transcript", "VOL", ""],
        ["thread", "new", "VOL", ""],
        ["thread", "reset", "VOL", "", "--yes"],
        ["thread", "undo", "VOL", "", "--yes"],
        ["memories", "get", "VOL", ""],
        ["memories", "forget", "VOL", ""],
        ["erase", "VOL", "--key", "", "--yes"],
        ["erase", "VOL", "--key", "discord:1", "--key", "", "--yes"],
        ["compact", "VOL", "--key", "", "--force", "--model", "m", "--dry-run"],
        ["sessions", "VOL", "--key", ""],
        ["runs", "VOL", "--key", ""],
        ["audit", "VOL", "--key", ""],
        ["search", "VOL", "hello", "--key", ""],
    ],
    ids=" ".join,
)
def test_an_empty_key_is_unusable_input(tmp_path, run_cli, args):
    """An empty KEY or --key names no thread or memory: exit 2 before the volume is touched,
    not 1 ("no thread under key ''"), nor an empty listing that looks like an answer."""
    from tests.conftest import assert_clean_error

    w = VolumeWriter(tmp_path / "agent.db")
    w.message(w.thread("discord:1"), "user", "hello")
    w.close()
    before = table_dump(w.path)
    result = run_cli(*[str(w.path) if a == "VOL" else a for a in args])
    named = "--key" if "--key" in args else "KEY"
    assert_clean_error(result, 2, f"{named} is empty")
    assert table_dump(w.path) == before


@pytest.mark.parametrize(
    "args",
    [
        ["init", "-"],
        ["demo", "-"],
        ["demo", "-", "--config-out", "agent.yaml"],
        ["status", "-"],
        ["sessions", "-"],
        ["check", "-"],
        ["migrate", "-"],
        ["backup", "-", "copy.db"],
        ["memories", "list", "-"],
        ["erase", "-", "--key", "discord:1", "--yes"],
    ],
    ids=" ".join,
)
def test_dash_as_volume_says_a_volume_cannot_be_stdin_or_stdout(
    tmp_path, run_cli, monkeypatch, args
):
    """`-` is stdin/stdout where a file is taken (SPEC 4); an SQLite volume can be neither, so
    it is refused, and never made or looked for as a file named `-`."""
    from tests.conftest import assert_clean_error

    monkeypatch.chdir(tmp_path)
    result = run_cli(*args)
    assert_clean_error(result, 2, "-: a volume is an SQLite file and cannot be stdin or stdout")
    assert "init" not in result.stderr
    assert list(tmp_path.iterdir()) == []

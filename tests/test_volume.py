"""Opening a volume: every bad file gets its exit code and one clear line; reads never write."""

from __future__ import annotations

import json
import re
import sqlite3
import threading

import pytest

from tests.conftest import assert_clean_error
from tests.support.volumes import VolumeWriter, file_digest
from volumetool.atomic import create_volume

READ_COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["sessions"],
    ["runs"],
    ["audit"],
    ["memories", "list"],
]


@pytest.mark.parametrize("command", READ_COMMANDS)
def test_missing_file_is_unusable_input(tmp_path, run_cli, command):
    result = run_cli(*command, tmp_path / "nope.db")
    assert_clean_error(result, 2, "no such file")


def test_directory_without_agent_db(tmp_path, run_cli):
    assert_clean_error(run_cli("status", tmp_path), 2, "no agent.db in")


def test_zero_byte_file(tmp_path, run_cli):
    (tmp_path / "agent.db").write_bytes(b"")
    assert_clean_error(run_cli("status", tmp_path), 2, "empty")


def test_not_sqlite(tmp_path, run_cli):
    (tmp_path / "agent.db").write_text("model: gpt-4.1\n" * 20)
    assert_clean_error(run_cli("sessions", tmp_path), 2, "not an SQLite database")


def test_damaged_header(tmp_path, run_cli):
    path = create_volume(tmp_path / "agent.db", "a")
    data = bytearray(path.read_bytes())
    data[16:100] = b"\xff" * 84
    path.write_bytes(bytes(data))
    assert_clean_error(run_cli("status", path), 2)


def test_truncated_header(tmp_path, run_cli):
    (tmp_path / "agent.db").write_bytes(b"SQLite format 3\x00\x10\x00")
    assert_clean_error(run_cli("status", tmp_path), 2, "truncated")


def test_sqlite_but_not_an_agent_file(tmp_path, run_cli):
    conn = sqlite3.connect(tmp_path / "other.db")
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
    conn.commit()
    conn.close()
    assert_clean_error(run_cli("runs", tmp_path / "other.db"), 2, "not an agent volume")


def test_older_file_asks_for_migrate(tmp_path, run_cli):
    path = create_volume(tmp_path / "agent.db", "a")
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm005_listing_indexes'")
    conn.commit()
    conn.close()
    assert_clean_error(run_cli("status", path), 3, "volumetool migrate")


def test_legacy_0x_file_asks_for_migrate(tmp_path, run_cli):
    from volumetool.migrations import LEGACY_TABLES_0X

    conn = sqlite3.connect(tmp_path / "agent.db")
    for statement in LEGACY_TABLES_0X:
        conn.execute(statement)
    conn.commit()
    conn.close()
    assert_clean_error(run_cli("sessions", tmp_path), 3, "runtime 0.x", "volumetool migrate")


def test_newer_file_is_refused(tmp_path, run_cli):
    path = create_volume(tmp_path / "agent.db", "a")
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at)"
        " VALUES ('agent-volume', 'm999_from_the_future', '2027-01-01')"
    )
    conn.commit()
    conn.close()
    assert_clean_error(run_cli("status", path), 3, "newer", "m999_from_the_future")


def test_locked_past_the_busy_timeout_is_busy(tmp_path, run_cli):
    path = create_volume(tmp_path / "agent.db", "a")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode = DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = run_cli("status", path, "--busy-timeout", "0.2")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_clean_error(result, 4, "locked")


def test_waits_for_a_short_lock_within_the_busy_timeout(tmp_path, run_cli):
    path = create_volume(tmp_path / "agent.db", "a")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA journal_mode = DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.3, lambda: holder.execute("ROLLBACK"))
    release.start()
    result = run_cli("status", path, "--busy-timeout", "5")
    release.join()
    holder.close()
    assert result.exit_code == 0, result


@pytest.mark.parametrize(
    "command",
    [
        *[[*c, "VOL"] for c in READ_COMMANDS],
        ["transcript", "VOL", "k1"],
        ["transcript", "VOL", "k1", "--full", "--json"],
        ["memories", "get", "VOL", "color"],
    ],
)
def test_read_commands_never_write_the_file(tmp_path, run_cli, command):
    w = VolumeWriter(tmp_path / "agent.db")
    s = w.thread("k1")
    w.turn(s, 1)
    w.memory("color", "blue")
    w.close()
    path = tmp_path / "agent.db"
    before, mtime = file_digest(path), path.stat().st_mtime_ns
    result = run_cli(*[path if a == "VOL" else a for a in command])
    assert result.exit_code == 0, result
    assert file_digest(path) == before
    assert path.stat().st_mtime_ns == mtime


def two_volumes(tmp_path):
    """A named volume and one that $VOLUMETOOL_VOLUME names, each with thread k1 and memory
    color, and an import file: everything a misplaced argument could write to."""
    paths = []
    for name in ("named", "from-env"):
        (tmp_path / name).mkdir()
        w = VolumeWriter(tmp_path / name / "agent.db")
        s = w.thread("k1")
        w.turn(s, 1)
        w.memory("color", "blue")
        w.close()
        paths.append(tmp_path / name)
    (tmp_path / "in.jsonl").write_text('{"key": "color", "value": "green"}\n')
    return paths


def everything(tmp_path) -> dict[str, str]:
    return {
        str(p.relative_to(tmp_path)): file_digest(p) if p.name == "agent.db" else ""
        for p in sorted(tmp_path.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


# Every command that takes VOLUME and more positional arguments, with values for them.
WITH_MORE_ARGUMENTS = [
    (["memories", "get"], ["color"], ["KEY"]),
    (["memories", "remember"], ["color", "red"], ["KEY", "VALUE"]),
    (["memories", "forget"], ["color"], ["KEY"]),
    (["memories", "import"], ["{tmp}/in.jsonl"], ["FILE|-"]),
    (["transcript"], ["k1"], ["KEY"]),
    (["thread", "new"], ["k1"], ["KEY"]),
    (["thread", "reset", "--yes"], ["k1"], ["KEY"]),
    (["backup"], ["{tmp}/copy.db"], ["DEST|-"]),
]
IDS = [" ".join(c[0][:2]) for c in WITH_MORE_ARGUMENTS]


@pytest.mark.parametrize(("command", "rest", "names"), WITH_MORE_ARGUMENTS, ids=IDS)
def test_with_the_variable_set_the_volume_must_be_named_when_more_arguments_are_given(
    tmp_path, run_cli, command, rest, names
):
    named, from_env = two_volumes(tmp_path)
    rest = [a.format(tmp=tmp_path) for a in rest]
    env = {"VOLUMETOOL_VOLUME": str(from_env)}
    before = everything(tmp_path)
    # every argument but VOLUME: the first is taken for VOLUME, never shifted into its place
    result = run_cli(*command, *rest, env=env)
    assert_clean_error(result, 2, f"Missing argument '{names[-1]}'", "name the volume")
    # VOLUME and all but the last: the last is missing, named, and nothing moves
    result = run_cli(*command, named, *rest[:-1], env=env)
    assert_clean_error(result, 2, f"Missing argument '{names[-1]}'")
    assert everything(tmp_path) == before


@pytest.mark.parametrize(("command", "rest", "names"), WITH_MORE_ARGUMENTS, ids=IDS)
def test_without_the_variable_a_missing_argument_is_named(tmp_path, run_cli, command, rest, names):
    named, _ = two_volumes(tmp_path)
    rest = [a.format(tmp=tmp_path) for a in rest]
    before = everything(tmp_path)
    for given in range(len(rest)):
        result = run_cli(*command, named, *rest[:given])
        assert_clean_error(result, 2, f"Missing argument '{names[given]}'")
    assert_clean_error(run_cli(*command), 2, "Missing argument 'VOLUME'", "VOLUMETOOL_VOLUME")
    assert everything(tmp_path) == before


@pytest.mark.parametrize(("command", "rest", "names"), WITH_MORE_ARGUMENTS, ids=IDS)
def test_a_named_volume_wins_over_the_variable(tmp_path, run_cli, command, rest, names):
    named, from_env = two_volumes(tmp_path)
    rest = [a.format(tmp=tmp_path) for a in rest]
    untouched = file_digest(from_env / "agent.db")
    overwrite = ["--on-conflict", "overwrite"] if command[-1] == "import" else []
    result = run_cli(*command, named, *rest, *overwrite, env={"VOLUMETOOL_VOLUME": str(from_env)})
    assert result.exit_code == 0, result
    assert file_digest(from_env / "agent.db") == untouched


def test_the_variable_stands_in_for_a_lone_volume(tmp_path, run_cli):
    _, from_env = two_volumes(tmp_path)
    env = {"VOLUMETOOL_VOLUME": str(from_env)}
    for command in (
        ["status", "--json"],
        ["sessions"],
        ["runs"],
        ["audit"],
        ["memories", "list"],
        ["memories", "export"],
        ["check"],
        ["migrate", "--list"],
        ["migrate", "--check"],
    ):
        result = run_cli(*command, env=env)
        assert result.exit_code == 0, (command, result)
    assert "blue" in run_cli("memories", "export", env=env).stdout


def test_many_volume_commands_take_the_variable_only_when_no_volume_is_given(tmp_path, run_cli):
    named, from_env = two_volumes(tmp_path)
    env = {"VOLUMETOOL_VOLUME": str(from_env)}
    assert str(from_env) in run_cli("migrate", "--check", env=env).stdout
    listed = run_cli("migrate", named, "--check", env=env).stdout
    assert str(named) in listed and str(from_env) not in listed
    assert_clean_error(run_cli("migrate"), 2, "Missing argument 'VOLUME...'", "VOLUMETOOL_VOLUME")


def test_no_volume_at_all_is_a_usage_error(run_cli):
    # status takes many volumes (SPEC section 12)
    assert_clean_error(run_cli("status"), 2, "Missing argument 'VOLUME...'", "VOLUMETOOL_VOLUME")


def test_init_and_demo_take_the_volume_from_the_environment(tmp_path, run_cli):
    env = {"VOLUMETOOL_VOLUME": f"{tmp_path}/vol/"}
    assert run_cli("init", env=env).exit_code == 0
    assert (tmp_path / "vol" / "agent.db").is_file()
    assert run_cli("demo", env={"VOLUMETOOL_VOLUME": str(tmp_path / "demo.db")}).exit_code == 0
    assert (tmp_path / "demo.db").is_file()


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("command", [["init"], ["demo", "--sessions", "2"]], ids=["init", "demo"])
def test_init_and_demo_refuse_beside_a_leftover_side_file(tmp_path, run_cli, command, suffix):
    other = VolumeWriter(tmp_path / "other.db")
    other.memory("secret", "another database's fact")
    other.close()
    (tmp_path / "vol").mkdir()
    side = tmp_path / "vol" / f"agent.db{suffix}"
    side.write_bytes((tmp_path / "other.db").read_bytes())
    for target in (tmp_path / "vol" / "agent.db", f"{tmp_path}/vol/"):
        result = run_cli(*command, target)
        assert_clean_error(result, 2, f"agent.db{suffix}", "another database")
    assert sorted(p.name for p in (tmp_path / "vol").iterdir()) == [side.name]
    assert side.read_bytes() == (tmp_path / "other.db").read_bytes()


def overwrite_text(path, old: bytes, new: bytes) -> None:
    """Overwrite stored text in place, as a bad disk or a stray write would: the pages stay
    well-formed, the text is no longer UTF-8."""
    data = path.read_bytes()
    assert data.count(old) >= 1
    path.write_bytes(data.replace(old, new))


@pytest.mark.parametrize(
    "command",
    [
        ["memories", "list", "VOL"],
        ["memories", "get", "VOL", "color"],
        ["memories", "export", "VOL"],
        ["memories", "list", "VOL", "--json"],
    ],
)
def test_text_that_is_not_utf8_is_the_one_line_damage_message(tmp_path, run_cli, command):
    w = VolumeWriter(tmp_path / "agent.db")
    w.memory("color", "bluebluebluebluebluebluebluebluebluebluebluebluebluebluebluebluebl")
    w.conn.execute("PRAGMA journal_mode = DELETE")
    w.close()
    overwrite_text(tmp_path / "agent.db", b"bluebluebluebluebluebluebl", b"\xff\xfe" * 13)
    result = run_cli(*[tmp_path / "agent.db" if a == "VOL" else a for a in command])
    assert_clean_error(result, 2, "the file is damaged", "not UTF-8")
    assert "decode" not in result.stderr


def test_every_connection_sets_trusted_schema_off(tmp_path):
    from volumetool.volume import Volume, connect, open_for_write

    path = create_volume(tmp_path / "agent.db", "a")
    with Volume(path) as reader, open_for_write(path, lock=False) as writer:
        connections = [reader.conn, writer.conn, connect(path), connect(path, readonly=True)]
        for conn in connections:
            assert conn.execute("PRAGMA trusted_schema").fetchone() == (0,)


def test_a_planted_view_or_trigger_cannot_call_an_unsafe_function(tmp_path):
    from volumetool.volume import Volume

    path = create_volume(tmp_path / "agent.db", "a")
    plant = sqlite3.connect(path)
    plant.executescript(
        "CREATE VIEW facts AS SELECT json_extract(value, '$') AS v FROM memories;"
        "CREATE TRIGGER stamp AFTER INSERT ON memories BEGIN"
        " UPDATE memories SET value = json(new.value) WHERE key = new.key; END;"
    )
    plant.execute("SELECT * FROM facts").fetchall()  # SQLite itself would run them
    plant.close()
    with Volume(path, readonly=False, gate=False) as vol:
        with pytest.raises(sqlite3.OperationalError, match="unsafe use of json_extract"):
            vol.conn.execute("SELECT * FROM facts").fetchall()
        with pytest.raises(sqlite3.OperationalError, match="unsafe use of json"):
            vol.conn.execute("INSERT INTO memories VALUES ('k', '1', 't', 't')")
        assert vol.conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)


def not_an_agent_file(path):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()


def planted_trigger(path):
    create_volume(path, "a")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TRIGGER t AFTER INSERT ON memories BEGIN DELETE FROM identity; END")
    conn.close()


@pytest.mark.parametrize(
    "make",
    [
        lambda p: p.write_text("not a database\n" * 10),
        not_an_agent_file,
        planted_trigger,
    ],
    ids=["not-sqlite", "not-an-agent-file", "planted-trigger"],
)
def test_a_file_that_fails_the_checks_gets_no_lock_file(tmp_path, run_cli, make):
    path = tmp_path / "agent.db"
    make(path)
    result = run_cli("migrate", path)
    assert result.exit_code in (2, 3), result
    # (a WAL-mode file gets the -wal and -shm every reader of it needs)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == [
        "agent.db"
    ]


def test_open_for_write_locks_only_when_asked(tmp_path):
    from volumetool.errors import Busy
    from volumetool.volume import lock_path, open_for_write

    path = create_volume(tmp_path / "agent.db", "a")
    with open_for_write(path, lock=False), open_for_write(path, lock=False):
        assert not lock_path(path).exists()
    with open_for_write(path, lock=True):
        with pytest.raises(Busy), open_for_write(path, lock=True, wait=0.1):
            pass
        with open_for_write(path, lock=False) as writer, writer.write() as conn:
            conn.execute("INSERT INTO memories VALUES ('k', 'v', 't', 't')")


def test_check_reports_damage_that_hides_the_agent_tables(tmp_path, run_cli):
    path = create_volume(tmp_path / "agent.db", "a")
    sqlite3.connect(path).execute("PRAGMA journal_mode = DELETE").close()
    data = bytearray(path.read_bytes())
    for found in re.finditer(b"agent-volume", bytes(data)):  # each migration record's header
        data[found.start() - 4 : found.start()] = bytes(4)
    path.write_bytes(bytes(data))
    assert_clean_error(run_cli("status", path), 2, "not an agent volume")
    result = run_cli("check", path, "--json")
    assert result.exit_code == 1, result
    assert [p["check"] for p in json.loads(result.stdout)] == ["integrity"]


def test_a_schema_whose_text_is_not_utf8_is_the_damage_message(tmp_path, run_cli):
    path = create_volume(tmp_path / "agent.db", "a")
    sqlite3.connect(path).execute("PRAGMA journal_mode = DELETE").close()
    overwrite_text(path, b"CREATE TABLE memories", b"CREATE TABLE \xf7emories")
    for command in (["status"], ["memories", "list"], ["memories", "remember"]):
        result = run_cli(*command, path, *(["k", "v"] if "remember" in command else []))
        assert_clean_error(result, 2, "the file is damaged")
        assert "internal error" not in result.stderr
    result = run_cli("check", path, "--json")
    assert result.exit_code == 1, result
    assert [p["check"] for p in json.loads(result.stdout)] == ["integrity"]


def test_opening_a_volume_again_keeps_the_locks_of_the_connection_already_open(tmp_path):
    """POSIX drops a process's locks on a file when it closes any descriptor of it: reading
    the header again while a connection is open (a search opens its volume twice) let the
    agent, closing its own connection, think itself the last one and delete the WAL, and the
    writes after that were lost."""
    import subprocess
    import sys
    from pathlib import Path

    from volumetool.volume import Volume

    w = VolumeWriter(tmp_path / "agent.db")
    session = w.thread("telegram:1")
    w.close()
    insert = (
        "INSERT INTO messages (session_id, role, content, created_at)"
        f" VALUES ({session}, 'user', ?, '2026-01-01T00:00:00Z')"
    )
    agent = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
        f" c.execute({insert!r}, ('from the agent',)); c.commit(); c.close()"
    )
    with Volume(w.path, readonly=False) as first:
        with first.snapshot() as conn:
            conn.execute("SELECT count(*) FROM messages").fetchone()
        with Volume(w.path, readonly=True):  # the header read again
            pass
        subprocess.run([sys.executable, "-c", agent, str(w.path)], check=True)
        assert Path(f"{w.path}-wal").exists()  # the agent knew it was not the last
        with first.write() as conn:
            conn.execute(insert, ("from volumetool",))
    conn = sqlite3.connect(w.path)
    contents = [c for (c,) in conn.execute("SELECT content FROM messages ORDER BY id")]
    assert contents == ["from the agent", "from volumetool"]
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def _close_between_lines(path, at: int) -> tuple[bool, list[Exception]]:
    """A thread connects to `path` and closes; at its `at`-th line in volume.py this thread
    closes another connection of the same file. Whether it came to that line; what raised."""
    import sys

    from volumetool import volume

    other = volume.connect(path)
    paused, resume, errors = threading.Event(), threading.Event(), []
    reached = False

    def line(frame, event, arg):
        nonlocal at, reached
        if event == "line":
            at -= 1
            if at == 0:
                reached = True
                paused.set()
                resume.wait()
        return line

    def first() -> None:
        sys.settrace(lambda frame, event, arg: line if frame.f_globals is vars(volume) else None)
        try:
            volume.connect(path).close()
        except Exception as exc:
            errors.append(exc)
        finally:
            sys.settrace(None)
            paused.set()

    thread = threading.Thread(target=first)
    thread.start()
    paused.wait()
    try:
        other.close()
    except Exception as exc:
        errors.append(exc)
    resume.set()
    thread.join()
    return reached, errors


def test_the_connections_on_a_file_stay_known_whatever_another_thread_closes_meanwhile(tmp_path):
    """`check_file` skips the header read of a file this process holds a connection on. A
    connection closed by another thread (or by the collector, in whichever thread it runs)
    between any two lines of a connect and a close must leave that knowledge right: a close
    lost takes the file for open forever, a count lost reads its header and drops the locks
    of a connection still open."""
    import os

    from volumetool import volume

    path = tmp_path / "agent.db"
    create_volume(path, "a")
    at = 0
    while True:
        at += 1
        reached, errors = _close_between_lines(path, at)
        assert errors == [], at
        assert not volume._connected(os.stat(path)), at
        if not reached:
            break
    assert at > 5  # line by line through a connect and a close
    conn = volume.connect(path)
    assert volume._connected(os.stat(path))
    conn.close()
    assert not volume._connected(os.stat(path))


def test_the_library_reads_no_volume_from_the_environment(monkeypatch, tmp_path):
    """$VOLUMETOOL_VOLUME is the CLI's (cli.options): a library call given no volume is an
    error, whatever the environment names."""
    from volumetool.errors import UnusableInput
    from volumetool.volume import resolve

    monkeypatch.setenv("VOLUMETOOL_VOLUME", str(tmp_path))
    for nothing in (None, ""):
        with pytest.raises(UnusableInput, match="no VOLUME given"):
            resolve(nothing)


def test_closing_a_volume_waits_for_a_write_another_thread_has_under_way(tmp_path):
    """After a second Ctrl-C the main thread closes the volume while a worker may still be
    writing a compaction's ending: the close waits for that transaction (closing the
    connection under it crashed the process)."""
    import time

    from volumetool.volume import open_for_write

    w = VolumeWriter(tmp_path / "agent.db")
    w.close()
    errors: list[BaseException] = []
    started = threading.Event()
    with open_for_write(w.path, lock=False) as volume:

        def writer() -> None:
            try:
                with volume.write() as conn:
                    started.set()
                    time.sleep(0.3)
                    conn.execute("INSERT INTO identity (key, value) VALUES ('k', 'v')")
            except BaseException as exc:
                errors.append(exc)
                started.set()

        thread = threading.Thread(target=writer)
        thread.start()
        started.wait()
        volume.close()
        assert not thread.is_alive() and errors == []
    assert sqlite3.connect(w.path).execute(
        "SELECT value FROM identity WHERE key = 'k'"
    ).fetchall() == [("v",)]

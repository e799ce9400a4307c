"""Opening a volume: every bad file gets its exit code and one clear line; reads never write."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from tests.conftest import assert_clean_error
from tests.volumes import VolumeWriter, file_digest
from volumetool.create import create_volume

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


def test_volume_from_the_environment(tmp_path, run_cli):
    w = VolumeWriter(tmp_path / "agent.db")
    s = w.thread("k1")
    w.turn(s, 1)
    w.memory("color", "blue")
    w.close()
    env = {"VOLUMETOOL_VOLUME": str(tmp_path)}
    assert run_cli("status", "--json", env=env).exit_code == 0
    result = run_cli("transcript", "k1", "--json", env=env)
    assert result.exit_code == 0, result
    assert "question 1" in result.stdout
    result = run_cli("memories", "get", "color", env=env)
    assert result.stdout == "blue"


def test_no_volume_at_all_is_a_usage_error(run_cli):
    assert_clean_error(run_cli("status"), 2, "VOLUMETOOL_VOLUME")


def test_init_demo_and_backup_take_the_volume_from_the_environment(tmp_path, run_cli):
    env = {"VOLUMETOOL_VOLUME": f"{tmp_path}/vol/"}
    assert run_cli("init", env=env).exit_code == 0
    assert (tmp_path / "vol" / "agent.db").is_file()
    result = run_cli("backup", tmp_path / "copy.db", env=env)
    assert result.exit_code == 0, result
    assert (tmp_path / "copy.db").is_file()
    assert run_cli("demo", env={"VOLUMETOOL_VOLUME": str(tmp_path / "demo.db")}).exit_code == 0

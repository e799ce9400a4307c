"""schema.sql is the current format, and the migration set produces exactly it."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import sqlite_utils

from volumetool.create import create_volume
from volumetool.migrations import migrations

ROOT = Path(__file__).resolve().parent.parent


def normalized_schema(conn: sqlite3.Connection) -> list[tuple]:
    """Tables and indexes by name, with whitespace in their SQL normalized."""
    rows = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master"
        " WHERE name NOT LIKE '_sqlite_migrations%' AND tbl_name != '_sqlite_migrations'"
        " ORDER BY type, name"
    ).fetchall()

    def squash(sql: str | None) -> str | None:
        if sql is None:
            return None
        sql = re.sub(r"\s+", " ", sql)
        return re.sub(r"\s*([(),])\s*", r"\1", sql).strip()

    return [(t, n, tbl, squash(sql)) for t, n, tbl, sql in rows]


def test_migrations_on_an_empty_file_give_exactly_schema_sql(tmp_path):
    migrated = sqlite3.connect(tmp_path / "migrated.db")
    migrations.apply(sqlite_utils.Database(migrated))
    reference = sqlite3.connect(":memory:")
    reference.executescript((ROOT / "schema.sql").read_text())
    assert normalized_schema(migrated) == normalized_schema(reference)
    assert [i[1] for i in migrated.execute("PRAGMA index_list(sessions)")]


def test_init_creates_the_current_format_in_wal_mode_stamped_as_migrated(tmp_path, run_cli):
    result = run_cli("init", f"{tmp_path}/vol/", "--name", "support-bot")
    assert result.exit_code == 0, result
    path = tmp_path / "vol" / "agent.db"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    reference = sqlite3.connect(":memory:")
    reference.executescript((ROOT / "schema.sql").read_text())
    assert normalized_schema(conn) == normalized_schema(reference)
    db = sqlite_utils.Database(conn)
    assert migrations.pending(db) == []
    assert dict(conn.execute("SELECT key, value FROM identity"))["name"] == "support-bot"


def test_sqlite_utils_migrate_list_sees_the_same_state(tmp_path):
    path = create_volume(tmp_path / "agent.db", "a")
    listed = subprocess.run(
        [
            Path(sys.executable).parent / "sqlite-utils",
            "migrate",
            str(path),
            str(ROOT / "volumetool" / "migrations.py"),
            "--list",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Migrations for: agent-volume" in listed
    applied, pending = listed.split("Pending:")
    assert "(none)" in pending
    every = [m.name for m in migrations.pending(sqlite_utils.Database(memory=True))]
    assert every and all(name in applied for name in every)


def test_init_refuses_to_overwrite(tmp_path, run_cli):
    path = tmp_path / "agent.db"
    path.write_bytes(b"precious")
    result = run_cli("init", path)
    assert result.exit_code == 2
    assert path.read_bytes() == b"precious"
    assert "already exists" in result.stderr


def test_the_gate_reads_the_same_migration_names_as_the_set():
    from volumetool.volume import known_migrations

    every = [m.name for m in migrations.pending(sqlite_utils.Database(memory=True))]
    assert known_migrations() == every

"""schema.sql is the current format, and the migration set produces exactly it."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlite_utils

from volumetool.atomic import create_volume
from volumetool.format import CURRENT_SCHEMA, MIGRATIONS, SEARCH_FTS5, compare
from volumetool.migrations import migrations
from volumetool.volume import read_schema

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


def test_the_format_names_every_migration_of_the_set_in_order():
    every = [m.name for m in migrations.pending(sqlite_utils.Database(memory=True))]
    assert list(MIGRATIONS) == every


def test_the_format_describes_exactly_what_the_migrations_define(tmp_path):
    migrated = sqlite3.connect(tmp_path / "migrated.db")
    migrations.apply(sqlite_utils.Database(migrated))
    found = read_schema(migrated)
    assert compare(found, CURRENT_SCHEMA) == []
    assert found == CURRENT_SCHEMA


def test_schema_sql_passes_the_gate():
    reference = sqlite3.connect(":memory:")
    reference.executescript((ROOT / "schema.sql").read_text())
    assert compare(read_schema(reference), CURRENT_SCHEMA) == []


# The same format as schema.sql, spelled the way another program might write it: quoted and
# upper-case names, lower-case types, other whitespace, tables and indexes in another order.
RESPELLED = """
create table "MEMORIES" ("key" text primary key, "value" text not null,
    "created_at" text not null, "updated_at" text not null);
CREATE TABLE [identity] ([key] Text PRIMARY KEY, [value] Text NOT NULL);
CREATE TABLE `sessions` (`id` integer PRIMARY KEY, `conversation_key` text NOT NULL,
  `channel` text NOT NULL, `status` text NOT NULL CHECK(`status` IN ('active','archived')),
  `summary` text, `created_at` text NOT NULL, `updated_at` text NOT NULL, `archived_at` text);
CREATE TABLE runs (id INTEGER PRIMARY KEY, session_id INTEGER REFERENCES "sessions"("id"),
  trigger TEXT NOT NULL, model TEXT, status TEXT NOT NULL, input_tokens INTEGER,
  output_tokens INTEGER, last_input_tokens INTEGER, error TEXT, started_at TEXT NOT NULL,
  finished_at TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY,
  folded_by_placeholder INTEGER);
CREATE TABLE audit (id INTEGER PRIMARY KEY, ts TEXT NOT NULL, event TEXT NOT NULL,
  detail TEXT NOT NULL, session_id INTEGER, run_id INTEGER,
  actor TEXT NOT NULL DEFAULT ( 'agent' ) CHECK (actor IN ('agent','volumetool')));
CREATE INDEX audit_by_session ON audit(session_id);
CREATE INDEX audit_by_ts ON audit(ts);
CREATE INDEX audit_by_event ON audit(event,id);
create unique index "sessions_one_active_per_key" on sessions ("conversation_key")
    where "status"='active';
CREATE INDEX sessions_by_status_updated ON sessions(status,updated_at);
CREATE INDEX runs_by_session ON runs(session_id,id);
CREATE INDEX runs_by_trigger ON runs(trigger,id);
CREATE INDEX runs_by_started ON runs(started_at);
CREATE TABLE Compactions (Run_Id integer primary key references runs, session_id integer
  not null references sessions(id), summary text, saved_tokens integer, retention real,
  missing_facts text, undone_at text, replaced_summary text,
  replaced_kept integer not null default (0), invented_facts text, tokens_per_estimate real);
CREATE INDEX compactions_by_session ON compactions (session_id ASC, run_id);
"""
MESSAGES_RESPELLED = """
DROP TABLE messages;
CREATE TABLE "messages" ("id" INTEGER PRIMARY KEY,
  "session_id" INTEGER NOT NULL REFERENCES sessions(id), "role" TEXT NOT NULL,
  "content" TEXT NOT NULL, "tool_calls" TEXT, "tool_call_id" TEXT, "created_at" TEXT NOT NULL,
  "folded_by" INTEGER REFERENCES runs(id));
CREATE INDEX messages_by_folding_run ON messages(folded_by);
CREATE INDEX messages_by_session ON messages(session_id,id);
"""


def test_the_gate_compares_meaning_not_create_text():
    conn = sqlite3.connect(":memory:")
    conn.executescript(RESPELLED + MESSAGES_RESPELLED)
    assert compare(read_schema(conn), CURRENT_SCHEMA) == []


def current_file(tmp_path) -> sqlite3.Connection:
    conn = sqlite3.connect(tmp_path / "agent.db")
    conn.executescript((ROOT / "schema.sql").read_text())
    return conn


def differences_after(tmp_path, sql: str) -> list[tuple[str, str, str]]:
    planted = current_file(tmp_path)
    planted.executescript(sql)
    planted.close()
    conn = sqlite3.connect(tmp_path / "agent.db")  # reads the schema afresh
    return [(d.kind, d.type, d.name) for d in compare(read_schema(conn), CURRENT_SCHEMA)]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        (
            "CREATE TRIGGER evil AFTER UPDATE OF summary ON sessions BEGIN"
            " DELETE FROM memories; END",
            [("unknown", "trigger", "evil")],
        ),
        ("CREATE VIEW recent AS SELECT * FROM messages", [("unknown", "view", "recent")]),
        (
            "DROP TABLE memories; CREATE VIEW memories AS SELECT key, value, created_at,"
            " updated_at FROM identity, (SELECT '' AS created_at, '' AS updated_at)",
            [("unknown", "view", "memories"), ("missing", "table", "memories")],
        ),
        ("ALTER TABLE sessions ADD COLUMN note TEXT", [("altered", "table", "sessions")]),
        ("CREATE TABLE notes (id INTEGER PRIMARY KEY)", [("unknown", "table", "notes")]),
        (
            "CREATE INDEX by_detail ON audit (json_extract(detail, '$.key'))",
            [("unknown", "index", "by_detail")],
        ),
        (
            "DROP INDEX audit_by_ts; CREATE INDEX audit_by_ts ON audit (lower(ts))",
            [("altered", "index", "audit_by_ts")],
        ),
        (
            "DROP INDEX sessions_one_active_per_key; CREATE UNIQUE INDEX"
            " sessions_one_active_per_key ON sessions (conversation_key) WHERE status = 'x'",
            [("altered", "index", "sessions_one_active_per_key")],
        ),
        (
            "DROP INDEX runs_by_started; CREATE UNIQUE INDEX runs_by_started ON runs (started_at)",
            [("altered", "index", "runs_by_started")],
        ),
        (
            "DROP INDEX runs_by_started; CREATE INDEX runs_by_started ON runs (started_at DESC)",
            [("altered", "index", "runs_by_started")],
        ),
        ("DROP INDEX audit_by_ts", [("missing", "index", "audit_by_ts")]),
        (
            # a cascade would delete the audit trail with the threads it names
            "DROP TABLE audit; CREATE TABLE audit (id INTEGER PRIMARY KEY, ts TEXT NOT NULL,"
            " event TEXT NOT NULL, detail TEXT NOT NULL, session_id INTEGER REFERENCES"
            " sessions (id) ON DELETE CASCADE, run_id INTEGER, actor TEXT NOT NULL DEFAULT"
            " 'agent'); CREATE INDEX audit_by_event ON audit (event, id);"
            " CREATE INDEX audit_by_ts ON audit (ts);"
            " CREATE INDEX audit_by_session ON audit (session_id)",
            [("altered", "table", "audit")],
        ),
        (
            # only a crafted file can hold such a name (SQLite reserves sqlite_ for its own)
            "CREATE TRIGGER x_internal AFTER INSERT ON messages BEGIN SELECT 1; END;"
            " PRAGMA writable_schema = ON; UPDATE sqlite_master SET name = 'sqlite_internal',"
            " sql = replace(sql, 'x_internal', 'sqlite_internal') WHERE name = 'x_internal'",
            [("unknown", "trigger", "sqlite_internal")],
        ),
    ],
    ids=[
        "trigger",
        "view",
        "view-in-place-of-a-table",
        "extra-column",
        "extra-table",
        "expression-index",
        "index-on-an-expression-instead",
        "partial-condition",
        "uniqueness",
        "order",
        "missing-index",
        "cascading-foreign-key",
        "trigger-named-like-sqlite",
    ],
)
def test_every_object_the_format_does_not_define_is_found(tmp_path, sql, expected):
    assert differences_after(tmp_path, sql) == expected


def test_an_altered_table_says_which_columns_differ(tmp_path):
    conn = current_file(tmp_path)
    conn.executescript(
        "ALTER TABLE sessions ADD COLUMN note TEXT; ALTER TABLE runs DROP COLUMN error"
    )
    described = [d.describe() for d in compare(read_schema(conn), CURRENT_SCHEMA)]
    assert described == [
        "table runs: column error is missing",
        "table sessions: column note is not in the format",
    ]


def test_sqlite_and_sqlite_utils_bookkeeping_is_not_an_unknown_object(tmp_path):
    conn = current_file(tmp_path)
    conn.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY AUTOINCREMENT)")
    conn.execute("INSERT INTO counter DEFAULT VALUES")
    conn.execute("ANALYZE")
    migrations.ensure_migrations_table(sqlite_utils.Database(conn))
    found = compare(read_schema(conn), CURRENT_SCHEMA)
    assert [(d.type, d.name) for d in found] == [("table", "counter")]


def test_volumetool_objects_are_accepted_only_as_defined_and_never_cover_code(tmp_path):
    conn = current_file(tmp_path)
    conn.executescript(
        f"CREATE VIRTUAL TABLE search_messages USING {SEARCH_FTS5};"
        "CREATE TRIGGER search_messages_sync AFTER INSERT ON messages BEGIN SELECT 1; END;"
        "CREATE VIRTUAL TABLE search_texts USING fts5(text, key);"
        "CREATE TABLE search_notes (x)"
    )
    found = [(d.kind, d.type, d.name) for d in compare(read_schema(conn), CURRENT_SCHEMA)]
    assert found == [
        ("unknown", "table", "search_notes"),
        ("unknown", "table", "search_texts_docsize"),  # columnsize = 0 has none
        ("unknown", "trigger", "search_messages_sync"),
        ("altered", "table", "search_texts"),  # other arguments
    ]

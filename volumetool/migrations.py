"""The `agent-volume` migration set: how every agent file reaches the format of schema.sql.

One decorated function per change, named for what it does, never edited once released. The
set is plain sqlite-utils, so `sqlite-utils migrate FILE volumetool/migrations.py` applies and
lists the same migrations as `volumetool migrate`; this module therefore imports nothing from
volumetool.

The chain starts at the shape runtime 0.x wrote (transcripts as JSON arrays inside `sessions`)
and rebuilds each table in the current shape. Rebuilds rename the old table aside with
`legacy_alter_table` on, so that references from other tables keep naming the real table and
the stored CREATE statements stay exactly as written here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

from sqlite_utils import Migrations

migrations = Migrations("agent-volume")

LEGACY_TABLES_0X = (
    "CREATE TABLE IF NOT EXISTS identity (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS sessions (id INTEGER PRIMARY KEY,
  conversation_key TEXT NOT NULL, channel TEXT NOT NULL,
  transcript TEXT NOT NULL, archived INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY,
  session_id INTEGER REFERENCES sessions(id), trigger TEXT NOT NULL,
  model TEXT, status TEXT NOT NULL, input_tokens INTEGER, output_tokens INTEGER, error TEXT,
  started_at TEXT NOT NULL, finished_at TEXT)""",
    """CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY, ts TEXT NOT NULL,
  event TEXT NOT NULL, detail TEXT NOT NULL, session_id INTEGER, run_id INTEGER)""",
    """CREATE TABLE IF NOT EXISTS memories (key TEXT PRIMARY KEY, value TEXT NOT NULL,
  created_at TEXT NOT NULL, updated_at TEXT NOT NULL)""",
)


class LegacyDataError(ValueError):
    """A row of an old file that cannot be carried forward as it is; names the row."""


def _rebuild(db, table: str, create_sql: str, copy_sql: str) -> None:
    """Replace `table` by the shape of `create_sql`, copying rows with `copy_sql` (from `old`)."""
    conn = db.conn
    conn.execute("PRAGMA legacy_alter_table = ON")
    try:
        conn.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
        conn.execute(create_sql)
        conn.execute(copy_sql.replace("{old}", f"{table}_old"))
        conn.execute(f"DROP TABLE {table}_old")
    finally:
        conn.execute("PRAGMA legacy_alter_table = OFF")


@migrations()
def m001_runtime_0x_tables(db) -> None:
    """Baseline: the tables runtime 0.x wrote. A 0.x file already has them; an empty file gets
    them, so that every file walks the same chain."""
    for statement in LEGACY_TABLES_0X:
        db.conn.execute(statement)


def _element_timestamp(value: object, fallback: str) -> str:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        moment = datetime.fromtimestamp(value, UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return fallback


def transcript_messages(session_id: int, transcript: str, created_at: str) -> Iterator[tuple]:
    """The `messages` rows of one 0.x transcript, in transcript order.

    Role, content, tool_calls and tool_call_id are carried over as written. Content that is
    not a string (null, or a list of content parts) is stored as its JSON text, so nothing is
    dropped; a missing `ts` takes the thread's creation time.
    """
    try:
        elements = json.loads(transcript)
    except (TypeError, ValueError) as exc:
        raise LegacyDataError(
            f"sessions row {session_id}: transcript is not valid JSON ({exc})"
        ) from None
    if not isinstance(elements, list):
        raise LegacyDataError(f"sessions row {session_id}: transcript is not a JSON array")
    for index, element in enumerate(elements):
        where = f"sessions row {session_id}, transcript element {index}"
        if not isinstance(element, dict):
            raise LegacyDataError(f"{where}: not a JSON object")
        role = element.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise LegacyDataError(f"{where}: unknown role {role!r}")
        content = element.get("content")
        if not isinstance(content, str):
            content = "" if content is None else json.dumps(content, ensure_ascii=False)
        tool_calls = element.get("tool_calls")
        if tool_calls is not None:
            tool_calls = json.dumps(tool_calls, ensure_ascii=False)
        tool_call_id = element.get("tool_call_id")
        if tool_call_id is not None and not isinstance(tool_call_id, str):
            tool_call_id = json.dumps(tool_call_id)
        ts = _element_timestamp(element.get("ts"), created_at)
        yield (session_id, role, content, tool_calls, tool_call_id, ts)


@migrations()
def m002_messages_from_transcripts(db) -> None:
    """Move every 0.x transcript into `messages`, one row per element, threads in id order and
    each thread in transcript order. Preserves role, content, tool_calls and tool_call_id
    exactly. `archived` becomes `status`; an archived 0.x thread has no archive time, so its
    `updated_at` stands in for `archived_at`."""
    conn = db.conn
    duplicate = conn.execute(
        "SELECT conversation_key, group_concat(id) FROM sessions WHERE archived = 0"
        " GROUP BY conversation_key HAVING count(*) > 1 LIMIT 1"
    ).fetchone()
    if duplicate:
        raise LegacyDataError(
            f"sessions rows {duplicate[1]}: more than one active thread for key "
            f"{duplicate[0]!r}; archive all but one (UPDATE sessions SET archived = 1 ...)"
        )
    conn.execute(
        """CREATE TABLE messages (
  id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES sessions (id),
  role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
  content TEXT NOT NULL,
  tool_calls TEXT,
  tool_call_id TEXT,
  created_at TEXT NOT NULL,
  folded_by INTEGER REFERENCES runs (id)
)"""
    )

    def rows() -> Iterator[tuple]:
        cursor = conn.execute("SELECT id, transcript, created_at FROM sessions ORDER BY id")
        for session_id, transcript, created_at in cursor:
            yield from transcript_messages(session_id, transcript, created_at)

    conn.executemany(
        "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        rows(),
    )
    _rebuild(
        db,
        "sessions",
        """CREATE TABLE sessions (
  id INTEGER PRIMARY KEY,
  conversation_key TEXT NOT NULL,
  channel TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('active', 'archived')),
  summary TEXT,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  archived_at TEXT
)""",
        """INSERT INTO sessions (id, conversation_key, channel, status, summary, created_at,
  updated_at, archived_at)
SELECT id, conversation_key, channel,
  CASE WHEN archived THEN 'archived' ELSE 'active' END, NULL, created_at, updated_at,
  CASE WHEN archived THEN updated_at END
FROM {old} ORDER BY id""",
    )


@migrations()
def m003_runs_last_input_tokens(db) -> None:
    """Add `runs.last_input_tokens` and the status CHECK. 0.x kept only the input summed over a
    run's calls; that is the last call's figure for single-call runs and the best figure
    available for the rest (it can only overstate, never hide, a thread's size), so it is
    copied. NULL stays NULL: an unreported figure is never invented."""
    _rebuild(
        db,
        "runs",
        """CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  session_id INTEGER REFERENCES sessions (id),
  trigger TEXT NOT NULL,
  model TEXT,
  status TEXT NOT NULL CHECK (status IN ('ok', 'error')),
  input_tokens INTEGER,
  output_tokens INTEGER,
  last_input_tokens INTEGER,
  error TEXT,
  started_at TEXT NOT NULL,
  finished_at TEXT
)""",
        """INSERT INTO runs (id, session_id, trigger, model, status, input_tokens, output_tokens,
  last_input_tokens, error, started_at, finished_at)
SELECT id, session_id, trigger, model, status, input_tokens, output_tokens, input_tokens,
  error, started_at, finished_at
FROM {old} ORDER BY id""",
    )


@migrations()
def m004_audit_actor(db) -> None:
    """Add `audit.actor`. Every 0.x event was written by the agent itself, so all get 'agent'."""
    _rebuild(
        db,
        "audit",
        """CREATE TABLE audit (
  id INTEGER PRIMARY KEY,
  ts TEXT NOT NULL,
  event TEXT NOT NULL,
  detail TEXT NOT NULL,
  session_id INTEGER,
  run_id INTEGER,
  actor TEXT NOT NULL DEFAULT 'agent' CHECK (actor IN ('agent', 'volumetool'))
)""",
        """INSERT INTO audit (id, ts, event, detail, session_id, run_id, actor)
SELECT id, ts, event, detail, session_id, run_id, 'agent' FROM {old} ORDER BY id""",
    )


@migrations()
def m005_listing_indexes(db) -> None:
    """The partial unique index (one active thread per key) and the indexes that listing and
    compaction read through."""
    for statement in (
        "CREATE UNIQUE INDEX sessions_one_active_per_key ON sessions (conversation_key)"
        " WHERE status = 'active'",
        "CREATE INDEX sessions_by_status_updated ON sessions (status, updated_at)",
        "CREATE INDEX messages_by_session ON messages (session_id, id)",
        "CREATE INDEX messages_by_folding_run ON messages (folded_by)",
        "CREATE INDEX runs_by_session ON runs (session_id, id)",
        "CREATE INDEX runs_by_trigger ON runs (trigger, id)",
        "CREATE INDEX runs_by_started ON runs (started_at)",
        "CREATE INDEX audit_by_event ON audit (event, id)",
        "CREATE INDEX audit_by_ts ON audit (ts)",
        "CREATE INDEX audit_by_session ON audit (session_id)",
    ):
        db.conn.execute(statement)

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
import sqlite3
from collections.abc import Iterable, Iterator
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


def _json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def transcript_rows(session_id: int, transcript: str, created_at: str) -> Iterator[tuple]:
    """The `messages` rows of one 0.x transcript, converted in Python exactly as the SQL of
    m002 converts them. Used for transcripts holding an escaped NUL (\\u0000), which SQLite's
    JSON functions would cut short."""
    for element in json.loads(transcript):
        content = element.get("content")
        if not isinstance(content, str):
            content = "" if content is None else _json_text(content)
        tool_calls = element.get("tool_calls")
        ts = element.get("ts")
        if isinstance(ts, int | float) and not isinstance(ts, bool):
            try:
                moment = datetime.fromtimestamp(ts, UTC)
            except (OverflowError, ValueError, OSError):  # the SQL path stores NULL: refused
                raise LegacyDataError(
                    f"sessions row {session_id}: a transcript element's ts {ts!r} is no time"
                ) from None
            ts = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        elif not isinstance(ts, str):
            ts = created_at
        call_id = element.get("tool_call_id")
        yield (
            session_id,
            element["role"],
            content,
            None if tool_calls is None else _json_text(tool_calls),
            None
            if call_id is None
            else (call_id if isinstance(call_id, str) else _json_text(call_id)),
            ts,
        )


def check_transcripts(conn) -> None:
    """Name the first 0.x row whose transcript cannot be carried forward as it is."""
    row = conn.execute(
        "SELECT id, transcript FROM sessions WHERE NOT json_valid(transcript)"
        " OR json_type(transcript) != 'array' ORDER BY id LIMIT 1"
    ).fetchone()
    if row:
        try:
            json.loads(row[1])
        except (TypeError, ValueError) as exc:
            raise LegacyDataError(
                f"sessions row {row[0]}: transcript is not valid JSON ({exc})"
            ) from None
        raise LegacyDataError(f"sessions row {row[0]}: transcript is not a JSON array")
    row = conn.execute(
        "SELECT s.id, e.key, e.type, json_extract(e.value, '$.role')"
        " FROM sessions s, json_each(s.transcript) e"
        " WHERE e.type != 'object' OR json_type(e.value, '$.role') IS NOT 'text'"
        " OR json_extract(e.value, '$.role') NOT IN ('system', 'user', 'assistant', 'tool')"
        " ORDER BY s.id, e.id LIMIT 1"
    ).fetchone()
    if row:
        where = f"sessions row {row[0]}, transcript element {row[1]}"
        if row[2] != "object":
            raise LegacyDataError(f"{where}: not a JSON object")
        raise LegacyDataError(f"{where}: unknown role {row[3]!r}")


# m002's move of the transcripts of threads `? < id < ?`, element by element, in order: the
# path for an SQLite without `->>` (before 3.38), each field read with json_extract.
MOVE_TRANSCRIPTS_SQL = """
INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, created_at)
SELECT s.id, json_extract(e.value, '$.role'),
  CASE json_type(e.value, '$.content')
    WHEN 'text' THEN json_extract(e.value, '$.content')
    WHEN 'true' THEN 'true'
    WHEN 'false' THEN 'false'
    ELSE coalesce(json_extract(e.value, '$.content'), '')
  END,
  CASE
    WHEN coalesce(json_type(e.value, '$.tool_calls'), 'null') = 'null' THEN NULL
    WHEN json_type(e.value, '$.tool_calls') IN ('object', 'array')
      THEN json_extract(e.value, '$.tool_calls')
    ELSE json_quote(json_extract(e.value, '$.tool_calls'))
  END,
  json_extract(e.value, '$.tool_call_id'),
  CASE
    WHEN json_type(e.value, '$.ts') = 'text' THEN json_extract(e.value, '$.ts')
    WHEN json_type(e.value, '$.ts') IN ('integer', 'real')
      THEN strftime('%Y-%m-%dT%H:%M:%fZ', json_extract(e.value, '$.ts'), 'unixepoch')
    ELSE s.created_at
  END
FROM sessions s, json_each(s.transcript) e
WHERE s.id > ? AND s.id < ?
ORDER BY s.id, e.id"""

# The same rows where SQLite has `->>` (3.38+), with one lookup per field where the old path
# makes two or three. Three nested queries (OFFSET 0 keeps each a subquery, so nothing is
# computed twice): the innermost renders each element's JSON once, the middle one reads each
# field once, the outer one asks json_type only where the value alone cannot tell (an integer
# that may be true or false, a text that may be an array's JSON). Each message takes its id
# from its thread's first id (the temporary table m002_first_ids: thread id, first id - 1)
# and its place in the transcript, so ids follow thread and transcript order without sorting
# every message. A role is read only from an object, so an element that is not one fails the
# insert.
# The statement above is the reference; a property test holds the two equal.
MOVE_TRANSCRIPTS_ARROW_SQL = """
INSERT INTO messages (id, session_id, role, content, tool_calls, tool_call_id, created_at)
SELECT id, session_id, role,
  CASE typeof(content)
    WHEN 'null' THEN ''
    WHEN 'integer' THEN CASE json_type(element, '$.content')
      WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE content END
    ELSE content
  END,
  CASE
    WHEN tool_calls IS NULL OR tool_calls = 'null' THEN NULL
    WHEN substr(tool_calls, 1, 1) IN ('[', '{') THEN tool_calls
    ELSE json_quote(element ->> '$.tool_calls')
  END,
  tool_call_id,
  CASE
    WHEN typeof(ts) = 'text' AND substr(ts, 1, 1) NOT IN ('[', '{') THEN ts
    WHEN typeof(ts) = 'real' THEN strftime('%Y-%m-%dT%H:%M:%fZ', ts, 'unixepoch')
    ELSE CASE json_type(element, '$.ts')
      WHEN 'text' THEN ts
      WHEN 'integer' THEN strftime('%Y-%m-%dT%H:%M:%fZ', ts, 'unixepoch')
      ELSE thread_created_at
    END
  END
FROM (
  SELECT id, session_id, thread_created_at, element,
    CASE WHEN type = 'object' THEN element ->> '$.role' END AS role,
    element ->> '$.content' AS content,
    element -> '$.tool_calls' AS tool_calls,
    element ->> '$.tool_call_id' AS tool_call_id,
    element ->> '$.ts' AS ts
  FROM (
    SELECT t.base + e.key + 1 AS id, s.id AS session_id,
      s.created_at AS thread_created_at, e.type AS type, e.value AS element
    FROM temp.m002_first_ids t CROSS JOIN sessions s CROSS JOIN json_each(s.transcript) e
    WHERE s.id = t.id
    LIMIT -1 OFFSET 0
  )
  LIMIT -1 OFFSET 0
)"""

# Each thread's element count when its transcript is a JSON array (NULL when not, for
# check_transcripts to name), and whether it holds an escaped NUL. Each transcript is parsed
# once (json_array_length is 0 for a value that is not an array; json_type tells those from an
# empty array), and text that is not JSON fails the statement.
TRANSCRIPT_SHAPES_SQL = """
SELECT id,
  coalesce(nullif(json_array_length(transcript), 0),
    CASE WHEN json_type(transcript) = 'array' THEN 0 END),
  instr(transcript, '\\u0000') > 0
FROM sessions ORDER BY id"""


def has_json_arrow(conn) -> bool:
    """Whether the SQLite at hand has the `->>` operator (3.38+): asked of the library itself,
    which need not be the one Python was built against."""
    try:
        conn.execute("SELECT '{}' ->> '$.a'")
    except sqlite3.OperationalError:
        return False
    return True


def _insert_messages(conn, rows: Iterable[tuple], with_ids: bool = False) -> None:
    columns = "session_id, role, content, tool_calls, tool_call_id, created_at"
    if with_ids:
        columns = "id, " + columns
    places = ", ".join("?" * len(columns.split(", ")))
    conn.executemany(f"INSERT INTO messages ({columns}) VALUES ({places})", rows)


def move_transcripts(conn, arrow: bool) -> None:
    """Every 0.x transcript into the empty `messages` table, threads in id order and each
    thread in transcript order. A transcript holding an escaped NUL (\\u0000), which SQLite's
    JSON functions would cut short, goes through `transcript_rows`. A transcript that cannot
    be carried forward raises LegacyDataError naming its row, before anything is inserted.

    `arrow` first tries the statement that reads fields with `->>`. It checks nothing ahead
    (the insert fails on an element that is not a message); whatever goes wrong, its rows are
    rolled back and the json_extract path runs instead, to give the same error (or the same
    rows) as ever."""
    if arrow:
        conn.execute("SAVEPOINT m002_arrow")
        try:
            _move_with_arrow(conn)
        except Exception:
            conn.execute("ROLLBACK TO m002_arrow")
        else:
            conn.execute("RELEASE m002_arrow")
            return
        conn.execute("RELEASE m002_arrow")
    check_transcripts(conn)
    # Threads in id order: runs of plain transcripts in SQL, the rare one holding an escaped
    # NUL in Python, so that message ids still follow thread order.
    with_nul = [
        row
        for row in conn.execute(
            "SELECT id, transcript, created_at FROM sessions"
            " WHERE instr(transcript, '\\u0000') ORDER BY id"
        )
    ]
    previous = -1
    for session_id, transcript, created_at in [*with_nul, (1 << 62, None, None)]:
        conn.execute(MOVE_TRANSCRIPTS_SQL, (previous, session_id))
        if transcript is not None:
            _insert_messages(conn, transcript_rows(session_id, transcript, created_at))
        previous = session_id


class _NotAsExpected(Exception):
    """The `->>` path met a transcript it leaves to the json_extract path."""


def _move_with_arrow(conn) -> None:
    """move_transcripts with `->>`: one pass to learn each transcript's length, then one
    statement for every plain transcript, each message given its id."""
    shapes = conn.execute(TRANSCRIPT_SHAPES_SQL).fetchall()
    if any(length is None for _, length, _ in shapes):
        raise _NotAsExpected("a transcript that is not a JSON array")
    first, in_sql, in_python = 0, [], []
    for session_id, length, with_nul in shapes:
        (in_python if with_nul else in_sql).append((session_id, first, length))
        first += length
    conn.execute("CREATE TEMP TABLE m002_first_ids (id INTEGER PRIMARY KEY, base INTEGER)")
    conn.executemany("INSERT INTO temp.m002_first_ids VALUES (?, ?)", [t[:2] for t in in_sql])
    conn.execute(MOVE_TRANSCRIPTS_ARROW_SQL)
    conn.execute("DROP TABLE temp.m002_first_ids")
    for session_id, before, length in in_python:
        transcript, created_at = conn.execute(
            "SELECT transcript, created_at FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        rows = list(transcript_rows(session_id, transcript, created_at))
        if len(rows) != length:
            raise _NotAsExpected("Python and SQLite read another number of elements")
        _insert_messages(
            conn, [(before + n + 1, *row) for n, row in enumerate(rows)], with_ids=True
        )


@migrations()
def m002_messages_from_transcripts(db) -> None:
    """Move every 0.x transcript into `messages`, one row per element, threads in id order and
    each thread in transcript order. Preserves role, content, tool_calls and tool_call_id
    exactly; content that is not a string (a list of content parts) is kept as its JSON text,
    so nothing is dropped, while a null or missing content (a tool-call message) is empty
    text rather than the word "null"; a missing `ts` takes the thread's creation time (a
    numeric one is read as Unix seconds). `archived` becomes `status`; an archived 0.x thread
    has no archive time, so its `updated_at` stands in for `archived_at`."""
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
    move_transcripts(conn, has_json_arrow(conn))
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


@migrations()
def m006_compaction_history(db) -> None:
    """Keep what each successful compaction run wrote, so a thread's history can be read in
    order and a compaction undone (SPEC section 10). Files from before this kept only the
    current summary: it goes to each thread's latest successful compaction run; the earlier
    runs' summaries were never stored and stay NULL (unknown). Nothing is removed or changed."""
    conn = db.conn
    conn.execute(
        """CREATE TABLE compactions (
  run_id INTEGER PRIMARY KEY REFERENCES runs (id),
  session_id INTEGER NOT NULL REFERENCES sessions (id),
  summary TEXT,
  saved_tokens INTEGER,
  retention REAL,
  missing_facts TEXT,
  undone_at TEXT
)"""
    )
    conn.execute("CREATE INDEX compactions_by_session ON compactions (session_id, run_id)")
    conn.execute(
        """INSERT INTO compactions (run_id, session_id, summary)
SELECT r.id, r.session_id,
  CASE WHEN r.id = (SELECT max(l.id) FROM runs l WHERE l.session_id = r.session_id
                    AND l.trigger = 'compaction' AND l.status = 'ok')
       THEN s.summary END
FROM runs r JOIN sessions s ON s.id = r.session_id
WHERE r.trigger = 'compaction' AND r.status = 'ok'
ORDER BY r.id"""
    )


@migrations()
def m007_compaction_replaced_summary(db) -> None:
    """Keep with each compaction the summary it replaced, so that undo restores it whoever
    wrote it — the agent compacting by itself, or a summary no compaction run stands behind
    (SPEC section 10). `replaced_kept` is 1 when `replaced_summary` holds it (NULL: there was
    none); rows from before this keep 0: their summary before is found as it was."""
    conn = db.conn
    conn.execute("ALTER TABLE compactions ADD COLUMN replaced_summary TEXT")
    conn.execute("ALTER TABLE compactions ADD COLUMN replaced_kept INTEGER NOT NULL DEFAULT 0")


@migrations()
def m008_compaction_quality(db) -> None:
    """Keep with each compaction the facts its summary invented (SPEC section 14), beside
    those it lost, and the input tokens its server counted for each one volumetool estimated,
    from which the next compactions with that model size their requests. Rows from before
    this keep NULL for both: unknown."""
    conn = db.conn
    conn.execute("ALTER TABLE compactions ADD COLUMN invented_facts TEXT")
    conn.execute("ALTER TABLE compactions ADD COLUMN tokens_per_estimate REAL")

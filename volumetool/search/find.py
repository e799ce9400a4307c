"""`search`: find text in a volume's messages (live and folded), summaries (the current one
and those earlier compactions kept) and memories, newest first.

Each kind of text is read from the index (every hit checked against the live row, its text
included, so a row deleted or changed since it was indexed is never shown) and from what the
index lacks in the same snapshot (indexed on the spot into temporary tables, `index.py`), then
merged by time. Only the rows shown get a snippet.
"""

from __future__ import annotations

import heapq
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from volumetool.errors import (
    Busy,
    Damaged,
    ProblemsFound,
    SchemaMismatch,
    UnusableInput,
)
from volumetool.format import SEARCH_FTS5
from volumetool.listings import Filters
from volumetool.search import index
from volumetool.search.query import KINDS, Query, holds_literally, parse_query
from volumetool.volume import DEFAULT_BUSY_TIMEOUT, Volume, open_for_write

SEARCH_FIELDS = (
    "kind",
    "conversation_key",
    "session_id",
    "message_id",
    "role",
    "folded",
    "created_at",
    "key",
    "snippet",
)
MARK_START, MARK_END = "⟦", "⟧"  # around each match in a snippet; rare in any text
SNIPPET_TOKENS = 16
ANNOUNCE_AT = 20_000  # an index refresh this large says so on stderr first


@dataclass(frozen=True)
class SearchRequest:
    query: str
    fts: bool = False
    kinds: tuple[str, ...] = KINDS
    key_glob: str | None = None
    role: str | None = None
    since: str | None = None
    limit: int | None = 100  # None: every result


@dataclass(frozen=True)
class Hit:
    at: str  # when the text was written
    kind: str  # message | summary | memory
    table: str  # the FTS5 table that found it, for its snippet
    rowid: int
    text: str
    key: str | None  # a memory's key
    session_id: int | None
    conversation_key: str | None
    role: str | None
    folded: bool  # a folded message, or a summary a later compaction replaced
    snippet: str | None = None  # None: not made yet

    def row(self, snippet: str) -> dict:
        return {
            "kind": self.kind,
            "conversation_key": self.conversation_key,
            "session_id": self.session_id,
            "message_id": self.rowid if self.kind == "message" else None,
            "role": self.role,
            "folded": self.folded,
            "created_at": self.at,
            "key": self.key,
            "snippet": snippet,
        }


# Each kind's hits in one FTS5 table `{table}` (column `{name}`), newest first, checked against
# the live row: the text is read from the table's own content table, which is quicker than
# through FTS5. Columns: time, rowid, text, memory key, thread, conversation key, role, folded,
# and for messages the snippet (cheap where the FTS5 cursor stands; the others are few, and
# get theirs once chosen: computing one for every match before sorting would not be).
_MESSAGES = """SELECT m.created_at AS at, f.rowid, c.c0, NULL, m.session_id,
  s.conversation_key, m.role, m.folded_by IS NOT NULL, {snippet}
FROM {table} f JOIN {table}_content c ON c.id = f.rowid
JOIN main.messages m ON m.id = c.id AND m.content = c.c0
LEFT JOIN main.sessions s ON s.id = m.session_id
WHERE {name} MATCH ? {where} ORDER BY f.rowid DESC"""
# A thread's summary dates from its latest compaction still standing.
_SUMMARIES = """SELECT coalesce((SELECT coalesce(r.finished_at, r.started_at) FROM main.runs r
    WHERE r.session_id = s.id AND r.trigger = 'compaction' AND r.status = 'ok'
    AND NOT EXISTS (SELECT 1 FROM main.compactions k
      WHERE k.run_id = r.id AND k.undone_at IS NOT NULL)
    ORDER BY r.id DESC LIMIT 1), s.updated_at) AS at,
  f.rowid, c.c0, NULL, s.id, s.conversation_key, NULL, 0, NULL
FROM {table} f JOIN {table}_content c ON c.id = f.rowid
JOIN main.sessions s ON s.id = c.id >> 2 AND s.summary = c.c0
WHERE {name} MATCH ? AND f.rowid & 3 = 1 {where}
ORDER BY at DESC, f.rowid DESC"""
# The summaries compactions kept, but the one the thread replays now (shown as its summary)
# and those undone (`thread undo`: no longer part of the thread, as `transcript --full` says).
_KEPT_SUMMARIES = """SELECT coalesce(r.finished_at, r.started_at, '') AS at, f.rowid, c.c0,
  NULL, k.session_id, s.conversation_key, NULL, 1, NULL
FROM {table} f JOIN {table}_content c ON c.id = f.rowid
JOIN main.compactions k ON k.run_id = c.id >> 2 AND k.summary = c.c0
LEFT JOIN main.runs r ON r.id = k.run_id LEFT JOIN main.sessions s ON s.id = k.session_id
WHERE {name} MATCH ? AND f.rowid & 3 = 2 AND s.summary IS NOT k.summary
  AND k.undone_at IS NULL {where}
ORDER BY at DESC, f.rowid DESC"""
_MEMORIES = """SELECT m.updated_at AS at, f.rowid, c.c0, c.c1, NULL, NULL, NULL, 0, NULL
FROM {table} f JOIN {table}_content c ON c.id = f.rowid
JOIN main.memories m ON m.rowid = c.id >> 2 AND m.value = c.c0 AND m.key = c.c1
WHERE {name} MATCH ? AND f.rowid & 3 = 3 {where}
ORDER BY at DESC, f.rowid DESC"""


@dataclass(frozen=True)
class _Stream:
    kind: str
    sql: str
    table: str  # index.MESSAGES or index.TEXTS
    key_column: str
    time_column: str
    role_column: str | None = None


_STREAMS = {
    "messages": (
        _Stream(
            "message",
            _MESSAGES,
            index.MESSAGES,
            "s.conversation_key",
            "m.created_at",
            "m.role",
        ),
    ),
    "summaries": (
        _Stream("summary", _SUMMARIES, index.TEXTS, "s.conversation_key", "at"),
        _Stream("summary", _KEPT_SUMMARIES, index.TEXTS, "s.conversation_key", "at"),
    ),
    "memories": (_Stream("memory", _MEMORIES, index.TEXTS, "m.key", "m.updated_at"),),
}


def _hits(
    conn: sqlite3.Connection, stream: _Stream, table: str, query: Query, request: SearchRequest
) -> Iterator[Hit]:
    where = Filters()
    if request.key_glob is not None:
        where = where.add(f"{stream.key_column} GLOB ?", request.key_glob)
    if request.since is not None:
        where = where.add(f"{stream.time_column} >= ?", request.since)
    if request.role is not None:
        where = where.add(f"{stream.role_column} = ?", request.role)
    name = table.rpartition(".")[2]
    sql = stream.sql.format(
        table=table,
        name=name,
        snippet=f"snippet({name}, -1, ?, ?, '…', ?)",
        where="".join(f" AND {c}" for c in where.clauses),
    )
    marks = (MARK_START, MARK_END, SNIPPET_TOKENS) if "{snippet}" in stream.sql else ()
    for at, rowid, text, key, thread_id, conversation, role, folded, snippet in conn.execute(
        sql, (*marks, query.expression, *where.params)
    ):
        if not holds_literally(query, text, key):
            continue
        yield Hit(
            at or "",
            stream.kind,
            table,
            rowid,
            text,
            key,
            thread_id,
            conversation,
            role,
            bool(folded),
            snippet,
        )


def _snippet(conn: sqlite3.Connection, hit: Hit, query: Query) -> str:
    if hit.snippet is not None:
        return hit.snippet
    name = hit.table.rpartition(".")[2]
    row = conn.execute(
        f"SELECT snippet({name}, -1, ?, ?, '…', ?) FROM {hit.table}"
        f" WHERE {name} MATCH ? AND rowid = ?",
        (MARK_START, MARK_END, SNIPPET_TOKENS, query.expression, hit.rowid),
    ).fetchone()
    return row[0] if row else ""


def find(
    conn: sqlite3.Connection, query: Query, request: SearchRequest, found: index.Pending
) -> list[dict]:
    """The results of `query`, newest first (at most `request.limit` + 1, so the caller
    knows whether there were more), in the snapshot `found` was read in."""
    index.index_lacking(conn, found)
    tables = {  # where each index table's documents are: the index, and what it lacks
        name: ([f"main.{name}"] if found.indexed else []) + [f"temp.{delta}"]
        for name, delta in index.DELTA.items()
    }
    streams = [
        _hits(conn, stream, table, query, request)
        for kind in request.kinds
        for stream in _STREAMS[kind]
        if request.role is None or stream.role_column is not None
        for table in tables[stream.table]
    ]
    merged = heapq.merge(*streams, key=lambda h: h.at, reverse=True)
    kept = list(itertools.islice(merged, None if request.limit is None else request.limit + 1))
    return [hit.row(_snippet(conn, hit, query)) for hit in kept]


def check_expression(expression: str) -> None:
    """Refuse (exit 2) an FTS5 expression SQLite cannot read, before the volume is opened."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(f"CREATE VIRTUAL TABLE probe USING {SEARCH_FTS5}")
        conn.execute("SELECT count(*) FROM probe WHERE probe MATCH ?", (expression,)).fetchone()
    except sqlite3.OperationalError as exc:
        raise UnusableInput(
            f"not a query SQLite's FTS5 accepts: {exc}",
            "see https://sqlite.org/fts5.html#full_text_query_syntax, or leave out --fts to"
            " match the words literally",
        ) from None
    finally:
        conn.close()


def _refresh(
    path: Path,
    busy_timeout: float,
    found: index.Pending,
    say: Callable,
    progress: index.Progress | None,
) -> None:
    if found.count >= ANNOUNCE_AT:
        say(f"indexing {found.count:,} texts for search (later searches add only what is new)")
    try:
        with open_for_write(path, busy_timeout=busy_timeout, lock=False) as volume:
            index.refresh(volume, found, progress)
    except Damaged:
        raise
    except (SchemaMismatch, Busy, UnusableInput, ProblemsFound) as exc:
        say(f"searching without updating the index: {exc.format_message()}")


def search(
    argument: str | Path | None,
    request: SearchRequest,
    *,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    write_index: bool = True,
    say: Callable[[str], None] = lambda message: None,
    progress: index.Progress | None = None,
) -> list[dict]:
    """Search a volume (SPEC section 11). With `write_index`, a search that finds the index
    missing, lacking much or holding deleted text refreshes it first; either way the results
    are those of one snapshot of the volume. `progress(done, total)`: how far a first build
    of the index is."""
    query = parse_query(request.query, request.fts)
    check_expression(query.expression)
    with Volume(argument, readonly=True, busy_timeout=busy_timeout) as volume:
        try:
            with volume.snapshot() as conn:
                found = index.pending(conn)
                if not (write_index and found.wants_refresh()):
                    return find(conn, query, request, found)
            _refresh(volume.path, busy_timeout, found, say, progress)
            with volume.snapshot() as conn:
                return find(conn, query, request, index.pending(conn))
        except Damaged:
            with volume.snapshot() as conn:  # Damaged again: the volume's own rows are
                rows = find(conn, query, request, index.pending(conn, use_index=False))
    say("the search index is damaged: searched without it")
    if write_index:
        _drop_damaged(volume.path, busy_timeout, say)
    return rows


def _drop_damaged(path: Path, busy_timeout: float, say: Callable) -> None:
    """Drop a damaged index (FTS5 finds it malformed) so that the next search builds it again:
    it is volumetool's own copy of text the volume holds intact."""
    try:
        with (
            open_for_write(path, busy_timeout=busy_timeout, lock=False) as volume,
            volume.write() as conn,
        ):
            index.drop(conn)
    except (SchemaMismatch, Busy, UnusableInput, ProblemsFound) as exc:
        say(f"the damaged index stays: {exc.format_message()}")
    else:
        say("dropped the damaged index; the next search builds it again")

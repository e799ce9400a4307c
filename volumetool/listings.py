"""Reading a volume for people and scripts: /status totals and the session, transcript, run and
audit listings. Every query here reads through an index; listings are newest first and stop at
their limit, so they cost the same on a small file and a large one.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from volumetool.errors import ProblemsFound
from volumetool.render import listing_limit
from volumetool.text import json_value
from volumetool.threads import active_thread
from volumetool.usage import total_sql
from volumetool.volume import Volume, reading

if TYPE_CHECKING:
    from volumetool.settings import MemorySettings

SESSION_FIELDS = (
    "id",
    "conversation_key",
    "channel",
    "status",
    "turns",
    "messages",
    "has_summary",
    "last_input_tokens",
    "compactions",
    "created_at",
    "updated_at",
    "held",  # last: scripts cut the columns before it by position
)
RUN_FIELDS = (
    "id",
    "session_id",
    "conversation_key",
    "trigger",
    "model",
    "status",
    "input_tokens",
    "output_tokens",
    "last_input_tokens",
    "error",
    "started_at",
    "finished_at",
)
AUDIT_FIELDS = (
    "id",
    "ts",
    "event",
    "detail",
    "session_id",
    "conversation_key",
    "run_id",
    "actor",
)
TRANSCRIPT_FIELDS = (
    "id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "created_at",
    "folded_by",
)


@dataclass(frozen=True)
class Filters:
    """The WHERE clause of a listing, built from the options that were given."""

    clauses: tuple[str, ...] = ()
    params: tuple[object, ...] = ()

    def add(self, clause: str, *params: object) -> Filters:
        return Filters((*self.clauses, clause), (*self.params, *params))

    @classmethod
    def of(cls, *given: tuple[str, object]) -> Filters:
        """The clauses whose value was given (not None, not empty), each with its value for
        every `?` it holds."""
        where = cls()
        for clause, value in given:
            if value is not None and value != "":
                where = where.add(clause, *[value] * clause.count("?"))
        return where

    def sql(self) -> str:
        return ("WHERE " + " AND ".join(self.clauses)) if self.clauses else ""


# What the compactions of threads prune and erase deleted had saved: their events keep it
# (volumetool's own events only; the agent's are not its word).
# CASE, not AND: SQLite does not promise to test json_valid before json_extract, which fails
# on a detail that is not JSON.
PRUNED_SAVINGS = f"""SELECT {total_sql("saved", signed=True)} FROM (SELECT CASE WHEN
   json_valid(detail) THEN CASE WHEN json_extract(detail, '$.action') IN ('prune', 'erase')
   THEN json_extract(detail, '$.compaction_saved') END END AS saved FROM audit
 WHERE event IN ('thread', 'erase') AND actor = 'volumetool')"""


@contextlib.contextmanager
def listed(
    volume: str, busy_timeout: float, listing: Callable[..., Iterator[dict]], **filters
) -> Iterator[Iterator[dict]]:
    """The rows of `listing(conn, **filters)` of one volume, read in one snapshot held while
    the block runs (`volume.reading`), so that they stream out consistent however many there
    are: what every listing command reads with."""
    with reading(volume, busy_timeout) as conn:
        yield listing(conn, **filters)


def status_of(
    volume: str, busy_timeout: float, memory: MemorySettings | None = None
) -> tuple[dict, bool]:
    """The /status totals of one volume, opened read-only (with `due`, the threads `compact`
    would find due under `memory`, when given), and whether the gate let it through with
    objects the format does not define (untrusted)."""
    with Volume(volume, readonly=True, busy_timeout=busy_timeout) as vol:
        return status(vol, memory), bool(vol.differences)


def count_due(conn: sqlite3.Connection, memory: MemorySettings) -> int:
    """How many active threads `compact` would find due under these settings."""
    from volumetool.compaction.store import active_threads, thread_due

    if not memory.compaction_enabled:
        return 0
    candidates = active_threads(conn, threshold=memory.compact_at_tokens)
    return sum(thread_due(conn, thread_id, memory).is_due for thread_id, _ in candidates)


def status(volume: Volume, memory: MemorySettings | None = None) -> dict:
    """The /status totals of a volume (the JSON fields of SPEC section 4), read in one
    snapshot; with `memory`, `due` last: how many threads `compact` would find due."""
    from volumetool.compaction.store import held_sql

    with volume.snapshot() as conn:
        due = None if memory is None else count_due(conn, memory)

        def scalar(sql: str) -> object:
            row = conn.execute(sql).fetchone()
            return row[0] if row else None

        sessions = dict(conn.execute("SELECT status, count(*) FROM sessions GROUP BY status"))
        total_messages = scalar("SELECT count(*) FROM messages")
        live = scalar("SELECT count(*) FROM messages WHERE folded_by IS NULL")
        by_trigger = dict(
            conn.execute("SELECT trigger, count(*) FROM runs GROUP BY trigger ORDER BY trigger")
        )
        errors = scalar("SELECT count(*) FROM runs WHERE status = 'error'")
        compaction = "trigger = 'compaction'"
        tokens = conn.execute(
            f"SELECT {total_sql('input_tokens')}, {total_sql('output_tokens')},"
            f" {total_sql('input_tokens', compaction)}, {total_sql('output_tokens', compaction)}"
            " FROM runs"
        ).fetchone()
        saved = scalar(
            f"SELECT {total_sql('saved_tokens', signed=True)} FROM compactions"
            " WHERE undone_at IS NULL"
        ) + scalar(PRUNED_SAVINGS)
        by_event = dict(
            conn.execute("SELECT event, count(*) FROM audit GROUP BY event ORDER BY event")
        )
        stamps = [
            scalar("SELECT max(updated_at) FROM sessions"),
            scalar("SELECT created_at FROM messages ORDER BY id DESC LIMIT 1"),
            scalar("SELECT coalesce(finished_at, started_at) FROM runs ORDER BY id DESC LIMIT 1"),
            scalar("SELECT ts FROM audit ORDER BY id DESC LIMIT 1"),
            scalar("SELECT max(updated_at) FROM memories"),
        ]
        held = scalar(
            "SELECT count(*) FROM sessions s WHERE s.status = 'active' AND s.id IN"
            " (SELECT session_id FROM compactions WHERE undone_at IS NOT NULL) AND "
            + held_sql("s.id")
        )
        memories = scalar("SELECT count(*) FROM memories")
        name = scalar("SELECT value FROM identity WHERE key = 'name'")
    totals = {
        "agent": name,
        "path": str(volume.path),
        "file_bytes": os.path.getsize(volume.path),
        "schema": {
            "version": volume.schema.version,
            "pending": volume.schema.pending,
            "newer": volume.schema.newer,
        },
        "sessions": {
            "active": sessions.get("active", 0),
            "archived": sessions.get("archived", 0),
            "held": held,  # active threads held after `thread undo` (SPEC 13)
        },
        "messages": {"live": live, "folded": total_messages - live},
        "runs": {"total": sum(by_trigger.values()), "errors": errors, "by_trigger": by_trigger},
        "tokens": {
            "input": tokens[0] or 0,
            "output": tokens[1] or 0,
            "compaction_input": tokens[2] or 0,
            "compaction_output": tokens[3] or 0,
            "compaction_saved": saved,
        },
        "memories": memories,
        "audit": {"total": sum(by_event.values()), "by_event": by_event},
        "last_activity": max((str(s) for s in stamps if s), default=None),
    }
    if due is not None:
        totals["due"] = due
    return totals


def sessions(
    conn: sqlite3.Connection,
    *,
    key_glob: str | None = None,
    channel: str | None = None,
    status: str = "active",
    since: str | None = None,
    limit: int | None = None,
    ids: Sequence[int] | None = None,
    updated_before: str | None = None,
    due: MemorySettings | None = None,
) -> Iterator[dict]:
    """Threads, most recently updated first, with their live size and compaction count, and
    whether compaction holds off after `thread undo`; `ids` lists only those threads,
    `updated_before` only those last updated before then (what prune deletes). With `due`
    (`sessions --due`), a last column `due`: would `compact` under these settings fold it?"""
    from volumetool.compaction.store import held_sql, thread_due

    where = Filters.of(
        ("s.status = ?", None if status == "all" else status),
        ("s.conversation_key GLOB ?", key_glob),
        ("s.channel = ?", channel),
        ("s.updated_at >= ?", since),
        ("s.updated_at < ?", updated_before),
    )
    if ids is not None:
        where = where.add(f"s.id IN ({', '.join('?' * len(ids))})", *ids)
    cursor = conn.execute(
        f"""SELECT s.id, s.conversation_key, s.channel, s.status,
  (SELECT count(*) FROM messages m
     WHERE m.session_id = s.id AND m.folded_by IS NULL AND m.role = 'user') AS turns,
  (SELECT count(*) FROM messages m WHERE m.session_id = s.id AND m.folded_by IS NULL),
  s.summary IS NOT NULL,
  (SELECT r.last_input_tokens FROM runs r
     WHERE r.session_id = s.id AND r.trigger != 'compaction' ORDER BY r.id DESC LIMIT 1),
  (SELECT count(*) FROM runs r
     WHERE r.session_id = s.id AND r.trigger = 'compaction' AND r.status = 'ok'
       AND NOT EXISTS (SELECT 1 FROM compactions c
                       WHERE c.run_id = r.id AND c.undone_at IS NOT NULL)),
  s.created_at, s.updated_at, s.status = 'active' AND {held_sql("s.id")}
FROM sessions s {where.sql()}
ORDER BY s.updated_at DESC, s.id DESC LIMIT ?""",
        (*where.params, listing_limit(limit)),
    )
    for row in cursor:
        record = dict(zip(SESSION_FIELDS, row, strict=True))
        record["has_summary"] = bool(record["has_summary"])
        record["held"] = bool(record["held"])
        if due is not None:
            active = record["status"] == "active"
            record["due"] = thread_due(conn, record["id"], due, active=active).is_due
        yield record


def find_thread(conn: sqlite3.Connection, key: str, session_id: int | None = None) -> dict:
    """The active thread under `key`, or the thread `session_id` (which must carry `key`)."""
    if session_id is None:
        session_id = active_thread(conn, key)[0]
    row = conn.execute(
        "SELECT id, status, summary FROM sessions WHERE id = ? AND conversation_key = ?",
        (session_id, key),
    ).fetchone()
    if row is None:
        raise ProblemsFound(f"no thread {session_id} under key {key!r}")
    return {"id": row[0], "status": row[1], "summary": row[2]}


def _summary_row(text: str | None, created_at: str | None, replaced_by: int | None) -> dict:
    return dict.fromkeys(TRANSCRIPT_FIELDS) | {
        "role": "summary",
        "content": text,
        "created_at": created_at,
        "folded_by": replaced_by,
    }


def summary_history(conn: sqlite3.Connection, thread: dict) -> list[tuple[int, dict]]:
    """(after message id, summary row) for each standing compaction of the thread, oldest
    first: the summary it wrote (None when unknown: written before volumetool kept them, or by
    the agent), placed after the last message it folded, and replaced by the next one."""
    standing = conn.execute(
        "SELECT r.id, r.finished_at, c.summary,"
        " (SELECT max(m.id) FROM messages m WHERE m.folded_by = r.id)"
        " FROM runs r LEFT JOIN compactions c ON c.run_id = r.id"
        " WHERE r.session_id = ? AND r.trigger = 'compaction' AND r.status = 'ok'"
        " AND c.undone_at IS NULL ORDER BY r.id",
        (thread["id"],),
    ).fetchall()
    history = []
    after = 0
    for n, (_, finished, text, last_folded) in enumerate(standing):
        latest = n == len(standing) - 1
        replaced_by = None if latest else standing[n + 1][0]
        if latest:
            text = thread["summary"]  # what replays now, whoever wrote it
        after = last_folded or after
        history.append((after, _summary_row(text, finished, replaced_by)))
    return history


def transcript(
    conn: sqlite3.Connection, key: str, session_id: int | None = None, full: bool = False
) -> Iterator[dict]:
    """The replayed transcript: the summary (a row with role `summary`), then the live
    messages in id order. `full` is the thread's whole history in order: each stretch of
    folded messages (they carry `folded_by`) followed by the summary that replaced it, whose
    own `folded_by` names the compaction that replaced it in turn; the last, current summary
    comes just before the live messages it precedes in the replay."""
    thread = find_thread(conn, key, session_id)
    history = summary_history(conn, thread) if full else []
    if not history and thread["summary"] is not None:
        yield _summary_row(thread["summary"], None, None)
    live_only = "" if full else "AND folded_by IS NULL"
    cursor = conn.execute(
        f"SELECT {', '.join(TRANSCRIPT_FIELDS)} FROM messages"
        f" WHERE session_id = ? {live_only} ORDER BY id",
        (thread["id"],),
    )
    pending = iter(history)
    upcoming = next(pending, None)
    for row in cursor:
        while upcoming is not None and upcoming[0] < row[0]:
            yield upcoming[1]
            upcoming = next(pending, None)
        record = dict(zip(TRANSCRIPT_FIELDS, row, strict=True))
        record["tool_calls"] = json_value(record["tool_calls"])
        yield record
    while upcoming is not None:
        yield upcoming[1]
        upcoming = next(pending, None)


# Runs and audit events belong to a thread through session_id; t is the listed table.
OF_THREAD_KEY = "t.session_id IN (SELECT id FROM sessions WHERE conversation_key = ?)"


def _newest_first(
    conn: sqlite3.Connection,
    table: str,
    fields: tuple[str, ...],
    where: Filters,
    limit: int | None,
) -> Iterator[dict]:
    """Rows of `table` (as t) with their thread's conversation key, newest (highest id) first,
    read backwards through an index and stopped at the limit."""
    columns = ", ".join(
        "s.conversation_key" if field == "conversation_key" else f"t.{field}" for field in fields
    )
    cursor = conn.execute(
        f"SELECT {columns} FROM {table} t LEFT JOIN sessions s ON s.id = t.session_id"
        f" {where.sql()} ORDER BY t.id DESC LIMIT ?",
        (*where.params, listing_limit(limit)),
    )
    for row in cursor:
        yield dict(zip(fields, row, strict=True))


def runs(
    conn: sqlite3.Connection,
    *,
    key: str | None = None,
    trigger: str | None = None,
    status: str | None = None,
    since: str | None = None,
    limit: int | None = None,
) -> Iterator[dict]:
    """Runs, newest first, with their thread's conversation key."""
    where = Filters.of(
        (OF_THREAD_KEY, key),
        ("t.trigger = ?", trigger),
        ("t.status = ?", status),
        ("t.started_at >= ?", since),
    )
    return _newest_first(conn, "runs", RUN_FIELDS, where, limit)


def audit(
    conn: sqlite3.Connection,
    *,
    event: str | None = None,
    action: str | None = None,
    key: str | None = None,
    since: str | None = None,
    limit: int | None = None,
) -> Iterator[dict]:
    """Audit events, newest first. `key` matches the thread's conversation key or the memory
    key an event names; `action` matches the detail's action."""
    detail_field = "(CASE WHEN json_valid(t.detail) THEN json_extract(t.detail, '$.{}') END)"
    where = Filters.of(
        ("t.event = ?", event),
        (f"{detail_field.format('action')} = ?", action),
        (f"({OF_THREAD_KEY} OR {detail_field.format('key')} = ?)", key),
        ("t.ts >= ?", since),
    )
    for record in _newest_first(conn, "audit", AUDIT_FIELDS, where, limit):
        record["detail"] = json_value(record["detail"])
        yield record

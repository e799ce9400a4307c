"""/new and /reset from the shell: ending a conversation, as the agent's own commands do."""

from __future__ import annotations

import sqlite3

from volumetool import audit
from volumetool.errors import ProblemsFound
from volumetool.timefmt import now_iso


def find_active(conn: sqlite3.Connection, key: str) -> tuple[int, str] | None:
    """The active thread under `key` as (id, channel), or None: the one lookup every command
    that names a thread by its key goes through (at most one, by the partial unique index)."""
    return conn.execute(
        "SELECT id, channel FROM sessions WHERE conversation_key = ? AND status = 'active'",
        (key,),
    ).fetchone()


def no_active_thread(conn: sqlite3.Connection, key: str) -> ProblemsFound:
    """Exit 1 for a key with no active thread, naming its archived threads if it has any."""
    archived = [
        str(r[0])
        for r in conn.execute(
            "SELECT id FROM sessions WHERE conversation_key = ? ORDER BY id", (key,)
        )
    ]
    hint = (
        f"archived threads: {', '.join(archived)}; pick one with --session ID"
        if archived
        else "list threads with `volumetool sessions --status all`"
    )
    return ProblemsFound(f"no active thread under key {key!r}", hint)


def active_thread(conn: sqlite3.Connection, key: str) -> tuple[int, str]:
    """The active thread under `key`: (id, channel); ProblemsFound when there is none."""
    row = find_active(conn, key)
    if row is None:
        raise no_active_thread(conn, key)
    return row


def new_thread(conn: sqlite3.Connection, key: str) -> tuple[int, int]:
    """/new: archive the active thread under `key` (its transcript stays in the file) and start
    an empty one under the same key. Returns (archived id, new id). Call in a write txn."""
    old, channel = active_thread(conn, key)
    ts = now_iso()
    conn.execute(
        "UPDATE sessions SET status = 'archived', archived_at = ?, updated_at = ? WHERE id = ?",
        (ts, ts, old),
    )
    new = conn.execute(
        "INSERT INTO sessions (conversation_key, channel, status, summary, created_at,"
        " updated_at, archived_at) VALUES (?, ?, 'active', NULL, ?, ?, NULL)",
        (key, channel, ts, ts),
    ).lastrowid
    audit.record(
        conn,
        "thread",
        {"action": "new", "key": key, "archived_session_id": old, "session_id": new},
        session_id=new,
        ts=ts,
    )
    return old, new


def count_messages(conn: sqlite3.Connection, session_id: int) -> int:
    return conn.execute(
        "SELECT count(*) FROM messages WHERE session_id = ?", (session_id,)
    ).fetchone()[0]


def reset_thread(conn: sqlite3.Connection, key: str) -> tuple[int, int]:
    """/reset: delete the active thread's messages (live and folded) and its summary; runs and
    audit events stay. Returns (thread id, messages deleted). Call in a write txn."""
    thread_id, _ = active_thread(conn, key)
    ts = now_iso()
    deleted = conn.execute("DELETE FROM messages WHERE session_id = ?", (thread_id,)).rowcount
    conn.execute("UPDATE sessions SET summary = NULL, updated_at = ? WHERE id = ?", (ts, thread_id))
    audit.record(
        conn,
        "thread",
        {"action": "reset", "key": key, "messages_deleted": deleted},
        session_id=thread_id,
        ts=ts,
    )
    return thread_id, deleted

"""/new and /reset from the shell: ending a conversation, as the agent's own commands do."""

from __future__ import annotations

import json
import sqlite3

from volumetool.errors import ProblemsFound
from volumetool.timefmt import now_iso


def active_thread(conn: sqlite3.Connection, key: str) -> tuple[int, str]:
    """The active thread under `key`: (id, channel); ProblemsFound when there is none."""
    row = conn.execute(
        "SELECT id, channel FROM sessions WHERE conversation_key = ? AND status = 'active'",
        (key,),
    ).fetchone()
    if row is None:
        raise ProblemsFound(
            f"no active thread under key {key!r}",
            "list threads with `volumetool sessions --status all`",
        )
    return row


def _audit(conn: sqlite3.Connection, session_id: int, detail: dict, ts: str) -> None:
    conn.execute(
        "INSERT INTO audit (ts, event, detail, session_id, run_id, actor)"
        " VALUES (?, 'thread', ?, ?, NULL, 'volumetool')",
        (ts, json.dumps(detail, ensure_ascii=False), session_id),
    )


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
    _audit(
        conn, new, {"action": "new", "key": key, "archived_session_id": old, "session_id": new}, ts
    )
    return old, new


def count_messages(conn: sqlite3.Connection, session_id: int) -> int:
    return conn.execute(
        "SELECT count(*) FROM messages WHERE session_id = ?", (session_id,)
    ).fetchone()[0]


def reset_thread(conn: sqlite3.Connection, key: str) -> tuple[int, int]:
    """/reset: delete the active thread's messages (live and folded) and its summary; runs and
    audit events stay. Returns (thread id, messages deleted). Call in a write txn."""
    session, _ = active_thread(conn, key)
    ts = now_iso()
    deleted = conn.execute("DELETE FROM messages WHERE session_id = ?", (session,)).rowcount
    conn.execute("UPDATE sessions SET summary = NULL, updated_at = ? WHERE id = ?", (ts, session))
    _audit(conn, session, {"action": "reset", "key": key, "messages_deleted": deleted}, ts)
    return session, deleted

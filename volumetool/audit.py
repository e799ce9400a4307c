"""The audit trail's one writer: every event volumetool records goes through `record`."""

from __future__ import annotations

import json
import sqlite3

from volumetool.timefmt import now_iso

_INSERT = "INSERT INTO audit (ts, event, detail, session_id, run_id, actor)"


def record(
    conn: sqlite3.Connection,
    event: str,
    detail: dict,
    *,
    session_id: int | None = None,
    run_id: int | None = None,
    ts: str | None = None,
) -> int:
    """Append one audit event written by volumetool (actor 'volumetool'); returns its id.
    Call inside the write transaction whose change it records."""
    cursor = conn.execute(
        _INSERT + " VALUES (?, ?, ?, ?, ?, 'volumetool')",
        (ts or now_iso(), event, json.dumps(detail, ensure_ascii=False), session_id, run_id),
    )
    return cursor.lastrowid or 0


def amend(conn: sqlite3.Connection, event_id: int, detail: dict) -> None:
    """Write `detail` over that of volumetool's event `event_id`: only for an event that counts
    a change made in several transactions (a prune), each bringing it up to date."""
    conn.execute(
        "UPDATE audit SET detail = ? WHERE id = ? AND actor = 'volumetool'",
        (json.dumps(detail, ensure_ascii=False), event_id),
    )


def record_memory_events(
    conn: sqlite3.Connection, actions_sql: str, params: tuple, ts: str | None = None
) -> None:
    """One memory event ({"action", "key"}) per row that `actions_sql` selects as
    (action, key), in its order: how a bulk import audits every key in one statement."""
    conn.execute(
        _INSERT + " SELECT ?, 'memory', json_object('action', action, 'key', key), NULL, NULL,"
        f" 'volumetool' FROM ({actions_sql})",
        (ts or now_iso(), *params),
    )

"""The audit trail's one writer: every event volumetool records goes through `record`."""

from __future__ import annotations

import json
import sqlite3

from volumetool.timefmt import now_iso


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
        "INSERT INTO audit (ts, event, detail, session_id, run_id, actor)"
        " VALUES (?, ?, ?, ?, ?, 'volumetool')",
        (ts or now_iso(), event, json.dumps(detail, ensure_ascii=False), session_id, run_id),
    )
    return cursor.lastrowid or 0

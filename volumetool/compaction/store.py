"""Compaction's SQLite side: reading what the plan needs, and the three ways a compaction ends
in the file — committed, failed, conflicted — each one transaction, each writing exactly what
SPEC section 6 says and nothing else."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from volumetool.compaction.plan import Due, Message, RunFact, check_due
from volumetool.model_client import Usage
from volumetool.settings import MemorySettings


@dataclass(frozen=True)
class Thread:
    """A thread as the plan saw it: the snapshot the commit re-checks against."""

    session_id: int
    conversation_key: str
    summary: str | None
    live: tuple[Message, ...]


def run_facts(conn: sqlite3.Connection, session_id: int) -> list[RunFact]:
    """The runs the trigger looks at: the latest successful compaction and the latest
    successful agent run (check_due needs no others)."""
    facts = []
    for condition in ("trigger = 'compaction'", "trigger != 'compaction'"):
        row = conn.execute(
            "SELECT id, trigger, status, last_input_tokens FROM runs"
            f" WHERE session_id = ? AND status = 'ok' AND {condition} ORDER BY id DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        if row:
            facts.append(RunFact(*row))
    return facts


def live_turns(conn: sqlite3.Connection, session_id: int) -> int:
    return conn.execute(
        "SELECT count(*) FROM messages WHERE session_id = ? AND folded_by IS NULL"
        " AND role = 'user'",
        (session_id,),
    ).fetchone()[0]


def thread_due(
    conn: sqlite3.Connection, session_id: int, settings: MemorySettings, active: bool = True
) -> Due:
    return check_due(settings, run_facts(conn, session_id), live_turns(conn, session_id), active)


def active_threads(
    conn: sqlite3.Connection, key: str | None = None, threshold: int | None = None
) -> list[tuple[int, str]]:
    """Active threads (id, key), optionally one key. With `threshold`, only threads whose latest
    successful agent run reached it: a necessary condition of check_due, checked in SQL so a
    cron pass over thousands of threads reads only the candidates."""
    sql = "SELECT s.id, s.conversation_key FROM sessions s WHERE s.status = 'active'"
    params: list[object] = []
    if key is not None:
        sql += " AND s.conversation_key = ?"
        params.append(key)
    if threshold is not None:
        sql += (
            " AND (SELECT r.last_input_tokens FROM runs r WHERE r.session_id = s.id"
            " AND r.status = 'ok' AND r.trigger != 'compaction'"
            " ORDER BY r.id DESC LIMIT 1) >= ?"
        )
        params.append(threshold)
    return list(conn.execute(sql + " ORDER BY s.id", params))


def load_thread(conn: sqlite3.Connection, session_id: int) -> Thread:
    key, summary = conn.execute(
        "SELECT conversation_key, summary FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    live = tuple(
        Message(*row)
        for row in conn.execute(
            "SELECT id, role, content, tool_calls, tool_call_id FROM messages"
            " WHERE session_id = ? AND folded_by IS NULL ORDER BY id",
            (session_id,),
        )
    )
    return Thread(session_id, key, summary, live)


def annotate_due(
    conn: sqlite3.Connection, rows: Iterable[dict], settings: MemorySettings
) -> Iterator[dict]:
    """sessions --due: each listed thread with a `due` column."""
    for row in rows:
        due = thread_due(conn, row["id"], settings, active=row["status"] == "active")
        yield {**row, "due": due.due}


# -- the three endings -----------------------------------------------------------------------


def _ids(messages: Iterable[Message]) -> str:
    return json.dumps([m.id for m in messages])


def conflict_reason(
    conn: sqlite3.Connection, thread: Thread, fold: tuple[Message, ...]
) -> str | None:
    """Why the thread can no longer take this summary, or None. Call under the write lock."""
    row = conn.execute(
        "SELECT status, summary FROM sessions WHERE id = ?", (thread.session_id,)
    ).fetchone()
    if row is None:
        return "the thread is gone"
    if row[0] != "active":
        return "the thread was archived (/new) while the summary was written"
    if row[1] != thread.summary:
        return "the thread's summary changed while the summary was written"
    still_live = conn.execute(
        "SELECT count(*) FROM messages WHERE session_id = ? AND folded_by IS NULL"
        " AND id IN (SELECT value FROM json_each(?))",
        (thread.session_id, _ids(fold)),
    ).fetchone()[0]
    if still_live != len(fold):
        return (
            f"{len(fold) - still_live} of the {len(fold)} messages to fold were folded or "
            "deleted meanwhile"
        )
    return None


def commit_summary(
    conn: sqlite3.Connection,
    thread: Thread,
    fold: tuple[Message, ...],
    summary: str,
    model: str,
    usage: Usage,
    started_at: str,
    finished_at: str,
) -> int:
    """The success transaction's writes: the compaction run, folded_by, the new summary.
    Returns the run id. The caller holds the write lock and has checked conflict_reason."""
    run_id = conn.execute(
        "INSERT INTO runs (session_id, trigger, model, status, input_tokens, output_tokens,"
        " last_input_tokens, error, started_at, finished_at)"
        " VALUES (?, 'compaction', ?, 'ok', ?, ?, ?, NULL, ?, ?)",
        (
            thread.session_id,
            model,
            usage.input_tokens,
            usage.output_tokens,
            usage.input_tokens,
            started_at,
            finished_at,
        ),
    ).lastrowid
    conn.execute(
        "UPDATE messages SET folded_by = ? WHERE id IN (SELECT value FROM json_each(?))",
        (run_id, _ids(fold)),
    )
    conn.execute("UPDATE sessions SET summary = ? WHERE id = ?", (summary, thread.session_id))
    return run_id


def record_failure(
    conn: sqlite3.Connection,
    thread: Thread,
    model: str,
    reason: str,
    usage: Usage,
    started_at: str,
    finished_at: str,
) -> int:
    """A failed summary: one error run (with any usage reported) and one audit event; the
    transcript is left exactly as it was."""
    run_id = conn.execute(
        "INSERT INTO runs (session_id, trigger, model, status, input_tokens, output_tokens,"
        " last_input_tokens, error, started_at, finished_at)"
        " VALUES (?, 'compaction', ?, 'error', ?, ?, ?, ?, ?, ?)",
        (
            thread.session_id,
            model,
            usage.input_tokens,
            usage.output_tokens,
            usage.input_tokens,
            reason,
            started_at,
            finished_at,
        ),
    ).lastrowid
    _audit(
        conn, thread, {"action": "failed", "reason": reason, "model": model}, finished_at, run_id
    )
    return run_id


def record_conflict(
    conn: sqlite3.Connection, thread: Thread, model: str, reason: str, usage: Usage, ts: str
) -> None:
    """A conflict writes nothing but its audit event (which keeps the spend visible)."""
    _audit(
        conn,
        thread,
        {
            "action": "conflict",
            "reason": reason,
            "model": model,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
        },
        ts,
        None,
    )


def _audit(
    conn: sqlite3.Connection, thread: Thread, detail: dict, ts: str, run_id: int | None
) -> None:
    conn.execute(
        "INSERT INTO audit (ts, event, detail, session_id, run_id, actor)"
        " VALUES (?, 'compaction', ?, ?, ?, 'volumetool')",
        (ts, json.dumps(detail, ensure_ascii=False), thread.session_id, run_id),
    )

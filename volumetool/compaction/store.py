"""Compaction's SQLite side: reading what the plan needs, and the three ways a compaction ends
in the file — committed, failed, conflicted — each one transaction, each writing exactly what
SPEC section 6 says and nothing else. This module is the one writer of compaction runs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from volumetool import audit
from volumetool.compaction.plan import Due, Message, RunFact, check_due
from volumetool.settings import MemorySettings
from volumetool.text import plural
from volumetool.threads import find_active
from volumetool.usage import Usage


@dataclass(frozen=True)
class Thread:
    """A thread as the plan saw it: the snapshot the commit re-checks against."""

    session_id: int
    conversation_key: str
    summary: str | None
    live: tuple[Message, ...]


@dataclass(frozen=True)
class ThreadFacts:
    """What the trigger and the back-off need to know of a thread's runs."""

    runs: tuple[RunFact, ...]
    live_turns: int
    failures: int  # failed compaction runs since the last successful one
    last_failure_at: datetime | None
    held: bool = False  # after `thread undo`, until a compaction stands again (SPEC 13)


def _moment(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


# A compaction that stands: successful and not undone (an undone one folded nothing it kept).
STANDING_COMPACTION = (
    "trigger = 'compaction' AND status = 'ok' AND NOT EXISTS (SELECT 1 FROM compactions c"
    " WHERE c.run_id = runs.id AND c.undone_at IS NOT NULL)"
)


def held_sql(session: str) -> str:
    """SQL that is true when the thread whose id is the SQL expression `session` is held after
    `thread undo` (SPEC 13): a compaction of it was undone, and none stands that is newer.
    Derived from the history alone: a compaction that stands after the undo releases it."""
    return (
        f"coalesce((SELECT max(u.run_id) FROM compactions u WHERE u.session_id = {session}"
        " AND u.undone_at IS NOT NULL), 0) > coalesce((SELECT max(runs.id) FROM runs"
        f" WHERE runs.session_id = {session} AND {STANDING_COMPACTION}), 0)"
    )


# How the error of every compaction run an interrupt recorded begins (compaction.run).
INTERRUPTED_BY_SIGNAL = "interrupted (Ctrl-C or SIGTERM)"


def thread_facts(conn: sqlite3.Connection, session_id: int) -> ThreadFacts:
    """The latest standing compaction, the latest successful agent run (check_due needs no
    others), the live turns, and the failed compactions since the last standing one."""
    runs = []
    for condition in (STANDING_COMPACTION, "trigger != 'compaction' AND status = 'ok'"):
        row = conn.execute(
            "SELECT id, trigger, status, last_input_tokens FROM runs"
            f" WHERE session_id = ? AND {condition} ORDER BY id DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        if row:
            runs.append(RunFact(*row))
    # Failures since the last successful compaction, undone or not: one that was undone still
    # succeeded, so those before it are no longer "the latest n" (SPEC 6).
    # `+trigger`: by the thread's runs (runs_by_session), never by every compaction run of the
    # file (runs_by_trigger also fits `trigger = … AND id > ?`, and a cron pass grew with it).
    # A run an interrupt recorded (Ctrl-C, `timeout`, a pod evicted) is no failure of the
    # endpoint: it stays a failed run with its cost, and the next pass does not back off for it.
    failures, last, held = conn.execute(
        "SELECT count(*), max(coalesce(finished_at, started_at)), "
        + held_sql("?1")
        + " FROM runs WHERE session_id = ?1 AND +trigger = 'compaction' AND status = 'error'"
        " AND substr(coalesce(error, ''), 1, length(?2)) != ?2"
        " AND id > coalesce((SELECT max(id) FROM runs WHERE session_id = ?1"
        " AND +trigger = 'compaction' AND status = 'ok'), 0)",
        (session_id, INTERRUPTED_BY_SIGNAL),
    ).fetchone()
    turns = conn.execute(
        "SELECT count(*) FROM messages WHERE session_id = ? AND folded_by IS NULL"
        " AND role = 'user'",
        (session_id,),
    ).fetchone()[0]
    return ThreadFacts(tuple(runs), turns, failures, _moment(last), bool(held))


def thread_due(
    conn: sqlite3.Connection, session_id: int, settings: MemorySettings, active: bool = True
) -> Due:
    facts = thread_facts(conn, session_id)
    return check_due(settings, facts.runs, facts.live_turns, active)


def active_threads(
    conn: sqlite3.Connection, key: str | None = None, threshold: int | None = None
) -> list[tuple[int, str]]:
    """Active threads (id, key), optionally one key. With `threshold`, only threads whose latest
    successful agent run reached it: a necessary condition of check_due, checked in SQL so a
    cron pass over thousands of threads reads only the candidates."""
    if key is not None:
        found = find_active(conn, key)
        return [(found[0], key)] if found else []
    sql = "SELECT s.id, s.conversation_key FROM sessions s WHERE s.status = 'active'"
    params: list[object] = []
    if threshold is not None:
        sql += (
            " AND (SELECT r.last_input_tokens FROM runs r WHERE r.session_id = s.id"
            " AND r.status = 'ok' AND r.trigger != 'compaction'"
            " ORDER BY r.id DESC LIMIT 1) >= ?"
        )
        params.append(threshold)
    return list(conn.execute(sql + " ORDER BY s.id", params))


MESSAGE_COLUMNS = "id, role, content, tool_calls, tool_call_id, created_at"


def load_thread(conn: sqlite3.Connection, session_id: int) -> Thread:
    key, summary = conn.execute(
        "SELECT conversation_key, summary FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    live = tuple(
        Message(*row)
        for row in conn.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages"
            " WHERE session_id = ? AND folded_by IS NULL ORDER BY id",
            (session_id,),
        )
    )
    return Thread(session_id, key, summary, live)


# -- the three endings -----------------------------------------------------------------------


def _ids(messages: Iterable[Message]) -> str:
    return json.dumps([m.id for m in messages])


def conflict_reason(
    conn: sqlite3.Connection, thread: Thread, fold: tuple[Message, ...]
) -> str | None:
    """Why the thread can no longer take this summary, or None. Call under the write lock.

    Every folded message must still be live in this thread with the very content the model
    saw: an id alone proves nothing, since after /reset SQLite may reuse a deleted row's id."""
    row = conn.execute(
        "SELECT status, summary FROM sessions WHERE id = ?", (thread.session_id,)
    ).fetchone()
    if row is None:
        return "the thread is gone"
    if row[0] != "active":
        return "the thread was archived (/new) while the summary was written"
    if row[1] != thread.summary:
        return "the thread's summary changed while the summary was written"
    current = {
        r[0]: Message(*r)
        for r in conn.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND folded_by IS NULL"
            " AND id IN (SELECT value FROM json_each(?))",
            (thread.session_id, _ids(fold)),
        )
    }
    gone = sum(1 for m in fold if m.id not in current)
    if gone:
        return (
            f"{gone} of the {plural(len(fold), 'message')} to fold {_were(gone)} folded or"
            " deleted meanwhile"
        )
    changed = sum(1 for m in fold if current[m.id].identity() != m.identity())
    if changed:
        return (
            f"{changed} of the {plural(len(fold), 'message')} to fold {_were(changed)} replaced"
            " meanwhile "
            "(the thread was reset and written again)"
        )
    # The live messages up to the fold's last must be those the plan saw: one that came back
    # meanwhile (`thread undo` of the compaction before, even one that put back the same
    # summary text) would then sit after a summary of messages that follow it.
    # (Those are all still live, the fold checked above and the prefix never folds, so a
    # count tells: only a reset deletes a message, and a reset changes the fold.)
    last = fold[-1].id
    planned = sum(1 for m in thread.live if m.id <= last)
    (live,) = conn.execute(
        "SELECT count(*) FROM messages WHERE session_id = ? AND folded_by IS NULL AND id <= ?",
        (thread.session_id, last),
    ).fetchone()
    if live != planned:
        return (
            f"{plural(live - planned, 'earlier message')} became live again meanwhile (a "
            "compaction was undone): folding now would put them out of order"
        )
    return None


@dataclass(frozen=True)
class RunTimes:
    started_at: str
    finished_at: str


def insert_run(
    conn: sqlite3.Connection,
    session_id: int,
    model: str,
    usage: Usage,
    times: RunTimes,
    error: str | None = None,
) -> int:
    """A compaction run: status ok without `error`, else error with it."""
    return conn.execute(
        "INSERT INTO runs (session_id, trigger, model, status, input_tokens, output_tokens,"
        " last_input_tokens, error, started_at, finished_at)"
        " VALUES (?, 'compaction', ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session_id,
            model,
            "ok" if error is None else "error",
            usage.input_tokens,
            usage.output_tokens,
            usage.last_input_tokens,
            error,
            times.started_at,
            times.finished_at,
        ),
    ).lastrowid


@dataclass(frozen=True)
class Written:
    """A summary as it is committed, with what the compaction is worth."""

    text: str
    saved_tokens: int
    retention: float | None = None
    missing_facts: tuple[str, ...] = ()
    invented_facts: tuple[str, ...] = ()
    tokens_per_estimate: float | None = None  # the server's input tokens per estimated one


LEARNED_FROM = 5  # the latest compactions with a model whose figures size its next requests
TOKEN_SCALE_RANGE = (0.25, 4.0)  # a figure outside is a server's mistake, not a tokenizer


def token_scale(conn: sqlite3.Connection, model: str | None) -> float | None:
    """The input tokens the model's server counted for each one volumetool estimated, in the
    latest `LEARNED_FROM` compactions with it that reported them: the largest (an estimate
    should err large), within `TOKEN_SCALE_RANGE`; None before any."""
    [(scale,)] = conn.execute(
        "SELECT max(tokens_per_estimate) FROM (SELECT c.tokens_per_estimate FROM compactions c"
        " JOIN runs r ON r.id = c.run_id WHERE r.model = ? AND c.tokens_per_estimate > 0"
        " ORDER BY c.run_id DESC LIMIT ?)",
        (model, LEARNED_FROM),
    ).fetchall()
    if not isinstance(scale, float | int):
        return None
    low, high = TOKEN_SCALE_RANGE
    return min(max(float(scale), low), high)


def commit_summary(
    conn: sqlite3.Connection,
    thread: Thread,
    fold: tuple[Message, ...],
    summary: Written,
    model: str,
    usage: Usage,
    times: RunTimes,
) -> int:
    """The success transaction's writes: the compaction run, folded_by, the new summary, the
    summary kept in the thread's history with the one it replaced, and its audit event.
    Returns the run id. The caller holds the write lock and has checked conflict_reason."""
    run_id = insert_run(conn, thread.session_id, model, usage, times)
    conn.execute(
        "UPDATE messages SET folded_by = ? WHERE id IN (SELECT value FROM json_each(?))",
        (run_id, _ids(fold)),
    )
    conn.execute("UPDATE sessions SET summary = ? WHERE id = ?", (summary.text, thread.session_id))
    missing = json.dumps(list(summary.missing_facts), ensure_ascii=False)
    # The summary it replaces (checked unchanged under this lock): what an undo restores.
    conn.execute(
        "INSERT INTO compactions (run_id, session_id, summary, saved_tokens, retention,"
        " missing_facts, replaced_summary, replaced_kept, invented_facts, tokens_per_estimate)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
        (
            run_id,
            thread.session_id,
            summary.text,
            summary.saved_tokens,
            summary.retention,
            missing,
            thread.summary,
            json.dumps(list(summary.invented_facts), ensure_ascii=False),
            summary.tokens_per_estimate,
        ),
    )
    audit.record(
        conn,
        "compaction",
        {
            "action": "compacted",
            "model": model,
            "folded_messages": len(fold),
            "saved_tokens": summary.saved_tokens,
            "retention": summary.retention,
            "missing_facts": list(summary.missing_facts),
            "invented_facts": list(summary.invented_facts),
        },
        session_id=thread.session_id,
        run_id=run_id,
        ts=times.finished_at,
    )
    return run_id


def record_failure(
    conn: sqlite3.Connection,
    thread: Thread,
    model: str,
    reason: str,
    usage: Usage,
    times: RunTimes,
    extra: dict | None = None,
    action: str = "failed",
) -> int:
    """A compaction that wrote no summary — failed, or conflicted with what the agent did
    meanwhile: one error run with whatever usage its calls reported (the spend stays visible)
    and one audit event; the transcript is left exactly as it was."""
    error = reason if action == "failed" else f"{action}: {reason}"
    run_id = insert_run(conn, thread.session_id, model, usage, times, error)
    detail = {"action": action, "reason": reason, "model": model, **(extra or {})}
    if action != "failed":
        detail |= {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    audit.record(
        conn,
        "compaction",
        detail,
        session_id=thread.session_id,
        run_id=run_id,
        ts=times.finished_at,
    )
    return run_id


def _were(count: int) -> str:
    return "was" if count == 1 else "were"

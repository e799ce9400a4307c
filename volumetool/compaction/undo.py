"""`thread undo`: reverse the latest standing compaction of a thread (SPEC section 10).

The messages it folded become live again — they never left the file, and their ids keep them
in their place among the messages the agent appended since — and the summary the thread had
before it comes back. The run stays (its cost was real); the compaction is marked undone, so
it no longer counts for the trigger and the thread is as due as it was before it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from volumetool import audit
from volumetool.errors import ProblemsFound
from volumetool.threads import active_thread
from volumetool.timefmt import now_iso

# The thread's standing compactions, newest first: (run id, summary kept, whether kept at all,
# the summary it replaced, whether that is kept: from m007 on).
_STANDING = """
SELECT r.id, c.summary, c.run_id IS NOT NULL, c.replaced_summary, coalesce(c.replaced_kept, 0)
FROM runs r
LEFT JOIN compactions c ON c.run_id = r.id
WHERE r.session_id = ? AND r.trigger = 'compaction' AND r.status = 'ok'
  AND c.undone_at IS NULL
ORDER BY r.id DESC LIMIT 2"""


@dataclass(frozen=True)
class UndoPlan:
    session_id: int
    run_id: int  # the compaction to reverse
    messages: int  # the messages it folded, live again after the undo
    restored_run_id: int | None  # the compaction before it, if any (None: none stands)
    restored_summary: str | None  # the summary that comes back (None: the thread had none)


def plan_undo(conn: sqlite3.Connection, key: str, confirmed: int | None = None) -> UndoPlan:
    """What `thread undo KEY` would do; ProblemsFound (exit 1) when it cannot, or when the
    latest compaction is no longer run `confirmed` (the one a person was asked about)."""
    session_id, _ = active_thread(conn, key)
    standing = conn.execute(_STANDING, (session_id,)).fetchall()
    if not standing:
        raise ProblemsFound(f"thread {session_id} ({key!r}) has no compaction to undo")
    (run_id, wrote, kept, replaced, replaced_kept) = standing[0]
    if confirmed is not None and run_id != confirmed:
        raise ProblemsFound(
            f"the latest compaction of thread {session_id} is now run {run_id}, not run "
            f"{confirmed} that was confirmed (it changed while you answered)",
            "nothing was changed; run thread undo again",
        )
    previous = standing[1] if len(standing) > 1 else None
    folded = conn.execute(
        "SELECT count(*) FROM messages WHERE folded_by = ?", (run_id,)
    ).fetchone()[0]
    if not folded:
        raise ProblemsFound(
            f"the messages compaction run {run_id} folded are gone (the thread was reset "
            "after it): there is nothing to bring back",
            "nothing was changed",
        )
    current = conn.execute("SELECT summary FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if kept and wrote is not None and current[0] != wrote:
        raise ProblemsFound(
            f"the summary of thread {session_id} changed after compaction run {run_id}; "
            "undoing it would lose that change",
        )
    if previous is not None and not _folded_any(conn, previous[0]):
        previous = None  # a compaction from before a /reset: its summary went with it
    restored_run_id = previous[0] if previous is not None else None
    if replaced_kept:  # whoever wrote it: the agent, or no compaction at all
        return UndoPlan(session_id, run_id, folded, restored_run_id, replaced)
    restored: str | None = None  # a compaction from before m007: its summary before is found
    if previous is not None:
        restored = previous[1]
        if restored is None:
            raise ProblemsFound(
                f"the summary before compaction run {run_id} is unknown (run {previous[0]} "
                "was written before volumetool kept summaries, or by the agent itself)",
                "nothing was changed",
            )
    return UndoPlan(session_id, run_id, folded, restored_run_id, restored)


def _folded_any(conn: sqlite3.Connection, run_id: int) -> bool:
    """Whether any message the compaction folded is still in the file: all of them go when the
    thread is reset (SPEC 7: /reset deletes the transcript outright), and nothing else deletes
    one from a thread that stays."""
    found = conn.execute("SELECT 1 FROM messages WHERE folded_by = ? LIMIT 1", (run_id,))
    return found.fetchone() is not None


def undo(conn: sqlite3.Connection, key: str, confirmed: int | None = None) -> UndoPlan:
    """Reverse the latest standing compaction of the active thread under `key`, with its
    audit event; with `confirmed`, only if that run is still the latest. Call inside one
    write transaction (BEGIN IMMEDIATE): the plan is made again under the lock, so whatever
    the agent or a compaction did meanwhile is seen."""
    plan = plan_undo(conn, key, confirmed)
    ts = now_iso()
    # A compaction the agent made itself has no row yet: its summary is the current one.
    conn.execute(
        "INSERT INTO compactions (run_id, session_id, summary, undone_at)"
        " SELECT ?, ?, summary, ? FROM sessions WHERE id = ?"
        " ON CONFLICT (run_id) DO UPDATE SET undone_at = excluded.undone_at",
        (plan.run_id, plan.session_id, ts, plan.session_id),
    )
    conn.execute("UPDATE messages SET folded_by = NULL WHERE folded_by = ?", (plan.run_id,))
    conn.execute(
        "UPDATE sessions SET summary = ? WHERE id = ?", (plan.restored_summary, plan.session_id)
    )
    audit.record(
        conn,
        "compaction",
        {
            "action": "undo",
            "key": key,
            "undone_run_id": plan.run_id,
            "restored_run_id": plan.restored_run_id,
            "messages": plan.messages,
        },
        session_id=plan.session_id,
        run_id=plan.run_id,
        ts=ts,
    )
    return plan

"""A simulated agent: appends turns, runs, memories and audit events to its volume at a high
rate, one transaction per turn as the runtime does, and reports what it committed.

    python -m tests.support.agent DB SECONDS KEY [KEY...]  ->  JSON on stdout

SIGTERM ends it early, after the turn in progress. AGENT_MEMORIES=0 leaves memories alone.

Each turn goes to the active thread under a random KEY, looked up at write time (so a /new
by volumetool sends later turns to the new thread). Every message carries a unique marker, so
the caller can check that each committed write is present exactly once, in order.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import threading
import time

BUSY_TIMEOUT = 5.0


def main() -> None:
    path, seconds, keys = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    memories = os.environ.get("AGENT_MEMORIES", "1") != "0"
    rng = random.Random(path)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
    committed: list[dict] = []
    locked = 0
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline and not stop.is_set():
        key = rng.choice(keys)
        marker = f"agent-live-{n}"
        ts = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        try:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(
                "SELECT id FROM sessions WHERE conversation_key = ? AND status = 'active'", (key,)
            ).fetchone()
            if row is None:
                conn.execute("ROLLBACK")
                continue
            session = row[0]
            ids = []
            for role in ("user", "assistant"):
                ids.append(
                    conn.execute(
                        "INSERT INTO messages (session_id, role, content, created_at)"
                        " VALUES (?, ?, ?, ?)",
                        (session, role, f"{marker} {role}", ts),
                    ).lastrowid
                )
            run = conn.execute(
                "INSERT INTO runs (session_id, trigger, model, status, input_tokens,"
                " output_tokens, last_input_tokens, started_at, finished_at)"
                # a context past the usual threshold: threads being compacted stay due
                " VALUES (?, 'agent-sim', 'gpt-4.1', 'ok', 61000, 10, 61000, ?, ?)",
                (session, ts, ts),
            ).lastrowid
            if memories:
                conn.execute(
                    "INSERT INTO memories VALUES (?, ?, ?, ?) ON CONFLICT (key) DO"
                    " UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                    (f"agent.memory.{n % 7}", marker, ts, ts),
                )
            conn.execute(
                "INSERT INTO audit (ts, event, detail, session_id, run_id, actor)"
                " VALUES (?, 'agent-sim', ?, ?, ?, 'agent')",
                (ts, json.dumps({"marker": marker}), session, run),
            )
            conn.execute("COMMIT")
            committed.append(
                {"marker": marker, "messages": ids, "run": run, "session": session, "key": key}
            )
        except sqlite3.OperationalError as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if "locked" in str(exc) or "busy" in str(exc):
                locked += 1
            else:
                raise
        n += 1
        time.sleep(0.002)
    conn.close()
    json.dump({"committed": committed, "locked": locked}, sys.stdout)


def verify(path: str, report: dict) -> list[str]:
    """What the agent committed and the file no longer holds exactly once, in order."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    problems = []
    rows = {
        content: (mid, session)
        for mid, content, session in conn.execute(
            "SELECT id, content, session_id FROM messages WHERE content LIKE 'agent-live-%'"
        )
    }
    count = conn.execute(
        "SELECT count(*) FROM messages WHERE content LIKE 'agent-live-%'"
    ).fetchone()[0]
    if count != len(rows):
        problems.append(f"{count - len(rows)} agent messages duplicated")
    last = 0
    for write in report["committed"]:
        for role, mid in zip(("user", "assistant"), write["messages"], strict=True):
            found = rows.get(f"{write['marker']} {role}")
            if found is None:
                problems.append(f"lost {write['marker']} {role}")
            elif found[0] != mid:
                problems.append(f"{write['marker']} {role} moved from id {mid} to {found[0]}")
            elif mid <= last:
                problems.append(f"{write['marker']} out of order")
            else:
                last = mid
        if not conn.execute(
            "SELECT 1 FROM runs WHERE id = ? AND trigger = 'agent-sim'", (write["run"],)
        ).fetchone():
            problems.append(f"lost run of {write['marker']}")
        if not conn.execute(
            "SELECT 1 FROM audit WHERE event = 'agent-sim' AND json_extract("
            "detail, '$.marker') = ?",
            (write["marker"],),
        ).fetchone():
            problems.append(f"lost audit event of {write['marker']}")
    conn.close()
    return problems


def assert_all_ran_beside_it(path: str, commands: list, results: list, report: dict) -> None:
    """Every command succeeded, the agent wrote all along, never met a lock, lost nothing."""
    for command, result in zip(commands, results, strict=True):
        assert result.returncode == 0, (command[0], result.stderr)
    assert len(report["committed"]) > 50
    assert report["locked"] == 0
    assert verify(path, report) == []


if __name__ == "__main__":
    main()

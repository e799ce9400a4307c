"""Building real agent files for tests, row by row, with a deterministic clock."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from volumetool.atomic import create_volume
from volumetool.compaction.undo import undo
from volumetool.timefmt import iso

START = datetime(2026, 11, 1, tzinfo=UTC)


@functools.cache
def _template(name: str) -> Path:
    """A new agent file named `name`, made once a process by `create_volume` (its migrations
    take some 20 ms, over a hundred times the copy): each VolumeWriter starts from a copy."""
    path = Path(tempfile.mkdtemp(prefix="volumetool-template-")) / "agent.db"
    create_volume(path, name)
    return path


def new_volume(path: Path, name: str) -> None:
    """What `create_volume(path, name)` writes, copied from the template."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template(name), path)


class VolumeWriter:
    """Writes an agent file the way the agent runtime would, one row at a time."""

    def __init__(self, path: Path, name: str = "test-agent") -> None:
        self.path = Path(path)
        if not self.path.exists():
            new_volume(self.path, name)
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.clock = START

    def tick(self, seconds: float = 1.0) -> str:
        self.clock += timedelta(seconds=seconds)
        return iso(self.clock)

    def close(self) -> None:
        self.conn.close()

    def insert(self, table: str, **values) -> int:
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        cursor = self.conn.execute(
            f"INSERT INTO {table} ({columns}) VALUES ({marks})", tuple(values.values())
        )
        return cursor.lastrowid

    def thread(
        self, key: str, channel: str = "discord", status: str = "active", summary: str | None = None
    ) -> int:
        ts = self.tick()
        return self.insert(
            "sessions",
            conversation_key=key,
            channel=channel,
            status=status,
            summary=summary,
            created_at=ts,
            updated_at=ts,
            archived_at=ts if status == "archived" else None,
        )

    def message(
        self,
        session: int,
        role: str,
        content: str,
        tool_calls: list | None = None,
        tool_call_id: str | None = None,
        folded_by: int | None = None,
    ) -> int:
        ts = self.tick()
        self.conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (ts, session))
        return self.insert(
            "messages",
            session_id=session,
            role=role,
            content=content,
            tool_calls=json.dumps(tool_calls) if tool_calls is not None else None,
            tool_call_id=tool_call_id,
            created_at=ts,
            folded_by=folded_by,
        )

    def turn(
        self, session: int, n: int, tool: bool = False, folded_by: int | None = None
    ) -> list[int]:
        ids = [self.message(session, "user", f"question {n}", folded_by=folded_by)]
        if tool:
            call = {
                "id": f"call-{session}-{n}",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
            }
            ids.append(
                self.message(session, "assistant", "", tool_calls=[call], folded_by=folded_by)
            )
            ids.append(
                self.message(
                    session, "tool", f"contents {n}", tool_call_id=call["id"], folded_by=folded_by
                )
            )
        ids.append(self.message(session, "assistant", f"answer {n}", folded_by=folded_by))
        return ids

    def run(
        self,
        session: int | None,
        trigger: str = "message",
        status: str = "ok",
        input_tokens: int | None = 1000,
        output_tokens: int | None = 100,
        last_input_tokens: int | None = 1000,
        model: str | None = "gpt-4.1",
        error: str | None = None,
    ) -> int:
        started = self.tick()
        return self.insert(
            "runs",
            session_id=session,
            trigger=trigger,
            model=model,
            status=status,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            last_input_tokens=last_input_tokens,
            error=error,
            started_at=started,
            finished_at=self.tick(),
        )

    def audit(
        self,
        event: str,
        detail: dict | str,
        session: int | None = None,
        run: int | None = None,
        actor: str = "agent",
    ) -> int:
        text = detail if isinstance(detail, str) else json.dumps(detail)
        return self.insert(
            "audit",
            ts=self.tick(),
            event=event,
            detail=text,
            session_id=session,
            run_id=run,
            actor=actor,
        )

    def memory(self, key: str, value: str) -> None:
        ts = self.tick()
        self.insert("memories", key=key, value=value, created_at=ts, updated_at=ts)


def due_thread(
    w: VolumeWriter, key: str, turns: int = 5, tokens: int | None = 60_000, prefix: bool = True
) -> int:
    """A thread past the compaction threshold: a system prefix, `turns` turns (every other one
    with a tool call and its result), and an agent run that reported `tokens`."""
    s = w.thread(key)
    if prefix:
        w.message(s, "system", "Channel context: #ops. Keep replies brief.")
    for n in range(turns):
        w.message(s, "user", f"Question {n}: please look at deploy/values.yaml for service {n}.")
        if n % 2 == 0:
            call = {
                "id": f"call-{s}-{n}",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "values.yaml"}'},
            }
            w.message(s, "assistant", "", tool_calls=[call])
            w.message(
                s,
                "tool",
                f"pool_size = {n}\nlog_level = debug\nregion = eu",
                tool_call_id=call["id"],
            )
        w.message(
            s,
            "assistant",
            f"Answer {n}: the pool size is {n} and logging is at debug. The service reads "
            "deploy/values.yaml at start-up; nothing else differs from staging, and the "
            "rollout can go ahead once the on-call engineer has signed it off.",
        )
    w.run(s, input_tokens=tokens, output_tokens=300, last_input_tokens=tokens)
    return s


def undo_in(path: Path, key: str, confirmed: int | None = None):
    """`thread undo KEY --yes` as the command runs it: one BEGIN IMMEDIATE transaction (with
    `confirmed`, as it runs once a person answered yes about that run)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            plan = undo(conn, key, confirmed)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return plan
    finally:
        conn.close()


def rows(path, sql, *params) -> list[tuple]:
    """The rows `sql` reads from the file at `path`."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def table_dump(
    path: Path, tables=("identity", "sessions", "messages", "runs", "audit", "memories")
) -> dict[str, list[tuple]]:
    """Every row of the agent tables, in id/key order, for before/after comparisons."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}
    finally:
        conn.close()


def file_digest(path: Path) -> str:
    """The database file and its WAL, if any: everything a write would have to touch."""
    wal = Path(f"{path}-wal")
    data = Path(path).read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    return hashlib.sha256(data).hexdigest()

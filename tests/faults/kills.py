"""SIGKILL at random moments during every write path of volumetool, and what the file holds
afterwards.

Each path builds its "before" fixture once, runs its command to completion once to learn the
"after" state and how long the command takes, then for each seeded trial: copies the fixture,
starts the command (and, for the paths that share the file with a running agent, a simulated
agent appending turns), kills the command with SIGKILL after a random delay, and classifies the
file: old, new, between (an allowed state between two separate transactions: some threads
compacted and others not, some migrations applied), mixed, or corrupt (integrity_check or
`volumetool check` fails). It then runs the command again, which must complete, and counts the
temporary files left behind and the agent's committed writes that are missing.

    python -m tests.faults.kills                   # 200 trials a path: writes RELIABILITY.md
    python -m tests.faults.kills --trials 3        # a short run: prints the table
    python -m tests.faults.kills --trials 3 --report /tmp/short.md
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.reliability import RELIABILITY, hostile_section
from tests.support.agent import verify as verify_agent
from tests.support.fixtures import KEY, THREAD_MEMORY, write_config
from tests.support.legacy import write_legacy
from tests.support.model_server import ModelServer
from tests.support.volumes import VolumeWriter, due_thread

ROOT = Path(__file__).resolve().parents[2]
VT = [sys.executable, "-m", "volumetool"]
AGENT = [sys.executable, "-m", "tests.support.agent"]
FULL_TRIALS = 200  # what RELIABILITY.md reports; a shorter run never overwrites it
STATES = ("old", "new", "between", "mixed", "corrupt")


@dataclass
class Tally:
    path: str
    trials: int = 0
    kills: int = 0
    states: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    lost: int = 0
    agent: bool = False  # whether a simulated agent wrote during the trials
    leftovers: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (
            self.states["mixed"]
            or self.states["corrupt"]
            or self.lost
            or self.leftovers
            or self.failures
        )


def rows(path: Path, sql: str, *params) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def integrity_ok(path: Path) -> bool:
    """integrity_check as the next writer sees the file: its open rolls back a hot journal."""
    try:
        conn = sqlite3.connect(path)
        try:
            return conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def volumetool(
    *args: object, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*VT, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT
    )


AGENT_ROWS = {
    "messages": "content NOT LIKE 'agent-live-%'",
    "runs": "trigger != 'agent-sim'",
    "audit": "event != 'agent-sim'",
    "memories": "key NOT LIKE 'agent.memory.%'",
}


def dump(path: Path, columns: dict[str, str]) -> dict[str, list[tuple]]:
    """The agent tables without the simulated agent's rows, `columns` picked per table."""
    out = {}
    for table, picked in columns.items():
        where = f"WHERE {AGENT_ROWS[table]}" if table in AGENT_ROWS else ""
        out[table] = rows(path, f"SELECT {picked} FROM {table} {where} ORDER BY 1")
    return out


class KillPath:
    """One write path: its fixture, its command, and how to read the file after a kill."""

    name = ""
    agent_keys: tuple[str, ...] = ()  # keys the simulated agent writes to meanwhile
    agent_memories = True
    target = "agent.db"

    def build(self, directory: Path) -> None:
        raise NotImplementedError

    def command(self, directory: Path) -> list[object]:
        raise NotImplementedError

    def state(self, directory: Path) -> object:
        raise NotImplementedError

    def env(self) -> dict:
        return {**os.environ, "TEST_MODEL_KEY": KEY, "PYTHONPATH": str(ROOT)}

    def classify(self, directory: Path, before: object, after: object) -> str:
        path = directory / self.target
        if path.exists() and not integrity_ok(path):
            return "corrupt"
        if (
            path.exists()
            and self.checkable(directory)
            and volumetool("check", path).returncode != 0
        ):
            return "corrupt"
        now = self.state(directory)
        if now == before:
            return "old"
        if now == after:
            return "new"
        return self.between(directory, now)

    def checkable(self, directory: Path) -> bool:
        return True

    def between(self, directory: Path, now: object) -> str:
        return "mixed"

    def recover(self, directory: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(c) for c in self.command(directory)],
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=ROOT,
            timeout=120,
        )


class MemoriesImport(KillPath):
    name = "memories import (20,000 records, overwrite + prune)"
    agent_keys = ("agent:1", "agent:2")
    agent_memories = False  # --prune would rightly forget the agent's own keys

    def build(self, directory: Path) -> None:
        w = VolumeWriter(directory / "agent.db")
        for key in self.agent_keys:
            w.thread(key)
        for n in range(2_000):
            w.memory(f"m{n:05d}", f"old value {n}")
        w.close()
        with open(directory / "in.jsonl", "w") as out:
            for n in range(1_000, 21_000):
                value = f"old value {n}" if n % 2 else f"new value {n} ✓\nline two"
                out.write(
                    json.dumps(
                        {
                            "key": f"m{n:05d}",
                            "value": value,
                            "created_at": "2026-01-01T00:00:00.000Z",
                            "updated_at": "2026-02-01T00:00:00.000Z",
                        }
                    )
                    + "\n"
                )

    def command(self, directory: Path) -> list[object]:
        return [
            *VT,
            "memories",
            "import",
            directory / "agent.db",
            directory / "in.jsonl",
            "--on-conflict",
            "overwrite",
            "--prune",
        ]

    def state(self, directory: Path) -> object:
        return dump(
            directory / "agent.db",
            {"memories": "*", "audit": "event, detail, actor", "messages": "*", "runs": "*"},
        )


class Compact(KillPath):
    name = "compact (6 due threads, concurrency 2)"
    agent_keys = tuple(f"due:{n}" for n in range(6))
    server: ModelServer | None = None

    def build(self, directory: Path) -> None:
        w = VolumeWriter(directory / "agent.db")
        for key in self.agent_keys:
            due_thread(w, key, turns=12)
        w.close()
        config = directory / "agent.yaml"
        write_config(config, self.server, None, "small", THREAD_MEMORY, "big", agent=None)

    def command(self, directory: Path) -> list[object]:
        return [
            *VT,
            "compact",
            directory / "agent.db",
            "--config",
            directory / "agent.yaml",
            "--concurrency",
            "2",
            "--min-retention",  # the summaries are placeholders: no quality gate
            "0",
        ]

    def state(self, directory: Path) -> object:
        path = directory / "agent.db"
        state = dump(path, {"sessions": "id, summary", "runs": "*"})
        # all messages, the agent's too: its turns count among a thread's last two
        state["messages"] = rows(
            path,
            "SELECT id, session_id, role, content, tool_calls,"
            " tool_call_id, created_at, folded_by FROM messages ORDER BY id",
        )
        return state

    def classify(self, directory: Path, before: object, after: object) -> str:
        """Each thread must be untouched, or exactly as a completed compaction leaves it: one
        run, the summary, and whole turns folded from the start with at least two turns live
        (the agent appending meanwhile moves where that boundary falls)."""
        path = directory / "agent.db"
        if not integrity_ok(path) or volumetool("check", path).returncode != 0:
            return "corrupt"
        now = self.state(directory)
        ours = [m[:7] for m in now["messages"] if not m[3].startswith("agent-live-")]
        if ours != [m[:7] for m in before["messages"]]:
            return "mixed"
        states = []
        for session, summary in now["sessions"]:
            messages = [m for m in now["messages"] if m[1] == session]
            runs = [r for r in now["runs"] if r[1] == session and r[2] == "compaction"]
            folded = [m for m in messages if m[7] is not None]
            if not folded and summary is None and not runs:
                states.append("old")
                continue
            live = [m for m in messages if m[7] is None]
            first_user = next(n for n, m in enumerate(messages) if m[2] == "user")
            whole = messages[first_user : first_user + len(folded)] == folded
            boundary_ok = len(folded) + first_user == len(messages) or (
                messages[first_user + len(folded)][2] == "user"
            )
            ok = (
                len(runs) == 1
                and runs[0][4] == "ok"
                and summary == "Summary."
                and whole
                and boundary_ok
                and {m[7] for m in folded} == {runs[0][0]}
                and sum(1 for m in live if m[2] == "user") >= 2
            )
            states.append("new" if ok else "mixed")
        if "mixed" in states:
            return "mixed"
        return states[0] if len(set(states)) == 1 else "between"


class Migrate(KillPath):
    name = "migrate a 0.x file (300 threads, 12,000 messages; backup first)"

    def build(self, directory: Path) -> None:
        elements = []
        for n in range(20):
            elements += [
                {"role": "user", "content": f"question {n} é\nline", "ts": "t"},
                {"role": "assistant", "content": f"answer {n} 🧠", "ts": "t"},
            ]
        threads = [
            {"id": n, "key": f"k{n % 150}", "archived": n >= 150, "transcript": elements}
            for n in range(1, 301)
        ]
        runs = [(n, n, "message", "m", "ok", 100 + n, 10, None, "t", "t") for n in range(1, 301)]
        write_legacy(directory / "agent.db", threads, runs)
        # the states between migrations: each one applied on its own to a copy
        import sqlite_utils

        from volumetool.migrations import migrations

        stage = directory.parent / f"{directory.name}-stage.db"
        shutil.copyfile(directory / "agent.db", stage)
        db = sqlite_utils.Database(stage)
        names = [m.name for m in migrations.pending(db)]
        self.stages = []
        for n in range(1, len(names)):
            migrations.apply(db, stop_before=names[n])
            self.stages.append(self._state(stage))
        db.close()
        stage.unlink()

    def command(self, directory: Path) -> list[object]:
        return [*VT, "migrate", directory / "agent.db"]

    @staticmethod
    def _state(path: Path) -> object:
        schema = rows(path, "SELECT type, name, sql FROM sqlite_master ORDER BY name")
        tables = {
            name: rows(path, f'SELECT * FROM "{name}" ORDER BY 1')
            for _, name, _ in schema
            if _ == "table" and name != "_sqlite_migrations"
        }
        applied = (
            rows(path, "SELECT name FROM _sqlite_migrations ORDER BY id")
            if any(n == "_sqlite_migrations" for _, n, _ in schema)
            else []
        )
        return schema, tables, applied

    def state(self, directory: Path) -> object:
        return self._state(directory / "agent.db")

    def checkable(self, directory: Path) -> bool:
        return False  # `check` gates on the current format; the states in between are older

    def between(self, directory: Path, now: object) -> str:
        return "between" if now in self.stages else "mixed"


class ThreadNew(KillPath):
    name = "thread new"
    agent_keys = ("t:1", "t:2")

    def build(self, directory: Path) -> None:
        w = VolumeWriter(directory / "agent.db")
        for key in ("t:0", *self.agent_keys):
            s = w.thread(key)
            for n in range(50):
                w.turn(s, n)
        w.close()

    def command(self, directory: Path) -> list[object]:
        return [*VT, "thread", "new", directory / "agent.db", "t:0"]

    def state(self, directory: Path) -> object:
        return dump(
            directory / "agent.db",
            {"sessions": "id, conversation_key, status", "audit": "event, detail", "messages": "*"},
        )


class ThreadReset(ThreadNew):
    name = "thread reset (one thread of 20,000 messages)"

    def build(self, directory: Path) -> None:
        w = VolumeWriter(directory / "agent.db")
        for key in self.agent_keys:
            w.thread(key)
        s = w.thread("t:0")
        w.conn.execute("BEGIN")
        w.conn.executemany(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, ?, ?, ?)",
            [
                (s, "user" if n % 2 == 0 else "assistant", f"message {n} " + "x" * 200, "t")
                for n in range(20_000)
            ],
        )
        w.conn.execute("COMMIT")
        w.close()

    def command(self, directory: Path) -> list[object]:
        return [*VT, "thread", "reset", directory / "agent.db", "t:0", "--yes"]

    def state(self, directory: Path) -> object:
        return dump(
            directory / "agent.db",
            {
                "sessions": "id, conversation_key, status, summary",
                "audit": "event, detail",
                "messages": "*",
            },
        )


class Demo(KillPath):
    name = "demo (600 threads)"

    def build(self, directory: Path) -> None:
        pass

    def command(self, directory: Path) -> list[object]:
        return [*VT, "demo", directory / "agent.db", "--sessions", "600"]

    def state(self, directory: Path) -> object:
        path = directory / "agent.db"
        if not path.exists():
            return None
        return dump(
            path,
            {t: "*" for t in ("identity", "sessions", "messages", "runs", "audit", "memories")},
        )

    def recover(self, directory: Path) -> subprocess.CompletedProcess:
        # the file and the side files reading it made: demo refuses beside a leftover -wal
        for name in ("agent.db", "agent.db-wal", "agent.db-shm", "agent.db-journal"):
            (directory / name).unlink(missing_ok=True)
        return super().recover(directory)


PREVIOUS_EXPORT = '{"key": "earlier", "value": "the previous export"}\n'


class Export(KillPath):
    name = "memories export -o (50,000 memories)"
    target = "out.jsonl"

    def build(self, directory: Path) -> None:
        w = VolumeWriter(directory / "agent.db")
        w.conn.execute("BEGIN")
        w.conn.executemany(
            "INSERT INTO memories VALUES (?, ?, 't', 't')",
            [(f"k{n:06d}", f"value {n} " + "y" * 100) for n in range(50_000)],
        )
        w.conn.execute("COMMIT")
        w.close()
        (directory / "out.jsonl").write_text(PREVIOUS_EXPORT)

    def command(self, directory: Path) -> list[object]:
        return [*VT, "memories", "export", directory / "agent.db", "-o", directory / "out.jsonl"]

    def state(self, directory: Path) -> object:
        return (directory / "out.jsonl").read_bytes()

    def classify(self, directory: Path, before: object, after: object) -> str:
        now = self.state(directory)
        return "old" if now == before else "new" if now == after else "mixed"

    def recover(self, directory: Path) -> subprocess.CompletedProcess:
        (directory / "out.jsonl").write_text(PREVIOUS_EXPORT)
        return super().recover(directory)


def bulk_threads(
    w: VolumeWriter,
    keys: list[str],
    messages: int,
    status: str = "archived",
    text: str = "message",
    summary: str | None = None,
) -> None:
    """Threads under `keys` with `messages` messages each (every 7th mentions kiwi), a run, an
    audit event, and with `summary` a compaction that folded the first half and kept it."""
    w.conn.execute("BEGIN")
    for key in keys:
        s = w.thread(key, status=status, summary=summary)
        run = w.run(s, trigger="compaction") if summary else None
        w.conn.executemany(
            "INSERT INTO messages (session_id, role, content, created_at, folded_by)"
            " VALUES (?, ?, ?, ?, ?)",
            [
                (
                    s,
                    "user" if n % 2 == 0 else "assistant",
                    f"{text} {n} of {key}" + (" about kiwi" if n % 7 == 0 else "") + " " * 100,
                    "2026-10-01T00:00:00.000Z",
                    run if n < messages // 2 else None,
                )
                for n in range(messages)
            ],
        )
        if run:
            w.insert("compactions", run_id=run, session_id=s, summary=f"kept: {summary}")
        w.run(s)
        w.audit("permission", {"tool": "read_file"}, session=s)
    w.conn.execute("COMMIT")


def build_index(path: Path) -> None:
    done = volumetool("search", path, "anything")
    if done.returncode != 0:
        raise RuntimeError(f"search failed: {done.stderr}")


LIFECYCLE_TABLES = {
    "sessions": "id, conversation_key, status, summary",
    "messages": "*",
    "compactions": "run_id, session_id, summary",
    "runs": "*",
    "audit": "event, detail, session_id, actor",  # not the id: the agent's events interleave
    "memories": "key, value",  # not the rowid: VACUUM may renumber it
}


def lifecycle_state(path: Path) -> object:
    return {table: sorted(found, key=repr) for table, found in dump(path, LIFECYCLE_TABLES).items()}


class SearchIndex(KillPath):
    """The first search builds the index in transactions of 20,000 documents: any state in
    between is allowed, as long as a search reads it right."""

    name = "search (builds the index: 60,000 messages)"
    agent_keys = ("agent:1", "agent:2")

    def build(self, directory: Path) -> None:
        w = VolumeWriter(directory / "agent.db")
        for key in self.agent_keys:
            w.thread(key)
        bulk_threads(w, [f"f:{n}" for n in range(300)], 200, summary="kiwi summary")
        for n in range(3_000):
            w.memory(f"m.{n}", f"memory {n} kiwi" if n % 5 == 0 else f"memory {n}")
        w.close()

    def command(self, directory: Path) -> list[object]:
        return [*VT, "search", directory / "agent.db", "kiwi", "-n", "1"]

    def state(self, directory: Path) -> object:
        return lifecycle_state(directory / "agent.db")

    def classify(self, directory: Path, before: object, after: object) -> str:
        path = directory / "agent.db"
        if not integrity_ok(path) or volumetool("check", path).returncode != 0:
            return "corrupt"
        if self.state(directory) != before:
            return "mixed"  # a search changed the agent's data
        found = volumetool("search", path, "kiwi", "--read-only", "--json", "-n", "0")
        expected = rows(
            path,
            "SELECT 'message', id FROM messages WHERE content LIKE '% kiwi %'"
            " UNION ALL SELECT 'summary', session_id FROM compactions"
            " UNION ALL SELECT 'summary', id FROM sessions WHERE summary LIKE '%kiwi%'"
            " UNION ALL SELECT 'memory', key FROM memories WHERE value LIKE '% kiwi'",
        )
        got = [
            (r["kind"], r["message_id"] or r["key"] or r["session_id"])
            for r in json.loads(found.stdout or "[]")
        ]
        if found.returncode != 0 or sorted(got) != sorted(expected):
            return "mixed"
        indexed = rows(path, "SELECT count(*) FROM sqlite_master WHERE name = 'search_state'")
        if indexed == [(0,)]:
            return "old"
        lacking = rows(
            path,
            "SELECT count(*) FROM messages WHERE id NOT IN (SELECT id FROM"
            " search_messages_content) AND content NOT LIKE 'agent-live-%'",
        )
        return "new" if lacking == [(0,)] else "between"


class Prune(KillPath):
    name = "prune --vacuum (400 archived threads of 100 messages, index built)"
    agent_keys = ("agent:1", "agent:2")

    def build(self, directory: Path) -> None:
        w = VolumeWriter(directory / "agent.db")
        for key in self.agent_keys:
            w.thread(key)
        bulk_threads(w, [f"old:{n}" for n in range(400)], 100, summary="old summary")
        w.clock = w.clock.replace(month=11, day=20)
        bulk_threads(w, [f"kept:{n}" for n in range(50)], 100)
        w.conn.execute(
            "UPDATE sessions SET updated_at = '2026-10-01T00:00:00.000Z'"
            " WHERE conversation_key LIKE 'old:%'"
        )
        w.close()
        build_index(directory / "agent.db")

    def command(self, directory: Path) -> list[object]:
        return [*VT, "prune", directory / "agent.db", "--archived-before", "2026-11-01", "--vacuum"]

    def state(self, directory: Path) -> object:
        return lifecycle_state(directory / "agent.db")

    def counted(self, directory: Path) -> tuple[list[dict], int, int, int]:
        """The prune events, and the old threads, their messages and the kept messages
        left."""
        path = directory / "agent.db"
        events = rows(
            path,
            "SELECT detail FROM audit WHERE event = 'thread' AND detail ->> 'action' = 'prune'",
        )
        [(threads, messages, kept)] = rows(
            path,
            "SELECT (SELECT count(*) FROM sessions WHERE conversation_key LIKE 'old:%'),"
            " (SELECT count(*) FROM messages m JOIN sessions s ON s.id = m.session_id"
            "  WHERE s.conversation_key LIKE 'old:%'),"
            " (SELECT count(*) FROM messages m JOIN sessions s ON s.id = m.session_id"
            "  WHERE s.conversation_key LIKE 'kept:%')",
        )
        return [json.loads(detail) for (detail,) in events], threads, messages, kept

    def between(self, directory: Path, now: object) -> str:
        """Killed between two of prune's short transactions: some old threads gone (the
        last of them maybe only some of its messages), nothing else, and the one prune event
        counting exactly that, still unfinished."""
        events, threads, messages, kept = self.counted(directory)
        whole = len(events) == 1 and events[0].get("finished") is False and kept == 50 * 100
        counts = whole and (events[0]["threads"], events[0]["messages"]) == (
            400 - threads,
            400 * 100 - messages,
        )
        return "between" if counts else "mixed"

    def recover(self, directory: Path) -> subprocess.CompletedProcess:
        """The same prune again finishes the one that was killed, under its one event."""
        done = super().recover(directory)
        events, threads, messages, kept = self.counted(directory)
        if done.returncode == 0 and not (
            len(events) == 1
            and "finished" not in events[0]
            and (events[0]["threads"], events[0]["messages"]) == (400, 400 * 100)
            and (threads, messages, kept) == (0, 0, 50 * 100)
        ):
            done.returncode, done.stderr = 1, f"after the prune again: {events}, {threads} left"
        return done


ERASE_MARKER = "qzerase4711marker"


def _as_scrubbed(state: dict) -> dict:
    """A lifecycle state with its erase events as a finished scrub leaves them."""

    def finished(row: tuple) -> tuple:
        event, detail, *rest = row
        if event != "erase":
            return row
        fields = {k: v for k, v in json.loads(detail).items() if k != "scrubbed"}
        return (event, json.dumps(fields, ensure_ascii=False), *rest)

    audit = sorted((finished(row) for row in state["audit"]), key=repr)
    return {**state, "audit": audit}


class Erase(KillPath):
    name = "erase (50 threads, 10,000 messages, 2,000 memories; index built)"
    agent_keys = ("agent:1", "agent:2")

    def build(self, directory: Path) -> None:
        w = VolumeWriter(directory / "agent.db")
        for key in self.agent_keys:
            w.thread(key)
        bulk_threads(w, ["erase:me"] * 49, 200, text=ERASE_MARKER, summary=ERASE_MARKER)
        bulk_threads(w, ["erase:me"], 200, status="active", text=ERASE_MARKER)
        bulk_threads(w, [f"other:{n}" for n in range(50)], 100)
        for n in range(2_000):
            w.memory(f"me.{n:04d}", f"{ERASE_MARKER} fact {n}")
            w.memory(f"you.{n:04d}", f"fact {n}")
        w.close()
        build_index(directory / "agent.db")

    def command(self, directory: Path) -> list[object]:
        return [
            *VT,
            "erase",
            directory / "agent.db",
            "--key",
            "erase:me",
            "--memories-prefix",
            "me.",
            "--yes",
        ]

    def state(self, directory: Path) -> object:
        return lifecycle_state(directory / "agent.db")

    def classify(self, directory: Path, before: object, after: object) -> str:
        """Killed after the delete committed, before the scrub finished: the new state's rows,
        the erase event still saying `"scrubbed": false` (the next erase finishes it)."""
        found = super().classify(directory, before, after)
        if found == "mixed" and _as_scrubbed(self.state(directory)) == after:
            return "between"
        return found

    def recover(self, directory: Path) -> subprocess.CompletedProcess:
        """Erase again: it erases (killed before the commit), finishes the scrub of the erase
        killed after its commit (exit 0), or, finding nothing under the key after a whole
        erase, scrubs again (exit 1). Either way no byte may hold the marker after."""
        done = super().recover(directory)
        if done.returncode == 1 and "it was erased at" in done.stderr:
            done.returncode = 0
        left = [
            p.name
            for p in directory.iterdir()
            if p.name.startswith("agent.db") and ERASE_MARKER[2:].encode() in p.read_bytes()
        ]
        if left:
            done.returncode, done.stderr = 1, f"the erased text is still in {left}"
        return done


def leftovers(directory: Path) -> list[str]:
    """Temporary files a run left behind (the lock file and SQLite's own -wal/-shm aside)."""
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)


def run_path(
    path: KillPath, trials: int, seed: int, work: Path, say: Callable[[str], None] = lambda s: None
) -> Tally:
    tally = Tally(path.name, agent=bool(path.agent_keys))
    template = work / "template"
    template.mkdir(parents=True)
    path.build(template)
    probe = work / "probe"
    shutil.copytree(template, probe)
    before = path.state(probe)
    started = time.monotonic()
    done = subprocess.run(
        [str(c) for c in path.command(probe)],
        capture_output=True,
        text=True,
        env=path.env(),
        cwd=ROOT,
        timeout=300,
    )
    duration = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{path.name}: the command failed: {done.stderr[-500:]}")
    after = path.state(probe)
    shutil.rmtree(probe)
    rng = random.Random(seed)
    for trial in range(trials):
        directory = work / f"trial-{trial}"
        shutil.copytree(template, directory)
        agent = None
        if path.agent_keys:
            agent = subprocess.Popen(
                [*AGENT, str(directory / "agent.db"), "60", *path.agent_keys],
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env={**os.environ, "AGENT_MEMORIES": "1" if path.agent_memories else "0"},
            )
            wait_for_agent(directory / "agent.db", agent)
        delay = rng.uniform(0, duration * 1.1)
        child = subprocess.Popen(
            [str(c) for c in path.command(directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=path.env(),
            cwd=ROOT,
        )
        try:
            child.wait(timeout=delay)
            killed = False
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            child.wait()
            killed = True
        report = None
        if agent:
            agent.send_signal(signal.SIGTERM)
            report = json.loads(agent.communicate(timeout=30)[0])
        tally.trials += 1
        tally.kills += killed
        state = path.classify(directory, before, after)
        tally.states[state] += 1
        if state in ("mixed", "corrupt"):  # kept as found, for a look
            shutil.copytree(directory, work / f"kept-{trial}-{state}")
            tally.failures.append(f"trial {trial}: {state}, kept in {work}/kept-{trial}-{state}")
        recovered = path.recover(directory)
        if recovered.returncode != 0:
            tally.failures.append(
                f"trial {trial}: recovery run failed: {recovered.stderr.strip()[-300:]}"
            )
        left = leftovers(directory)
        tally.leftovers += len(left)
        if left:
            tally.failures.append(f"trial {trial}: left behind {left}")
        if report is not None:
            lost = verify_agent(str(directory / "agent.db"), report)
            tally.lost += len(lost)
            if report["locked"]:
                tally.failures.append(
                    f"trial {trial}: the agent met 'database is locked' {report['locked']} time(s)"
                )
            if lost:
                tally.failures.append(f"trial {trial}: {lost[:3]}")
        say(
            f"  trial {trial}: delay {delay:.3f}s, {'killed' if killed else 'finished'}, "
            f"{state}" + (f", leftovers {left}" if left else "")
        )
        shutil.rmtree(directory)
    shutil.rmtree(template)
    return tally


def all_paths(server: ModelServer) -> list[KillPath]:
    compact = Compact()
    compact.server = server
    return [
        MemoriesImport(),
        compact,
        Migrate(),
        ThreadNew(),
        ThreadReset(),
        Demo(),
        Export(),
        SearchIndex(),
        Prune(),
        Erase(),
    ]


def wait_for_agent(db: Path, agent: subprocess.Popen) -> None:
    """Until the simulated agent has committed a turn: on a loaded machine its interpreter can
    take longer to start than a short command runs, and a SIGTERM that came before its handler
    was set would end it without its report."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and agent.poll() is None:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            if conn.execute(
                "SELECT 1 FROM messages WHERE content LIKE 'agent-live-%' LIMIT 1"
            ).fetchone():
                return
        except sqlite3.OperationalError:
            pass  # locked by the agent's own write: look again
        finally:
            conn.close()
        time.sleep(0.01)
    raise RuntimeError(f"the simulated agent did not start writing to {db}")


def markdown(tallies: list[Tally], trials: int, seed: int, took: float) -> str:
    lines = [
        "# Reliability",
        "",
        f"From `make faults` (`python -m tests.faults.kills --trials {trials} --seed {seed}`),"
        f" {took / 60:.0f} min. Each trial copies a fixture, starts the write command (beside a "
        "simulated agent appending turns, where the path shares the file with one), kills it "
        "with SIGKILL after a random delay within its running time, and reads the file: `old`"
        " (as before), `new` (as after a complete run), `between` (an allowed state between "
        "two separate transactions: some threads compacted and others not, some migrations "
        "migrations applied), `mixed` (anything else) or `corrupt` (integrity_check or `volumetool "
        "check` fails). Then the command runs again and must complete; temporary files left "
        "behind and agent writes missing are counted.",
        "",
        "| write path | trials | killed | old | new | between | mixed | corrupt | leftovers "
        "| agent writes lost |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in tallies:
        s = t.states
        lines.append(
            f"| {t.path} | {t.trials} | {t.kills} | {s['old']} | {s['new']} | "
            f"{s['between']} | {s['mixed']} | {s['corrupt']} | {t.leftovers} | "
            f"{t.lost if t.agent else '- (no agent)'} |"
        )
    return "\n".join(lines) + "\n"


def report_path(trials: int, only: str | None, report: str | None) -> Path | None:
    """Where a run's table goes: RELIABILITY.md only from a full run (every path, at least
    FULL_TRIALS trials each); a shorter run to --report, else nowhere (it is printed).
    ValueError when --report names RELIABILITY.md for a shorter run."""
    full = trials >= FULL_TRIALS and not only
    if report is None:
        return RELIABILITY if full else None
    path = Path(report)
    if not full and path.resolve() == RELIABILITY.resolve():
        raise ValueError(
            f"RELIABILITY.md reports full runs ({FULL_TRIALS} trials of every path);"
            " write a shorter run elsewhere"
        )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description="SIGKILL every write path, many times")
    parser.add_argument("--trials", type=int, default=FULL_TRIALS)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", help="paths whose name contains this")
    parser.add_argument("--work", default="/tmp/volumetool-faults")
    parser.add_argument(
        "--report",
        metavar="PATH",
        help="write the table here (default: RELIABILITY.md for a full run; a shorter run "
        "only prints it)",
    )
    args = parser.parse_args()
    try:
        target = report_path(args.trials, args.only, args.report)
    except ValueError as exc:
        parser.error(str(exc))
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    started = time.monotonic()
    tallies = []
    with ModelServer(latency=0.05) as server:
        server.summary = "Summary."
        for n, path in enumerate(all_paths(server)):
            if args.only and args.only not in path.name:
                continue
            print(f"{path.name}: {args.trials} trials", flush=True)
            tally = run_path(path, args.trials, args.seed + n, work / f"path-{n}")
            print(
                f"  {tally.kills} killed; {tally.states}; leftovers {tally.leftovers}; "
                f"agent writes lost {tally.lost}",
                flush=True,
            )
            for failure in tally.failures[:5]:
                print(f"  FAILURE {failure}", flush=True)
            tallies.append(tally)
    took = time.monotonic() - started
    table = markdown(tallies, args.trials, args.seed, took)
    if target is None:
        print(
            f"\n{table}\n(a short run: RELIABILITY.md keeps the full one; --report PATH saves this)"
        )
    else:
        kept = hostile_section(target.read_text()) if target.exists() else ""
        target.write_text(table + kept + NOTES)
        print(f"wrote {target}")
    sys.exit(0 if all(t.clean for t in tallies) else 1)


NOTES = """
## What else is tested

- **Concurrency** (`tests/faults/test_concurrency.py`): a simulated agent process appends
  turns, runs, memories and audit events every few milliseconds while `compact` (of the very
  threads it appends to), `memories import`, `thread new` and `backup` run against the same
  file, in WAL mode and in rollback-journal mode. Every write the agent committed is present
  exactly once, in order; neither side meets "database is locked" within the 5 s busy
  timeout; every volumetool command succeeds.
- **Hostile files** (`tests/faults/test_hostile.py`): truncated files, zero-filled pages, a WAL
  file without its database, a read-only file and a read-only directory (a read-only bind
  mount, since the tests run as root), and a full disk (`RLIMIT_FSIZE`): each command fails
  with its documented exit code and one line, and the file is never made worse.
- `make test` runs a few seeded trials of every kill path; `make faults` runs the long ones
  and rewrites this file (a shorter `make faults TRIALS=N` only prints its table, or writes it
  to `REPORT=PATH`).
"""


if __name__ == "__main__":
    main()

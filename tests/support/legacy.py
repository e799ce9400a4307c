"""Runtime 0.x agent files, for migration tests and benchmarks."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from volumetool.migrations import LEGACY_TABLES_0X


def write_legacy(
    path: Path,
    threads: list[dict],
    runs: list[tuple] = (),
    audit: list[tuple] = (),
    memories: list[tuple] = (),
) -> Path:
    """A 0.x file. threads: {"id", "key", "channel", "archived", "transcript": [elements],
    "created_at", "updated_at"}; the transcript may also be given as raw text."""
    conn = sqlite3.connect(path)
    for statement in LEGACY_TABLES_0X:
        conn.execute(statement.replace("IF NOT EXISTS ", ""))
    conn.execute(
        "INSERT INTO identity VALUES ('name', 'legacy-agent'),"
        " ('created_at', '2025-01-01T00:00:00.000Z')"
    )
    for t in threads:
        transcript = t["transcript"]
        if not isinstance(transcript, str):
            transcript = json.dumps(transcript, ensure_ascii=False)
        conn.execute(
            "INSERT INTO sessions (id, conversation_key, channel, transcript, archived,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                t["id"],
                t["key"],
                t.get("channel", "discord"),
                transcript,
                int(t.get("archived", False)),
                t.get("created_at", "2025-01-01T00:00:00.000Z"),
                t.get("updated_at", "2025-01-02T00:00:00.000Z"),
            ),
        )
    conn.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", runs)
    conn.executemany("INSERT INTO audit VALUES (?, ?, ?, ?, ?, ?)", audit)
    conn.executemany("INSERT INTO memories VALUES (?, ?, ?, ?)", memories)
    conn.commit()
    conn.close()
    return path


def legacy_from_current(source: Path, dest: Path) -> Path:
    """The 0.x file holding the same threads, runs, audit and memories as a current one:
    every thread's messages folded back into a transcript array (for large fixtures)."""
    conn = sqlite3.connect(dest)
    for statement in LEGACY_TABLES_0X:
        conn.execute(statement.replace("IF NOT EXISTS ", ""))
    conn.execute("ATTACH DATABASE ? AS src", (f"file:{source}?mode=ro",))
    conn.execute("INSERT INTO identity SELECT key, value FROM src.identity")
    conn.execute(
        """INSERT INTO sessions (id, conversation_key, channel, transcript, archived, created_at,
             updated_at)
           SELECT s.id, s.conversation_key, s.channel,
             (SELECT json_group_array(json(CASE
                 WHEN m.tool_calls IS NOT NULL THEN json_object('role', m.role, 'content',
                   m.content, 'ts', m.created_at, 'tool_calls', json(m.tool_calls))
                 WHEN m.tool_call_id IS NOT NULL THEN json_object('role', m.role, 'content',
                   m.content, 'ts', m.created_at, 'tool_call_id', m.tool_call_id)
                 ELSE json_object('role', m.role, 'content', m.content, 'ts', m.created_at)
               END)) FROM (SELECT * FROM src.messages WHERE session_id = s.id ORDER BY id) m),
             s.status = 'archived', s.created_at, s.updated_at
           FROM src.sessions s ORDER BY s.id"""
    )
    conn.execute(
        "INSERT INTO runs SELECT id, session_id, trigger, model, status, input_tokens,"
        " output_tokens, error, started_at, finished_at FROM src.runs"
    )
    conn.execute(
        "INSERT INTO audit SELECT id, ts, event, detail, session_id, run_id FROM src.audit"
    )
    conn.execute("INSERT INTO memories SELECT * FROM src.memories")
    conn.commit()
    conn.execute("DETACH DATABASE src")
    conn.close()
    return dest

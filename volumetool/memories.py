"""Persistent memories: list, get, remember, forget, export and import.

Memories are the facts an agent keeps about its people; nothing here may lose one, change it by
a byte or write half of an import.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from volumetool.errors import ProblemsFound

MEMORY_FIELDS = ("key", "value", "created_at", "updated_at")


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (None: no bound)."""
    while prefix:
        last = ord(prefix[-1])
        if last < 0x10FFFF:
            return prefix[:-1] + chr(last + 1)
        prefix = prefix[:-1]
    return None


def list_memories(
    conn: sqlite3.Connection, prefix: str | None = None, limit: int | None = None
) -> Iterator[dict]:
    """Memories in key order, optionally only keys starting with `prefix` (an index range)."""
    clauses, params = [], []
    if prefix:
        clauses.append("key >= ?")
        params.append(prefix)
        upper = prefix_upper_bound(prefix)
        if upper is not None:
            clauses.append("key < ?")
            params.append(upper)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    cursor = conn.execute(
        f"SELECT key, value, created_at, updated_at FROM memories {where} ORDER BY key LIMIT ?",
        (*params, -1 if limit is None else limit),
    )
    for row in cursor:
        yield dict(zip(MEMORY_FIELDS, row, strict=True))


def get_memory(conn: sqlite3.Connection, key: str) -> str:
    row = conn.execute("SELECT value FROM memories WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise ProblemsFound(f"no memory under key {key!r}")
    return row[0]

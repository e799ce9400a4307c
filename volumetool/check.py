"""`check`: integrity and consistency of an agent file, one finding per kind and table."""

from __future__ import annotations

import collections
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from volumetool.errors import NOT_UTF8, Damaged, SchemaMismatch, UnusableInput
from volumetool.format import CURRENT_SCHEMA
from volumetool.timefmt import SQL_IS_TIMESTAMP, TIMESTAMP_FORM
from volumetool.volume import (
    DEFAULT_BUSY_TIMEOUT,
    Volume,
    check_file,
    connect,
    require_current,
    resolve,
    schema_differences,
)

MAX_IDS = 20  # ids named in one line; the count is always exact


@dataclass(frozen=True)
class Problem:
    check: str
    table: str
    ids: tuple[int, ...]
    message: str

    def as_dict(self) -> dict:
        return {
            "check": self.check,
            "table": self.table,
            "ids": list(self.ids),
            "message": self.message,
        }

    def line(self) -> str:
        shown = ", ".join(str(i) for i in self.ids[:MAX_IDS])
        more = f" and {len(self.ids) - MAX_IDS} more" if len(self.ids) > MAX_IDS else ""
        rows = f" rows {shown}{more}" if self.ids else ""
        return f"{self.table}{rows}: {self.message} [{self.check}]"


# (check, table, query returning offending ids, message)
ROW_CHECKS = (
    (
        "folded-by-non-compaction",
        "messages",
        "SELECT m.id FROM messages m JOIN runs r ON r.id = m.folded_by"
        " WHERE r.trigger != 'compaction' OR r.status != 'ok' ORDER BY m.id",
        "folded_by names a run that is not a successful compaction run",
    ),
    (
        "folded-by-other-thread",
        "messages",
        "SELECT m.id FROM messages m JOIN runs r ON r.id = m.folded_by"
        " WHERE r.session_id IS NOT m.session_id ORDER BY m.id",
        "folded by a compaction run of another thread",
    ),
    (
        "audit-detail-not-object",
        "audit",
        "SELECT id FROM audit WHERE NOT json_valid(detail) OR json_type(detail) != 'object'"
        " ORDER BY id",
        "detail is not a JSON object",
    ),
    (
        "tool-calls-not-array",
        "messages",
        "SELECT id FROM messages WHERE tool_calls IS NOT NULL"
        " AND (NOT json_valid(tool_calls) OR json_type(tool_calls) != 'array') ORDER BY id",
        "tool_calls is not a JSON array",
    ),
    (
        "audit-missing-thread",
        "audit",
        "SELECT a.id FROM audit a WHERE a.session_id IS NOT NULL"
        " AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = a.session_id) ORDER BY a.id",
        "session_id points to a missing thread",
    ),
    (
        "audit-missing-run",
        "audit",
        "SELECT a.id FROM audit a WHERE a.run_id IS NOT NULL"
        " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = a.run_id) ORDER BY a.id",
        "run_id points to a missing run",
    ),
    (
        "memory-timestamp-format",
        "memories",
        f"SELECT rowid FROM memories WHERE NOT {SQL_IS_TIMESTAMP.format('created_at')}"
        f" OR NOT {SQL_IS_TIMESTAMP.format('updated_at')} ORDER BY rowid",
        f"created_at or updated_at is not a timestamp {TIMESTAMP_FORM} (ids are rowids)",
    ),
    (
        "memory-updated-before-created",
        "memories",
        "SELECT rowid FROM memories WHERE updated_at < created_at"
        f" AND {SQL_IS_TIMESTAMP.format('created_at')} AND {SQL_IS_TIMESTAMP.format('updated_at')}"
        " ORDER BY rowid",
        "updated_at is before created_at (ids are rowids)",
    ),
)


# The finding for each way a schema departs from the format.
SCHEMA_CHECKS = {
    "unknown": "unknown-schema-object",
    "missing": "missing-schema-object",
    "altered": "altered-schema-object",
}


def problems(conn: sqlite3.Connection) -> Iterator[Problem]:
    """Every problem SPEC section 8 lists (and a few more), from one read snapshot."""
    differences = schema_differences(conn)
    for difference in differences:
        yield Problem(SCHEMA_CHECKS[difference.kind], difference.table, (), difference.describe())
    integrity = integrity_check(conn)
    if integrity != ["ok"]:
        for message in integrity:
            yield Problem("integrity", "database", (), message)
        return  # nothing else can be trusted in a damaged file
    if any(d.type == "table" and d.kind != "unknown" for d in differences):
        return  # the row checks read tables that are not what the format defines
    dangling: dict[tuple[str, str], list[int]] = {}
    for table, rowid, parent, _ in conn.execute("PRAGMA foreign_key_check"):
        dangling.setdefault((table, parent), []).append(rowid)
    for (table, parent), ids in sorted(dangling.items()):
        yield Problem("foreign-key", table, tuple(sorted(ids)), f"point to missing {parent} rows")
    for key, ids in conn.execute(
        "SELECT conversation_key, group_concat(id) FROM sessions WHERE status = 'active'"
        " GROUP BY conversation_key HAVING count(*) > 1 ORDER BY conversation_key"
    ):
        yield Problem(
            "duplicate-active-thread",
            "sessions",
            tuple(sorted(int(i) for i in ids.split(","))),
            f"more than one active thread for key {key!r}",
        )
    for check, table, sql, message in ROW_CHECKS:
        ids = tuple(r[0] for r in conn.execute(sql))
        if ids:
            yield Problem(check, table, ids, message)
    yield from _not_utf8(conn)


def _not_utf8(conn: sqlite3.Connection) -> Iterator[Problem]:
    """Rows of the format's tables holding text that is not UTF-8 (written as bytes, or pages
    overwritten): every other command stops at them, calling the file damaged, so they are
    `integrity` findings. Each table is read whole as the other commands read it (sqlite3
    decodes in C); only a table where that fails is read again, row by row, for the ids."""
    for (kind, table), definition in CURRENT_SCHEMA.items():
        if kind != "table":
            continue
        columns = [column.name for column in definition.columns]
        try:
            collections.deque(conn.execute(f"SELECT {', '.join(columns)} FROM {table}"), 0)
            continue
        except sqlite3.OperationalError as exc:
            if not str(exc).startswith(NOT_UTF8):
                raise
        texts = ", ".join(
            f"CASE WHEN typeof({c}) = 'text' THEN CAST({c} AS BLOB) END" for c in columns
        )
        ids, named = [], set()
        for rowid, *values in conn.execute(f"SELECT rowid, {texts} FROM {table} ORDER BY rowid"):
            bad = {column for column, value in zip(columns, values, strict=True) if _broken(value)}
            if bad:
                ids.append(rowid)
                named |= bad
        message = f"text that is not UTF-8 in {', '.join(sorted(named))} (ids are rowids)"
        yield Problem("integrity", table, tuple(ids), message)


def _broken(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        value.decode()
    except UnicodeDecodeError:
        return True
    return False


def integrity_check(conn: sqlite3.Connection) -> list[str]:
    """SQLite's integrity_check: ["ok"], or its first findings."""
    try:
        return [r[0] for r in conn.execute(f"PRAGMA integrity_check({MAX_IDS})")]
    except MemoryError:  # SQLITE_NOMEM: a damaged size or count sent it past any sane bound
        return ["SQLite ran out of memory checking the file: a page holds a damaged size"]


def check_volume(
    argument: str | os.PathLike | None, busy_timeout: float = DEFAULT_BUSY_TIMEOUT
) -> tuple[Path, list[Problem]]:
    """The agent file a VOLUME argument names, and its problems. A damaged file is one more
    finding (`integrity`), after those found before the damage showed; a file that is not an
    agent volume, or not at the current format, raises as for every command."""
    path = resolve(argument)
    found: list[Problem] = []
    try:
        with _open(path, busy_timeout) as volume, volume.snapshot() as conn:
            for problem in problems(conn):  # one by one: kept when damage stops the rest
                found.append(problem)
    except Damaged as exc:
        found.append(Problem("integrity", "database", (), f"the file is damaged: {exc.what}"))
    return path, found


def _open(path: Path, busy_timeout: float) -> Volume:
    """The volume, which must be an agent file at the current format; Damaged when it is not
    one because it is damaged: damage can hide or garble the very tables and migration
    records that make it one."""
    check_file(path)  # not SQLite at all stays a refusal (exit 2), whatever its bytes
    try:
        volume = Volume(path, readonly=True, busy_timeout=busy_timeout, gate=False)
        try:
            require_current(volume.schema, path)
        except SchemaMismatch:
            volume.close()
            raise
    except (UnusableInput, SchemaMismatch) as exc:
        damage = None if isinstance(exc, Damaged) else _integrity_failure(path, busy_timeout)
        if damage is None:
            raise
        raise Damaged(path, damage) from exc
    return volume


def _integrity_failure(path: Path, busy_timeout: float) -> str | None:
    """integrity_check's first finding on a file that did not open as an agent volume; None
    when it is intact."""
    conn = connect(path, readonly=True, busy_timeout=busy_timeout)
    try:
        first = integrity_check(conn)[0]
    except sqlite3.Error as exc:
        return str(exc)
    except UnicodeDecodeError:
        return "text that is not UTF-8"
    finally:
        conn.close()
    return None if first == "ok" else first

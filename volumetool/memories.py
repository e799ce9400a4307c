"""Persistent memories: list, get, remember, forget, export and import.

Memories are the facts an agent keeps about its people; nothing here may lose one, change it by
a byte or write half of an import.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from volumetool import audit
from volumetool.errors import ProblemsFound, UnusableInput
from volumetool.output import OutputTarget
from volumetool.render import listing_limit
from volumetool.text import BIDI_CHARS, CONTROL_CHARS, SURROGATES, plural
from volumetool.timefmt import TIMESTAMP_FORM, is_timestamp, now_iso
from volumetool.volume import Volume, open_for_write

MEMORY_FIELDS = ("key", "value", "created_at", "updated_at")


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (None: no bound).
    The character after U+D7FF is U+E000: the surrogates between are no text SQLite holds."""
    while prefix:
        last = ord(prefix[-1])
        if last < 0x10FFFF:
            return prefix[:-1] + chr(0xE000 if last == 0xD7FF else last + 1)
        prefix = prefix[:-1]
    return None


def prefix_range(prefix: str) -> tuple[str, tuple[str, ...]]:
    """The keys starting with `prefix`, as an index range: a WHERE clause and its parameters
    (no LIKE, whose `%` and `_` would widen the match)."""
    upper = prefix_upper_bound(prefix)
    if upper is None:
        return "key >= ?", (prefix,)
    return "key >= ? AND key < ?", (prefix, upper)


def list_memories(
    conn: sqlite3.Connection, prefix: str | None = None, limit: int | None = None
) -> Iterator[dict]:
    """Memories in key order, optionally only keys starting with `prefix` (an index range)."""
    where, params = prefix_range(prefix) if prefix else ("1", ())
    where = f"WHERE {where}"
    cursor = conn.execute(
        f"SELECT key, value, created_at, updated_at FROM memories {where} ORDER BY key LIMIT ?",
        (*params, listing_limit(limit)),
    )
    for row in cursor:
        yield dict(zip(MEMORY_FIELDS, row, strict=True))


def get_memory(conn: sqlite3.Connection, key: str) -> str:
    row = conn.execute("SELECT value FROM memories WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise ProblemsFound(f"no memory under key {key!r}")
    return row[0]


# -- keys --------------------------------------------------------------------------------------

KEY_MAX_CHARS = 200
_CONTROL = re.compile(f"[{CONTROL_CHARS}]")
_BIDI = re.compile(f"[{BIDI_CHARS}]")
_SURROGATE = re.compile(f"[{SURROGATES}]")
# Every rule below in one pass, for the common case of a good key.
_SUSPECT = re.compile(rf"[{CONTROL_CHARS}{BIDI_CHARS}{SURROGATES}]|^\s|\s$")


def key_problem(key: object) -> str | None:
    """Why `key` cannot name a memory, or None."""
    if isinstance(key, str) and key and len(key) <= KEY_MAX_CHARS and not _SUSPECT.search(key):
        return None
    if not isinstance(key, str):
        return f"the key is not a string (got {_json_type(key)})"
    if not key:
        return "the key is empty"
    if len(key) > KEY_MAX_CHARS:
        return f"the key is {len(key)} characters long (at most {KEY_MAX_CHARS})"
    if _SURROGATE.search(key):
        return "the key holds a lone surrogate, which is not valid Unicode"
    if _CONTROL.search(key):
        return "the key holds a control character or a line break"
    if _BIDI.search(key):
        # A key that displays in another order than it reads ("Trojan Source").
        return "the key holds a bidirectional control character"
    if key != key.strip():
        return "the key has leading or trailing whitespace"
    return None


def check_key(key: str) -> str:
    problem = key_problem(key)
    if problem:
        raise UnusableInput(f"invalid memory key {key[:60]!r}: {problem}")
    return key


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        list: "an array",
        dict: "an object",
        str: "a string",
    }.get(type(value), type(value).__name__)


# -- remember / forget ---------------------------------------------------------------------


def audit_memory(conn: sqlite3.Connection, action: str, key: str, ts: str) -> None:
    """The memory audit event the agent's own tools write, by volumetool."""
    audit.record(conn, "memory", {"action": action, "key": key}, ts=ts)


def remember(conn: sqlite3.Connection, key: str, value: str) -> None:
    """Save or update one memory, with its audit event. Call inside a write transaction."""
    check_key(key)
    if _SURROGATE.search(value):
        raise UnusableInput("the value holds a lone surrogate, which is not valid Unicode")
    ts = now_iso()
    conn.execute(
        "INSERT INTO memories (key, value, created_at, updated_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        (key, value, ts, ts),
    )
    audit_memory(conn, "remember", key, ts)


def forget(conn: sqlite3.Connection, key: str) -> None:
    """Delete one memory, with its audit event; ProblemsFound when there is none."""
    if conn.execute("DELETE FROM memories WHERE key = ?", (key,)).rowcount == 0:
        raise ProblemsFound(f"no memory under key {key!r}")
    audit_memory(conn, "forget", key, now_iso())


# -- export --------------------------------------------------------------------------------

EXPORT_FORMAT = "volumetool.memories"
# How an export file begins (JSON Lines, then the JSON document): -o replaces nothing else.
EXPORT_STARTS = (b'{"key"', b'{"format"')
EXPORT_VERSION = 1


def export_target(name: str) -> OutputTarget:
    """Where `memories export -o NAME` writes, checked: stdout for `-`; never over a volume or
    anything else named by mistake, only an earlier export; always 0600, whatever the file it
    replaces had (SPEC 7: personal facts)."""
    target = OutputTarget(name, "memories export", "memories.jsonl", starts=EXPORT_STARTS)
    return target.check()


_EXPORT_ROW = (
    "SELECT json_object('key', key, 'value', value, 'created_at', created_at,"
    " 'updated_at', updated_at) FROM memories ORDER BY key"
)


def export_volume(volume: str, target: OutputTarget, fmt: str, busy_timeout: float) -> int:
    """`memories export`: every memory of `volume`, read in one snapshot, written to `target`
    (from `export_target`, checked before the volume is opened); returns the count."""
    with (
        Volume(volume, busy_timeout=busy_timeout) as vol,
        vol.snapshot() as conn,
        target.open() as out,
    ):
        return export(conn, out, fmt, vol.agent_name())


def export(
    conn: sqlite3.Connection, out: BinaryIO, fmt: str = "jsonl", agent: str | None = None
) -> int:
    """Stream every memory in key order as JSON Lines or one JSON document; returns the count.

    SQLite writes each object (json_object), so memory use stays flat whatever the count.
    """
    count = 0
    cursor = conn.execute(_EXPORT_ROW)
    if fmt == "json":
        header = {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "agent": agent,
            "exported_at": now_iso(),
        }
        out.write(json.dumps(header, ensure_ascii=False)[:-1].encode() + b', "memories": [')
    separator = b"\n" if fmt == "jsonl" else b",\n"
    while rows := cursor.fetchmany(10_000):
        chunk = separator.join(row[0].encode() for row in rows)
        if fmt == "json":
            out.write((b"\n" if count == 0 else b",\n") + chunk)
        else:
            out.write(chunk + b"\n")
        count += len(rows)
    if fmt == "json":
        out.write(b"\n]}\n")
    return count


# -- import --------------------------------------------------------------------------------

ACTIONS = ("added", "changed", "unchanged", "skipped", "removed")
_FIELDS = {"key", "value", "created_at", "updated_at"}
_BOM = b"\xef\xbb\xbf"  # Windows editors start UTF-8 files with one


class _Repeated(dict):
    """A JSON object that named a field twice (json.loads would keep the last silently)."""

    field: str


def _object(pairs: list[tuple[str, object]]) -> dict:
    """json's object_pairs_hook: a dict, marked when a field repeats so that the record holding
    it can be refused by its line or number."""
    item = dict(pairs)
    if len(item) == len(pairs):
        return item
    repeated = _Repeated(item)
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            repeated.field = name
            break
        seen.add(name)
    return repeated


_loads = json.JSONDecoder(object_pairs_hook=_object).decode  # one decoder for every line


@dataclass
class ImportPlan:
    counts: dict[str, int]

    def summary(self) -> str:
        return ", ".join(f"{self.counts[a]:,} {a}" for a in ACTIONS)


# What an import reads at most: a line of JSON Lines, and a JSON document, which is read whole
# (JSON Lines is streamed). A file that never ends (a device, a runaway pipe) stops there.
MAX_LINE_BYTES = 64 * 2**20
MAX_DOCUMENT_BYTES = 512 * 2**20


class _Records:
    """Validated records of an import file, streamed; `number` is the line (JSON Lines) or
    record (JSON document) of the last one read."""

    def __init__(self, source: BinaryIO) -> None:
        self.source = source
        self.kind = "line"
        self.number = 1
        self.escapes = True  # could the text hold \\u escapes (so lone surrogates)?

    @property
    def where(self) -> str:
        return "the document" if self.number == 0 else f"{self.kind} {self.number}"

    def fail(self, problem: str) -> UnusableInput:
        return UnusableInput(f"{self.where}: {problem}", "nothing was imported")

    def record(self, item: object) -> tuple[str, str, str | None, str | None]:
        if not isinstance(item, dict):
            raise self.fail(f"expected a JSON object, got {_json_type(item)}")
        if isinstance(item, _Repeated):
            raise self.fail(f"the field {item.field!r} appears twice in one object")
        if not item.keys() <= _FIELDS:
            unknown = sorted(item.keys() - _FIELDS)[0]
            raise self.fail(
                f"unknown field {unknown!r} (fields: key, value, created_at, updated_at)"
            )
        if "key" not in item or "value" not in item:
            raise self.fail("a memory needs both key and value")
        key, value = item["key"], item["value"]
        problem = key_problem(key)
        if problem:
            raise self.fail(f"invalid key: {problem}")
        if not isinstance(value, str):
            raise self.fail(f"the value of {key!r} is {_json_type(value)}, not a string")
        if self.escapes and _SURROGATE.search(value):
            raise self.fail(
                f"the value of {key!r} holds a lone surrogate, which is not valid Unicode"
            )
        created, updated = item.get("created_at"), item.get("updated_at")
        self.check_timestamps(key, created, updated)
        return key, value, created, updated

    def check_timestamps(self, key: str, created: object, updated: object) -> None:
        for field, stamp in (("created_at", created), ("updated_at", updated)):
            if stamp is not None and not is_timestamp(stamp):
                shown = repr(stamp[:40]) if isinstance(stamp, str) else _json_type(stamp)
                raise self.fail(
                    f"{field} of {key!r} is {shown}, not a timestamp {TIMESTAMP_FORM} "
                    "naming a real UTC moment"
                )
        if isinstance(created, str) and isinstance(updated, str) and updated < created:
            raise self.fail(
                f"updated_at of {key!r} ({updated}) is before its created_at ({created})"
            )

    def readline(self) -> bytes:
        line = self.source.readline(MAX_LINE_BYTES + 1)
        if len(line) > MAX_LINE_BYTES:
            raise self.fail(f"a line longer than {MAX_LINE_BYTES // 2**20} MiB")
        return line

    def __iter__(self) -> Iterator[tuple]:
        first = self.readline().removeprefix(_BOM)
        while first and not first.strip():
            self.number += 1
            first = self.readline()
        if not first:
            return
        head = self._decode(first)
        try:
            item = _loads(head)
        except ValueError:
            item = None
        if isinstance(item, dict) and "format" not in item and "memories" not in item:
            yield from self._lines(head)
        else:
            self.number = 1
            rest = self.source.read(max(0, MAX_DOCUMENT_BYTES + 1 - len(first)))
            if len(first) + len(rest) > MAX_DOCUMENT_BYTES:
                self.number = 0
                raise self.fail(
                    f"a JSON document larger than {MAX_DOCUMENT_BYTES // 2**20} MiB "
                    "(JSON Lines is read a line at a time, of any length)"
                )
            yield from self._document(first + rest)

    def _decode(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.number += data[: exc.start].count(b"\n")
            raise self.fail(f"invalid UTF-8 (byte 0x{data[exc.start]:02x})") from None

    def _lines(self, text: str) -> Iterator[tuple]:
        while True:
            if text.strip():
                # Decoded UTF-8 holds no surrogates: only a \\u escape can bring one in.
                self.escapes = "\\u" in text
                try:
                    item = _loads(text)
                except ValueError as exc:
                    raise self.fail(f"not valid JSON ({exc.msg})") from None
                yield self.record(item)
            raw = self.readline()
            if not raw:
                return
            self.number += 1
            text = self._decode(raw)

    def _document(self, data: bytes) -> Iterator[tuple]:
        text = self._decode(data)
        self.escapes = "\\u" in text
        try:
            document = _loads(text)
        except ValueError as exc:
            self.number = exc.lineno
            raise self.fail(f"not valid JSON ({exc.msg})") from None
        self.number = 0
        if isinstance(document, _Repeated):
            raise self.fail(f"the field {document.field!r} appears twice")
        if not (
            isinstance(document, dict)
            and document.get("format") == EXPORT_FORMAT
            and isinstance(document.get("memories"), list)
        ):
            raise self.fail(
                f"not a memories export (expected JSON Lines, or a JSON object "
                f'with "format": "{EXPORT_FORMAT}" and a "memories" list)'
            )
        if document.get("version") != EXPORT_VERSION:
            raise self.fail(f"unsupported export version {document.get('version')!r}")
        self.kind = "record"
        for self.number, item in enumerate(document["memories"], 1):
            yield self.record(item)


def stage_import(conn: sqlite3.Connection, source: BinaryIO) -> int:
    """Read and validate a whole import file into a TEMP table, touching only the temp
    database, so the agent's file stays unlocked while a large file is parsed. Returns the
    count; UnusableInput names the line or record of the first problem."""
    records = _Records(source)
    conn.execute("DROP TABLE IF EXISTS temp.import_memories")
    conn.execute(
        "CREATE TEMP TABLE import_memories (key TEXT PRIMARY KEY, value TEXT NOT NULL,"
        " created_at TEXT, updated_at TEXT, position INTEGER NOT NULL)"
    )
    last: list[str] = [""]

    def rows() -> Iterator[tuple]:
        for key, value, created, updated in records:
            last[0] = key
            yield key, value, created, updated, records.number

    conn.execute("BEGIN")
    try:
        conn.executemany("INSERT INTO temp.import_memories VALUES (?, ?, ?, ?, ?)", rows())
    except sqlite3.IntegrityError:
        first = conn.execute(
            "SELECT position FROM temp.import_memories WHERE key = ?", (last[0],)
        ).fetchone()
        conn.execute("ROLLBACK")
        raise records.fail(
            f"key {last[0]!r} appears twice (first at {records.kind} {first[0]})"
        ) from None
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return conn.execute("SELECT count(*) FROM temp.import_memories").fetchone()[0]


_CLASSIFY = """
SELECT i.key, CASE WHEN m.key IS NULL THEN 'added'
                   WHEN m.value = i.value THEN 'unchanged'
                   ELSE 'changed' END
FROM temp.import_memories i LEFT JOIN main.memories m ON m.key = i.key
UNION ALL
SELECT m.key, 'removed' FROM main.memories m
WHERE ? AND NOT EXISTS (SELECT 1 FROM temp.import_memories i WHERE i.key = m.key)
ORDER BY 1
"""
_CONFLICTS = """
SELECT i.key FROM temp.import_memories i JOIN main.memories m ON m.key = i.key
WHERE m.value != i.value ORDER BY i.key
"""
SHOWN_CONFLICTS = 10


def refuse_conflicts(
    conn: sqlite3.Connection, on_key: Callable[[str, str], None] | None = None
) -> None:
    """--on-conflict fail: ProblemsFound listing the keys of the staged import that exist with
    a different value, if any; `on_key("conflict", key)` hears of each, in key order."""
    shown: list[str] = []
    count = 0
    for (key,) in conn.execute(_CONFLICTS):
        count += 1
        if len(shown) < SHOWN_CONFLICTS:
            shown.append(repr(key))
        if on_key is not None:
            on_key("conflict", key)
    if count:
        more = f" and {count - len(shown)} more" if count > len(shown) else ""
        raise ProblemsFound(
            f"{plural(count, 'key')} {'exists' if count == 1 else 'exist'} with a different "
            f"value: {', '.join(shown)}{more};"
            " nothing was imported",
            "--on-conflict skip keeps them, --on-conflict overwrite replaces them",
        )


def import_file(
    volume: str,
    name: str,
    *,
    on_conflict: str,
    prune: bool,
    dry_run: bool,
    busy_timeout: float,
    on_key: Callable[[str, str], None] | None = None,
) -> ImportPlan:
    """`memories import`: the file `name` (`-` is stdin) staged and validated whole, then
    planned (`dry_run`: read-only, `on_key` hears of each key that would change) or applied
    in one write transaction. A file with no memories never prunes: it is refused."""
    opened = (
        Volume(volume, busy_timeout=busy_timeout)
        if dry_run
        else open_for_write(volume, busy_timeout=busy_timeout, lock=False)
    )
    with opened as vol:
        try:
            source = sys.stdin.buffer if name == "-" else open(name, "rb")  # noqa: SIM115
        except OSError as exc:
            raise UnusableInput(f"{name}: cannot read ({exc.strerror})") from None
        with source, vol.translating():
            staged = stage_import(vol.conn, source)
        if staged == 0 and prune:
            raise UnusableInput(
                f"{name} holds no memories", "refusing to --prune every memory; nothing was changed"
            )
        if dry_run:
            with vol.snapshot() as conn:
                return plan_import(conn, on_conflict, prune, on_key)
        with vol.write() as conn:
            return apply_import(conn, on_conflict, prune)


def plan_import(
    conn: sqlite3.Connection,
    on_conflict: str,
    prune: bool,
    on_key: Callable[[str, str], None] | None = None,
) -> ImportPlan:
    """Classify every key of the staged import against the volume's memories, streaming:
    `on_key(action, key)` hears of each key that is not unchanged, in key order. Under
    --on-conflict fail a conflict refuses the whole plan, so a dry run predicts the real
    run's refusal (and its exit code) exactly, as well as its counts."""
    if on_conflict == "fail":
        refuse_conflicts(conn, on_key)
    plan = ImportPlan(dict.fromkeys(ACTIONS, 0))
    for key, action in conn.execute(_CLASSIFY, (prune,)):
        if action == "changed" and on_conflict == "skip":
            action = "skipped"
        plan.counts[action] += 1
        if on_key is not None and action != "unchanged":
            on_key(action, key)
    return plan


def apply_import(conn: sqlite3.Connection, on_conflict: str, prune: bool) -> ImportPlan:
    """Write the staged import: call inside the write transaction. Every key written gets a
    remember event and every key removed a forget event; unchanged keys get neither."""
    plan = plan_import(conn, on_conflict, prune)
    ts = now_iso()
    overwrite = on_conflict == "overwrite"
    audit.record_memory_events(
        conn,
        "SELECT i.key AS key, 'remember' AS action"
        "   FROM temp.import_memories i LEFT JOIN main.memories m ON m.key = i.key"
        "   WHERE m.key IS NULL OR (? AND m.value != i.value)"
        " UNION ALL SELECT m.key, 'forget' FROM main.memories m"
        "   WHERE ? AND NOT EXISTS (SELECT 1 FROM temp.import_memories i WHERE i.key = m.key)"
        " ORDER BY key",
        (overwrite, prune),
        ts,
    )
    if prune:
        conn.execute(
            "DELETE FROM main.memories WHERE key NOT IN (SELECT key FROM temp.import_memories)"
        )
    if overwrite:
        # created_at stays; an updated_at from the file older than it moves up to it, so that
        # no memory is updated before it was created.
        conn.execute(
            "UPDATE main.memories SET value = i.value,"
            " updated_at = max(memories.created_at, coalesce(i.updated_at, ?))"
            " FROM temp.import_memories i WHERE memories.key = i.key AND memories.value != i.value",
            (ts,),
        )
    # A missing created_at is the updated_at when the file has one (the memory existed by
    # then), else now; a missing updated_at is the created_at.
    conn.execute(
        "INSERT INTO main.memories (key, value, created_at, updated_at)"
        " SELECT key, value, coalesce(created_at, updated_at, ?),"
        " coalesce(updated_at, created_at, ?)"
        " FROM temp.import_memories i"
        " WHERE NOT EXISTS (SELECT 1 FROM main.memories m WHERE m.key = i.key) ORDER BY key",
        (ts, ts),
    )
    return plan

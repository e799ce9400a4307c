"""The agent file format as data: the migrations this version knows, and every schema object
they define, in the form the schema gate compares with a file.

The schema is part of a file's trust (SPEC section 2): an object the format does not define (a
trigger that deletes memories when a summary changes, a view in place of a table) would run
with volumetool's writes. So the gate compares what a file holds with what is here, by meaning
rather than by CREATE text (most files are written by the agent runtime, not by volumetool):
columns as `pragma_table_xinfo` reports them, indexes by their key columns, uniqueness and
condition. Triggers and views are never part of the format.

Pure data and a pure comparison: no sqlite3, no sqlite-utils, so every command's gate costs
nothing to import. A test applies every migration to an empty file and holds this module equal
to what they produce.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

MIGRATION_SET = "agent-volume"

# The `agent-volume` migrations of volumetool/migrations.py, in order.
MIGRATIONS = (
    "m001_runtime_0x_tables",
    "m002_messages_from_transcripts",
    "m003_runs_last_input_tokens",
    "m004_audit_actor",
    "m005_listing_indexes",
    "m006_compaction_history",
    "m007_compaction_replaced_summary",
    "m008_compaction_quality",
)


@dataclass(frozen=True)
class Column:
    """One column as `pragma_table_xinfo` describes it."""

    name: str
    type: str
    notnull: bool = False
    default: str | None = None  # the default expression, normalized (`normalize_sql`)
    pk: int = 0  # position in the primary key, 0 when not part of it
    hidden: int = 0  # 2 or 3 for a generated column


@dataclass(frozen=True)
class ForeignKey:
    column: str
    table: str
    to: str | None
    on_update: str = "NO ACTION"
    on_delete: str = "NO ACTION"
    match: str = "NONE"


@dataclass(frozen=True)
class Table:
    columns: tuple[Column, ...]
    foreign_keys: tuple[ForeignKey, ...] = ()  # sorted
    virtual: bool = False  # its columns are not read: that would call the module's code
    module: str | None = None  # a virtual table's `module(arguments)`, normalized


@dataclass(frozen=True)
class Index:
    table: str
    # Key columns in order: `name`, with ` DESC` or ` COLLATE X` when not the default;
    # `(expression)` for an expression.
    columns: tuple[str, ...]
    unique: bool = False
    where: str | None = None  # a partial index's condition, normalized


@dataclass(frozen=True)
class Code:
    """A trigger or a view: code that runs when volumetool reads or writes. None is part of
    the format."""

    table: str


Definition = Table | Index | Code
Schema = Mapping[tuple[str, str], Definition]  # (type, name) → definition


def _text(name: str, notnull: bool = True, default: str | None = None) -> Column:
    return Column(name, "TEXT", notnull, default)


def _integer(name: str, notnull: bool = False) -> Column:
    return Column(name, "INTEGER", notnull)


_ID = Column("id", "INTEGER", pk=1)
_KEY = Column("key", "TEXT", pk=1)


def _index(table: str, *columns: str, unique: bool = False, where: str | None = None) -> Index:
    return Index(table, columns, unique, where)


# What applying every migration to an empty file defines.
CURRENT_SCHEMA: Schema = {
    ("table", "identity"): Table((_KEY, _text("value"))),
    ("table", "sessions"): Table(
        (
            _ID,
            _text("conversation_key"),
            _text("channel"),
            _text("status"),
            _text("summary", notnull=False),
            _text("created_at"),
            _text("updated_at"),
            _text("archived_at", notnull=False),
        )
    ),
    ("table", "messages"): Table(
        (
            _ID,
            _integer("session_id", notnull=True),
            _text("role"),
            _text("content"),
            _text("tool_calls", notnull=False),
            _text("tool_call_id", notnull=False),
            _text("created_at"),
            _integer("folded_by"),
        ),
        (ForeignKey("folded_by", "runs", "id"), ForeignKey("session_id", "sessions", "id")),
    ),
    ("table", "runs"): Table(
        (
            _ID,
            _integer("session_id"),
            _text("trigger"),
            _text("model", notnull=False),
            _text("status"),
            _integer("input_tokens"),
            _integer("output_tokens"),
            _integer("last_input_tokens"),
            _text("error", notnull=False),
            _text("started_at"),
            _text("finished_at", notnull=False),
        ),
        (ForeignKey("session_id", "sessions", "id"),),
    ),
    ("table", "audit"): Table(
        (
            _ID,
            _text("ts"),
            _text("event"),
            _text("detail"),
            _integer("session_id"),
            _integer("run_id"),
            _text("actor", default="'agent'"),
        )
    ),
    ("table", "memories"): Table((_KEY, _text("value"), _text("created_at"), _text("updated_at"))),
    ("table", "compactions"): Table(
        (
            Column("run_id", "INTEGER", pk=1),
            _integer("session_id", notnull=True),
            _text("summary", notnull=False),
            _integer("saved_tokens"),
            Column("retention", "REAL"),
            _text("missing_facts", notnull=False),
            _text("undone_at", notnull=False),
            _text("replaced_summary", notnull=False),
            Column("replaced_kept", "INTEGER", notnull=True, default="0"),
            _text("invented_facts", notnull=False),
            Column("tokens_per_estimate", "REAL"),
        ),
        (ForeignKey("run_id", "runs", "id"), ForeignKey("session_id", "sessions", "id")),
    ),
    ("index", "sessions_one_active_per_key"): _index(
        "sessions", "conversation_key", unique=True, where="status = 'active'"
    ),
    ("index", "sessions_by_status_updated"): _index("sessions", "status", "updated_at"),
    ("index", "messages_by_session"): _index("messages", "session_id", "id"),
    ("index", "messages_by_folding_run"): _index("messages", "folded_by"),
    ("index", "runs_by_session"): _index("runs", "session_id", "id"),
    ("index", "runs_by_trigger"): _index("runs", "trigger", "id"),
    ("index", "runs_by_started"): _index("runs", "started_at"),
    ("index", "audit_by_event"): _index("audit", "event", "id"),
    ("index", "audit_by_ts"): _index("audit", "ts"),
    ("index", "audit_by_session"): _index("audit", "session_id"),
    ("index", "compactions_by_session"): _index("compactions", "session_id", "run_id"),
}

# Tables that are not agent data: sqlite-utils' record of applied migrations.
BOOKKEEPING_TABLES = ("_sqlite_migrations",)


def is_ignored(kind: str, name: str, table: str, has_sql: bool) -> bool:
    """Objects the gate does not compare: SQLite's own (sqlite_sequence, sqlite_stat1, the
    indexes behind PRIMARY KEY and UNIQUE) and sqlite-utils' migrations table and its index.
    A trigger or view is never ignored, whatever its name."""
    if kind not in ("table", "index"):
        return False
    if name.lower().startswith("sqlite_") and (kind == "table" or not has_sql):
        return True
    return table.lower() in BOOKKEEPING_TABLES


# SQL tokens: string literals, quoted identifiers, words, numbers, operators.
_TOKEN = re.compile(
    r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\]|[A-Za-z_][\w$]*|\d[\w.]*"""
    r"""|<>|!=|<=|>=|==|\|\||\S"""
)


def sql_tokens(sql: str) -> list[str]:
    """The tokens of an SQL fragment, as SQLite reads them: identifiers unquoted and
    lowercased (SQLite's names ignore case), keywords lowercased, string literals exact."""
    tokens = []
    for token in _TOKEN.findall(sql):
        if token[0] in '"`[':
            token = token[1:-1].replace(token[0] * 2, token[0]) if token[0] != "[" else token[1:-1]
            token = token.lower()
        elif token[0] != "'":
            token = token.lower()
        tokens.append(token)
    return tokens


def normalize_sql(sql: str | None) -> str | None:
    """An SQL fragment with formatting, quoting and letter case taken out."""
    return None if sql is None else " ".join(sql_tokens(sql))


def virtual_module(create_sql: str | None) -> str | None:
    """The normalized `module(arguments)` of a CREATE VIRTUAL TABLE statement."""
    tokens = sql_tokens(create_sql or "")
    return " ".join(tokens[tokens.index("using") + 1 :]) if "using" in tokens else None


def index_definition(create_sql: str | None) -> tuple[bool, str | None]:
    """Whether a CREATE INDEX statement makes a unique index, and its normalized WHERE
    condition (None for a full index). An index SQLite made itself has no statement."""
    if create_sql is None:
        return True, None  # the index behind a PRIMARY KEY or UNIQUE constraint
    tokens = sql_tokens(create_sql)
    depth = 0
    for n, token in enumerate(tokens):
        depth += {"(": 1, ")": -1}.get(token, 0)
        if depth == 0 and token == "where":
            return tokens[1] == "unique", " ".join(tokens[n + 1 :])
    return tokens[1] == "unique", None


# Objects volumetool itself adds beside the migrations' schema: the search index
# (volumetool/search/index.py), two FTS5 tables with their shadow tables and a table of counts.
# Each is accepted only as defined here (a virtual table by its module and arguments, the others
# by their columns) and none needs to be there; a trigger or a view is never one of them, since
# its code would run with every write.
SEARCH_TOKENIZER = "unicode61 remove_diacritics 0"
SEARCH_FTS5 = f"fts5(text, key, tokenize = '{SEARCH_TOKENIZER}', columnsize = 0)"
SEARCH_TABLES = ("search_messages", "search_texts")
SEARCH_STATE = "search_state"
# Where a first build of the index is copied into the file before each table takes its name.
SEARCH_BUILDS = ("search_build_messages", "search_build_texts")


def _untyped(name: str, pk: int = 0) -> Column:
    return Column(name, "", notnull=pk > 0, pk=pk)  # a WITHOUT ROWID key is NOT NULL


def _fts5_objects(name: str) -> dict[tuple[str, str], Definition]:
    """An FTS5 table as SQLite lays it out: the virtual table and its shadow tables (no
    `_docsize`, with columnsize = 0)."""
    return {
        ("table", name): Table((), virtual=True, module=normalize_sql(SEARCH_FTS5)),
        ("table", f"{name}_data"): Table((_ID, Column("block", "BLOB"))),
        ("table", f"{name}_idx"): Table(
            (_untyped("segid", 1), _untyped("term", 2), _untyped("pgno"))
        ),
        ("table", f"{name}_content"): Table((_ID, _untyped("c0"), _untyped("c1"))),
        ("table", f"{name}_config"): Table((_untyped("k", 1), _untyped("v"))),
    }


# The search index, complete or not at all (`search.index.index_state`).
INDEX_OBJECTS: Schema = {
    **{key: d for name in SEARCH_TABLES for key, d in _fts5_objects(name).items()},
    ("table", SEARCH_STATE): Table((Column("name", "TEXT", pk=1), _integer("value", True))),
}
# Everything volumetool may add to an agent file: the index, and a first build of it under way.
VOLUMETOOL_OBJECTS: Schema = {
    **INDEX_OBJECTS,
    **{key: d for name in SEARCH_BUILDS for key, d in _fts5_objects(name).items()},
}


@dataclass(frozen=True)
class Difference:
    """One way a file's schema departs from the format."""

    kind: str  # unknown | missing | altered
    type: str
    name: str
    table: str
    detail: str = ""

    def describe(self) -> str:
        on = f" on {self.table}" if self.type in ("trigger", "index") else ""
        what = f"{self.type} {self.name}{on}"
        if self.kind == "missing":
            return f"{what} is missing"
        if self.kind == "altered":
            return f"{what}: {self.detail}"
        return what


def _table_changes(found: Table, expected: Table) -> Iterator[str]:
    if found.virtual != expected.virtual:
        yield "a virtual table" if found.virtual else "not a virtual table"
        return
    if found.module != expected.module:
        yield "another module or other arguments"
        return
    have = {c.name: c for c in found.columns}
    want = {c.name: c for c in expected.columns}
    yield from (f"column {name} is not in the format" for name in have if name not in want)
    yield from (f"column {name} is missing" for name in want if name not in have)
    yield from (
        f"column {name} differs" for name in want if name in have and have[name] != want[name]
    )
    if [c.name for c in found.columns if c.name in want] != [
        c.name for c in expected.columns if c.name in have
    ]:
        yield "columns in another order"
    if found.foreign_keys != expected.foreign_keys:
        yield "foreign keys differ"


def _changes(found: Definition, expected: Definition) -> str:
    if isinstance(found, Table) and isinstance(expected, Table):
        return ", ".join(_table_changes(found, expected))
    return "defined differently"


def _lowered(schema: Schema) -> dict[tuple[str, str], tuple[str, Definition]]:
    return {(kind, name.lower()): (name, d) for (kind, name), d in schema.items()}


def compare(
    found: Schema, expected: Schema, optional: Schema = VOLUMETOOL_OBJECTS
) -> list[Difference]:
    """Every object of `found` the format does not define, every object it defines that
    `found` lacks, and every one defined differently; unknown objects first. `optional`
    objects (volumetool's own) may be absent, and are compared when present. Names match
    whatever their letter case, as in SQLite; differences name objects as `found` spells
    them."""
    have = _lowered(found)
    want = _lowered(expected)
    extra = {k: v for k, v in _lowered(optional).items() if k in have and k not in want}
    want |= extra
    differences = []
    for key in sorted(have.keys() - want.keys()):
        differences.append(_difference("unknown", key[0], *have[key]))
    for key in sorted(want.keys() - have.keys() - extra.keys()):
        differences.append(_difference("missing", key[0], *want[key]))
    for key in sorted(have.keys() & want.keys()):
        (name, definition), (_, wanted) = have[key], want[key]
        if definition != wanted:
            detail = _changes(definition, wanted) or "defined differently"
            differences.append(_difference("altered", key[0], name, definition, detail))
    return differences


def _difference(
    kind: str, type_: str, name: str, definition: Definition, detail: str = ""
) -> Difference:
    table = name if isinstance(definition, Table) else definition.table
    return Difference(kind, type_, name, table, detail)

"""The search index volumetool keeps in the agent file, and what it lacks at any moment.

The agent runtime writes the file and knows nothing of the index, so nothing keeps it current
as the agent writes (no trigger: it would run inside the agent's transactions, and fail them
where FTS5 is missing or `trusted_schema` is off). Instead every search works out, in its own
read snapshot, what the index lacks, and reads that directly:

- `search_messages` holds each message's text under the message id. Messages are appended, so
  the ids above the highest one indexed are the new ones; below it, a message can only have
  been deleted (the index row is then ignored: every hit is checked against the live row, text
  included) or, after the highest messages were deleted, replaced by a new one with a reused
  id, which a walk down from the top finds.
- `search_texts` holds the thread summaries, the summaries each compaction kept (but those
  undone) and the memories, under `id * 4 + slot`; there are few of them, so each is compared
  with the index.
- `search_state` counts the indexed messages, so that a deleted one shows without reading the
  index whole.

A search then refreshes the index in short transactions when it lacks much, or holds text the
volume no longer has (so that the copy of a deleted message does not outlive it for long).
Any state of the index is right in this sense, so a refresh killed anywhere leaves nothing to
repair, and two refreshes can run at once: each transaction works out its part again under
the write lock.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from volumetool.format import (
    INDEX_OBJECTS,
    SEARCH_BUILDS,
    SEARCH_FTS5,
    SEARCH_STATE,
    SEARCH_TABLES,
    compare,
)
from volumetool.volume import Volume, give_way, read_schema, resized

MESSAGES, TEXTS = SEARCH_TABLES
BUILDS = dict(zip(SEARCH_TABLES, SEARCH_BUILDS, strict=True))  # each table's first build
SLOT_SUMMARY, SLOT_HISTORY, SLOT_MEMORY = 1, 2, 3  # text document id = source id * 4 + slot
# Source ids beyond this would overflow `id * 4`; no agent file comes near (they are not found).
ID_LIMIT = 1 << 60
REFRESH_AT = 1_000  # a search that lacks fewer reads them directly and writes nothing
WALK = 64  # messages compared at a time when looking for reused ids below the top
FIRST = 100  # documents the first transaction of a refresh or tidy writes; then sized by time
# Seconds of copying each write transaction of a first build aims at (then `give_way`, as
# long again): a copy is plain rows, so three times prune's work a transaction, which makes
# fewer turns of the copy, still lets an agent's write in within about 50 ms, its commit
# included (writing the copied pages to the WAL: 25 ms of copying took 15-25 ms more at the
# commit, and the agent waited up to 58-90 ms; at 15 ms, 23-54 ms on a loaded machine).
# Indexing is not plain rows: FTS5 merges its segments now and then within a write, one
# transaction in ten or so taking 10 ms more whatever its size, so a refresh aims at prune's
# WORK_SECONDS (measured on 50,000 new messages: the agent waited up to 57-60 ms aiming at 25
# or 10 ms a transaction, 34-36 ms at 5 ms, the refresh a quarter longer).
TURN = 0.015


@dataclass(frozen=True)
class TextSource:
    """Where one slot of `search_texts` comes from."""

    slot: int
    table: str
    id: str
    text: str
    key: str
    where: str


TEXT_SOURCES = (
    TextSource(SLOT_SUMMARY, "sessions", "id", "summary", "NULL", "t.summary IS NOT NULL"),
    # An undone compaction's summary is no longer part of the thread (SPEC 13): not indexed.
    TextSource(
        SLOT_HISTORY,
        "compactions",
        "run_id",
        "summary",
        "NULL",
        "t.summary IS NOT NULL AND t.undone_at IS NULL",
    ),
    TextSource(SLOT_MEMORY, "memories", "rowid", "value", "t.key", "1"),
)


def create_statements() -> list[str]:
    """The index's objects, exactly as `format.INDEX_OBJECTS` defines them."""
    return [
        *(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING {SEARCH_FTS5}"
            for name in SEARCH_TABLES
        ),
        f"CREATE TABLE IF NOT EXISTS {SEARCH_STATE}"
        " (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        f"INSERT OR IGNORE INTO {SEARCH_STATE} (name, value) VALUES ('messages', 0)",
    ]


def index_state(conn: sqlite3.Connection) -> str:
    """`absent`, `present` (every object there, as volumetool defines it), `partial` (some
    missing, none altered: a refresh completes it) or `foreign` (an object under one of its
    names is defined otherwise: not volumetool's, never read or written)."""
    ours = {(kind, name.lower()) for kind, name in INDEX_OBJECTS}
    found = {key: d for key, d in read_schema(conn).items() if (key[0], key[1].lower()) in ours}
    if not found:
        return "absent"
    differences = compare(found, INDEX_OBJECTS, optional={})
    if any(d.kind != "missing" for d in differences):
        return "foreign"
    return "partial" if differences else "present"


@dataclass(frozen=True)
class Pending:
    """What the index lacks in one snapshot of the volume."""

    indexed: bool  # the index is there and volumetool's
    top: int | None  # the highest message id indexed; None: every message is lacking
    tail: int  # messages above `top`
    changed: tuple[int, ...]  # message ids at or below `top` whose text the index lacks
    texts: tuple[int, ...]  # text document ids the index lacks or holds other text for
    gone_messages: bool = False  # it holds messages that were deleted (or that it lacks)
    gone_texts: bool = False  # it holds summaries or memories that were deleted or changed

    @property
    def stale(self) -> bool:
        """The index holds text the volume no longer has."""
        return bool(self.changed) or self.gone_messages or self.gone_texts

    @property
    def count(self) -> int:
        return self.tail + len(self.changed) + len(self.texts)

    def wants_refresh(self) -> bool:
        return not self.indexed or self.stale or self.count >= REFRESH_AT


def _scalar(conn: sqlite3.Connection, sql: str, *params: object) -> object:
    return conn.execute(sql, params).fetchone()[0]


def _changed_messages(conn: sqlite3.Connection, top: int) -> list[int]:
    """Message ids at or below `top` whose text the index lacks: new messages that took the
    ids of deleted ones. They sit at the top (SQLite hands out the highest id plus one), so
    the walk stops at the first stretch of WALK messages that are all indexed as they are."""
    changed: list[int] = []
    below = top
    while True:
        rows = conn.execute(
            f"SELECT m.id, c.c0 IS m.content FROM messages m"
            f" LEFT JOIN {MESSAGES}_content c ON c.id = m.id"
            " WHERE m.id <= ? ORDER BY m.id DESC LIMIT ?",
            (below, WALK),
        ).fetchall()
        differing = [message for message, same in rows if not same]
        changed += differing
        if not differing or len(rows) < WALK:
            return changed
        below = rows[-1][0] - 1


def _texts_lacking(
    conn: sqlite3.Connection, source: TextSource, indexed: bool
) -> tuple[int, list[int]]:
    """How many documents `source` has, and those the index lacks or holds other text for:
    one pass over the source (a memory at a time is compared with its indexed copy)."""
    doc = f"t.{source.id} * 4 + {source.slot}"
    lacking, join = doc, ""
    if indexed:
        lacking = (
            f"CASE WHEN c.c0 IS NOT t.{source.text} OR c.c1 IS NOT {source.key} THEN {doc} END"
        )
        join = f"LEFT JOIN {TEXTS}_content c ON c.id = {doc}"
    count, docs = conn.execute(
        f"SELECT count(*), group_concat({lacking}) FROM {source.table} t {join}"
        f" WHERE {source.where} AND t.{source.id} BETWEEN {-ID_LIMIT} AND {ID_LIMIT}"
    ).fetchone()
    return count, [int(d) for d in docs.split(",")] if docs else []


def _stale_texts_sql() -> str:
    """Text documents whose source is gone or holds other text now."""
    cases = " ".join(
        f"WHEN {s.slot} THEN EXISTS (SELECT 1 FROM {s.table} t WHERE t.{s.id} = c.id >> 2"
        f" AND t.{s.text} = c.c0 AND {s.key} IS c.c1 AND {s.where})"
        for s in TEXT_SOURCES
    )
    return f"SELECT c.id FROM {TEXTS}_content c WHERE NOT CASE c.id & 3 {cases} ELSE 0 END"


def pending(conn: sqlite3.Connection, use_index: bool = True) -> Pending:
    """What the index lacks, and whether it holds text the volume no longer has. Without
    `use_index`, as if there were none: everything is lacking."""
    indexed = use_index and index_state(conn) == "present"
    counted_texts = [_texts_lacking(conn, source, indexed) for source in TEXT_SOURCES]
    texts = tuple(doc for _, docs in counted_texts for doc in docs)
    total = _scalar(conn, "SELECT count(*) FROM messages")
    if not indexed:
        return Pending(False, None, total, (), texts)
    rightly_indexed = sum(count for count, _ in counted_texts) - len(texts)
    gone_texts = _scalar(conn, f"SELECT count(*) FROM {TEXTS}_content") != rightly_indexed
    top = _scalar(conn, f"SELECT max(id) FROM {MESSAGES}_content")
    if top is None:
        return Pending(True, None, total, (), texts, gone_texts=gone_texts)
    tail = _scalar(conn, "SELECT count(*) FROM messages WHERE id > ?", top)
    counted = _scalar(conn, f"SELECT value FROM {SEARCH_STATE} WHERE name = 'messages'")
    return Pending(
        True,
        top,
        tail,
        tuple(_changed_messages(conn, top)),
        texts,
        gone_messages=counted != total - tail,
        gone_texts=gone_texts,
    )


def _ids(values: Iterable[int]) -> str:
    return json.dumps(list(values))


_IN_BATCH = "IN (SELECT value FROM json_each(?))"  # the ids `_ids` gave


def add_messages(
    conn: sqlite3.Connection,
    table: str,
    top: int | None,
    limit: int | None = None,
    ids: tuple[int, ...] = (),
) -> int:
    """Index into `table` the messages `ids` and those above `top` (all with None), at most
    `limit` of the latter, in id order; returns how many."""
    added = 0
    if ids:
        added += conn.execute(
            f"INSERT INTO {table} (rowid, text) SELECT id, content FROM messages"
            " WHERE id IN (SELECT value FROM json_each(?))",
            (_ids(ids),),
        ).rowcount
    if limit == 0:
        return added
    above, params = ("", ()) if top is None else ("WHERE id > ?", (top,))
    added += conn.execute(
        f"INSERT INTO {table} (rowid, text) SELECT id, content FROM messages {above}"
        " ORDER BY id LIMIT ?",
        (*params, -1 if limit is None else limit),
    ).rowcount
    return added


def add_texts(
    conn: sqlite3.Connection, table: str, docs: Iterable[int], lacking: bool = False
) -> None:
    """Index into `table` the text documents `docs` (ids `source id * 4 + slot`) that are
    there to index; with `lacking`, only those `table` does not hold yet."""
    docs = list(docs)
    for source in TEXT_SOURCES:
        ids = [doc >> 2 for doc in docs if doc & 3 == source.slot]
        if ids:
            doc = f"t.{source.id} * 4 + {source.slot}"
            held = f" AND NOT EXISTS (SELECT 1 FROM {table}_content c WHERE c.id = {doc})"
            conn.execute(
                f"INSERT INTO {table} (rowid, text, key) SELECT {doc}, t.{source.text},"
                f" {source.key} FROM {source.table} t WHERE t.{source.id} {_IN_BATCH}"
                f" AND {source.where}{held if lacking else ''}",
                (_ids(ids),),
            )


def _count_messages(conn: sqlite3.Connection, change: int | None = None) -> None:
    """Keep `search_state` counting the indexed messages: add `change`, or count them."""
    if change is None:
        conn.execute(
            f"UPDATE {SEARCH_STATE} SET value = (SELECT count(*) FROM {MESSAGES}_content)"
            " WHERE name = 'messages'"
        )
    elif change:
        conn.execute(
            f"UPDATE {SEARCH_STATE} SET value = value + ? WHERE name = 'messages'", (change,)
        )


# Index rows whose message is gone, or holds other text now (its id was reused).
_STALE_MESSAGES = (
    f"SELECT c.id FROM {MESSAGES}_content c LEFT JOIN messages m ON m.id = c.id"
    " WHERE m.content IS NOT c.c0"
)
# Messages at or below an id that the index lacks.
_LACKING_BELOW = (
    f"SELECT m.id FROM messages m WHERE m.id <= ? AND NOT EXISTS"
    f" (SELECT 1 FROM {MESSAGES}_content c WHERE c.id = m.id)"
)

Step = Callable[[sqlite3.Connection, int], bool]


def in_turns(volume: Volume, step: Step) -> None:
    """Call `step(conn, size)` in write transactions until it returns False (nothing left, or
    no index to keep), giving way after each, the last too (`volume.give_way`): each `size`d
    by `volume.resized` to hold the write lock about `volume.WORK_SECONDS`, as a prune does.
    FTS5 writes what it was given at a savepoint or the commit: a savepoint at the end of
    the work has it written where it is timed (a commit in a rollback journal syncs, as long
    for one row as for many, so the commit itself does not size the next)."""
    size = FIRST
    while True:
        with volume.write() as conn:
            started = time.monotonic()  # the lock is ours: the wait for it is not our work
            more = step(conn, size)
            conn.execute("SAVEPOINT written")
            conn.execute("RELEASE written")
            work = time.monotonic() - started
        give_way(volume.conn, time.monotonic() - started)  # before any other work too
        if not more:
            return
        size = resized(size, work, size * 2)


def each_in_turns(
    volume: Volume, items: list[int], mend: Callable[[sqlite3.Connection, list[int]], bool]
) -> None:
    """`mend(conn, some)` for every item of `items`, a time-sized slice a transaction
    (`in_turns`), until all are done or `mend` returns False."""
    done = 0

    def step(conn: sqlite3.Connection, size: int) -> bool:
        nonlocal done
        if not mend(conn, items[done : done + size]):
            return False
        done += size
        return done < len(items)

    if items:
        in_turns(volume, step)


def mend_messages(conn: sqlite3.Connection, ids: list[int]) -> bool:
    """Make the index hold exactly what the messages `ids` say now, checked under the write
    lock: a copy whose message is gone or says something else now taken out, one it lacks
    added. False when there is no index to keep (`_maintained`)."""
    if not _maintained(conn):
        return False
    batch = _ids(ids)
    removed = conn.execute(
        f"DELETE FROM {MESSAGES} WHERE rowid IN ({_STALE_MESSAGES} AND c.id {_IN_BATCH})",
        (batch,),
    ).rowcount
    added = conn.execute(
        f"INSERT INTO {MESSAGES} (rowid, text) SELECT m.id, m.content FROM messages m"
        f" WHERE m.id {_IN_BATCH} AND NOT EXISTS"
        f" (SELECT 1 FROM {MESSAGES}_content c WHERE c.id = m.id)",
        (batch,),
    ).rowcount
    _count_messages(conn, added - removed)
    return True


def mend_texts(conn: sqlite3.Connection, docs: list[int]) -> bool:
    """`mend_messages` for the text documents `docs` (summaries and memories)."""
    if not _maintained(conn):
        return False
    conn.execute(
        f"DELETE FROM {TEXTS} WHERE rowid IN ({_stale_texts_sql()} AND c.id {_IN_BATCH})",
        (_ids(docs),),
    )
    add_texts(conn, TEXTS, docs, lacking=True)
    return True


def tidy(volume: Volume) -> None:
    """Take out of the index every copy of text the volume no longer has: deleted or replaced
    messages, summaries and memories. They are found in a read snapshot (a deleted message is
    known only by its absence: tenths of a second for a million), then set right in short
    transactions (`each_in_turns`), each checked again under the write lock; with
    secure_delete where they stood."""
    with volume.snapshot() as conn:
        if index_state(conn) != "present":
            return
        messages = [row for (row,) in conn.execute(_STALE_MESSAGES)]
        texts = [row for (row,) in conn.execute(_stale_texts_sql())]
    each_in_turns(volume, messages, mend_messages)
    each_in_turns(volume, texts, mend_texts)


def append(conn: sqlite3.Connection, size: int) -> bool:
    """Index the next `size` messages above the highest indexed; whether there may be more."""
    if not _maintained(conn):
        return False
    top = _scalar(conn, f"SELECT max(id) FROM {MESSAGES}_content")
    added = add_messages(conn, MESSAGES, top, size)
    _count_messages(conn, added)
    return added == size


Progress = Callable[[int, int], None]  # (done, total) of a first build


def refresh(volume: Volume, found: Pending, progress: Progress | None = None) -> None:
    """Bring the index up to date in short write transactions that give way to the agent
    (`in_turns`); a volume with no index at all is indexed by `build` first. What the index
    lacks or holds stale is found in a read snapshot, off the write lock, and each transaction
    checks its part again under it. `found`: what the search's snapshot found."""
    volume.conn.execute("PRAGMA secure_delete = ON")  # a text taken out leaves no copy
    if _journal_mode(volume.conn) == "wal":
        # Many small commits of a copy the volume's own rows can always make again: the WAL
        # is synced at checkpoints, not at each (the agent would wait for each sync).
        volume.conn.execute("PRAGMA synchronous = NORMAL")
    if not found.indexed and found.count:
        with volume.snapshot() as conn:
            absent = index_state(conn) == "absent"
        if absent and _journal_mode(volume.conn) == "wal":
            build(volume, progress or (lambda done, total: None))
        elif absent:  # built below instead: what a killed build left goes first
            with volume.write() as conn:
                drop_build(conn)
    with volume.snapshot() as conn:
        present = index_state(conn) == "present"
    if not present:
        with volume.write() as conn:  # an index given up, or some of its objects gone
            for statement in create_statements():
                conn.execute(statement)
    with volume.snapshot() as conn:
        found = pending(conn)
        messages, texts = set(found.changed), set(found.texts)
        miscounted = False
        if found.gone_messages and found.top is not None:
            messages.update(row for (row,) in conn.execute(_STALE_MESSAGES))
            messages.update(row for (row,) in conn.execute(_LACKING_BELOW, (found.top,)))
            # each transaction adds to the count what it adds to the index: a count that
            # differs from the rows indexed stays so until counted again (its row was lost)
            miscounted = _scalar(
                conn, f"SELECT value FROM {SEARCH_STATE} WHERE name = 'messages'"
            ) != _scalar(conn, f"SELECT count(*) FROM {MESSAGES}_content")
        if found.gone_texts:
            texts.update(row for (row,) in conn.execute(_stale_texts_sql()))
    each_in_turns(volume, sorted(texts), mend_texts)
    each_in_turns(volume, sorted(messages), mend_messages)
    if miscounted:
        with volume.write() as conn:
            if _maintained(conn):
                _count_messages(conn)
    in_turns(volume, append)


# -- a first build: the tokenizing off the write lock ------------------------------------------


def _journal_mode(conn: sqlite3.Connection) -> str:
    """The volume's journal mode. A first build reads the whole volume in one snapshot; only in
    WAL mode does a reader leave the agent's commits alone. With a rollback journal its read
    lock holds every commit of the agent off until the last message is tokenized (measured:
    1.2 s for 500,000 short messages, past a busy timeout on a large volume), so the index is
    built as `refresh` keeps it, in write transactions sized by time."""
    return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()


FILL = 20_000  # messages FTS5 reads per statement of a first build (progress between them)
# The tables of an FTS5 index and their keys, the structure and settings last.
SHADOWS = (("content", "id"), ("idx", "segid, term"), ("data", "id"), ("config", "k"))


def build(volume: Volume, progress: Progress) -> bool:
    """Index every message, summary and memory of a volume that has no index, without holding
    the agent up for longer than a short copy at a time. FTS5 fills the index in a scratch
    database from one read snapshot (the tokenizing: nearly all the work, and none of it under
    the volume's write lock); its tables are then copied into the volume under SEARCH_BUILDS
    in short write transactions, and take their names in a last one. What the agent changed
    since the snapshot is then what any index lacks or holds stale, which `refresh` goes on
    to set right (and a search never shows: every hit is checked against its row). The build
    is given up (False; `refresh` then indexes everything as it does what any index lacks)
    when an erase came after its snapshot (the copy holds what it erased), when an index was
    made meanwhile, or when another build took its tables. The scratch database is SQLite's
    temporary one, deleted from the disk as it is opened: a build killed anywhere leaves at
    most SEARCH_BUILDS in the volume, which the next one drops."""
    with Volume(volume.path, readonly=False, busy_timeout=volume.busy_timeout) as copier:
        # Its own connection: the FTS5 tables it creates and fills by hand are never read
        # through its cache, and are renamed before anyone reads them.
        try:
            return _Build(copier, progress).run()
        finally:
            volume.written = volume.written or copier.written


class _Build:
    """One first build of the index: `build`."""

    def __init__(self, copier: Volume, progress: Progress) -> None:
        self.copier, self.progress = copier, progress
        self.token = os.urandom(16).hex()  # in the build's tables while it is this one's
        self.count = self.audited = 0

    def run(self) -> bool:
        conn = self.copier.conn
        conn.execute("PRAGMA secure_delete = ON")
        # The copy's many commits are synced at checkpoints, not each (the agent waited for
        # each sync: 15 ms of its 40 ms): one lost to a power cut leaves a build the next drops.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("ATTACH DATABASE '' AS scratch")
        try:
            self.fill()
            return self.copy()
        finally:
            conn.execute("DETACH DATABASE scratch")

    def fill(self) -> None:
        """Index in the scratch database everything of one snapshot of the volume (its tables
        are read under their own names); count the messages, note the last audit event."""
        conn = self.copier.conn
        for name in SEARCH_BUILDS:
            conn.execute(f"CREATE VIRTUAL TABLE scratch.{name} USING {SEARCH_FTS5}")
        messages, texts = (f"scratch.{BUILDS[name]}" for name in SEARCH_TABLES)
        with self.copier.translating():
            conn.execute("BEGIN")
            try:
                found = pending(conn, use_index=False)
                add_texts(conn, texts, found.texts)
                top = None
                while added := add_messages(conn, messages, top, FILL):
                    self.count += added
                    self.progress(self.count, 2 * found.tail)
                    top = _scalar(conn, f"SELECT max(id) FROM {messages}_content")
                self.audited = _scalar(conn, "SELECT coalesce(max(id), 0) FROM main.audit")
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

    def copy(self) -> bool:
        """Copy the scratch index into the volume, about TURN seconds of copying a
        transaction (`give_way` after each), and give its tables their names."""
        if not self.start():
            return False
        copied = 0
        for name in SEARCH_BUILDS:
            for suffix, key in SHADOWS:
                for added in self.copy_rows(f"{name}_{suffix}", key):
                    if added is None:
                        return False
                    if name == BUILDS[MESSAGES] and suffix == "content":
                        copied += added
                        self.progress(self.count + copied, 2 * self.count)
        return self.finish()

    def start(self) -> bool:
        """Make the build's tables in the volume, marked as this build's."""
        with self.copier.write() as conn:
            if index_state(conn) != "absent":
                return False
            drop_build(conn)  # one a killed build left (or another build's, which gives up)
            for name in SEARCH_BUILDS:
                conn.execute(f"CREATE VIRTUAL TABLE main.{name} USING {SEARCH_FTS5}")
            conn.execute(
                f"INSERT INTO main.{BUILDS[MESSAGES]}_content (id, c0) VALUES (-1, ?)",
                (self.token,),
            )
        give_way(self.copier.conn, 0.0)
        return True

    def finish(self) -> bool:
        """Give the copied tables their names, in one transaction."""
        with self.copier.write() as conn:
            if not self.wanted(conn):
                return False
            conn.execute(f"DELETE FROM main.{BUILDS[MESSAGES]}_content WHERE id = -1")
            if index_state(conn) != "absent" or not _renamed(conn):
                drop_build(conn)
                return False
            for statement in create_statements():
                conn.execute(statement)
            conn.execute(
                f"UPDATE {SEARCH_STATE} SET value = ? WHERE name = 'messages'", (self.count,)
            )
        return True

    def wanted(self, conn: sqlite3.Connection) -> bool:
        """Whether the build may go on: its tables are still this build's (another build
        drops them, an erase too), and no erase was committed since its snapshot (an audit
        event above the one it noted): the copy holds what that erase deleted, which must
        not come back into the file, even for a while. If not, the tables are dropped."""
        try:
            mine = (
                _scalar(conn, f"SELECT c0 FROM main.{BUILDS[MESSAGES]}_content WHERE id = -1")
                == self.token
            )
        except (sqlite3.OperationalError, TypeError):  # dropped: no table, or no row
            mine = False
        if mine and not _scalar(
            conn,
            "SELECT EXISTS (SELECT 1 FROM main.audit WHERE id > ? AND event = 'erase')",
            self.audited,
        ):
            return True
        if mine:
            drop_build(conn)
        return False

    def copy_rows(self, table: str, key: str) -> Iterator[int | None]:
        """Copy `table` from the scratch index in key order, one write transaction of about
        TURN seconds at a time, then `give_way`: how many rows each copied; None, and nothing more
        copied, once the build is not `wanted`."""
        rows, after = 256, ()
        while True:
            with self.copier.write() as conn:
                started = time.monotonic()
                wanted = self.wanted(conn)  # (not yielded here: that would hold the lock)
                if wanted:
                    last, added = self.copy_turn(conn, table, key, after, rows)
                took = time.monotonic() - started
            if not wanted:
                yield None
                return
            give_way(self.copier.conn, took)
            yield added
            if last is None:
                return
            rows, after = resized(rows, took, rows * 2, aim=TURN), tuple(last)

    @staticmethod
    def copy_turn(
        conn: sqlite3.Connection, table: str, key: str, after: tuple, rows: int
    ) -> tuple[tuple | None, int]:
        """Copy the next `rows` rows of `table` after the key `after`: the last key copied
        (None when none is left after them) and how many."""
        bounds, values = [], list(after)
        if after:
            bounds.append(f"({key}) > ({', '.join('?' * len(after))})")
        last = conn.execute(
            f"SELECT {key} FROM scratch.{table} {_where(bounds)} ORDER BY {key} LIMIT 1 OFFSET ?",
            (*values, rows - 1),
        ).fetchone()
        if last is not None:
            bounds.append(f"({key}) <= ({', '.join('?' * len(last))})")
            values += last
        added = conn.execute(
            f"INSERT OR REPLACE INTO main.{table} SELECT * FROM scratch.{table} {_where(bounds)}",
            values,
        ).rowcount
        return last, added


def _renamed(conn: sqlite3.Connection) -> bool:
    """Each table of the build given its name, or none (False)."""
    conn.execute("SAVEPOINT renaming")
    try:
        for name, build in BUILDS.items():
            conn.execute(f"ALTER TABLE main.{build} RENAME TO {name}")
    except sqlite3.OperationalError:  # a view of the agent's that SQLite cannot read
        conn.execute("ROLLBACK TO renaming")
        return False
    finally:
        conn.execute("RELEASE renaming")
    return True


def _where(conditions: list[str]) -> str:
    return f"WHERE {' AND '.join(conditions)}" if conditions else ""


DELTA = {MESSAGES: "search_delta_messages", TEXTS: "search_delta_texts"}


def index_lacking(conn: sqlite3.Connection, found: Pending) -> None:
    """Index what the index lacks into temporary FTS5 tables of this connection (the same
    definition), so that a search reads it as it reads the index. Call inside the snapshot
    `found` comes from; they go with its rollback."""
    for name in DELTA.values():
        conn.execute(f"DROP TABLE IF EXISTS temp.{name}")
        conn.execute(f"CREATE VIRTUAL TABLE temp.{name} USING {SEARCH_FTS5}")
    add_messages(conn, f"temp.{DELTA[MESSAGES]}", found.top, None, found.changed)
    add_texts(conn, f"temp.{DELTA[TEXTS]}", found.texts)


# -- for prune and erase: taking text out of the index with the rows it came from ------------


def drop(conn: sqlite3.Connection) -> None:
    """Drop the index (every object; the next search builds it again). SQLite opens an FTS5
    table to drop it, and cannot when one of its own tables was dropped or emptied by hand
    ("vtable constructor failed"): those are first put back as a new, empty index has them,
    so that the text in the others still goes."""
    for name in (*SEARCH_TABLES, *SEARCH_BUILDS):
        _drop_fts5(conn, name)
    conn.execute(f"DROP TABLE IF EXISTS {SEARCH_STATE}")


def drop_build(conn: sqlite3.Connection) -> None:
    """Drop a first build of the index under way or killed (an erase: it holds copies of
    text from before it)."""
    for name in SEARCH_BUILDS:
        _drop_fts5(conn, name)


def _drop_fts5(conn: sqlite3.Connection, name: str) -> None:
    try:
        conn.execute(f"DROP TABLE IF EXISTS main.{name}")  # not a build's scratch copy
    except sqlite3.DatabaseError:
        _restore_own_tables(conn, name)
        conn.execute(f"DROP TABLE IF EXISTS main.{name}")


def _restore_own_tables(conn: sqlite3.Connection, name: str) -> None:
    """Give the FTS5 table `name` back what its constructor reads: each of its shadow tables
    that is missing, created, and the rows an empty index of this SQLite starts with (its
    structure record, its format version) written over whatever is left. Both are taken from a
    new index made in memory, so nothing here depends on FTS5's file format."""
    fresh = sqlite3.connect(":memory:")
    try:
        fresh.execute(f"CREATE VIRTUAL TABLE {name} USING {SEARCH_FTS5}")
        shadows = fresh.execute(  # the fresh database holds this index and nothing else
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name != ?", (name,)
        ).fetchall()
        for shadow, sql in shadows:
            conn.execute(sql.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1))
            rows = fresh.execute(f'SELECT * FROM "{shadow}"').fetchall()
            if rows:
                places = ", ".join("?" * len(rows[0]))
                conn.executemany(f'INSERT OR REPLACE INTO "{shadow}" VALUES ({places})', rows)
    finally:
        fresh.close()


def _maintained(conn: sqlite3.Connection) -> bool:
    """Whether there is an index to keep in step; an incomplete one is dropped instead. Call in
    a write transaction: its gate has refused any object not volumetool's."""
    state = index_state(conn)
    if state == "partial":
        drop(conn)
    return state == "present"


def _merged(conn: sqlite3.Connection, merge: str, pages: int) -> bool:
    """Whether the FTS5 'merge' statement `merge` merged anything, given `pages`."""
    before = conn.total_changes
    conn.execute(merge, (pages,))
    return conn.total_changes - before >= 2


def merge_all(volume: Volume) -> None:
    """Merge each FTS5 table down to one segment. A deleted document leaves only a tombstone
    beside its words in the older segments; merging drops both, and with secure_delete the
    pages they freed are zeroed. As FTS5's 'optimize' does, but in short transactions
    (`in_turns`, a number of pages each): a 'merge' with a negative count puts every segment
    on one level and starts merging them, positive ones carry it on. A positive one finds
    nothing to do (SQLite's changes counter then moves by less than 2) once the merge is done,
    but also when another search's refresh wrote two or three segments of its own meanwhile
    (FTS5 then looks at their level first, too few there to merge, and leaves the merge begun
    where it is, the erased words in its inputs): so it ends only where a negative one, which
    merges any two segments, finds nothing to do either (one segment left)."""
    for name in SEARCH_TABLES:
        merge = f"INSERT INTO {name} ({name}, rank) VALUES ('merge', ?)"
        begun = False

        def step(conn: sqlite3.Connection, pages: int, merge: str = merge) -> bool:
            nonlocal begun
            if not _maintained(conn):
                return False
            merged = _merged(conn, merge, pages if begun else -pages)
            if begun and not merged:
                merged = _merged(conn, merge, -pages)
            begun = True
            return merged

        in_turns(volume, step)

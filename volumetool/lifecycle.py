"""Keeping data only as long as a policy says (`prune`) and erasing a person's data on request
(`erase`), SPEC section 11.

Both delete whole threads — the sessions row, its messages, its summary and the summaries its
compactions kept. `erase` does it in one write transaction with its audit event, so a volume
holds the old rows or the new ones, never a mix. `prune` works beside the running agent and
may have much to delete, so it deletes in short transactions, giving way to the agent between
them, oldest thread first (a thread's messages, then the thread); its one audit event is
written with the first of them and counts, in each, exactly what is deleted so far, saying
`"finished": false` until the last: a prune killed midway leaves threads deleted and an event
that says so, and the next prune finishes it under that event.

Runs stay, detached from the thread (session_id NULL), so
that the tokens the volume spent keep adding up, and the event keeps what the threads'
compactions saved (`compaction_saved`), which `status` adds to the savings still on file;
audit events stay too, detached. What they
held of the conversation's words (a failure's missing facts, a tool's arguments) goes with
the thread; their figures and what happened stay. Deletion
runs with `secure_delete`, so the rows' bytes are overwritten where they stood. Their copies
in the search index go afterwards, in short transactions of their own (`index.tidy`): a
search never shows a copy whose row is gone, and the agent never waits long.

`erase` then scrubs the file, since older copies of the text can sit where SQLite never
overwrites them: in free pages and in the unused space of pages (every compaction rewrites the
rows it folds, every /reset frees pages), in the search index's older segments, and in the WAL.
So the index is merged down to one segment, the file is rewritten (VACUUM) and the WAL
truncated. A scrub that cannot finish (killed, or a reader holds the WAL) is finished by
running the same erase again: the erase event says `"scrubbed": false` until a scrub finishes,
so that run knows it finished what was asked.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace

from volumetool import audit
from volumetool.errors import (
    Busy,
    Damaged,
    Interrupted,
    ProblemsFound,
    UnusableInput,
    VolumetoolError,
)
from volumetool.memories import prefix_range
from volumetool.search import index
from volumetool.text import plural
from volumetool.timefmt import now_iso
from volumetool.usage import total_sql
from volumetool.volume import WORK_SECONDS, Volume, give_way, open_for_write

# The threads an operation deletes, chosen once per transaction into a temporary table.
_DOOMED = "temp.lifecycle_threads"


@dataclass(frozen=True)
class EarlierErase:
    """An erase whose rows are deleted but whose scrub did not finish (killed, interrupted, a
    busy WAL): its audit event, which says `"scrubbed": false` until a scrub finishes."""

    id: int
    erased_at: str
    detail: dict

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.detail.get("keys") or [self.detail.get("key")])

    @property
    def memories_prefixes(self) -> tuple[str, ...]:
        named = self.detail.get("memories_prefixes") or [self.detail.get("memories_prefix")]
        return tuple(prefix for prefix in named if prefix)

    def deletion(self) -> Deletion:
        """What it deleted, as its event counts it."""
        return Deletion(**{name: int(self.detail.get(name) or 0) for name in _NO_DELETION.counts()})


@dataclass(frozen=True)
class Deletion:
    """What a prune or an erase deletes (or, dry, would delete), as counts."""

    threads: int
    messages: int
    summaries: int  # threads' current summaries
    kept_summaries: int  # summaries earlier compactions kept (`compactions` rows)
    runs_detached: int
    audit_detached: int
    # What the threads' standing compactions saved (their `compactions` rows go with them):
    # the event keeps it, so that `status`'s tokens.compaction_saved does not change.
    compaction_saved: int
    memories: int = 0
    # erase: the keys given under which no thread was found (the others were erased)
    absent_keys: tuple[str, ...] = field(default=(), compare=False)
    # erase: the earlier erases whose scrub did not finish, which this one's scrub finishes
    scrubbed_earlier: tuple[EarlierErase, ...] = field(default=(), compare=False)

    def counts(self) -> dict[str, int]:
        counts = asdict(self)
        del counts["absent_keys"], counts["scrubbed_earlier"]
        return counts

    def thread_counts(self) -> dict[str, int]:
        """The counts without memories (a prune never deletes one)."""
        counts = self.counts()
        del counts["memories"]
        return counts


_COUNTS = f"""SELECT
  (SELECT count(*) FROM {_DOOMED}),
  (SELECT count(*) FROM messages WHERE session_id IN (SELECT id FROM {_DOOMED})),
  (SELECT count(*) FROM sessions WHERE id IN (SELECT id FROM {_DOOMED})
     AND summary IS NOT NULL),
  (SELECT count(*) FROM compactions WHERE session_id IN (SELECT id FROM {_DOOMED})),
  (SELECT count(*) FROM runs WHERE session_id IN (SELECT id FROM {_DOOMED})),
  (SELECT count(*) FROM audit WHERE session_id IN (SELECT id FROM {_DOOMED})),
  (SELECT {total_sql("saved_tokens", signed=True)} FROM compactions
     WHERE session_id IN (SELECT id FROM {_DOOMED}) AND undone_at IS NULL)"""


def _choose(conn: sqlite3.Connection, sql: str, params: tuple) -> None:
    # Emptied, not dropped, when it is there: a prune chooses each thread in turn, and every
    # change of the schema (the temporary one too) makes SQLite prepare each statement again.
    conn.execute(f"CREATE TABLE IF NOT EXISTS {_DOOMED} (id INTEGER PRIMARY KEY)")
    conn.execute(f"DELETE FROM {_DOOMED}")
    conn.execute(f"INSERT INTO {_DOOMED} (id) {sql}", params)


def _memories_where(prefixes: Sequence[str]) -> tuple[str, tuple]:
    """Memories under any of `prefixes` (none without one)."""
    ranges = [prefix_range(prefix) for prefix in prefixes]
    where = " OR ".join(f"({clause})" for clause, _ in ranges) or "0"
    return where, tuple(param for _, params in ranges for param in params)


def _count(conn: sqlite3.Connection, memories_prefixes: Sequence[str] = ()) -> Deletion:
    counts = conn.execute(_COUNTS).fetchone()
    where, params = _memories_where(memories_prefixes)
    memories = conn.execute(f"SELECT count(*) FROM memories WHERE {where}", params).fetchone()[0]
    return Deletion(*counts, memories=memories)


# What a deleted thread's detached audit events keep: their figures (numbers, booleans, null)
# and the words that say what happened (`action`, `model`, `key`, and a permission's `tool`
# and `decision`); any other text may be copied from the conversation — the facts a summary
# missed, a refusal quoting the model, a tool's arguments in the agent's own events — and goes
# with the thread, whether a retention policy (prune) or a request (erase) deletes it.
_KEPT = (
    "(type IN ('integer', 'real', 'true', 'false', 'null')"
    " OR (type = 'text' AND key IN ('action', 'model', 'key', 'tool', 'decision')))"
)
_DETACHED_DETAIL = f"""CASE
  WHEN NOT (json_valid(detail) AND json_type(detail) = 'object') THEN '{{}}'
  WHEN NOT EXISTS (SELECT 1 FROM json_each(detail) WHERE NOT {_KEPT}) THEN detail
  ELSE (SELECT json_group_object(key, CASE type WHEN 'true' THEN json('true')
                                                WHEN 'false' THEN json('false') ELSE value END)
        FROM json_each(detail) WHERE {_KEPT}) END"""
# A detached run's error is text about the conversation just as often (`missing: …`).
_DETACHED_ERROR = "CASE WHEN error IS NULL THEN NULL ELSE 'deleted with its thread' END"


def _delete_threads(conn: sqlite3.Connection) -> None:
    """Delete the chosen threads with their messages and kept summaries; detach their runs
    and audit events, keeping of them only what is not the conversation's text. (Their
    copies in the search index go afterwards, `index.tidy`.)"""
    doomed = f"IN (SELECT id FROM {_DOOMED})"
    conn.execute(f"DELETE FROM compactions WHERE session_id {doomed}")
    conn.execute(f"DELETE FROM messages WHERE session_id {doomed}")
    conn.execute(
        f"UPDATE runs SET session_id = NULL, error = {_DETACHED_ERROR} WHERE session_id {doomed}"
    )
    conn.execute(
        f"UPDATE audit SET session_id = NULL, detail = {_DETACHED_DETAIL} WHERE session_id {doomed}"
    )
    conn.execute(f"DELETE FROM sessions WHERE id {doomed}")
    conn.execute(f"DELETE FROM {_DOOMED}")


# -- prune ---------------------------------------------------------------------------------

_ARCHIVED_BEFORE = "SELECT id FROM sessions WHERE status = 'archived' AND updated_at < ?"


def check_before(before: str, now: str | None = None) -> str:
    """`--archived-before` must lie in the past: a moment to come would take every archived
    thread, surely not what was meant."""
    if before > (now or now_iso()):
        raise UnusableInput(
            f"--archived-before {before} is in the future",
            "give a moment in the past: a date (2026-09-01) or a duration ago (90d)",
        )
    return before


# What `prune --dry-run` lists of each thread: `sessions`' columns, with the same meaning
# (`messages` the live ones), and `folded_messages`, those compactions folded: both go.
PRUNE_FIELDS = (
    "id",
    "conversation_key",
    "channel",
    "turns",
    "messages",
    "folded_messages",
    "has_summary",
    "compactions",
    "created_at",
    "updated_at",
)


def prune_listing(
    conn: sqlite3.Connection, before: str, limit: int | None = None
) -> Iterator[dict]:
    """The threads `prune --archived-before` would delete (those `plan_prune` counts), most
    recently updated first, at most `limit` (and one more: `listing_limit`), each with
    PRUNE_FIELDS. Call in a snapshot."""
    from volumetool.listings import sessions

    for row in sessions(conn, status="archived", updated_before=before, limit=limit):
        (row["folded_messages"],) = conn.execute(
            "SELECT count(*) FROM messages WHERE session_id = ? AND folded_by IS NOT NULL",
            (row["id"],),
        ).fetchone()
        yield {field: row[field] for field in PRUNE_FIELDS}


def plan_prune(conn: sqlite3.Connection, before: str, not_before: str = "") -> Deletion:
    """What `prune --archived-before` would delete: archived threads last updated before
    `before` (and not before `not_before`). Call in a snapshot."""
    _choose(conn, _ARCHIVED_BEFORE + " AND updated_at >= ?", (before, not_before))
    try:
        return _count(conn)
    finally:
        conn.execute(f"DROP TABLE {_DOOMED}")


def predict_prune(conn: sqlite3.Connection, before: str) -> Pruned:
    """What `prune` would report (`Pruned`, without sizes), a prune killed earlier included:
    finished first, under its own event, when its `before` is another (`earlier`; the threads
    it takes are not this prune's), else counted in this prune's. Call in a snapshot."""
    unfinished = _unfinished_prune(conn)
    if unfinished is None:
        return Pruned(plan_prune(conn, before))
    if unfinished.before == before:
        return Pruned(_added(unfinished.done, plan_prune(conn, before)))
    earlier = _added(unfinished.done, plan_prune(conn, unfinished.before))
    return Pruned(
        plan_prune(conn, before, not_before=unfinished.before), (unfinished.before, earlier)
    )


# A prune works beside the running agent in short write transactions (`volume.WORK_SECONDS`
# each, then `volume.give_way`), oldest thread first, each thread whole in one of them: a thread
# deleted in parts could be made active again by the agent between two of them, and would then
# live on without its oldest messages.
_NEXT_ARCHIVED = _ARCHIVED_BEFORE + " ORDER BY updated_at, id LIMIT 1"
_NO_DELETION = Deletion(0, 0, 0, 0, 0, 0, 0)


def _added(a: Deletion, b: Deletion) -> Deletion:
    return Deletion(*(x + y for x, y in zip(a.counts().values(), b.counts().values(), strict=True)))


def _prune_batch(conn: sqlite3.Connection, before: str) -> tuple[Deletion, bool]:
    """Inside one write transaction: delete archived threads last updated before `before`,
    oldest first, each whole, until WORK_SECONDS have gone. Returns what went, and whether
    threads are left to delete."""
    started = time.monotonic()
    went = _NO_DELETION
    while True:
        row = conn.execute(_NEXT_ARCHIVED, (before,)).fetchone()
        if row is None:
            return went, False
        _choose(conn, "SELECT ?", (row[0],))
        went = _added(went, _count(conn))
        _delete_threads(conn)
        if time.monotonic() - started >= WORK_SECONDS:
            return went, True


# The event of a prune under way says `"finished": false` beside what it deleted so far.
_UNFINISHED = {"finished": False}
_LAST_PRUNE = (
    "SELECT id, detail FROM audit WHERE event = 'thread' AND actor = 'volumetool'"
    " AND json_valid(detail) AND detail ->> 'action' = 'prune' ORDER BY id DESC LIMIT 1"
)


@dataclass(frozen=True)
class _PruneEvent:
    id: int
    before: str
    done: Deletion


def _unfinished_prune(conn: sqlite3.Connection) -> _PruneEvent | None:
    """The event of a prune that did not finish (killed), if any: the latest prune event,
    since a prune finishes any other before it starts."""
    row = conn.execute(_LAST_PRUNE).fetchone()
    if row is None:
        return None
    detail = json.loads(row[1])
    if detail.get("finished", True) is not False:
        return None
    fields = Deletion(0, 0, 0, 0, 0, 0, 0).thread_counts()
    done = Deletion(**{name: int(detail.get(name) or 0) for name in fields})
    return _PruneEvent(row[0], str(detail.get("archived_before")), done)


def _record_prune(
    conn: sqlite3.Connection, event: _PruneEvent | None, before: str, went: Deletion, more: bool
) -> _PruneEvent | None:
    """The prune's one audit `thread` event, written with its first deletion and brought up
    to date with each one after, in the same transaction: it always counts exactly what is
    deleted, and says `"finished": false` until nothing is left to delete."""
    if event is None and went == _NO_DELETION:
        return None
    done = went if event is None else _added(event.done, went)
    detail = {"action": "prune", "archived_before": before, **done.thread_counts()}
    if more:
        detail |= _UNFINISHED
    if event is None:
        return _PruneEvent(audit.record(conn, "thread", detail), before, done)
    audit.amend(conn, event.id, detail)
    return _PruneEvent(event.id, before, done)


@dataclass(frozen=True)
class Pruned:
    """What a prune did: `done`, its own deletions (with those of the run it finished, when
    that had the same `before`); `earlier`, the `before` and all the deletions of a killed
    prune with another `before` that it finished first; the file's size before and after."""

    done: Deletion
    earlier: tuple[str, Deletion] | None = None
    size: int = 0
    shrunk: int = 0


def prune(volume: Volume, before: str) -> Pruned:
    """Delete the archived threads last updated before `before`, in short transactions that
    give way to the agent between them, with one audit `thread` event (action `prune`) that
    counts them; nothing at all when there are none (a daily cron run leaves no trail of
    empty events). A prune that was killed is finished first, under its own event, so its
    event ends counting everything it deleted. Returns what the prune deleted, by this run
    and by the run it finished, if it finishes one with the same `before`, and what a run it
    finished with another `before` deleted (`Pruned`)."""
    with volume.snapshot() as conn:
        unfinished = _unfinished_prune(conn)
    earlier = None
    if unfinished and unfinished.before != before:
        earlier = (unfinished.before, _prune_with(volume, unfinished.before, unfinished))
        unfinished = None
    return Pruned(_prune_with(volume, before, unfinished), earlier)


def _prune_with(volume: Volume, before: str, event: _PruneEvent | None) -> Deletion:
    more = True
    try:
        while more:
            with volume.write() as conn:
                started = time.monotonic()  # the lock is ours: the wait for it is not ours
                went, more = _prune_batch(conn, before)
                recorded = _record_prune(conn, event, before, went, more)
            event = recorded  # committed
            if more:
                give_way(volume.conn, time.monotonic() - started)
    except KeyboardInterrupt:
        raise Interrupted(
            f"{volume.path}: interrupted; {_pruned_so_far(event)}", _FINISH_IT
        ) from None
    except Busy as exc:
        if event is None:
            raise
        raise Busy(f"{_pruned_so_far(event)}: {exc.message}", _FINISH_IT) from exc
    return event.done if event else _NO_DELETION


_FINISH_IT = "run the same prune again to finish it"


def _pruned_so_far(event: _PruneEvent | None) -> str:
    done = event.done.threads if event else 0
    return f"pruned {plural(done, 'thread')} (committed), but not all of them yet"


# -- erase ---------------------------------------------------------------------------------


def _under_keys(keys: Sequence[str]) -> tuple[str, tuple]:
    marks = ", ".join("?" for _ in keys)
    return f"SELECT id FROM sessions WHERE conversation_key IN ({marks})", tuple(keys)


def keys_named(keys: Sequence[str], memories_prefixes: Sequence[str]) -> dict:
    """What an erase names, in its audit event and its --json: `keys` and `memories_prefixes`,
    and, when one key (and at most one prefix) was given, `key` and `memories_prefix` as
    well, as before --key could be repeated."""
    named: dict = {"keys": list(keys), "memories_prefixes": list(memories_prefixes)}
    if len(keys) == 1 and len(memories_prefixes) <= 1:
        named |= {"key": keys[0], "memories_prefix": next(iter(memories_prefixes), None)}
    return named


def _quoted(keys: Sequence[str]) -> str:
    return ", ".join(repr(key) for key in keys)


class NothingToErase(ProblemsFound):
    """Exit 1: no thread under the key(s). `erased_at` names the latest earlier erase of one of
    them, if any."""

    def __init__(self, keys: Sequence[str], erased_at: str | None, more: str = "") -> None:
        which = "it was" if len(keys) == 1 else "one of them was"
        where = f"; {which} erased at {erased_at}" if erased_at else ""
        super().__init__(
            f"no thread under key {_quoted(keys)}{where}{f'; {more}' if more else ''}",
            "list threads with `volumetool sessions --status all --key GLOB`",
        )
        self.erased_at = erased_at


def check_prefixes(prefixes: Sequence[str]) -> tuple[str, ...]:
    if "" in prefixes:
        raise UnusableInput(
            "--memories-prefix '' would erase every memory", "give the prefix of the keys"
        )
    return tuple(dict.fromkeys(prefixes))


def _erased_at(conn: sqlite3.Connection, keys: Sequence[str]) -> str | None:
    """The latest erase event naming one of `keys` (`key`, or `keys` since it repeats)."""
    marks = ", ".join("?" for _ in keys)
    row = conn.execute(
        "SELECT max(ts) FROM audit WHERE event = 'erase' AND json_valid(detail)"
        f" AND (json_extract(detail, '$.key') IN ({marks})"
        "      OR EXISTS (SELECT 1 FROM json_each(detail, '$.keys')"
        f"                 WHERE json_each.value IN ({marks})))",
        (*keys, *keys),
    ).fetchone()
    return row[0]


def _absent(conn: sqlite3.Connection, keys: Sequence[str]) -> tuple[str, ...]:
    return tuple(
        key
        for key in keys
        if conn.execute(_under_keys([key])[0] + " LIMIT 1", (key,)).fetchone() is None
    )


def plan_erase_or_finish(
    conn: sqlite3.Connection, keys: Sequence[str], memories_prefixes: Sequence[str]
) -> Deletion:
    """`plan_erase`, with the earlier erases whose scrub this one finishes
    (`scrubbed_earlier`). With no thread under any key, an erase that finishes the scrub of
    an earlier erase of every key has done what was asked: it deletes nothing (zero counts)
    rather than NothingToErase — unless memories under a prefix were written since, which
    no erase without a thread takes (NothingToErase, saying so). Call in a snapshot."""
    earlier = unscrubbed_erases(conn)
    try:
        return replace(plan_erase(conn, keys, memories_prefixes), scrubbed_earlier=earlier)
    except NothingToErase as nothing:
        named = {key for erase in earlier for key in erase.keys}
        if not earlier or not set(keys) <= named:
            raise
        where, params = _memories_where(memories_prefixes)
        (since,) = conn.execute(f"SELECT count(*) FROM memories WHERE {where}", params).fetchone()
        if since:
            raise NothingToErase(
                keys,
                nothing.erased_at,
                # shown once the scrub finished (an error of the scrub replaces it)
                f"the scrub it left unfinished is done; not erased: {plural(since, 'memory')}"
                f" under {_quoted(memories_prefixes)} written since (an erase takes memories"
                " only with a thread)",
            ) from None
        return replace(_NO_DELETION, scrubbed_earlier=earlier)


def plan_erase(
    conn: sqlite3.Connection, keys: Sequence[str], memories_prefixes: Sequence[str]
) -> Deletion:
    """What `erase --key …` would delete: every thread under each of `keys`, active and
    archived, and the memories under each of `memories_prefixes`; the keys with no thread are
    `absent_keys`. NothingToErase when no thread is under any of the keys."""
    keys = tuple(dict.fromkeys(keys))
    _choose(conn, *_under_keys(keys))
    try:
        planned = _count(conn, memories_prefixes)
    finally:
        conn.execute(f"DROP TABLE IF EXISTS {_DOOMED}")
    if not planned.threads:
        raise NothingToErase(keys, _erased_at(conn, keys))
    return Deletion(**planned.counts(), absent_keys=_absent(conn, keys))


def erase_rows(
    conn: sqlite3.Connection, keys: Sequence[str], memories_prefixes: Sequence[str]
) -> Deletion:
    """Delete every thread under `keys` and the memories under `memories_prefixes`, with one
    audit `erase` event that names them and counts what went, never what it said. Call in
    one write transaction, with secure_delete on."""
    done = plan_erase(conn, keys, memories_prefixes)
    _choose(conn, *_under_keys(keys))
    _delete_threads(conn)
    where, params = _memories_where(memories_prefixes)
    conn.execute(f"DELETE FROM memories WHERE {where}", params)
    audit.record(
        conn,
        "erase",
        {"action": "erase", **keys_named(keys, memories_prefixes), **done.counts()} | _UNSCRUBBED,
    )
    return done


# The event of an erase says `"scrubbed": false` until the file is scrubbed: an erase run
# again after a scrub that did not finish knows it finishes that one.
_UNSCRUBBED = {"scrubbed": False}


def unscrubbed_erases(conn: sqlite3.Connection) -> tuple[EarlierErase, ...]:
    """The erases whose scrub did not finish, oldest first."""
    rows = conn.execute(
        "SELECT id, ts, detail FROM audit WHERE event = 'erase' AND actor = 'volumetool'"
        " AND json_valid(detail) AND json_extract(detail, '$.scrubbed') = 0 ORDER BY id"
    )
    return tuple(EarlierErase(id, ts, json.loads(detail)) for id, ts, detail in rows)


def _mark_scrubbed(volume: Volume) -> None:
    """After a whole scrub: the events of every erase it finished no longer say it did not
    (the scrub covers the whole file). The WAL, which took the change, is emptied again if
    it can be (it holds no erased text: the pages were written after the scrub)."""
    with volume.write() as conn:
        for earlier in unscrubbed_erases(conn):
            detail = {k: v for k, v in earlier.detail.items() if k != "scrubbed"}
            audit.amend(conn, earlier.id, detail)
    if volume.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        truncate_wal(volume.conn, 0)


def vacuum(volume: Volume) -> None:
    """Rewrite the file without its free pages and the unused space of its pages, then empty
    the WAL, so that what was deleted is in none of the file's bytes (and the space goes back
    to the file system). Busy when the WAL cannot be emptied within the busy timeout."""
    with volume.translating():
        volume.conn.execute("VACUUM")
        if volume.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            return
        emptied = truncate_wal(volume.conn, volume.busy_timeout)
    if not emptied:
        raise Busy(
            f"{volume.path}: readers or writers kept the WAL from being emptied",
            "it is emptied at a later checkpoint",
        )


def truncate_wal(conn: sqlite3.Connection, busy_timeout: float) -> bool:
    """Checkpoint the WAL into the file and truncate it to nothing. The copying goes first
    without blocking anyone (PASSIVE: VACUUM put the whole file in the WAL); the truncation
    then needs a moment when no writer is at work, which an agent writing every few
    milliseconds leaves only now and then: it is tried again, over the busy timeout. Returns
    whether the WAL was emptied."""
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    deadline = time.monotonic() + max(busy_timeout, 1.0)
    pause = 0.01
    # Each attempt must fail at once when a reader holds an older snapshot: a TRUNCATE
    # checkpoint waits out the busy timeout holding the writer lock, so the agent's writes
    # would wait with it. The pauses between attempts are the agent's.
    (waited,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(waited)}")
    return True


def scrub(volume: Volume) -> None:
    """After an erase: every copy of deleted text taken out of the search index (the erased
    threads', and any the agent deleted itself), the index merged down (its older segments
    still hold the words), then `vacuum`. A damaged index (FTS5 finds it malformed) would
    stop this for good, each run again failing on it, so it is dropped instead: it is
    volumetool's own copy of the text, which the next search builds again."""
    try:
        with volume.write() as conn:  # first: a build renamed after it would escape the tidy
            index.drop_build(conn)
        index.tidy(volume)
        index.merge_all(volume)
    except Damaged:
        with volume.write() as conn:
            index.drop(conn)
    vacuum(volume)


def erase(
    volume: Volume,
    keys: Sequence[str],
    memories_prefixes: Sequence[str],
    confirm: Callable[[Deletion], None] = lambda planned: None,
) -> Deletion:
    """The whole erase on a volume opened for writing (with the volume lock): plan, `confirm`
    (which raises to stop), delete in one transaction, scrub. Erasing a key again after an
    erase whose scrub did not finish (killed, interrupted, a busy WAL) scrubs again: that
    finishes the earlier erase (zero counts, `scrubbed_earlier` naming it), or, when a key
    was never erased, says there was nothing to erase."""
    volume.conn.execute("PRAGMA secure_delete = ON")
    volume.conn.execute("PRAGMA journal_size_limit = 0")  # a persistent journal keeps no pages
    try:
        with volume.snapshot() as conn:
            planned = plan_erase_or_finish(conn, keys, memories_prefixes)
    except NothingToErase as nothing:
        if nothing.erased_at:
            scrub(volume)
            _mark_scrubbed(volume)
        raise
    if planned.threads:
        confirm(planned)
        with volume.write() as conn:
            done = replace(
                erase_rows(conn, keys, memories_prefixes), scrubbed_earlier=planned.scrubbed_earlier
            )
        what = f"erased {plural(done.threads, 'thread')} under {_quoted(keys)}"
    else:
        done = planned
        what = f"the threads under {_quoted(keys)} were erased earlier"
    with _after_commit(
        volume,
        what,
        "the file is not scrubbed yet",
        "run the same erase again to scrub (the erased text may remain in free space or"
        " the WAL until then)",
    ):
        scrub(volume)
        _mark_scrubbed(volume)
    return done


@contextlib.contextmanager
def _after_commit(volume: Volume, done: str, undone: str, hint: str) -> Iterator[None]:
    """What comes after a commit (a scrub, a vacuum): an error or an interrupt there says what
    is committed and what did not finish, never "rolled back". Busy stays busy (retry
    later)."""
    try:
        yield
    except VolumetoolError as exc:
        kind = Busy if isinstance(exc, Busy) else ProblemsFound
        raise kind(f"{done}, but {undone}: {exc.message}", hint) from exc
    except KeyboardInterrupt:
        raise Interrupted(
            f"{volume.path}: interrupted; {done} (committed), but {undone}", hint
        ) from None


def prune_path(
    path: str, before: str, vacuum_after: bool, *, busy_timeout: float, wait: float
) -> Pruned:
    """`prune`: the volume at `path` opened for writing with the volume lock, and pruned;
    with the file's size in bytes before and after."""
    with open_for_write(path, busy_timeout=busy_timeout, lock=True, wait=wait) as volume:
        size = os.path.getsize(volume.path)
        pruned = prune_volume(volume, before, vacuum_after)
        return replace(pruned, size=size, shrunk=os.path.getsize(volume.path))


def erase_path(
    path: str,
    keys: Sequence[str],
    memories_prefixes: Sequence[str],
    confirm: Callable[[Deletion], None],
    *,
    busy_timeout: float,
    wait: float,
) -> Deletion:
    """`erase`: the volume at `path` opened for writing with the volume lock, and erased."""
    with open_for_write(path, busy_timeout=busy_timeout, lock=True, wait=wait) as volume:
        return erase(volume, keys, memories_prefixes, confirm)


def prune_volume(volume: Volume, before: str, vacuum_after: bool) -> Pruned:
    """The whole prune on a volume opened for writing (with the volume lock): delete in short
    transactions (`prune`), take the pruned text out of the search index in short ones too,
    and with `vacuum_after` merge the index and rewrite the file (VACUUM) so the space goes
    back to the file system."""
    volume.conn.execute("PRAGMA secure_delete = ON")
    # Many small commits: the WAL is synced at checkpoints, not at each one (the agent would
    # wait for each sync). A commit lost to a power cut is deleted again by the next prune.
    volume.conn.execute("PRAGMA synchronous = NORMAL")
    pruned = prune(volume, before)
    done = pruned.done
    with _after_commit(
        volume,
        f"pruned {plural(done.threads, 'thread')}",
        "the search index or the vacuum did not finish",
        "run the same prune again",
    ):
        if vacuum_after:
            scrub(volume)
        elif done.threads or pruned.earlier:
            index.tidy(volume)
    return pruned

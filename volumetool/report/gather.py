"""What a report shows of one volume: SQL here, and pure functions that
shape the rows (days of a window, the state of a thread against its threshold).

Every query reads through an index or a bounded window, so a volume of 20,000 threads reads in
a fraction of a second; nothing here renders.
"""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import date, timedelta

from volumetool.compaction.plan import MIN_LIVE_TURNS, Due, RunFact, check_due
from volumetool.compaction.store import STANDING_COMPACTION
from volumetool.errors import UntrustedSchemaWarning, VolumetoolError
from volumetool.settings import MemorySettings
from volumetool.usage import total_sql
from volumetool.volume import Volume

LARGEST = 20  # threads in the table of the largest


@dataclass(frozen=True)
class TokenDay:
    """The runs of one trigger on one day, with their reported tokens (NULL counts as 0)."""

    day: str
    trigger: str
    runs: int
    input_tokens: int
    output_tokens: int

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class CompactionDay:
    """The compaction runs of one day: how many stood, failed or were undone, and what the
    successful ones saved (as each compaction estimated it; unknown for older runs)."""

    day: str
    ok: int = 0
    failed: int = 0
    undone: int = 0
    saved_tokens: int = 0


@dataclass(frozen=True)
class ThreadSize:
    """An active thread against the threshold: its figure is the last input tokens of its
    latest successful agent run since its latest compaction (SPEC section 6), None when there
    is none. `due`, for a thread at or over the threshold, says whether compaction would take
    it now, and why not (None for the others: under the threshold nothing is due)."""

    session_id: int
    conversation_key: str
    channel: str
    figure: int | None
    due: Due | None = None

    @property
    def due_now(self) -> bool:
        return self.due is not None and self.due.is_due


@dataclass
class VolumeReport:
    """Everything the page shows of one volume."""

    path: str
    totals: dict  # listings.status: the /status totals
    days: list[str]
    settings: MemorySettings
    tokens: list[TokenDay] = field(default_factory=list)
    compactions: list[CompactionDay] = field(default_factory=list)
    threads: list[ThreadSize] = field(default_factory=list)
    largest: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def agent(self) -> str | None:
        return self.totals.get("agent")

    @property
    def threshold(self) -> int | None:
        return threshold_of(self.settings)


@dataclass(frozen=True)
class VolumeFailure:
    """A volume the report could not read: as it was named, and why."""

    path: str
    error: VolumetoolError

    @property
    def message(self) -> str:
        return self.error.format_message()

    @property
    def exit_code(self) -> int:
        return self.error.exit_code


def threshold_of(settings: MemorySettings) -> int | None:
    """The threshold compaction works to, None when the settings turn compaction off."""
    return settings.compact_at_tokens if settings.compaction_enabled else None


def window(today: date, days: int) -> list[str]:
    """The `days` days ending with `today`, oldest first, as YYYY-MM-DD."""
    return [(today - timedelta(days=n)).isoformat() for n in range(days - 1, -1, -1)]


def _bounds(days: list[str]) -> tuple[str, str]:
    """The window as a started_at range: from its first day to the day after its last."""
    return days[0], (date.fromisoformat(days[-1]) + timedelta(days=1)).isoformat()


def token_days(conn: sqlite3.Connection, days: list[str]) -> list[TokenDay]:
    """Runs and tokens per day and trigger inside the window (read through runs_by_started)."""
    rows = conn.execute(
        "SELECT substr(started_at, 1, 10) AS day, trigger, count(*),"
        f" {total_sql('input_tokens')}, {total_sql('output_tokens')}"
        " FROM runs WHERE started_at >= ? AND started_at < ? GROUP BY day, trigger"
        " ORDER BY day, trigger",
        _bounds(days),
    )
    inside = set(days)  # a started_at that is not a date stays out of every day
    return [TokenDay(*row) for row in rows if row[0] in inside]


def compaction_days(conn: sqlite3.Connection, days: list[str]) -> list[CompactionDay]:
    """Compaction runs per day inside the window, one entry for each day of it."""
    rows = conn.execute(
        "SELECT substr(r.started_at, 1, 10) AS day,"
        " sum(r.status = 'ok' AND c.undone_at IS NULL), sum(r.status = 'error'),"
        " sum(c.undone_at IS NOT NULL),"
        f" {total_sql('c.saved_tokens', 'c.undone_at IS NULL', signed=True)}"
        " FROM runs r LEFT JOIN compactions c ON c.run_id = r.id"
        " WHERE r.trigger = 'compaction' AND r.started_at >= ? AND r.started_at < ?"
        " GROUP BY day",
        _bounds(days),
    )
    found = {row[0]: CompactionDay(*row) for row in rows}
    return [found.get(day, CompactionDay(day)) for day in days]


# The latest standing compaction of every thread that has one (through runs_by_trigger), and
# every active thread with its latest successful agent run (read backwards, so it stops at
# once): what check_due needs of the runs, for thousands of threads in two queries.
_STANDING_SQL = (
    f"SELECT session_id, max(id) FROM runs WHERE {STANDING_COMPACTION} GROUP BY session_id"
)
_ACTIVE_THREADS_SQL = """
SELECT s.id, s.conversation_key, s.channel, a.id, a.last_input_tokens
FROM sessions s
LEFT JOIN runs a ON a.id = (SELECT r.id FROM runs r WHERE r.session_id = s.id
                            AND r.trigger != 'compaction' AND r.status = 'ok'
                            ORDER BY r.id DESC LIMIT 1)
WHERE s.status = 'active'"""
# Live turns, counted only as far as the trigger needs to know (MIN_LIVE_TURNS).
_LIVE_TURNS_SQL = """
SELECT count(*) FROM (SELECT 1 FROM messages WHERE session_id = ? AND folded_by IS NULL
                      AND role = 'user' LIMIT ?)"""


def thread_sizes(conn: sqlite3.Connection, settings: MemorySettings) -> list[ThreadSize]:
    """Every active thread with its figure; for those at or over the threshold, whether it is
    due, by check_due itself, with live turns counted only as far as they decide."""
    threshold = threshold_of(settings)
    compacted = dict(conn.execute(_STANDING_SQL))
    sizes = []
    for session_id, key, channel, run_id, last_input in conn.execute(_ACTIVE_THREADS_SQL):
        latest_compaction = compacted.get(session_id)
        newer = run_id is not None and run_id > (latest_compaction or 0)
        size = ThreadSize(session_id, key, channel, last_input if newer else None)
        if threshold is not None and size.figure is not None and size.figure >= threshold:
            runs = [RunFact(run_id, "message", "ok", last_input)]
            if latest_compaction is not None:
                runs.append(RunFact(latest_compaction, "compaction", "ok", None))
            turns = conn.execute(_LIVE_TURNS_SQL, (session_id, MIN_LIVE_TURNS)).fetchone()[0]
            size = replace(size, due=check_due(settings, runs, turns))
        sizes.append(size)
    return sizes


def largest_threads(conn: sqlite3.Connection, limit: int = LARGEST) -> list[dict]:
    """The threads holding the most messages (live and folded), largest first, each with the
    fields of the `sessions` listing and its total `messages_total`."""
    from volumetool import listings

    counts = dict(
        conn.execute(
            "SELECT session_id, count(*) AS n FROM messages GROUP BY session_id"
            " ORDER BY n DESC, session_id LIMIT ?",
            (limit,),
        )
    )
    if not counts:
        return []
    rows = listings.sessions(conn, status="all", ids=list(counts))
    listed = [{**row, "messages_total": counts[row["id"]]} for row in rows]
    return sorted(listed, key=lambda r: (-r["messages_total"], r["id"]))


def read_volume(volume: Volume, settings: MemorySettings, days: list[str]) -> VolumeReport:
    """Read what the report shows of an open volume (`volume.Volume`): the /status totals,
    then everything else in one snapshot."""
    from volumetool import listings

    totals = listings.status(volume)
    report = VolumeReport(str(volume.path), totals, days, settings)
    with volume.snapshot() as conn:
        report.tokens = token_days(conn, days)
        report.compactions = compaction_days(conn, days)
        report.threads = thread_sizes(conn, settings)
        report.largest = largest_threads(conn)
    return report


def by_day(rows: Iterable[TokenDay], days: list[str]) -> dict[str, dict[str, int]]:
    """Tokens per day and trigger: {day: {trigger: tokens}}, every day of the window present."""
    table: dict[str, dict[str, int]] = {day: {} for day in days}
    for row in rows:
        table[row.day][row.trigger] = table[row.day].get(row.trigger, 0) + row.tokens
    return table


def read_volumes(
    arguments: Iterable[str], settings: MemorySettings, days: list[str], busy_timeout: float
) -> tuple[list[VolumeReport], list[VolumeFailure]]:
    """Each volume read (read-only), or why it could not be. A warning that the schema
    departs from the format is kept in the volume's notes, and warned again for stderr."""
    reports, failures = [], []
    for argument in arguments:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with Volume(argument, readonly=True, busy_timeout=busy_timeout) as volume:
                    report = read_volume(volume, settings, days)
        except VolumetoolError as exc:
            failures.append(VolumeFailure(str(argument), exc))
            continue
        for warning in caught:
            if issubclass(warning.category, UntrustedSchemaWarning):
                report.notes.append(str(warning.message))
            warnings.warn(warning.message, stacklevel=2)
        reports.append(report)
    return reports, failures

"""`status` of many volumes: one row per volume, read the way `status` reads one, where a volume
that cannot be read is a row saying why instead of the end of the listing.

Each volume is opened, read in one snapshot and closed before the next, so a fleet of any size
holds one file open at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from volumetool.errors import SchemaMismatch, UnusableInput, VolumetoolError
from volumetool.listings import count_due
from volumetool.settings import MemorySettings
from volumetool.timefmt import iso
from volumetool.usage import total_sql
from volumetool.volume import DEFAULT_BUSY_TIMEOUT, SchemaState, Volume, resolve

# The JSON fields of a row (SPEC section 12), in order.
ROW_FIELDS = (
    "path",
    "agent",
    "file_bytes",
    "sessions_active",
    "sessions_archived",
    "due",
    "tokens_24h",
    "failed_runs_24h",
    "schema",
    "error",
)
RECENT = timedelta(hours=24)


@dataclass
class VolumeStatus:
    """One volume of a fleet: the row's fields, and the running totals its metrics count."""

    path: str
    agent: str | None = None
    file_bytes: int | None = None
    sessions_active: int | None = None
    sessions_archived: int | None = None
    due: int | None = None
    tokens_24h: int | None = None
    failed_runs_24h: int | None = None
    schema: str | None = None  # current | older | legacy | newer | untrusted
    error: str | None = None
    # Totals over every run the volume records (metrics counters), not part of the row:
    runs: int | None = None
    failed_runs: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    exit_code: int = field(default=0, repr=False)

    def row(self) -> dict:
        return {name: getattr(self, name) for name in ROW_FIELDS}


def schema_word(state: SchemaState, untrusted: bool) -> str:
    """A volume's schema in one word: `current`, `older` (pending migrations), `legacy` (a
    runtime 0.x file), `newer` (written by a newer volumetool), or `untrusted` (current, but
    holding objects the format does not define)."""
    if state.newer:
        return "newer"
    if state.legacy:
        return "legacy"
    if state.pending:
        return "older"
    return "untrusted" if untrusted else "current"


def _error_text(exc: VolumetoolError, path: Path) -> str:
    """An error for a row that already names the path: without it."""
    text = exc.format_message()
    prefix = f"{path}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def _read(volume: Volume, now: datetime, memory: MemorySettings | None) -> VolumeStatus:
    with volume.snapshot() as conn:
        sessions = dict(conn.execute("SELECT status, count(*) FROM sessions GROUP BY status"))
        recent_in, recent_out, recent_failed = conn.execute(
            f"SELECT {total_sql('input_tokens')}, {total_sql('output_tokens')},"
            " count(CASE WHEN status = 'error' THEN 1 END) FROM runs WHERE started_at >= ?",
            (iso(now - RECENT),),
        ).fetchone()
        totals = conn.execute(
            "SELECT count(*), count(CASE WHEN status = 'error' THEN 1 END),"
            f" {total_sql('input_tokens')}, {total_sql('output_tokens')} FROM runs"
        ).fetchone()
        due = None if memory is None else count_due(conn, memory)
        agent = volume.agent_name()
    return VolumeStatus(
        str(volume.path),
        agent=agent,
        file_bytes=os.path.getsize(volume.path),
        sessions_active=sessions.get("active", 0),
        sessions_archived=sessions.get("archived", 0),
        due=due,
        tokens_24h=recent_in + recent_out,
        failed_runs_24h=recent_failed,
        schema=schema_word(volume.schema, bool(volume.differences)),
        runs=totals[0],
        failed_runs=totals[1],
        input_tokens=totals[2],
        output_tokens=totals[3],
    )


def _mismatched(path: Path, exc: SchemaMismatch, busy_timeout: float) -> VolumeStatus:
    """A volume at another format than this version reads: its schema state, its name and
    size, and the error (exit 3)."""
    status = VolumeStatus(str(path), error=_error_text(exc, path), exit_code=exc.exit_code)
    try:
        with Volume(path, readonly=True, busy_timeout=busy_timeout, gate=False) as volume:
            status.schema = schema_word(volume.schema, untrusted=False)
            status.agent = volume.agent_name()
            status.file_bytes = os.path.getsize(path)
    except (VolumetoolError, OSError):
        pass  # what could be read stays; the row's error is the mismatch
    return status


def volume_status(
    argument: str,
    *,
    now: datetime,
    memory: MemorySettings | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
) -> VolumeStatus:
    """The row of one volume; whatever stops the read (busy, damaged, not an agent file, another
    format) becomes the row's error and exit code."""
    path = resolve(argument)
    try:
        with Volume(path, readonly=True, busy_timeout=busy_timeout) as volume:
            return _read(volume, now, memory)
    except SchemaMismatch as exc:
        return _mismatched(path, exc, busy_timeout)
    except VolumetoolError as exc:
        return VolumeStatus(str(path), error=_error_text(exc, path), exit_code=exc.exit_code)
    except OSError as exc:  # the file went away between the checks and the read
        failure = UnusableInput(f"cannot read the file ({exc.strerror or exc})")
        return VolumeStatus(str(path), error=failure.message, exit_code=failure.exit_code)


def fleet_status(
    arguments: Iterable[str],
    *,
    now: datetime,
    memory: MemorySettings | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
) -> Iterator[VolumeStatus]:
    """The row of each volume, in the order given (each once: `shard.select`)."""
    for argument in arguments:
        yield volume_status(argument, now=now, memory=memory, busy_timeout=busy_timeout)

"""`migrate`: bringing agent files to the current format, backup first, one transaction per
migration, checks after. Runtime 0.x files are recognized and migrated like any other."""

from __future__ import annotations

import contextlib
import glob
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from volumetool.backup import backup
from volumetool.create import remove_stale_stages
from volumetool.errors import ProblemsFound, SchemaMismatch
from volumetool.volume import SchemaState, Volume, read_schema_state, require_current

MIGRATION_FIELDS = ("migration", "status", "applied_at")


def migration_rows(state: SchemaState) -> list[dict]:
    """--list: every migration of the set, applied (with time), pending, or unknown (newer)."""
    applied = dict(state.applied)
    rows = [
        {
            "migration": name,
            "status": "applied" if name in applied else "pending",
            "applied_at": applied.get(name),
        }
        for name in state.known
    ]
    rows += [
        {"migration": name, "status": "unknown (newer)", "applied_at": applied[name]}
        for name in state.newer
    ]
    return rows


def backup_path(path: Path, now: datetime | None = None) -> Path:
    """agent.db.bak-<UTC timestamp>, never an existing file."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    candidate = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.bak-{stamp}-{n}")
    return candidate


@dataclass
class MigrateResult:
    path: Path
    pending: list[str]
    applied: list[str] = field(default_factory=list)
    backup: Path | None = None


def _dangling(conn: sqlite3.Connection) -> str | None:
    rows = conn.execute("PRAGMA foreign_key_check").fetchall()
    if not rows:
        return None
    table, rowid, parent, _ = rows[0]
    more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
    return f"{table} row {rowid} points to a missing {parent} row{more}"


def migrate(volume: Volume, *, make_backup: bool = True, dry_run: bool = False) -> MigrateResult:
    """Apply the pending migrations of an open (writable, ungated) volume."""
    import sqlite_utils

    from volumetool.migrations import LegacyDataError, migrations

    state = volume.schema
    if state.newer:
        require_current(state, volume.path)  # raises: a newer file is never touched
    result = MigrateResult(volume.path, list(state.pending))
    if not state.pending or dry_run:
        return result
    conn = volume.conn
    with volume.translating():
        dangling = _dangling(conn)
        if dangling:
            raise ProblemsFound(
                f"{volume.path}: {dangling}; nothing was migrated",
                "fix those rows first (volumetool check names them)",
            )
        if make_backup:
            # a killed migrate's half-made backup has another timestamp: clear those too
            remove_stale_stages(volume.path.parent, f"{glob.escape(volume.path.name)}.bak-*")
            result.backup = backup(volume, backup_path(volume.path))
        conn.execute("PRAGMA foreign_keys = OFF")  # table rebuilds; checked before each commit
        db = sqlite_utils.Database(conn)
        for n, name in enumerate(state.pending):
            later = state.pending[n + 1 :]
            conn.execute("BEGIN IMMEDIATE")
            try:
                if read_schema_state(conn, volume.path).pending[:1] != [name]:
                    raise SchemaMismatch(
                        f"{volume.path}: changed by someone else while migrating",
                        "run migrate again",
                    )
                migrations.apply(db, stop_before=later)
                dangling = _dangling(conn)
                if dangling:
                    raise LegacyDataError(f"after {name}: {dangling}")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, LegacyDataError | sqlite3.IntegrityError):
                    restore = f"; the backup is {result.backup}" if result.backup else ""
                    raise ProblemsFound(
                        f"{volume.path}: migration {name} failed: {exc}",
                        f"the file is as it was before {name}{restore}; fix the row and "
                        "run migrate again",
                    ) from exc
                raise
            conn.execute("COMMIT")
            result.applied.append(name)
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA foreign_keys = ON")
        problems = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        if problems != ["ok"]:
            raise ProblemsFound(
                f"{volume.path}: integrity check failed after migrating ({problems[0]})",
                f"restore {result.backup}" if result.backup else None,
            )
    return result

"""Upgrading an agent file to the current format (the `migrate` command): the pending
migrations of the set in migrations.py applied backup first, one transaction per migration,
checks after; and `--list`'s rows. Runtime 0.x files are recognized and migrated like any
other."""

from __future__ import annotations

import contextlib
import functools
import glob
import shlex
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from volumetool.atomic import remove_stale_stages
from volumetool.backup import backup, backup_target
from volumetool.errors import Interrupted, ProblemsFound, SchemaMismatch, VolumetoolError
from volumetool.format import MIGRATIONS, Schema
from volumetool.timefmt import iso
from volumetool.volume import (
    SchemaState,
    Volume,
    admit,
    connect,
    open_for_write,
    read_schema,
    read_schema_state,
)

MIGRATION_FIELDS = ("migration", "status", "applied_at")


def applied_stamp(text: str | None) -> str | None:
    """When a migration was applied, in the form of every other timestamp volumetool shows
    (`2026-11-30T05:27:20.123Z`, SPEC 2): sqlite-utils records Python's text of a datetime
    (`2026-11-30 05:27:20.123456+00:00`). Text that is no time is shown as it is."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    return iso(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


def migration_rows(state: SchemaState) -> list[dict]:
    """--list: every migration of the set, applied (with time), pending, or unknown (newer)."""
    applied = {name: applied_stamp(at) for name, at in state.applied}
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


@functools.cache
def _schema_after(applied: tuple[str, ...]) -> Schema:
    import sqlite_utils

    from volumetool.migrations import migrations

    conn = connect(":memory:")
    try:
        pending = [name for name in MIGRATIONS if name not in applied]
        migrations.apply(sqlite_utils.Database(conn), stop_before=pending[0] if pending else None)
        return read_schema(conn)
    finally:
        conn.close()


def recorded_schema(state: SchemaState, path: Path) -> Schema:
    """The schema that the migrations a file records define, computed by applying them to an
    empty database: what a file about to be migrated must hold, and nothing more. A 0.x file
    records none and must hold the 0.x shape, which the first migration defines."""
    names = tuple(name for name, _ in state.applied)
    if names != MIGRATIONS[: len(names)]:
        raise SchemaMismatch(
            f"{path}: records migrations out of order ({', '.join(names)})",
            "restore it from a backup",
        )
    return _schema_after(names or MIGRATIONS[:1])


@dataclass
class MigrateResult:
    path: Path
    pending: list[str]
    applied: list[str] = field(default_factory=list)
    backup: Path | None = None


# How much of the file migrate reads through a memory mapping: SQLite maps no more than the
# file holds, nor more than its build allows (2 GB by default).
MIGRATE_MMAP_SIZE = 1 << 31


def _dangling(conn: sqlite3.Connection) -> str | None:
    """The first row of the file pointing to a missing row, described."""
    rows = conn.execute("PRAGMA foreign_key_check").fetchall()
    if not rows:
        return None
    table, rowid, parent, _ = rows[0]
    more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
    return f"{table} row {rowid} points to a missing {parent} row{more}"


def migrations_of(path: Path, busy_timeout: float) -> list[dict]:
    """`migrate --list`: the volume's migrations, applied (with time) and pending; read-only,
    past the schema gate (a file behind or ahead of the format is what --list is for)."""
    with Volume(path, readonly=True, busy_timeout=busy_timeout, gate=False) as vol:
        return migration_rows(vol.schema)


def migrate_volume(
    path: Path, *, dry_run: bool, make_backup: bool, wait: float, busy_timeout: float
) -> MigrateResult:
    """`migrate` of one volume: opened read-only for a dry run (or --check), else for writing
    with the volume lock (`open_for_write`, the schema its migrations define), then `migrate`."""
    if dry_run:
        opened = Volume(path, readonly=True, busy_timeout=busy_timeout, gate=False)
    else:
        opened = open_for_write(
            path, busy_timeout=busy_timeout, lock=True, wait=wait, expected=recorded_schema
        )
    with opened as vol:
        return migrate(vol, make_backup=make_backup, dry_run=dry_run)


def migrate(volume: Volume, *, make_backup: bool = True, dry_run: bool = False) -> MigrateResult:
    """Apply the pending migrations of an open (ungated) volume: writable, from
    `open_for_write(…, expected=recorded_schema)`, or read-only for a dry run. A newer file,
    or one whose schema is not what its recorded migrations define (a 0.x file: the 0.x
    shape), is refused before anything moves."""
    volume.admit(recorded_schema)
    result = MigrateResult(volume.path, list(volume.schema.pending))
    if not result.pending or dry_run:
        return result
    try:
        _apply(volume, result, make_backup)
    except KeyboardInterrupt:
        raise _interrupted(volume, result) from None
    return result


def _interrupted(volume: Volume, result: MigrateResult) -> Interrupted:
    """Ctrl-C: the migration under way rolled back; the file says which ones committed."""
    try:
        recorded = {name for name, _ in read_schema_state(volume.conn, volume.path).applied}
    except (sqlite3.Error, VolumetoolError):
        recorded = set(result.applied)
    done = [name for name in result.pending if name in recorded]
    rest = [name for name in result.pending if name not in recorded]
    # The backup is whole once its file exists (it is published by a rename): say where.
    kept = result.backup is not None and result.backup.exists()
    backed_up = f"; the backup taken first is {result.backup}" if kept else ""
    if not done:
        what = "nothing was migrated"
    elif rest:
        what = f"{', '.join(done)} applied; {', '.join(rest)} still pending"
    else:
        # Migrate again would find the file up to date and check nothing: `check` runs both
        # checks (and more) on a current file.
        return Interrupted(
            f"{volume.path}: interrupted; every migration applied (committed: the file is at"
            f" {done[-1]}, the current format, and its foreign_key_check passed), but its"
            f" integrity_check did not run{backed_up}",
            f"run `volumetool check {shlex.quote(str(volume.path))}`",
        )
    return Interrupted(f"{volume.path}: interrupted; {what}{backed_up}", "run migrate again")


def _apply(volume: Volume, result: MigrateResult, make_backup: bool) -> None:
    """Backup, then one transaction per migration, then the integrity check."""
    import sqlite_utils

    from volumetool.migrations import LegacyDataError, migrations

    conn = volume.conn
    with volume.translating():
        # Every page of the file is read several times over (the checks, the move, the
        # rebuilds, the index builds): read through a mapping rather than copied page by page.
        conn.execute(f"PRAGMA mmap_size = {MIGRATE_MMAP_SIZE}")
        dangling = _dangling(conn)
        if dangling:
            raise ProblemsFound(
                f"{volume.path}: {dangling}; nothing was migrated",
                "fix those rows first (volumetool check names them)",
            )
        if make_backup:
            # a killed migrate's half-made backup has another timestamp: clear those too
            remove_stale_stages(volume.path.parent, f"{glob.escape(volume.path.name)}.bak-*")
            result.backup = backup_path(volume.path)
            backup(volume, backup_target(str(result.backup)))
        conn.execute("PRAGMA foreign_keys = OFF")  # table rebuilds; checked before the last commit
        db = sqlite_utils.Database(conn)
        for n, name in enumerate(result.pending):
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Under the write lock: still where this run found it, nothing planted since.
                state = read_schema_state(conn, volume.path)
                if state.pending[:1] != [name]:
                    raise SchemaMismatch(
                        f"{volume.path}: changed by someone else while migrating",
                        "run migrate again",
                    )
                admit(conn, state, volume.path, recorded_schema)
                migrations.apply(db, stop_before=result.pending[n + 1 :])
                # The file had no row pointing nowhere before the first migration, and each
                # migration builds its references from the rows they point to: one check of
                # the whole file, before the last commit, finds what a faulty one would leave.
                dangling = _dangling(conn) if n == len(result.pending) - 1 else None
                if dangling:
                    raise LegacyDataError(f"{dangling}, found once every migration ran")
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
        _check_after(volume, result)


def _check_after(volume: Volume, result: MigrateResult) -> None:
    """integrity_check, once every migration committed (foreign_key_check ran before the last
    commit)."""
    problems = [r[0] for r in volume.conn.execute("PRAGMA integrity_check")]
    volume.conn.execute("PRAGMA mmap_size = 0")
    if problems != ["ok"]:
        raise ProblemsFound(
            f"{volume.path}: integrity check failed after migrating ({problems[0]})",
            f"restore {result.backup}" if result.backup else None,
        )

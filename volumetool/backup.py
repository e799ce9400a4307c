"""`backup`: a consistent copy of a live agent file, made with SQLite's online backup API.

A copy is staged under a temporary name — next to DEST, or in $TMPDIR when DEST is `-` — and
linked into place (or streamed) only when it is complete and checked. While a stage exists, a
record beside the volume (a symlink `.agent.db.backup-HOST-PID-…` naming the stage) says where
it is, so that the next backup of the same volume, whatever its DEST, removes what a killed
one left behind. Only stages of processes that are gone are ever removed.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from volumetool.atomic import dead_stages, remove_stage, stage_owner, stage_prefix
from volumetool.errors import ProblemsFound
from volumetool.output import OutputTarget
from volumetool.volume import Volume

RECORD_KIND = "backup"


def backup_target(name: str) -> OutputTarget:
    """Where `backup VOLUME DEST` writes, checked: a new file (never over anything, mode 0600:
    it holds personal data), or stdout for `-` (never a terminal)."""
    return OutputTarget(name, "database", "agent-backup.db", binary=True).check()


def backup_volume(argument: str, target: OutputTarget, busy_timeout: float) -> Path:
    """`backup VOLUME DEST`: the volume opened read-only, whatever its schema version (a copy
    of a file behind or ahead of the format is still a copy), copied to `target` (from
    `backup_target`, checked before the volume is opened); returns the volume's path. The
    copy's size is then `target.written`."""
    with Volume(argument, readonly=True, busy_timeout=busy_timeout, gate=False) as vol:
        backup(vol, target)
    return vol.path


def backup(volume: Volume, target: OutputTarget) -> int:
    """Copy `volume` to `target` as one snapshot, check the copy's integrity, and publish it
    only then (linked into place, or streamed to stdout); returns its size.

    The copy is taken in a single step inside one read transaction: in WAL mode the agent keeps
    writing meanwhile, and the copy holds exactly the state at the moment it began.
    """
    remove_killed_backups(volume.path)
    with _recording_stages(volume.path) as record, target.staged() as tmp:
        record(tmp)
        _copy(volume, tmp, target.name)
    return target.written


def remove_killed_backups(volume_path: Path) -> None:
    """Delete the stages that killed backups of this volume left, wherever they were, by the
    records beside the volume. A record is only trusted to name a stage of its own process."""
    records = dead_stages(volume_path.parent, glob.escape(volume_path.name), RECORD_KIND)
    for record, pid in records:
        with contextlib.suppress(OSError):
            stage = Path(os.readlink(record))
            if stage_owner(stage.name) == pid:
                remove_stage(stage)
        with contextlib.suppress(OSError):
            record.unlink()


@contextlib.contextmanager
def _recording_stages(volume_path: Path) -> Iterator[Callable[[Path], None]]:
    """`record(stage)` leaves a record of `stage` beside the volume until the block ends (after
    the stage is gone). A volume directory that cannot take one (read-only) goes without: its
    stages are then found only by a later backup to the same directory."""
    made: list[Path] = []

    def record(stage: Path) -> None:
        name = stage_prefix(volume_path.name, RECORD_KIND) + secrets.token_hex(4)
        try:
            os.symlink(os.path.abspath(stage), volume_path.parent / name)
        except OSError:
            return
        made.append(volume_path.parent / name)

    try:
        yield record
    finally:
        for path in made:
            with contextlib.suppress(OSError):
                path.unlink()


def _copy(volume: Volume, tmp: Path, dest: object) -> None:
    target = sqlite3.connect(tmp)
    try:
        with volume.translating():
            volume.conn.backup(target)
            problems = [r[0] for r in target.execute("PRAGMA integrity_check")]
    finally:
        target.close()
    if problems != ["ok"]:
        raise ProblemsFound(
            f"{dest}: the copy failed its integrity check ({problems[0]})",
            "nothing was written; check the source with volumetool check",
        )

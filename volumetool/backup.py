"""`backup`: a consistent copy of a live agent file, made with SQLite's online backup API."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from volumetool.create import staged_file
from volumetool.errors import ProblemsFound
from volumetool.volume import Volume


def backup(volume: Volume, dest: Path) -> Path:
    """Copy `volume` to `dest` (which must not exist) as one snapshot, check the copy's
    integrity, and link it into place only then (mode 0600: it holds personal data).

    The copy is taken in a single step inside one read transaction: in WAL mode the agent keeps
    writing meanwhile, and the copy holds exactly the state at the moment it began.
    """
    with staged_file(dest, mode=0o600) as tmp:
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
    return dest

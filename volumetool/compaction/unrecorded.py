"""Model calls a pass paid for but could not record yet (SPEC 13, "no paid call unrecorded").

A summary that could not be committed because the agent kept the volume's write lock past
`--busy-timeout` is still a call the provider bills. Its failed run waits here: the pass
writes it once more at its end (one transaction per volume), and what still cannot be written
goes into a small file beside the volume, `agent.db.volumetool-unrecorded`, which the next
pass writes into `runs` first — before it spends anything, in the transaction that proves it
can take the write lock at all. The file is replaced atomically (a staged sibling renamed into
place: never half-written), read only when it is a regular file of at most 1 MiB, and holds
what `runs` would: the thread, the model, the reason, the usage and the times — never a key
(the reason is the stored error text, from which the client has already taken it out).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from volumetool.compaction.store import RunTimes, Thread, record_failure
from volumetool.errors import Busy, VolumetoolError
from volumetool.usage import Usage, count
from volumetool.volume import Volume

if TYPE_CHECKING:
    from volumetool.compaction.run import Outcome

SUFFIX = ".volumetool-unrecorded"
MAX_BYTES = 1 << 20
FORMAT = 1


@dataclass(frozen=True)
class UnrecordedRun:
    """A failed compaction run not written yet, as `runs` and the audit event will hold it."""

    session_id: int
    conversation_key: str
    model: str
    reason: str
    usage: Usage
    times: RunTimes

    def as_json(self) -> dict:
        return {
            "session_id": self.session_id,
            "conversation_key": self.conversation_key,
            "model": self.model,
            "reason": self.reason,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "last_input_tokens": self.usage.last_input_tokens,
            "started_at": self.times.started_at,
            "finished_at": self.times.finished_at,
        }

    @classmethod
    def from_json(cls, data: object) -> UnrecordedRun | None:
        """The run a file entry describes; None for an entry that is not one."""
        if not isinstance(data, dict):
            return None
        texts = [data.get(k) for k in ("conversation_key", "model", "reason", "started_at")]
        finished = data.get("finished_at")
        thread_id = data.get("session_id")
        if not all(isinstance(t, str) for t in texts) or not isinstance(finished, str):
            return None
        if not isinstance(thread_id, int) or isinstance(thread_id, bool):
            return None
        key, model, reason, started = texts
        usage = Usage(
            count(data.get("input_tokens")),
            count(data.get("output_tokens")),
            count(data.get("last_input_tokens")),
        )
        return cls(thread_id, key, model, reason, usage, RunTimes(started, finished))


def sidecar(volume_path: Path) -> Path:
    return volume_path.with_name(volume_path.name + SUFFIX)


def read_kept(volume_path: Path) -> list[UnrecordedRun]:
    """The runs an earlier pass kept beside the volume; none when there is no such file (or
    something else sits under its name: it is never followed, and is replaced when written)."""
    path = sidecar(volume_path)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return []
        with path.open("rb") as handle:
            data = json.loads(handle.read(MAX_BYTES + 1)[:MAX_BYTES].decode("utf-8"))
    except (OSError, ValueError):
        return []
    entries = data.get("runs") if isinstance(data, dict) else None
    runs = (UnrecordedRun.from_json(e) for e in entries) if isinstance(entries, list) else ()
    return [run for run in runs if run is not None]


def keep(volume_path: Path, runs: Iterable[UnrecordedRun]) -> Path:
    """Add `runs` to the file beside the volume, atomically; its path."""
    from volumetool.atomic import staged_file

    path = sidecar(volume_path)
    kept = [*read_kept(volume_path), *runs]
    text = json.dumps({"format": FORMAT, "runs": [r.as_json() for r in kept]}, indent=1)
    with staged_file(path, replace=True) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")
    return path


def write_runs(conn: sqlite3.Connection, runs: Iterable[UnrecordedRun]) -> list[int | None]:
    """Each run as a failed compaction run with its audit event, in the caller's transaction;
    its id, or None when it is in `runs` already (written by a pass killed before it removed
    the file). A thread gone meanwhile (prune, erase, or its id taken by another) gets a
    detached run, as prune leaves them."""
    ids: list[int | None] = []
    for run in runs:
        times = run.times
        there = conn.execute(
            "SELECT 1 FROM sessions WHERE id = ? AND conversation_key = ?",
            (run.session_id, run.conversation_key),
        ).fetchone()
        thread_id = run.session_id if there else None
        if conn.execute(
            "SELECT 1 FROM runs WHERE trigger = 'compaction' AND session_id IS ? AND error IS ?"
            " AND model IS ? AND started_at IS ? AND finished_at IS ?",
            (thread_id, run.reason, run.model, times.started_at, times.finished_at),
        ).fetchone():
            ids.append(None)
            continue
        thread = Thread(thread_id, run.conversation_key, None, ())  # type: ignore[arg-type]
        ids.append(record_failure(conn, thread, run.model, run.reason, run.usage, times))
    return ids


def record_kept(volume: Volume) -> None:
    """Before a pass spends anything on `volume`: take its write lock (Busy, exit 4, when the
    agent keeps it past the busy timeout: then nothing is spent on it) and write the runs an
    earlier pass kept beside it; the file goes once they are committed."""
    runs = read_kept(volume.path)
    if not runs:
        with volume.translating():
            volume.conn.execute("BEGIN IMMEDIATE")
            volume.conn.execute("ROLLBACK")
        return
    with volume.write() as conn:
        write_runs(conn, runs)
    with contextlib.suppress(FileNotFoundError):
        sidecar(volume.path).unlink()


@dataclass
class Settled:
    """A waiting run once the pass ended: written (`run_id`), else kept in `kept_in`."""

    run: UnrecordedRun
    outcome: Outcome
    run_id: int | None = None
    kept_in: Path | None = None


@dataclass
class Pending:
    """The runs of one pass that wait for their volume, each with its result row."""

    waiting: list[tuple[Volume, UnrecordedRun, Outcome]] = field(default_factory=list)

    def add(self, volume: Volume, run: UnrecordedRun, outcome: Outcome) -> None:
        self.waiting.append((volume, run, outcome))

    def settle(self, write: bool = True) -> list[Settled]:
        """Write each volume's waiting runs in one transaction (with `write`: the pass ended
        normally, so one more wait for the lock is fine), else keep them beside it. A run that
        can be neither stays only in its result row."""
        settled: list[Settled] = []
        for volume in {id(v): v for v, _, _ in self.waiting}.values():
            mine = [Settled(run, outcome) for v, run, outcome in self.waiting if v is volume]
            runs = [s.run for s in mine]
            try:
                if not write:
                    raise Busy("the pass was interrupted")
                with volume.write() as conn:
                    for one, run_id in zip(mine, write_runs(conn, runs), strict=True):
                        one.run_id = run_id
            except VolumetoolError:
                with contextlib.suppress(OSError, VolumetoolError):
                    path = keep(volume.path, runs)
                    for one in mine:
                        one.kept_in = path
            settled += mine
        self.waiting.clear()
        return settled

"""Finding and opening an agent volume: read-only and write connections, the busy timeout, the
schema-version gate and the per-volume lock.

Every SQLite error met here or inside `Volume` is translated into the exit-code exceptions of
`volumetool.errors`, so commands never see a raw `sqlite3.Error`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from volumetool.errors import Busy, SchemaMismatch, UnusableInput, from_sqlite

DB_NAME = "agent.db"
ENV_VAR = "VOLUMETOOL_VOLUME"
DEFAULT_BUSY_TIMEOUT = 5.0
MIGRATION_SET = "agent-volume"
SQLITE_MAGIC = b"SQLite format 3\x00"


def _given(argument: str | os.PathLike | None) -> str:
    if argument is None or str(argument) == "":
        argument = os.environ.get(ENV_VAR, "")
        if not argument:
            raise UnusableInput("no VOLUME given", f"pass a path or set {ENV_VAR}")
    return str(argument)


def resolve(argument: str | os.PathLike | None) -> Path:
    """The agent file named by a VOLUME argument (a file, or a directory holding agent.db),
    or by $VOLUMETOOL_VOLUME when there is none."""
    path = Path(_given(argument))
    if path.is_dir():
        return path / DB_NAME
    return path


def resolve_new(argument: str | os.PathLike | None) -> Path:
    """Like `resolve`, for a file about to be created: a trailing slash also means a directory."""
    given = _given(argument)
    path = resolve(given)
    if given.endswith(os.sep) and path.name != DB_NAME:
        return path / DB_NAME
    return path


@functools.cache
def known_migrations() -> list[str]:
    """The names of the `agent-volume` migrations, in order, read from the declarations in
    migrations.py rather than by importing it: every read command's gate needs them, and
    importing sqlite-utils just for a list of names would double their start-up cost. A test
    holds this equal to the set's own list."""
    import ast

    tree = ast.parse(Path(__file__).with_name("migrations.py").read_text(encoding="utf-8"))
    names = []
    for node in tree.body:
        for decorator in getattr(node, "decorator_list", []):
            if (
                isinstance(decorator, ast.Call)
                and isinstance(decorator.func, ast.Name)
                and decorator.func.id == "migrations"
            ):
                named = [
                    k.value.value
                    for k in decorator.keywords
                    if k.arg == "name" and isinstance(k.value, ast.Constant)
                ]
                names.append(named[0] if named else node.name)
    return names


@dataclass(frozen=True)
class SchemaState:
    """Which migrations of the set a file records, against those this version knows."""

    applied: list[tuple[str, str]]  # (name, applied_at), in the order they were applied
    known: list[str]
    legacy: bool = False  # a runtime 0.x file: no migrations table, transcripts inline
    pending: list[str] = field(init=False)
    newer: list[str] = field(init=False)

    def __post_init__(self) -> None:
        names = {name for name, _ in self.applied}
        object.__setattr__(self, "pending", [n for n in self.known if n not in names])
        object.__setattr__(self, "newer", [n for n, _ in self.applied if n not in set(self.known)])

    @property
    def version(self) -> str | None:
        return self.applied[-1][0] if self.applied else None


def check_file(path: Path) -> None:
    """Refuse, with one clear line, anything that cannot be an SQLite agent file."""
    if not path.exists():
        if Path(f"{path}-wal").exists():
            raise UnusableInput(
                f"{path}: missing, but its WAL ({path.name}-wal) is there and may hold "
                "committed data",
                "restore the database file next to it; keep the WAL",
            )
        where = f"no {DB_NAME} in {path.parent}" if path.name == DB_NAME else "no such file"
        raise UnusableInput(f"{path}: {where}", "create one with `volumetool init`")
    if not path.is_file():
        raise UnusableInput(f"{path}: not a regular file")
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot read the file ({exc.strerror})") from None
    if not header:
        raise UnusableInput(f"{path}: the file is empty, not an agent volume")
    if not header.startswith(SQLITE_MAGIC):
        raise UnusableInput(f"{path}: not an SQLite database")
    if len(header) < 100:
        raise UnusableInput(f"{path}: the SQLite header is truncated; the file is damaged")


def read_schema_state(conn: sqlite3.Connection, path: Path) -> SchemaState:
    """The file's place in the migration set; UnusableInput when it is not an agent file."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    applied: list[tuple[str, str]] = []
    if "_sqlite_migrations" in tables:
        applied = [
            (name, applied_at)
            for name, applied_at in conn.execute(
                "SELECT name, applied_at FROM _sqlite_migrations WHERE migration_set = ?"
                " ORDER BY rowid",
                (MIGRATION_SET,),
            )
        ]
    if applied:
        return SchemaState(applied, known_migrations())
    if "sessions" in tables:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
        if "transcript" in columns:
            return SchemaState([], known_migrations(), legacy=True)
    raise UnusableInput(
        f"{path}: SQLite, but not an agent volume (no {MIGRATION_SET} migrations and no "
        "runtime 0.x tables)"
    )


def require_current(state: SchemaState, path: Path) -> None:
    """The schema-version gate: exit 3 for an older or a newer file."""
    if state.newer:
        raise SchemaMismatch(
            f"{path}: written by a newer volumetool (unknown migration {state.newer[0]})",
            "upgrade volumetool",
        )
    if state.pending:
        what = "a runtime 0.x file" if state.legacy else f"{len(state.pending)} migration(s) behind"
        raise SchemaMismatch(f"{path}: {what}", f"run: volumetool migrate {path}")


def _connect(
    path: Path, readonly: bool, busy_timeout: float, immutable: bool = False
) -> sqlite3.Connection:
    if readonly:
        target, uri = Path(os.path.abspath(path)).as_uri() + "?mode=ro", True
        if immutable:
            target += "&immutable=1"
    else:
        target, uri = str(path), False
    conn = sqlite3.connect(
        target, uri=uri, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    if not readonly:
        conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _hot_journal(path: Path) -> bool:
    journal = Path(f"{path}-journal")
    return journal.exists() and journal.stat().st_size > 0


def _roll_back(path: Path, busy_timeout: float) -> None:
    """A writer that died mid-transaction (rollback-journal mode) leaves a hot journal that a
    read-only connection cannot roll back. Opening the file for writing lets SQLite roll it
    back, as the agent's next open would: the file then reads as its last committed state, and
    nothing committed changes. A live writer's journal is not hot, so this never touches it."""
    conn = sqlite3.connect(path, timeout=busy_timeout)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    finally:
        conn.close()


def _nobody_can_write(path: Path) -> bool:
    """A WAL-mode file in a directory that cannot be written has no -wal and can get none, so
    no writer can exist: SQLite cannot open it read-only (it wants to create -shm), but reading
    it as immutable is then exact."""
    wal = Path(f"{path}-wal")
    return not os.access(path.parent, os.W_OK) and (not wal.exists() or wal.stat().st_size == 0)


class Volume:
    """An open agent file. Use as a context manager; SQLite errors leave it translated."""

    def __init__(
        self,
        argument: str | os.PathLike | None,
        *,
        readonly: bool = True,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        gate: bool = True,
    ) -> None:
        self.path = resolve(argument)
        self.readonly = readonly
        self.busy_timeout = busy_timeout
        self.gate = gate
        check_file(self.path)
        self.conn: sqlite3.Connection
        with self.translating():
            self.conn = _connect(self.path, readonly, busy_timeout)
            try:
                try:
                    self.schema = read_schema_state(self.conn, self.path)
                except sqlite3.OperationalError:
                    if not readonly:
                        raise
                    self.conn.close()
                    immutable = False
                    if _hot_journal(self.path):
                        _roll_back(self.path, busy_timeout)
                    elif _nobody_can_write(self.path):
                        immutable = True
                    else:
                        raise
                    self.conn = _connect(self.path, readonly, busy_timeout, immutable)
                    self.schema = read_schema_state(self.conn, self.path)
                if gate:
                    require_current(self.schema, self.path)
            except BaseException:
                self.conn.close()
                raise

    @contextlib.contextmanager
    def translating(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise from_sqlite(exc, self.path) from exc

    def __enter__(self) -> Volume:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE) so it never has to upgrade
        a read lock; the schema gate is checked again under the lock."""
        with self.translating():
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                if self.gate:
                    require_current(read_schema_state(self.conn, self.path), self.path)
                yield self.conn
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            else:
                self.conn.execute("COMMIT")

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same state of the file."""
        with self.translating():
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")

    def agent_name(self) -> str | None:
        with self.translating():
            row = self.conn.execute("SELECT value FROM identity WHERE key = 'name'").fetchone()
        return row[0] if row else None


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".volumetool-lock")


@contextlib.contextmanager
def volume_lock(path: Path, wait: float = 0.0) -> Iterator[None]:
    """Hold the per-volume lock, so that two volumetool writers of the same kind never overlap.

    It is an flock on a side file: the kernel drops it when the process dies, so a leftover file
    from a killed run is harmless and is reused.
    """
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot create the volume lock ({exc.strerror})") from None
    deadline = time.monotonic() + max(wait, 0.0)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise Busy(
                        f"{path}: another volumetool holds the volume lock",
                        "retry later, or pass --wait SECONDS",
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)

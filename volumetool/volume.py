"""Finding and opening an agent volume: read-only and write connections, the busy timeout,
the schema gate (version and trust) and the per-volume lock.

Every SQLite error met here or inside `Volume` is translated into the exit-code exceptions of
`volumetool.errors`, so commands never see a raw `sqlite3.Error`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from volumetool import VOLUME_ENV
from volumetool.errors import (
    Busy,
    Damaged,
    Interrupted,
    SchemaMismatch,
    UntrustedSchemaWarning,
    UnusableInput,
    from_sqlite,
)
from volumetool.format import (
    CURRENT_SCHEMA,
    MIGRATION_SET,
    MIGRATIONS,
    Code,
    Column,
    Definition,
    Difference,
    ForeignKey,
    Index,
    Schema,
    Table,
    compare,
    index_definition,
    is_ignored,
    normalize_sql,
    virtual_module,
)
from volumetool.shard import Shard, in_shard
from volumetool.text import plural

DB_NAME = "agent.db"
DEFAULT_BUSY_TIMEOUT = 5.0

# Work done beside the running agent (prune; the search index's refresh, tidy and merge) goes in
# short write transactions, each sized to hold the write lock about WORK_SECONDS, and gives way
# after each for as long as it held the lock, at least GIVE_WAY: an agent whose write waited
# meanwhile looks for the lock again within that time (SQLite's busy handler looks after 1, 3,
# 8, 18 and 33 ms of waiting) and takes it before the next one (issue 31: the agent never
# waits 50 ms).
WORK_SECONDS = 0.005
GIVE_WAY = 0.015


def give_way(conn: sqlite3.Connection, held: float) -> None:
    """After a write transaction that held the lock `held` seconds, with more to come. The WAL
    is checkpointed meanwhile (PASSIVE: it takes no lock a writer needs), so that the agent's
    next commit does not find it long and copy it into the file itself, making its own write
    wait for that (measured: most of its waits over 40 ms during a prune)."""
    started = time.monotonic()
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    time.sleep(max(held, GIVE_WAY) - min(time.monotonic() - started, held))


def resized(size: int, took: float, most: int, aim: float | None = None) -> int:
    """The size of the next batch, when one of `size` took `took` seconds: about `aim` seconds
    of work (WORK_SECONDS), between 1 and `most`."""
    aim = WORK_SECONDS if aim is None else aim
    return max(1, min(most, int(size * aim / max(took, 1e-4))))


SQLITE_MAGIC = b"SQLite format 3\x00"


def check_argument(argument: str | os.PathLike | None) -> str:
    """A VOLUME argument that can name a file, checked without opening anything: none, empty
    or `-` is unusable input (exit 2)."""
    # $VOLUMETOOL_VOLUME is read by the CLI alone (cli.options), where no VOLUME is given.
    if argument is None or str(argument) == "":
        raise UnusableInput("no VOLUME given", f"pass a path or set {VOLUME_ENV}")
    if str(argument) == "-":  # SPEC 4's `-` is stdin/stdout: a database is neither
        raise UnusableInput(
            "-: a volume is an SQLite file and cannot be stdin or stdout",
            "name its path (./- for a file named -)",
        )
    return str(argument)


def resolve(argument: str | os.PathLike | None) -> Path:
    """The agent file named by a VOLUME argument (a file, or a directory holding agent.db). A
    path that cannot be looked at (too long, a directory without permission) is returned as it
    is: `check_file` then says why it cannot be used."""
    path = Path(check_argument(argument))
    try:
        is_directory = path.is_dir()
    except OSError:
        return path
    return path / DB_NAME if is_directory else path


def is_sqlite_file(argument: str) -> bool:
    """Whether an argument names an SQLite file (or a directory holding agent.db): the test of
    which argument of a command line is the VOLUME, when the first is not."""
    try:
        with resolve(argument).open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except (OSError, ValueError, UnusableInput):
        return False


def resolve_new(argument: str | os.PathLike | None) -> Path:
    """Like `resolve`, for a file about to be created: a trailing slash also means a directory."""
    given = check_argument(argument)
    path = resolve(given)
    if given.endswith(os.sep) and path.name != DB_NAME:
        return path / DB_NAME
    return path


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
    try:
        os.stat(path)
    except FileNotFoundError:
        pass
    except OSError as exc:  # a name too long, a directory without permission: unusable input
        raise UnusableInput(f"{path}: cannot read the file ({exc.strerror or exc})") from None
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
    with contextlib.suppress(OSError):
        if _connected(path.stat()):
            return  # read when it was opened; reading it again would drop SQLite's locks
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
        raise Damaged(path, "the SQLite header is truncated")


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
        return SchemaState(applied, list(MIGRATIONS))
    if "sessions" in tables:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
        if "transcript" in columns:
            return SchemaState([], list(MIGRATIONS), legacy=True)
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
        what = (
            "a runtime 0.x file"
            if state.legacy
            else f"{plural(len(state.pending), 'migration')} behind"
        )
        raise SchemaMismatch(f"{path}: {what}", f"run: volumetool migrate {path}")


# The files this process holds SQLite connections on, by (device, inode): the ids of those
# connections. POSIX drops every lock a process holds on a file when it closes any descriptor
# of that file, so reading one of them with open() (`check_file`) would drop the locks of
# SQLite's connections on it; an agent closing its own connection would then think itself the
# last one, and checkpoint and delete the WAL under them (what they write after that is lost).
# Each change is one operation under the GIL (setdefault, add, discard; a file's set is never
# removed): a connection closed meanwhile by another thread, or by the collector in another
# thread, cannot undo it, as a count read and written back could.
_CONNECTED: dict[tuple[int, int], set[int]] = {}


def _connected(found: os.stat_result) -> bool:
    """Whether this process holds an SQLite connection on the file `found` describes."""
    return bool(_CONNECTED.get((found.st_dev, found.st_ino)))


class _Connection(sqlite3.Connection):
    """An SQLite connection listed in `_CONNECTED` while it is open."""

    _file: tuple[int, int] | None = None

    def counted(self, target: Path | str) -> _Connection:
        with contextlib.suppress(OSError, ValueError):
            found = os.stat(target)
            self._file = (found.st_dev, found.st_ino)
            _CONNECTED.setdefault(self._file, set()).add(id(self))
        return self

    def close(self) -> None:
        self._uncount()
        super().close()

    def __del__(self) -> None:
        self._uncount()

    def _uncount(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            _CONNECTED.get(file, set()).discard(id(self))


def connect(
    target: Path | str,
    *,
    readonly: bool = False,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    immutable: bool = False,
) -> sqlite3.Connection:
    """Every connection volumetool opens: `trusted_schema` off, so that a view, trigger or index
    of the file may not call a function SQLite does not know to be harmless; autocommit, so
    that every transaction is explicit."""
    if readonly:
        uri = Path(os.path.abspath(target)).as_uri() + "?mode=ro"
        conn = sqlite3.connect(
            uri + ("&immutable=1" if immutable else ""),
            uri=True,
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            factory=_Connection,
        )
    else:
        conn = sqlite3.connect(
            target,
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            factory=_Connection,
        )
    conn.counted(target)
    conn.execute("PRAGMA trusted_schema = OFF")
    return conn


# The schema as the gate compares it: four reads of the schema table and its pragmas, a fixed
# cost whatever the size of the file. Names inside definitions are lowercased (SQLite's names
# ignore case); objects keep their own spelling, for the messages.
_OBJECTS_SQL = "SELECT type, name, lower(tbl_name), sql FROM main.sqlite_master"
_TABLES = (
    "FROM main.sqlite_master m, {pragma}(m.name, 'main') p WHERE m.type = 'table'"
    " AND coalesce(m.sql, '') NOT LIKE 'CREATE VIRTUAL TABLE%'"
)
_COLUMNS_SQL = (
    'SELECT lower(m.name), lower(p.name), upper(p.type), p."notnull", p.dflt_value, p.pk,'
    " p.hidden " + _TABLES.format(pragma="pragma_table_xinfo") + " ORDER BY m.name, p.cid"
)
_FOREIGN_KEYS_SQL = (
    'SELECT lower(m.name), lower(p."from"), lower(p."table"), lower(p."to"), p.on_update,'
    ' p.on_delete, p."match" ' + _TABLES.format(pragma="pragma_foreign_key_list")
)
_INDEX_COLUMNS_SQL = (
    "SELECT lower(m.name), p.cid, lower(p.name), p.desc, upper(p.coll)"
    " FROM main.sqlite_master m, pragma_index_xinfo(m.name, 'main') p"
    " WHERE m.type = 'index' AND p.key ORDER BY m.name, p.seqno"
)


def _index_column(cid: int, name: str | None, desc: int, collation: str) -> str:
    text = "(expression)" if cid == -2 or name is None else name
    return (
        text
        + (" DESC" if desc else "")
        + ("" if collation == "BINARY" else f" COLLATE {collation}")
    )


def read_schema(conn: sqlite3.Connection) -> dict[tuple[str, str], Definition]:
    """Every schema object of the file that the gate compares, as `format` describes them;
    names as the file spells them (`compare` ignores their case, as SQLite does)."""
    objects = [
        (kind, name, table, sql)
        for kind, name, table, sql in conn.execute(_OBJECTS_SQL)
        if not is_ignored(kind, name, table, sql is not None)
    ]
    columns: dict[str, list[Column]] = {}
    for table, name, declared, notnull, default, pk, hidden in conn.execute(_COLUMNS_SQL):
        columns.setdefault(table, []).append(
            Column(name, declared, bool(notnull), normalize_sql(default), pk, hidden)
        )
    primary = {t: c.name for t, cs in columns.items() for c in cs if c.pk == 1}
    foreign_keys: dict[str, list[ForeignKey]] = {}
    for table, column, parent, to, *actions in conn.execute(_FOREIGN_KEYS_SQL):
        # `REFERENCES runs` names the parent's primary key as surely as `REFERENCES runs (id)`
        key = ForeignKey(column, parent, to or primary.get(parent), *actions)
        foreign_keys.setdefault(table, []).append(key)
    index_columns: dict[str, list[str]] = {}
    for index, *column in conn.execute(_INDEX_COLUMNS_SQL):
        index_columns.setdefault(index, []).append(_index_column(*column))
    schema: dict[tuple[str, str], Definition] = {}
    for kind, name, table, sql in objects:
        lowered = name.lower()
        if kind == "table":
            virtual = lowered not in columns
            schema[kind, name] = Table(
                tuple(columns.get(lowered, ())),
                tuple(sorted(foreign_keys.get(lowered, ()), key=lambda k: (k.column, k.table))),
                virtual=virtual,
                module=virtual_module(sql) if virtual else None,
            )
        elif kind == "index":
            schema[kind, name] = Index(
                table, tuple(index_columns.get(lowered, ())), *index_definition(sql)
            )
        else:
            schema[kind, name] = Code(table)
    return schema


# The verdicts of the current format, by schema table: SQLite builds a file's schema from the
# text of those rows alone, so files with the same rows have the same verdict, and a process
# that reads many volumes of one format (`status` of a fleet) compares it once.
_VERDICTS: dict[tuple, list[Difference]] = {}
_MOST_VERDICTS = 64


def schema_differences(
    conn: sqlite3.Connection, expected: Schema = CURRENT_SCHEMA
) -> list[Difference]:
    """How the file's schema departs from `expected` (the current format by default)."""
    if expected is not CURRENT_SCHEMA:
        return compare(read_schema(conn), expected)
    rows = tuple(conn.execute(_OBJECTS_SQL))
    if rows not in _VERDICTS:
        if len(_VERDICTS) >= _MOST_VERDICTS:
            _VERDICTS.clear()
        _VERDICTS[rows] = compare(read_schema(conn), expected)
    return list(_VERDICTS[rows])


def describe_differences(differences: list[Difference], most: int = 10) -> str:
    shown = "; ".join(d.describe() for d in differences[:most])
    more = len(differences) - most
    return shown + (f"; and {more} more" if more > 0 else "")


def admit(
    conn: sqlite3.Connection,
    state: SchemaState,
    path: Path,
    expected: Callable[[SchemaState, Path], Schema] | None = None,
) -> None:
    """The schema gate of a write: the file is at the format this version writes (or, with
    `expected`, at a format its recorded migrations define: migrate) and holds nothing the
    format does not define, so that no planted trigger fires with volumetool's writes."""
    if expected is None or state.newer:
        require_current(state, path)
    schema = CURRENT_SCHEMA if expected is None else expected(state, path)
    differences = schema_differences(conn, schema)
    if differences:
        raise SchemaMismatch(
            f"{path}: the schema departs from the format: {describe_differences(differences)}",
            "volumetool writes nothing beside objects it does not know (they could run with "
            "its writes); `volumetool check` lists them",
        )


def _hot_journal(path: Path) -> bool:
    journal = Path(f"{path}-journal")
    return journal.exists() and journal.stat().st_size > 0


def _roll_back(path: Path, busy_timeout: float) -> None:
    """A writer that died mid-transaction (rollback-journal mode) leaves a hot journal that a
    read-only connection cannot roll back. Opening the file for writing lets SQLite roll it
    back, as the agent's next open would: the file then reads as its last committed state, and
    nothing committed changes. A live writer's journal is not hot, so this never touches it."""
    conn = connect(path, busy_timeout=busy_timeout)
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
    """An open agent file. Use as a context manager; SQLite errors leave it translated.

    With `gate` (the default), the file must be at the current format: a read-only volume
    whose schema departs from it reads on with an `UntrustedSchemaWarning`; a writable one is
    refused (SchemaMismatch), and every write transaction checks again under the lock.
    """

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
        self.written = False  # a write transaction committed
        self.differences: list[Difference] = []  # how a read-only file departs from the format
        # Held by a transaction, so that close() from another thread (the main one, after a
        # second Ctrl-C) waits for a write under way in a worker instead of closing the
        # connection under it (which crashed the process, SIGSEGV).
        self._in_use = threading.RLock()
        check_file(self.path)
        self.conn: sqlite3.Connection
        with self.translating():
            self.conn = connect(self.path, readonly=readonly, busy_timeout=busy_timeout)
            if not readonly:
                self.conn.execute("PRAGMA foreign_keys = ON")
            try:
                self._open()
            except BaseException:
                self.conn.close()
                raise

    def _open(self) -> None:
        try:
            self.schema = read_schema_state(self.conn, self.path)
        except sqlite3.OperationalError:
            if not self.readonly:
                raise
            self.conn.close()
            immutable = False
            if _hot_journal(self.path):
                _roll_back(self.path, self.busy_timeout)
            elif _nobody_can_write(self.path):
                immutable = True
            else:
                raise
            self.conn = connect(
                self.path, readonly=True, busy_timeout=self.busy_timeout, immutable=immutable
            )
            self.schema = read_schema_state(self.conn, self.path)
        if not self.gate:
            return
        if not self.readonly:
            admit(self.conn, self.schema, self.path)
            return
        require_current(self.schema, self.path)
        differences = self.differences = schema_differences(self.conn)
        if differences:
            warnings.warn(
                f"{self.path}: the schema departs from the format: "
                f"{describe_differences(differences)}; reading on, but write commands refuse "
                "this file",
                UntrustedSchemaWarning,
                stacklevel=3,
            )

    @contextlib.contextmanager
    def translating(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise from_sqlite(exc, self.path) from exc
        except UnicodeDecodeError as exc:
            # SQLite handed back bytes that are not UTF-8 (an error message quoting a damaged
            # schema, say): in an agent file, only damage does that.
            raise Damaged(self.path, "text that is not UTF-8") from exc

    def __enter__(self) -> Volume:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection, once no transaction of another thread uses it."""
        with self._in_use, contextlib.suppress(sqlite3.Error):
            self.conn.close()

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE) so it never has to upgrade
        a read lock; the schema gate is checked again under the lock. Any exception, Ctrl-C
        included, rolls it back."""
        with self._in_use, self.translating():
            self.conn.execute("BEGIN IMMEDIATE")
            committing = False
            try:
                if self.gate:
                    admit(self.conn, read_schema_state(self.conn, self.path), self.path)
                yield self.conn
                committing = True
                self.conn.execute("COMMIT")
                self.written = True
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                elif committing:
                    self.written = True  # interrupted just after the COMMIT returned
                raise

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same state of the file."""
        with self._in_use, self.translating():
            self.conn.execute("BEGIN")
            try:
                yield self.conn
            finally:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")

    def admit(self, expected: Callable[[SchemaState, Path], Schema] | None = None) -> None:
        """The schema gate of a write (`admit`) on this volume's connection."""
        with self.translating():
            admit(self.conn, self.schema, self.path, expected)

    def agent_name(self) -> str | None:
        with self.translating():
            row = self.conn.execute("SELECT value FROM identity WHERE key = 'name'").fetchone()
        return row[0] if row else None


@contextlib.contextmanager
def open_for_write(
    argument: str | os.PathLike | None,
    *,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    lock: bool,
    wait: float = 0.0,
    expected: Callable[[SchemaState, Path], Schema] | None = None,
) -> Iterator[Volume]:
    """The one way a command opens a volume to write it: resolve the argument, check the file
    (an SQLite agent file, no orphaned WAL, the schema gate: version and trust), then take the
    per-volume lock if asked, then open it for writing. A file that fails the checks gets no
    lock file and no write connection (a WAL-mode file only the -wal and -shm that any reader
    of it makes).

    `lock` is for commands that hold a volume across several transactions or for long
    (migrate, compact, prune, erase): two of them must not interleave. A single-transaction
    write (remember, forget, import, thread new/reset) passes lock=False: SQLite's own locking
    serializes it with everything else, as it does the agent's writes, and a long cron
    compaction must not lock out a `remember`.

    `expected` is for migrate: the file may be behind the current format (never ahead) and
    its schema must be what its recorded migrations define. Ctrl-C inside the block becomes
    `Interrupted` (exit 130), saying whether anything had been written.
    """
    path = resolve(argument)
    volume = None
    try:
        with Volume(path, readonly=True, busy_timeout=busy_timeout, gate=False) as checked:
            checked.admit(expected)
        guard = volume_lock(path, wait) if lock else contextlib.nullcontext()
        with (
            guard,
            Volume(
                path, readonly=False, busy_timeout=busy_timeout, gate=expected is None
            ) as volume,
        ):
            if expected is not None:
                volume.admit(expected)  # again, now that no other volumetool can change it
            yield volume
    except KeyboardInterrupt:
        kept = volume is not None and volume.written
        raise Interrupted(
            f"{path}: interrupted; "
            + (
                "what was committed before stays, the write under way was rolled back"
                if kept
                else "nothing was written"
            )
        ) from None


@contextlib.contextmanager
def reading(
    argument: str | os.PathLike | None, busy_timeout: float
) -> Iterator[sqlite3.Connection]:
    """How a read command reads: the volume opened read-only through the schema gate, and one
    snapshot of it held while the block runs."""
    with Volume(argument, readonly=True, busy_timeout=busy_timeout) as vol, vol.snapshot() as conn:
        yield conn


@contextlib.contextmanager
def writing(
    argument: str | os.PathLike | None,
    busy_timeout: float,
    confirm: Callable[[sqlite3.Connection], None] | None = None,
) -> Iterator[sqlite3.Connection]:
    """How a single-transaction change (remember, forget, thread new/reset/undo) writes:
    `open_for_write` without the volume lock, then one write transaction for the block
    (`Volume.write`). `confirm`, given, first reads in a snapshot and asks; it raises to stop,
    and then nothing is written."""
    with open_for_write(argument, busy_timeout=busy_timeout, lock=False) as vol:
        if confirm is not None:
            with vol.snapshot() as conn:
                confirm(conn)
        with vol.write() as conn:
            yield conn


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


# -- which volumes a shard of a fleet run takes (volumetool.shard decides, from the path) --


def shard_key(argument: str | os.PathLike) -> str:
    """The path a VOLUME argument is sharded by: its agent file (a directory means the agent.db
    in it), absolute, with `.`, `..` and doubled or trailing slashes normalised away."""
    return str(resolve(os.path.abspath(argument)))


def select(arguments: Iterable[str], shard: Shard | None) -> list[str]:
    """The VOLUME arguments of `shard` (all of them without one), in the order given, each
    volume once: `vol`, `./vol/` and `vol/agent.db`, or a link to it, name one file, and a
    command given it twice would otherwise do its work twice (a compaction then found the
    volume lock held by itself)."""
    chosen, seen = [], set()
    for argument in arguments:
        key = shard_key(argument)
        identity = _identity(key)
        if identity in seen or (shard is not None and not in_shard(key, shard)):
            continue
        seen.add(identity)
        chosen.append(argument)
    return chosen


def _identity(key: str) -> tuple[int, int] | str:
    """The file a shard key names (device and inode, whatever the path to it), or the key
    itself when there is no such file to ask."""
    try:
        found = os.stat(key)
    except (OSError, ValueError):
        return key
    return found.st_dev, found.st_ino

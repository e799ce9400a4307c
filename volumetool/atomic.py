"""Atomic files: every file volumetool writes whole (a new volume, a backup, an export, a
report page, a metrics file) is built under a temporary name in the target directory and
linked into place only when complete (`staged_file`, `publish`), or renamed over the file it
may replace, so a crash leaves either the old file or a whole new one, and a new file never
overwrites an existing one (the link fails instead). `create_volume` is `init`'s (and `demo`'s)
new agent file, made that way. What a command's file may replace, and stdout, are
`output.OutputTarget`'s.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import socket
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from volumetool.errors import UnusableInput
from volumetool.timefmt import now_iso
from volumetool.volume import connect


def refuse_existing(path: Path) -> None:
    if path.exists() or path.is_symlink():
        raise UnusableInput(f"{path}: already exists", "refusing to overwrite; pick a new path")


SIDE_FILES = ("-wal", "-shm", "-journal")


def refuse_side_files(path: Path) -> None:
    """A new database must not be born beside a leftover -wal, -shm or -journal: SQLite would
    take it for the new file's own and replay another database's committed pages into it."""
    for suffix in SIDE_FILES:
        side = Path(f"{path}{suffix}")
        if side.exists() or side.is_symlink():
            raise UnusableInput(
                f"{path}: {side.name} is already there and may hold another database's pages",
                "move it away (or restore its database file), or pick a new path",
            )


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp: Path, path: Path) -> None:
    """Move a finished temporary file to `path` without ever replacing an existing file."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        refuse_existing(path)
        raise
    except OSError:
        # Filesystems without hard links: the rename is still atomic, the check just before it
        # is the best no-overwrite guard they allow.
        refuse_existing(path)
        os.replace(tmp, path)
    fsync_directory(path.parent)


def _host() -> str:
    return socket.gethostname().replace("-", "_").replace("/", "_")


def stage_prefix(name: str, kind: str = "tmp") -> str:
    """How a file of this process that may outlive it is named: `.NAME.KIND-HOST-PID-`."""
    return f".{name}.{kind}-{_host()}-{os.getpid()}-"


def stage_owner(name: str, kind: str = "tmp") -> int | None:
    """The pid in a name `.NAME.KIND-HOST-PID-…` that a process of this host gave a file, or
    None when the name is not one of those."""
    found = re.search(rf"\.{re.escape(kind)}-{re.escape(_host())}-(\d+)-", name)
    return int(found.group(1)) if found else None


def dead_stages(directory: Path, names: str, kind: str = "tmp") -> Iterator[tuple[Path, int]]:
    """The files `.NAMES.KIND-HOST-PID-…` in `directory` (NAMES a glob) left by a process of
    this host that is gone, with its pid; a live process's files are never among them."""
    for leftover in directory.glob(f".{names}.{kind}-*"):
        pid = stage_owner(leftover.name, kind)
        if pid is None:
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            yield leftover, pid
        except PermissionError:
            pass  # alive, someone else's


def remove_stale_stages(directory: Path, names: str) -> None:
    """Delete the temporary files a killed volumetool left for files matching the glob `names`
    in `directory`. Only stages of this host whose process is gone are touched, so a live
    writer's stage is never removed."""
    for leftover, _ in dead_stages(directory, names):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


def remove_stage(tmp: Path) -> None:
    """Delete a staged file with the side files SQLite may have made beside it."""
    for leftover in (tmp, *(Path(f"{tmp}{suffix}") for suffix in SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


@contextlib.contextmanager
def staged_file(
    path: Path, mode: int = 0o600, replace: bool = False, make_parents: bool = False
) -> Iterator[Path]:
    """A temporary sibling of `path` (mode 0600) that becomes `path` when the block succeeds:
    fsynced, then linked into place (never replacing a file) or, with `replace`, renamed over
    it. A failure or a kill leaves `path` as it was."""
    if not replace:
        refuse_existing(path)
    # A new volume's directories; an export or a backup needs an existing one.
    with made_directories(path.parent if make_parents else None):
        try:
            remove_stale_stages(path.parent, glob.escape(path.name))
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=stage_prefix(path.name))
        except OSError as exc:
            raise UnusableInput(f"{path}: cannot create the file ({exc.strerror})") from None
        os.close(fd)
        os.chmod(name, mode)
        tmp = Path(name)
        try:
            yield tmp
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            if replace:
                os.replace(tmp, path)
                fsync_directory(path.parent)
            else:
                publish(tmp, path)
        finally:
            remove_stage(tmp)


@contextlib.contextmanager
def made_directories(directory: Path | None) -> Iterator[list[Path]]:
    """Make `directory` and its missing parents (None: nothing) for the block; if the block
    fails, remove those this call made, deepest first, as long as they are still empty: a
    failed command leaves no directory behind, and never removes one it did not make."""
    made: list[Path] = []
    missing = [d for d in (directory, *directory.parents) if not d.exists()] if directory else []
    for each in reversed(missing):
        try:
            # Never writable by others, whatever the umask: whoever can write in it can put
            # another file in the volume's place.
            each.mkdir(mode=0o755)
            made.append(each)
        except OSError as exc:
            if isinstance(exc, FileExistsError) and each.is_dir():
                continue  # made meanwhile by someone else: not this call's to remove
            remove_empty(made)
            raise UnusableInput(f"{each}: cannot make the directory ({exc.strerror})") from None
    try:
        yield made
    except BaseException:
        remove_empty(made)
        raise


def remove_empty(directories: list[Path]) -> None:
    """Remove these directories, deepest (last) first, each only if it is empty."""
    for directory in reversed(directories):
        with contextlib.suppress(OSError):
            directory.rmdir()


def apply_migrations(conn: sqlite3.Connection) -> None:
    """Bring a file to the current format with the `agent-volume` migration set."""
    import sqlite_utils

    from volumetool.migrations import migrations

    migrations.apply(sqlite_utils.Database(conn))


def create_volume(
    path: Path,
    name: str,
    fill: Callable[[sqlite3.Connection], None] | None = None,
    created_at: str | None = None,
) -> Path:
    """Create an agent file at the current format, in WAL mode, optionally filled by `fill`."""
    refuse_existing(path)
    refuse_side_files(path)
    with staged_file(path, make_parents=True) as tmp:
        conn = connect(tmp)
        try:
            # The staged file is private until published, so it needs no crash journal.
            conn.execute("PRAGMA journal_mode = MEMORY")
            conn.execute("PRAGMA synchronous = OFF")
            apply_migrations(conn)
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT INTO identity (key, value) VALUES (?, ?)",
                [("name", name), ("created_at", created_at or now_iso())],
            )
            if fill:
                fill(conn)
            conn.execute("COMMIT")
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
    return path

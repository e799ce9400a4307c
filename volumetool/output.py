"""Where a command's file goes: one target for every command that writes one (`memories
export -o`, `report -o`, `backup DEST`, `compact --metrics-file`, `demo --config-out`), named
on the command line as a path or as `-` (stdout).

One shape, whatever the file:

1. `OutputTarget.check()` before the work starts (before a volume is opened or a model
   called): the name is usable, its directory exists and is writable, and what is there may be
   replaced — nothing (`starts=None`: the file must be new), or a file of the same kind (its
   first bytes are one of `starts`) or an empty one; never a directory, a link, a device or a
   volume named by mistake (exit 2).
2. `OutputTarget.open()` (a binary stream) or `OutputTarget.staged()` (a file to fill) for the
   write: checked again (the work took a while), staged beside the file and published
   atomically (`atomic.staged_file`), so a reader or a crash sees the old file or the whole new
   one; stdout goes through the same path, written whole (a reader that closes the pipe
   before the end makes it an error, exit 1: the copy it got is incomplete).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from volumetool.atomic import refuse_existing, remove_stage, stage_prefix, staged_file
from volumetool.errors import ProblemsFound, UnusableInput


@dataclass
class OutputTarget:
    """A file a command writes whole, as named on the command line."""

    name: str  # as given: a path, or `-` for stdout
    what: str  # what the file is, for messages: "memories export"
    example: str  # a file name for the hint when a directory is named: "memories.jsonl"
    # The first bytes of a file it may replace; None: it replaces nothing (a new file only).
    starts: tuple[bytes, ...] | None = None
    mode: int = 0o600  # a new file's mode
    keep_mode: bool = False  # a replaced file keeps its mode
    binary: bool = False  # never written to a terminal
    make_parents: bool = False  # the directories it goes in are made (demo's new files)
    written: int = 0  # bytes, once written

    @property
    def path(self) -> Path | None:
        """The file; None for stdout."""
        return None if self.name == "-" else Path(self.name)

    def check(self) -> OutputTarget:
        """Refuse (exit 2) what cannot or must not be written; done before the work starts."""
        if self.path is None:
            if self.binary and sys.stdout.isatty():
                raise UnusableInput(
                    f"refusing to write a {self.what} to a terminal",
                    f"pipe it (… - | zstd > {self.example}.zst) or name a file",
                )
            return self
        self.file_mode()
        return self

    def file_mode(self) -> int:
        """The mode the file gets; refused (exit 2) unless it may be written."""
        path, text = self.path, self.name
        assert path is not None
        if "\x00" in text:
            raise UnusableInput(f"a {self.what} name cannot hold a NUL character")
        try:
            if text.endswith("/"):  # `DIR/` read as `DIR` would land under a name nobody asked
                raise UnusableInput(
                    f"{text}: names a directory", f"name the file, e.g. DIR/{self.example}"
                )
            if path.is_dir():
                raise UnusableInput(
                    f"{text}: is a directory", f"name the file, e.g. {text}/{self.example}"
                )
            directory = path.parent
            if self.make_parents:
                directory = nearest_existing(directory)
            if not directory.is_dir():
                raise UnusableInput(f"{text}: no directory {directory} for the {self.what}")
        except OSError as exc:  # a name too long, a directory without permission
            raise UnusableInput(f"{text}: cannot use the name ({exc.strerror or exc})") from None
        if not os.access(directory, os.W_OK | os.X_OK):
            raise UnusableInput(f"{text}: cannot write in {directory}")
        if self.starts is None:
            refuse_existing(path)
            return self.mode
        mode = replaceable_mode(path, self.starts, self.what, self.mode)
        return mode if self.keep_mode else self.mode

    @contextlib.contextmanager
    def staged(self) -> Iterator[Path]:
        """A file to fill, which becomes the target when the block succeeds: a sibling of the
        file published atomically, or for stdout a file in $TMPDIR streamed there after (and
        unlinked before its first byte is written, so nothing is left however it ends)."""
        path = self.path
        if path is not None:
            mode, replace = self.file_mode(), self.starts is not None
            with staged_file(path, mode, replace=replace, make_parents=self.make_parents) as tmp:
                yield tmp
                self.written = tmp.stat().st_size
            return
        try:
            fd, name = tempfile.mkstemp(prefix=stage_prefix(self.example))
        except OSError as exc:
            raise UnusableInput(
                f"{tempfile.gettempdir()}: cannot stage the {self.what} ({exc.strerror})",
                "set TMPDIR to a directory with room for it",
            ) from None
        os.close(fd)
        stage = Path(name)
        try:
            yield stage
            with open(stage, "rb") as staged:
                remove_stage(stage)
                out = WholeWrites(sys.stdout.buffer, self.what)
                shutil.copyfileobj(staged, out, 1 << 20)
                out.flush()
                self.written = os.fstat(staged.fileno()).st_size
        finally:
            remove_stage(stage)

    @contextlib.contextmanager
    def open(self) -> Iterator[BinaryIO]:
        """A binary stream to the target: stdout written whole, or a staged file published
        when the block succeeds."""
        if self.path is None:
            out = WholeWrites(sys.stdout.buffer, self.what)
            yield out
            out.flush()
            self.written = out.written
            return
        with self.staged() as tmp, open(tmp, "wb") as out:
            yield out


def nearest_existing(directory: Path) -> Path:
    """The directory itself or its nearest ancestor that exists (which may be no directory)."""
    return next(
        (d for d in (directory, *directory.parents) if d.exists() or d.is_symlink()), directory
    )


def replaceable_mode(path: Path, kinds: tuple[bytes, ...], what: str, new_mode: int = 0o600) -> int:
    """The mode a file written over `path` gets: a new file's (`new_mode`), or that of the
    file it replaces — which must be empty (it then gets a new file's mode too) or begin as a
    file of this kind does (`kinds`: its first bytes). A volume, a directory, a device, a
    symbolic link (the rename would replace the link, not where it points) or any other file
    named by mistake is refused (exit 2) before anything is written or read past its start."""
    try:
        link, exists = path.is_symlink(), path.exists()
    except OSError as exc:  # a name too long, a directory without permission
        raise UnusableInput(f"{path}: cannot use the name ({exc.strerror or exc})") from None
    if link:
        raise UnusableInput(
            f"{path}: is a symbolic link; refusing to replace it", f"name the {what}'s file itself"
        )
    if not exists:
        return new_mode
    if not path.is_file():
        raise UnusableInput(f"{path}: not a regular file", f"name the {what}'s file")
    try:
        with path.open("rb") as existing:
            start = existing.read(max(len(k) for k in kinds))
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot read it ({exc.strerror})") from None
    if not start:
        return new_mode
    if not start.startswith(kinds):
        raise UnusableInput(
            f"{path}: exists and is not a {what}; refusing to replace it",
            f"name a new file, or an earlier {what}",
        )
    return os.stat(path).st_mode & 0o777


class WholeWrites:
    """A binary stream to stdout that writes every byte or fails. Python's buffered stdout may
    take part of a large write and drop the rest when the pipe closes under it (`… | head`);
    here the rest is written again. A pipe closed before the end is an error (exit 1) that
    says the `what` is incomplete: a copy cut short must never pass for a whole one (listings
    end quietly on a closed pipe; a file's data does not)."""

    def __init__(self, stream: BinaryIO, what: str) -> None:
        self.stream = stream
        self.what = what
        self.written = 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        with self._whole():
            while view:
                view = view[self.stream.write(view) :]
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        with self._whole():
            self.stream.flush()

    @contextlib.contextmanager
    def _whole(self) -> Iterator[None]:
        try:
            if stdout_closed_at_start:  # `>&-`: main() put /dev/null there; nobody reads it
                raise BrokenPipeError
            yield
        except BrokenPipeError:
            discard_stdout()
            if stdout_closed_at_start:
                raise ProblemsFound(
                    f"the {self.what} was not written: stdout is closed",
                    "write to a file, or run the command with stdout open",
                ) from None
            raise ProblemsFound(
                f"the {self.what} written to stdout is incomplete: the reader closed the pipe"
                " before its end",
                "do not use what it read; write to a file, or read the pipe to its end",
            ) from None


# The process started with stdout closed (`>&-`): set by `volumetool.cli.main`, which opens
# /dev/null in its place; a file's data written there would be lost, so it is an error.
stdout_closed_at_start = False


class VerdictStdout:
    """sys.stdout while a command whose exit code is a verdict runs (`Command(verdict=True)`):
    a reader that closes the pipe (`… | grep -q failed`, `… | head -1`) does not end the
    command, as it ends a listing. The first write that finds the pipe closed points stdout at
    /dev/null, and the command finishes its work (a compaction records its runs and writes
    its metrics file), drops the rest of its output and exits with its own code: 1 when it
    found problems, never 0 for them."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.closed_pipe = False

    def write(self, text: str) -> int:
        if not self.closed_pipe:
            with self._dropping():
                return self.stream.write(text)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._dropping():
            self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)

    @contextlib.contextmanager
    def _dropping(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            self.closed_pipe = True
            discard_stdout()  # what is still buffered goes to /dev/null when flushed


@contextlib.contextmanager
def verdict_stdout() -> Iterator[None]:
    """Run a command with `VerdictStdout` as sys.stdout; flushed before the command ends."""
    stream = sys.stdout
    sys.stdout = verdict = VerdictStdout(stream)
    try:
        yield
    finally:
        verdict.flush()
        sys.stdout = stream


def discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of what is still
    buffered cannot fail again on a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # not a real file descriptor (a test runner's capture)

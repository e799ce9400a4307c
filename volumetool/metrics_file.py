"""The metrics file of `compact --metrics-file`: checked before a run, written atomically after
it for node_exporter's textfile collector. The I/O beside volumetool.metrics, which only
formats."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from volumetool.atomic import replaceable_mode, staged_file
from volumetool.errors import ProblemsFound, UnusableInput
from volumetool.metrics import compaction_metrics, last_success_in

if TYPE_CHECKING:
    from volumetool.compaction.run import Outcome


def check_textfile(path: str) -> Path:
    """A metrics file can be written at `path` (its directory exists and is writable): checked
    before a run starts, so a typo costs nothing."""
    if "\x00" in path:
        raise UnusableInput("a metrics file name cannot hold a NUL character")
    target = Path(path)
    directory = target.parent
    if target.is_dir():
        raise UnusableInput(f"{path}: is a directory", "name the metrics file itself")
    if not directory.is_dir():
        raise UnusableInput(f"{path}: no directory {directory} for the metrics file")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UnusableInput(f"{path}: cannot write in {directory}")
    metrics_mode(target)  # never over a volume, a device or anything else named by mistake
    return target


# How a metrics file this module wrote begins; node_exporter reads any file it is shown.
METRICS_STARTS = (b"# TYPE ", b"# HELP ", b"# EOF")
PREVIOUS_MAX_BYTES = 1 << 20  # of an earlier metrics file, read for its last success


def metrics_mode(path: Path) -> int:
    """The mode the metrics file at `path` is written with: 0644, or an earlier one's."""
    return replaceable_mode(path, METRICS_STARTS, "metrics file", new_mode=0o644)


def write_textfile(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (a temporary file in the same directory, renamed),
    readable by all, so that node_exporter never reads half a file; the temporary name starts
    with a dot and does not end in .prom, so the collector never reads it either. `path` is
    checked again first (the run took a while): only an earlier metrics file is replaced."""
    try:
        with staged_file(path, mode=metrics_mode(path), replace=True) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except (OSError, UnusableInput) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ProblemsFound(
            f"{path}: the metrics file was not written ({why}); the run's results above stand"
        ) from None


def record_compaction(
    path: Path,
    outcomes: Sequence[Outcome],
    duration: float,
    *,
    succeeded: bool,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Write a compaction run's metrics file, keeping the last success of the file it replaces."""
    text = compaction_metrics(
        outcomes,
        duration,
        finished_at=time.time(),
        succeeded=succeeded,
        previous_success=None if succeeded else _last_success_before(path),
        labels=labels,
    )
    write_textfile(path, text)


def _last_success_before(path: Path) -> float | None:
    """The last success the earlier metrics file at `path` records: read (1 MiB at most) only
    when it is one, so that no other file named there is read at all."""
    try:
        metrics_mode(path)
        with path.open("rb") as earlier:
            return last_success_in(earlier.read(PREVIOUS_MAX_BYTES).decode("utf-8", "replace"))
    except (OSError, UnusableInput):
        return None

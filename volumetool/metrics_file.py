"""The metrics file of `compact --metrics-file`: checked before a run, written atomically after
it for node_exporter's textfile collector. The I/O beside volumetool.metrics, which only
formats."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from volumetool.errors import ProblemsFound, UnusableInput
from volumetool.metrics import compaction_metrics, last_success_in
from volumetool.output import OutputTarget

if TYPE_CHECKING:
    from volumetool.compaction.run import Outcome


# How a metrics file this module wrote begins; node_exporter reads any file it is shown.
METRICS_STARTS = (b"# TYPE ", b"# HELP ", b"# EOF")
PREVIOUS_MAX_BYTES = 1 << 20  # of an earlier metrics file, read for its last success


def metrics_target(name: str) -> OutputTarget:
    """Where `--metrics-file NAME` writes, checked before a run starts, so that a typo costs
    nothing: never over a volume, a device or anything else named by mistake, only an earlier
    metrics file (whose mode it keeps; a new one is 0644, readable by node_exporter). Not
    stdout (`-`): that carries the run's results, and node_exporter reads files."""
    if name == "-":
        raise UnusableInput(
            "--metrics-file -: stdout carries the run's results, so the metrics cannot go there",
            "name a file in node_exporter's textfile directory",
        )
    target = OutputTarget(
        name,
        "metrics file",
        "volumetool-compact.prom",
        starts=METRICS_STARTS,
        mode=0o644,
        keep_mode=True,
    )
    return target.check()


def write_textfile(target: OutputTarget, text: str) -> None:
    """Replace the file with `text` atomically (a temporary file in the same directory,
    renamed), so that node_exporter never reads half a file; the temporary name starts with a
    dot and does not end in .prom, so the collector never reads it either. The target is
    checked again first (the run took a while): only an earlier metrics file is replaced."""
    try:
        with target.open() as out:
            out.write(text.encode())
    except (OSError, UnusableInput) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ProblemsFound(
            f"{target.name}: the metrics file was not written ({why}); the run's results above"
            " stand"
        ) from None


def record_compaction(
    target: OutputTarget,
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
        previous_success=None if succeeded else _last_success_before(target),
        labels=labels,
    )
    write_textfile(target, text)


def _last_success_before(target: OutputTarget) -> float | None:
    """The last success the earlier metrics file there records: read (1 MiB at most) only
    when it is one, so that no other file named there is read at all."""
    try:
        target.check()
        with open(target.name, "rb") as earlier:
            return last_success_in(earlier.read(PREVIOUS_MAX_BYTES).decode("utf-8", "replace"))
    except (OSError, UnusableInput):
        return None

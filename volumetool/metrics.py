"""Metrics for Prometheus: `status --prometheus` (a fleet's volumes) and `compact
--metrics-file` (the figures of one run, for node_exporter's textfile collector).

Both are OpenMetrics 1.0 text: a `# TYPE`, `# UNIT` and `# HELP` line per family, samples
grouped by family, label values escaped (backslash, double quote, line feed), `# EOF` last.
Names follow the Prometheus naming guide: the `volumetool_` prefix, the unit as a suffix
(`_bytes`, `_seconds`, `_tokens`) and `_total` on counter samples. node_exporter's textfile
collector reads the older Prometheus text format, where `# UNIT` and `# EOF` are comments:
the compaction file holds gauges only, so it reads the same in both; a counter of `status
--prometheus` reads there as an untyped sample with the same name and value.

Everything here is pure: the file is written by `metrics_file.py`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from volumetool.compaction.run import Outcome
    from volumetool.fleet import VolumeStatus


@dataclass(frozen=True)
class Metric:
    """A metric family: its name (a counter's without `_total`), type, help and unit."""

    name: str
    kind: str  # gauge | counter
    help: str
    unit: str | None = None

    def __post_init__(self) -> None:
        if self.unit is not None and not self.name.endswith(f"_{self.unit}"):
            raise ValueError(f"{self.name}: a metric with a unit ends with it")


Sample = tuple[Mapping[str, str], float]
_SURROGATE = re.compile("[\ud800-\udfff]")


def label_value(text: str) -> str:
    """A label value as the exposition formats spell it: backslash, double quote and line feed
    escaped; a lone surrogate (a file name that is not UTF-8) becomes U+FFFD, since the text
    must be UTF-8."""
    text = _SURROGATE.sub("\ufffd", text)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{label_value(v)}"' for k, v in labels.items()) + "}"


def exposition(families: Iterable[tuple[Metric, Sequence[Sample]]]) -> str:
    """OpenMetrics text of the families that have samples, then `# EOF`."""
    lines = []
    for metric, samples in families:
        if not samples:
            continue
        lines.append(f"# TYPE {metric.name} {metric.kind}")
        if metric.unit:
            lines.append(f"# UNIT {metric.name} {metric.unit}")
        lines.append(f"# HELP {metric.name} {metric.help}")
        sample = metric.name + ("_total" if metric.kind == "counter" else "")
        lines.extend(f"{sample}{_labels(labels)} {number(value)}" for labels, value in samples)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


# -- status --prometheus --------------------------------------------------------------------

STATUS_METRICS: tuple[tuple[Metric, Callable[[VolumeStatus], float | None]], ...] = (
    (
        Metric(
            "volumetool_volume_up",
            "gauge",
            "1 when the volume was read, 0 when it could not be (status --json says why).",
        ),
        lambda s: 0 if s.error else 1,
    ),
    (
        Metric("volumetool_volume_size_bytes", "gauge", "Size of the agent file.", "bytes"),
        lambda s: s.file_bytes,
    ),
    (
        Metric(
            "volumetool_schema_current",
            "gauge",
            "1 when the file is at the current format and holds nothing the format does not "
            "define; 0 when it needs migrate, is newer, or is untrusted.",
        ),
        lambda s: None if s.schema is None else int(s.schema == "current"),
    ),
    (
        Metric("volumetool_active_threads", "gauge", "Active threads."),
        lambda s: s.sessions_active,
    ),
    (
        Metric("volumetool_archived_threads", "gauge", "Archived threads."),
        lambda s: s.sessions_archived,
    ),
    (
        Metric(
            "volumetool_due_threads",
            "gauge",
            "Active threads due for compaction under the --config thresholds.",
        ),
        lambda s: s.due,
    ),
    (
        Metric(
            "volumetool_runs", "counter", "Runs the volume records, the agent's and compaction's."
        ),
        lambda s: s.runs,
    ),
    (
        Metric("volumetool_failed_runs", "counter", "Runs that ended with status error."),
        lambda s: s.failed_runs,
    ),
    (
        Metric(
            "volumetool_model_input_tokens",
            "counter",
            "Input tokens the model provider reported, over all runs.",
            "tokens",
        ),
        lambda s: s.input_tokens,
    ),
    (
        Metric(
            "volumetool_model_output_tokens",
            "counter",
            "Output tokens the model provider reported, over all runs.",
            "tokens",
        ),
        lambda s: s.output_tokens,
    ),
)


def status_metrics(statuses: Iterable[VolumeStatus]) -> str:
    """One series per volume and metric, labelled by agent and path; a figure a volume could
    not give (it could not be read, or no --config) is left out, never shown as 0."""
    statuses = list(statuses)
    families = []
    for metric, read in STATUS_METRICS:
        samples = []
        for status in statuses:
            value = read(status)
            if value is not None:
                samples.append(({"agent": status.agent or "", "path": status.path}, value))
        families.append((metric, samples))
    return exposition(families)


# -- compact --metrics-file -----------------------------------------------------------------

COMPACTION_STATUSES = ("compacted", "failed", "conflict", "skipped")
LAST_SUCCESS = "volumetool_compact_last_success_timestamp_seconds"


def compaction_metrics(
    outcomes: Sequence[Outcome],
    duration: float,
    *,
    finished_at: float,
    succeeded: bool,
    previous_success: float | None = None,
    labels: Mapping[str, str] | None = None,
) -> str:
    """The figures of one compaction run, all gauges: threads by outcome, threads backing off,
    model tokens, the run's duration, and when a run last succeeded (exit 0): `finished_at` if
    this one did, else `previous_success` (read from the file this run replaces), else left out."""
    labels = dict(labels or {})
    counts = dict.fromkeys(COMPACTION_STATUSES, 0)
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    last_success = finished_at if succeeded else previous_success
    return exposition(
        [
            (
                Metric(
                    "volumetool_compact_threads", "gauge", "Threads of the last run, by outcome."
                ),
                [({**labels, "status": status}, n) for status, n in counts.items()],
            ),
            (
                Metric(
                    "volumetool_compact_threads_backing_off",
                    "gauge",
                    "Due threads the last run left alone: backing off after failed compactions.",
                ),
                # Outcome.reason, compaction.run.BACKING_OFF (that module is not pure)
                [(labels, sum(o.reason == "backing_off" for o in outcomes))],
            ),
            (
                Metric(
                    "volumetool_compact_model_input_tokens",
                    "gauge",
                    "Input tokens the last run's model calls reported.",
                    "tokens",
                ),
                [(labels, sum(o.input_tokens or 0 for o in outcomes))],
            ),
            (
                Metric(
                    "volumetool_compact_model_output_tokens",
                    "gauge",
                    "Output tokens the last run's model calls reported.",
                    "tokens",
                ),
                [(labels, sum(o.output_tokens or 0 for o in outcomes))],
            ),
            (
                Metric(
                    "volumetool_compact_duration_seconds",
                    "gauge",
                    "How long the last run took.",
                    "seconds",
                ),
                [(labels, round(duration, 3))],
            ),
            (
                Metric(
                    LAST_SUCCESS,
                    "gauge",
                    "When a run last ended with exit code 0 (Unix time).",
                    "seconds",
                ),
                [] if last_success is None else [(labels, round(last_success, 3))],
            ),
        ]
    )


def last_success_in(text: str) -> float | None:
    """The last-success time a metrics file written by `compaction_metrics` holds, if any."""
    for line in text.splitlines():
        if line.startswith((LAST_SUCCESS + " ", LAST_SUCCESS + "{")):
            try:
                value = float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                return None
            return value if math.isfinite(value) else None
    return None

"""Charts as inline SVG: pure functions from figures to markup, no script, no external asset.

Every chart is an `<svg role="img">` with an `aria-label`, a `<title>` and a `<desc>` that say
in words what it shows; every bar has a `<title>` with its exact figure (a tooltip on hover).
Series differ by pattern as well as by colour, and states (over the threshold, failed) are
also written as text, so nothing is told by colour alone and a black-and-white print reads.
All text passes through `text()`: volume content is escaped for HTML and made printable.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from volumetool.text import escape_control

WIDTH = 720  # viewBox units; the page scales the chart to its column
LEFT, RIGHT, TOP, BOTTOM = 60, 12, 26, 34
LABEL_CHARS = 30  # a conversation key beside a bar is cut here (the tooltip has it whole)

# (colour, pattern drawn over it): the Okabe-Ito palette, told apart by patterns too.
STYLES = (
    ("#0072B2", ""),
    ("#E69F00", '<path d="M0 6 L6 0" stroke="#5a3c00" stroke-width="1.4"/>'),
    ("#009E73", '<circle cx="3" cy="3" r="1.3" fill="#00382a"/>'),
    ("#CC79A7", '<path d="M0 0 L6 6 M6 0 L0 6" stroke="#4d1d39" stroke-width="1"/>'),
    ("#56B4E9", '<path d="M0 3 H6" stroke="#0d3c5c" stroke-width="1.4"/>'),
    ("#999999", '<path d="M3 0 V6" stroke="#333333" stroke-width="1.4"/>'),
)
ALERT = len(STYLES)  # the style of what needs attention: over the threshold, failed
ALERT_STYLE = ("#D55E00", '<path d="M0 6 L6 0 M-1 1 L1 -1 M5 7 L7 5" stroke="#000" />')
PLAIN = 0


def text(value: object) -> str:
    """Any value as HTML text: controls escaped as for a terminal, then markup escaped."""
    return html.escape(escape_control(str(value)), quote=True)


def fill(style: int) -> str:
    return f"url(#vt-style-{style})"


def pattern_defs() -> str:
    """The patterns every chart fills with, once per page (an SVG of no size)."""
    patterns = []
    for n, (colour, overlay) in enumerate((*STYLES, ALERT_STYLE)):
        patterns.append(
            f'<pattern id="vt-style-{n}" width="6" height="6" patternUnits="userSpaceOnUse">'
            f'<rect width="6" height="6" fill="{colour}"/>{overlay}</pattern>'
        )
    return (
        '<svg class="defs" width="0" height="0" aria-hidden="true">'
        f"<defs>{''.join(patterns)}</defs></svg>"
    )


def swatch(style: int) -> str:
    """A legend's sample of a style, beside its label in HTML."""
    return (
        '<svg class="swatch" width="14" height="14" viewBox="0 0 14 14" aria-hidden="true">'
        f'<rect width="14" height="14" fill="{fill(style)}" stroke="#333"/></svg>'
    )


def compact(n: float) -> str:
    """A figure for an axis or a label: 950, 12k, 3.4M, 1.2B, 0.5."""
    n = float(n)
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k"), (1, "")):
        if abs(n) >= size:
            return f"{n / size:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{n:.2f}".rstrip("0").rstrip(".")


def nice_ticks(top: float, count: int = 4, whole: bool = False) -> list[float]:
    """Round axis ticks from 0 to at least `top`: steps of 1, 2 or 5 times a power of ten
    (at least 1 when the figures are `whole` counts)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if whole:
        step = max(step, 1)
    return [step * n for n in range(math.ceil(top / step - 1e-9) + 1)]


@dataclass(frozen=True)
class Series:
    """One stacked series of a bar chart."""

    key: str
    label: str
    style: int


def _frame(chart_id: str, title: str, desc: str, height: int, body: str) -> str:
    return (
        f'<svg id="{chart_id}" class="chart" role="img" viewBox="0 0 {WIDTH} {height}"'
        f' aria-label="{text(title)}" aria-describedby="{chart_id}-desc"'
        ' xmlns="http://www.w3.org/2000/svg">'
        f'<title>{text(title)}</title><desc id="{chart_id}-desc">{text(desc)}</desc>'
        f"{body}</svg>"
    )


def _y_axis(ticks: list[float], scale: Callable[[float], float], unit: str) -> str:
    parts = []
    for tick in ticks:
        y = scale(tick)
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{compact(tick)}</text>"
        )
    parts.append(f'<text class="unit" x="4" y="12" text-anchor="start">{text(unit)}</text>')
    return "".join(parts)


def bar_chart(
    chart_id: str,
    title: str,
    desc: str,
    categories: Sequence[str],
    series: Sequence[Series],
    value: Callable[[str, str], float],
    unit: str,
    label: Callable[[str], str] = str,
    height: int = 240,
    whole: bool = False,
    labels: int = 12,
) -> str:
    """Vertical bars, one per category, each stacked from its series (bottom first); at most
    `labels` categories are named under the axis; `whole` for counts."""
    totals = [sum(value(c, s.key) for s in series) for c in categories]
    ticks = nice_ticks(max(totals, default=0), whole=whole)
    plot = height - TOP - BOTTOM

    def scale(v: float) -> float:
        return TOP + plot - plot * v / ticks[-1]

    slot = (WIDTH - LEFT - RIGHT) / max(len(categories), 1)
    bar = max(slot * 0.72, 1.0)
    every = max(1, math.ceil(len(categories) / labels))
    parts = [_y_axis(ticks, scale, unit)]
    for n, category in enumerate(categories):
        x = LEFT + n * slot + (slot - bar) / 2
        base = 0.0
        for s in series:
            v = value(category, s.key)
            if v <= 0:
                continue
            top, bottom = scale(base + v), scale(base)
            parts.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar:.1f}"'
                f' height="{max(bottom - top, 0.5):.1f}" fill="{fill(s.style)}">'
                f"<title>{text(label(category))} · {text(s.label)}: {v:,.0f} {text(unit)}"
                "</title></rect>"
            )
            base += v
        if n % every == 0 or n == len(categories) - 1:
            parts.append(
                f'<text class="tick" x="{x + bar / 2:.1f}" y="{height - BOTTOM + 16}"'
                f' text-anchor="middle">{text(label(category))}</text>'
            )
    parts.append(
        f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{scale(0):.1f}"'
        f' y2="{scale(0):.1f}"/>'
    )
    return _frame(chart_id, title, desc, height, "".join(parts))


@dataclass(frozen=True)
class Bar:
    """One horizontal bar: a thread and its figure, with the words that say its state."""

    label: str
    value: float
    state: str
    alert: bool
    tooltip: str


def hbar_chart(
    chart_id: str,
    title: str,
    desc: str,
    bars: Sequence[Bar],
    mark: float | None,
    mark_label: str,
    unit: str,
) -> str:
    """Horizontal bars with their labels on the left and their state on the right, and a
    dashed line at `mark` (the threshold) when there is one."""
    row = 20
    label_width = 220
    state_width = 170
    left = label_width
    right = WIDTH - state_width
    height = TOP + 18 + row * len(bars) + BOTTOM
    ticks = nice_ticks(max([b.value for b in bars] + [mark or 0]))

    def scale(v: float) -> float:
        return left + (right - left) * v / ticks[-1]

    parts = []
    axis_y = TOP + 18 + row * len(bars)
    for tick in ticks:
        x = scale(tick)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + 14}" y2="{axis_y}"/>'
            f'<text class="tick" x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">'
            f"{compact(tick)}</text>"
        )
    for n, b in enumerate(bars):
        y = TOP + 18 + n * row
        shown = b.label if len(b.label) <= LABEL_CHARS else b.label[: LABEL_CHARS - 1] + "…"
        parts.append(
            f'<text class="label" x="{left - 6}" y="{y + row * 0.65:.1f}" text-anchor="end">'
            f"{text(shown)}</text>"
            f'<rect x="{left}" y="{y + 3}" width="{max(scale(b.value) - left, 0.5):.1f}"'
            f' height="{row - 6}" fill="{fill(ALERT if b.alert else PLAIN)}">'
            f"<title>{text(b.tooltip)}</title></rect>"
            f'<text class="state{" alert" if b.alert else ""}" x="{right + 6}"'
            f' y="{y + row * 0.65:.1f}">{text(b.state)}</text>'
        )
    if mark is not None:
        x = scale(mark)
        parts.append(
            f'<line class="mark" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + 8}" y2="{axis_y}"/>'
            f'<text class="mark-label" x="{x:.1f}" y="{TOP + 4}" text-anchor="middle">'
            f"{text(mark_label)}</text>"
        )
    parts.append(
        f'<text class="unit" x="{right}" y="{axis_y + 30}" text-anchor="end">{text(unit)}</text>'
    )
    return _frame(chart_id, title, desc, height + 16, "".join(parts))

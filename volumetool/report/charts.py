"""Charts as inline SVG: pure functions from figures to markup, no script, no external asset.

Every chart is an `<svg role="img">` with an `aria-label`, a `<title>` and a `<desc>` that say
in words what it shows; every bar has a `<title>` with its exact figure (a tooltip on hover).
Series differ by pattern as well as by colour, and states (over the threshold, failed) are
also written as text, so nothing is told by colour alone and a black-and-white print reads.
Every chart is `Html` (report/markup.py): the figures and words put into it, volume content
among them, are made printable and escaped for HTML as they are put in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from volumetool.report.markup import EMPTY, Html

WIDTH = 720  # viewBox units; the page scales the chart to its column
LEFT, RIGHT, TOP, BOTTOM = 60, 12, 26, 34
LABEL_CHARS = 30  # a conversation key beside a bar is cut here (the tooltip has it whole)

# (colour, pattern drawn over it): the Okabe-Ito palette, told apart by patterns too.
STYLES = (
    ("#0072B2", Html()),
    ("#E69F00", Html('<path d="M0 6 L6 0" stroke="#5a3c00" stroke-width="1.4"/>')),
    ("#009E73", Html('<circle cx="3" cy="3" r="1.3" fill="#00382a"/>')),
    ("#CC79A7", Html('<path d="M0 0 L6 6 M6 0 L0 6" stroke="#4d1d39" stroke-width="1"/>')),
    ("#56B4E9", Html('<path d="M0 3 H6" stroke="#0d3c5c" stroke-width="1.4"/>')),
    ("#999999", Html('<path d="M3 0 V6" stroke="#333333" stroke-width="1.4"/>')),
)
ALERT = len(STYLES)  # the style of what needs attention: over the threshold, failed
ALERT_STYLE = ("#D55E00", Html('<path d="M0 6 L6 0 M-1 1 L1 -1 M5 7 L7 5" stroke="#000" />'))
PLAIN = 0


def fill(style: int) -> str:
    return f"url(#vt-style-{style})"


def pattern_defs() -> Html:
    """The patterns every chart fills with, once per page (an SVG of no size)."""
    patterns = EMPTY.join(
        Html(
            '<pattern id="vt-style-{}" width="6" height="6" patternUnits="userSpaceOnUse">'
            '<rect width="6" height="6" fill="{}"/>{}</pattern>'
        ).format(n, colour, overlay)
        for n, (colour, overlay) in enumerate((*STYLES, ALERT_STYLE))
    )
    return Html(
        '<svg class="defs" width="0" height="0" aria-hidden="true"><defs>{}</defs></svg>'
    ).format(patterns)


def swatch(style: int) -> Html:
    """A legend's sample of a style, beside its label in HTML."""
    return Html(
        '<svg class="swatch" width="14" height="14" viewBox="0 0 14 14" aria-hidden="true">'
        '<rect width="14" height="14" fill="{}" stroke="#333"/></svg>'
    ).format(fill(style))


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


def _frame(chart_id: str, title: str, desc: str, height: int, body: Html) -> Html:
    return Html(
        '<svg id="{id}" class="chart" role="img" viewBox="0 0 {width} {height}"'
        ' aria-label="{title}" aria-describedby="{id}-desc"'
        ' xmlns="http://www.w3.org/2000/svg">'
        '<title>{title}</title><desc id="{id}-desc">{desc}</desc>'
        "{body}</svg>"
    ).format(id=chart_id, width=WIDTH, height=height, title=title, desc=desc, body=body)


def _y_axis(ticks: list[float], scale: Callable[[float], float], unit: str) -> Html:
    parts = [
        Html(
            '<line class="grid" x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}"/>'
            '<text class="tick" x="{tick_x}" y="{text_y:.1f}" text-anchor="end">{tick}</text>'
        ).format(
            left=LEFT,
            right=WIDTH - RIGHT,
            y=scale(tick),
            tick_x=LEFT - 6,
            text_y=scale(tick) + 4,
            tick=compact(tick),
        )
        for tick in ticks
    ]
    parts.append(Html('<text class="unit" x="4" y="12" text-anchor="start">{}</text>').format(unit))
    return EMPTY.join(parts)


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
) -> Html:
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
                Html(
                    '<rect x="{x:.1f}" y="{top:.1f}" width="{bar:.1f}" height="{height:.1f}"'
                    ' fill="{fill}"><title>{label} · {series}: {v:,.0f} {unit}</title></rect>'
                ).format(
                    x=x,
                    top=top,
                    bar=bar,
                    height=max(bottom - top, 0.5),
                    fill=fill(s.style),
                    label=label(category),
                    series=s.label,
                    v=v,
                    unit=unit,
                )
            )
            base += v
        if n % every == 0 or n == len(categories) - 1:
            parts.append(
                Html('<text class="tick" x="{:.1f}" y="{}" text-anchor="middle">{}</text>').format(
                    x + bar / 2, height - BOTTOM + 16, label(category)
                )
            )
    parts.append(
        Html('<line class="axis" x1="{}" x2="{}" y1="{y:.1f}" y2="{y:.1f}"/>').format(
            LEFT, WIDTH - RIGHT, y=scale(0)
        )
    )
    return _frame(chart_id, title, desc, height, EMPTY.join(parts))


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
) -> Html:
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

    axis_y = TOP + 18 + row * len(bars)
    parts = [
        Html(
            '<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{axis_y}"/>'
            '<text class="tick" x="{x:.1f}" y="{text_y}" text-anchor="middle">{tick}</text>'
        ).format(x=scale(tick), top=TOP + 14, axis_y=axis_y, text_y=axis_y + 16, tick=compact(tick))
        for tick in ticks
    ]
    for n, b in enumerate(bars):
        y = TOP + 18 + n * row
        shown = b.label if len(b.label) <= LABEL_CHARS else b.label[: LABEL_CHARS - 1] + "…"
        parts.append(
            Html(
                '<text class="label" x="{label_x}" y="{text_y:.1f}" text-anchor="end">{shown}'
                '</text><rect x="{left}" y="{bar_y}" width="{width:.1f}" height="{height}"'
                ' fill="{fill}"><title>{tooltip}</title></rect>'
                '<text class="{state_class}" x="{state_x}" y="{text_y:.1f}">{state}</text>'
            ).format(
                label_x=left - 6,
                text_y=y + row * 0.65,
                shown=shown,
                left=left,
                bar_y=y + 3,
                width=max(scale(b.value) - left, 0.5),
                height=row - 6,
                fill=fill(ALERT if b.alert else PLAIN),
                tooltip=b.tooltip,
                state_class="state alert" if b.alert else "state",
                state_x=right + 6,
                state=b.state,
            )
        )
    if mark is not None:
        parts.append(
            Html(
                '<line class="mark" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{axis_y}"/>'
                '<text class="mark-label" x="{x:.1f}" y="{label_y}" text-anchor="middle">'
                "{label}</text>"
            ).format(x=scale(mark), top=TOP + 8, axis_y=axis_y, label_y=TOP + 4, label=mark_label)
        )
    parts.append(
        Html('<text class="unit" x="{}" y="{}" text-anchor="end">{}</text>').format(
            right, axis_y + 30, unit
        )
    )
    return _frame(chart_id, title, desc, height + 16, EMPTY.join(parts))

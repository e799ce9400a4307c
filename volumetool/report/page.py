"""The report page: one self-contained HTML document (inline CSS and SVG, no script, no
network), from the figures `gather` read. Pure: the same reports give the same bytes.

The page is `Html` (report/markup.py) all through: every value put into it is escaped unless it
is markup itself, so volume content reaches the page as text without a call site escaping it.

The markup is also well-formed XML (every element closed, attributes quoted, only the XML
entities), so that the tests can hold it to an XML parser as well as to an HTML5 one.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import datetime

from volumetool.report.charts import (
    ALERT,
    PLAIN,
    STYLES,
    Bar,
    Series,
    bar_chart,
    compact,
    hbar_chart,
    pattern_defs,
    swatch,
)
from volumetool.report.gather import ThreadSize, VolumeFailure, VolumeReport, by_day
from volumetool.report.markup import EMPTY, Html
from volumetool.settings import DEFAULT_THRESHOLD
from volumetool.text import plural
from volumetool.timefmt import is_timestamp

DOCTYPE = "<!DOCTYPE html>"  # how every page starts: -o replaces nothing else
TOP_TRIGGERS = len(STYLES) - 1  # the busiest triggers get their own series; the rest "other"
TOP_THREADS = 25  # bars in the chart of the threads nearest compaction
# Bins of the threshold chart, as fractions of the threshold: [low, high).
FRACTION_BINS = (0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0)

CSS = Html("""
:root { color-scheme: light; --ink: #1a1a1a; --muted: #5b5b5b; --line: #d0d0d0; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--ink); background: #fff; }
main { max-width: 1100px; margin: 0 auto; padding: 1rem 1.25rem 3rem; }
h1 { font-size: 1.5rem; margin: 0.5rem 0 0.25rem; }
h2 { font-size: 1.25rem; margin: 2.5rem 0 0.5rem; padding-top: 0.5rem;
  border-top: 2px solid var(--ink); overflow-wrap: anywhere; }
h3 { font-size: 1.05rem; margin: 1.5rem 0 0.25rem; }
p, li { max-width: 75ch; }
.muted, figcaption { color: var(--muted); }
.note { border-left: 4px solid #D55E00; background: #fff4ec; padding: 0.5rem 0.75rem;
  margin: 0.75rem 0; overflow-wrap: anywhere; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.15rem 1rem;
  margin: 0.5rem 0; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
figure { margin: 1rem 0 1.5rem; }
svg.chart { display: block; width: 100%; height: auto; max-height: 70vh; }
svg.chart text { font: 11px system-ui, sans-serif; fill: var(--ink); }
svg.chart .tick, svg.chart .unit { fill: var(--muted); }
svg.chart .grid { stroke: #e6e6e6; }
svg.chart .axis { stroke: #777; }
svg.chart .mark { stroke: #000; stroke-width: 1.5; stroke-dasharray: 5 3; }
svg.chart .mark-label, svg.chart .alert { font-weight: 700; }
svg.defs { position: absolute; }
ul.legend { list-style: none; padding: 0; margin: 0.25rem 0; display: flex; flex-wrap: wrap;
  gap: 0.25rem 1.25rem; }
ul.legend li { display: flex; align-items: center; gap: 0.4rem; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { border-bottom: 1px solid var(--line); padding: 0.25rem 0.6rem; text-align: left;
  vertical-align: top; }
th { background: #f3f3f3; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.key { overflow-wrap: anywhere; max-width: 28rem; }
td.when { white-space: nowrap; }
.scroll { overflow-x: auto; }
details { margin: 0.25rem 0 0; }
summary { cursor: pointer; color: var(--muted); }
@media print {
  @page { size: A4; margin: 12mm; }
  body { font-size: 10pt; }
  main { max-width: none; padding: 0; }
  section.volume { break-before: page; }
  section.volume:first-of-type { break-before: auto; }
  figure, dl.facts, .note, tr { break-inside: avoid; }
  h2, h3 { break-after: avoid; }
  .scroll { overflow: visible; }
  table { font-size: 7.5pt; width: 100%; }
  th, td { padding: 0.1rem 0.3rem; }
  td.key { max-width: none; }
  svg.chart { max-height: none; }
  details:not([open]) { display: none; }
  a { color: inherit; text-decoration: none; }
}
""")


def page(
    reports: Sequence[VolumeReport],
    failures: Sequence[VolumeFailure],
    generated: datetime,
    version: str,
    config: str | None,
) -> str:
    """The whole document: a fleet table first when there is more than one volume (or one
    could not be read), then a section per volume in the order given."""
    subject = (
        plural(len(reports) + len(failures), "volume")
        if len(reports) + len(failures) > 1
        else (reports[0].agent or reports[0].path)
    )
    days = reports[0].days if reports else []
    head = Html(
        '<html lang="en" xmlns="http://www.w3.org/1999/xhtml"><head><meta charset="utf-8"/>'
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>'
        '<meta name="generator" content="volumetool {version}"/>'
        "<title>volumetool report: {subject}</title>"
        "<style>{css}</style></head><body>{defs}<main>"
    ).format(version=version, subject=subject, css=CSS, defs=pattern_defs())
    threshold = (
        Html("thresholds from {}").format(config)
        if config
        else Html(
            "threshold {:,} input tokens, the default (pass --config for an agent's own)"
        ).format(DEFAULT_THRESHOLD)
    )
    intro = Html(
        '<header><h1>Agent volumes: {subject}</h1><p class="muted">Read {read} UTC by'
        " volumetool {version}. Charts cover the {days}{span} (UTC); {threshold}. {volumes}"
        " read{failed}.</p></header>"
    ).format(
        subject=subject,
        read=generated.strftime("%Y-%m-%d %H:%M"),
        version=version,
        days=plural(len(days), "day"),
        span=Html(" {} to {}").format(days[0], days[-1]) if days else EMPTY,
        threshold=threshold,
        volumes=plural(len(reports), "volume"),
        failed=f", {len(failures)} could not be read" if failures else "",
    )
    body = [head, intro]
    body += [_failure_note(f) for f in failures]
    if len(reports) + len(failures) > 1:
        body.append(_fleet(reports, failures))
    body += [_volume(n, r) for n, r in enumerate(reports, 1)]
    body.append(Html("</main></body></html>\n"))
    return f"{DOCTYPE}\n{EMPTY.join(body)}"


def _failure_note(failure: VolumeFailure) -> Html:
    return Html(
        '<p class="note" role="note"><strong>Not read:</strong> {} (exit code {}).</p>'
    ).format(_what(failure), failure.exit_code)


def _what(failure: VolumeFailure) -> str:
    """The error line, naming the volume (most lines already start with its path)."""
    if failure.message.startswith(failure.path):
        return failure.message
    return f"{failure.path}: {failure.message}"


def _counts(report: VolumeReport) -> dict[str, int]:
    """Active threads by their state against the threshold."""
    counts = {"due": 0, "over": 0, "under": 0, "none": 0}
    threshold = report.threshold
    for t in report.threads:
        if t.figure is None:
            counts["none"] += 1
        elif t.due_now:
            counts["due"] += 1
        elif threshold is not None and t.figure >= threshold:
            counts["over"] += 1
        else:
            counts["under"] += 1
    return counts


def _fleet(reports: Sequence[VolumeReport], failures: Sequence[VolumeFailure]) -> Html:
    rows = []
    for n, r in enumerate(reports, 1):
        counts = _counts(r)
        rows.append(
            Html(
                '<tr><td class="key"><a href="#volume-{n}">{path}</a></td><td>{agent}</td>'
                '<td class="n">{active:,}</td><td class="n">{due:,}</td>'
                '<td class="n">{tokens:,}</td><td class="n">{ok:,} ok, {failed:,} failed</td>'
                '<td class="n">{size:,}</td><td>read</td></tr>'
            ).format(
                n=n,
                path=r.path,
                agent=r.agent or "(unnamed)",
                active=r.totals["sessions"]["active"],
                due=counts["due"],
                tokens=sum(t.tokens for t in r.tokens),
                ok=sum(c.ok for c in r.compactions),
                failed=sum(c.failed for c in r.compactions),
                size=r.totals["file_bytes"],
            )
        )
    for f in failures:
        rows.append(
            Html(
                '<tr><td class="key">{}</td><td colspan="6">{}</td>'
                "<td><strong>not read</strong> (exit {})</td></tr>"
            ).format(f.path, _what(f), f.exit_code)
        )
    return Html(
        '<section aria-labelledby="fleet"><h2 id="fleet">Fleet</h2><div class="scroll"><table>'
        '<caption class="muted">One row per volume; figures are for the report\'s days.</caption>'
        '<thead><tr><th scope="col">volume</th><th scope="col">agent</th>'
        '<th scope="col" class="n">active threads</th><th scope="col" class="n">due now</th>'
        '<th scope="col" class="n">tokens</th><th scope="col" class="n">compactions</th>'
        '<th scope="col" class="n">file bytes</th><th scope="col">state</th></tr></thead>'
        "<tbody>{}</tbody></table></div></section>"
    ).format(EMPTY.join(rows))


def _volume(n: int, r: VolumeReport) -> Html:
    vid = f"volume-{n}"
    parts = [
        Html('<section class="volume" id="{vid}" aria-labelledby="{vid}-h">').format(vid=vid),
        Html('<h2 id="{}-h">{} — {}</h2>').format(vid, r.agent or "(unnamed agent)", r.path),
    ]
    parts += [Html('<p class="note" role="note">{}</p>').format(note) for note in r.notes]
    parts.append(_facts(r))
    parts.append(_tokens_figure(vid, r))
    parts.append(_threshold_figure(vid, r))
    parts.append(_compactions_figure(vid, r))
    parts.append(_largest_table(vid, r))
    parts.append(Html("</section>"))
    return EMPTY.join(parts)


def _facts(r: VolumeReport) -> Html:
    t = r.totals
    tokens = t["tokens"]
    schema = t["schema"]["version"] or "none"
    facts = [
        ("Agent", t["agent"] or "(unnamed)"),
        ("File", f"{r.path} ({t['file_bytes']:,} bytes)"),
        ("Schema", schema),
        (
            "Threads",
            f"{t['sessions']['active']:,} active{_held(t['sessions'])}, "
            f"{t['sessions']['archived']:,} archived",
        ),
        ("Messages", f"{t['messages']['live']:,} live, {t['messages']['folded']:,} folded"),
        ("Runs", f"{t['runs']['total']:,}, of which {t['runs']['errors']:,} failed"),
        (
            "Tokens (all time)",
            f"{tokens['input']:,} in, {tokens['output']:,} out; compaction "
            f"{tokens['compaction_input']:,} in, {tokens['compaction_output']:,} out, "
            f"about {tokens['compaction_saved']:,} saved",
        ),
        ("Memories", f"{t['memories']:,}"),
        ("Last activity", t["last_activity"] or "never"),
    ]
    items = EMPTY.join(Html("<dt>{}</dt><dd>{}</dd>").format(k, v) for k, v in facts)
    return Html('<dl class="facts">{}</dl>').format(items)


def _held(sessions: dict) -> str:
    """The mark of threads held after `thread undo` (SPEC 13): compaction skips them."""
    held = sessions.get("held", 0)
    return f" ({held:,} held after undo: compact --key releases)" if held else ""


def _legend(entries: Sequence[tuple[int, str]]) -> Html:
    items = EMPTY.join(
        Html("<li>{}<span>{}</span></li>").format(swatch(style), label) for style, label in entries
    )
    return Html('<ul class="legend">{}</ul>').format(items)


def _trigger_series(r: VolumeReport) -> tuple[list[Series], dict[str, str]]:
    """The busiest triggers, each its own series, and the rest as "other": (series, the
    series each trigger counts in)."""
    totals: dict[str, int] = {}
    for row in r.tokens:
        totals[row.trigger] = totals.get(row.trigger, 0) + row.tokens
    ranked = sorted(totals, key=lambda k: (-totals[k], k))
    own = ranked if len(ranked) <= TOP_TRIGGERS + 1 else ranked[:TOP_TRIGGERS]
    series = [Series(k, k, n) for n, k in enumerate(own)]
    if len(own) < len(ranked):
        series.append(Series("\x00other", "other triggers", len(STYLES) - 1))
    home = {k: (k if k in own else "\x00other") for k in ranked}
    return series, home


def _tokens_figure(vid: str, r: VolumeReport) -> Html:
    series, home = _trigger_series(r)
    table: dict[str, dict[str, int]] = {day: {} for day in r.days}
    for day, by_trigger in by_day(r.tokens, r.days).items():
        for trigger, tokens in by_trigger.items():
            table[day][home[trigger]] = table[day].get(home[trigger], 0) + tokens
    total = sum(t.tokens for t in r.tokens)
    busiest = max(r.days, key=lambda d: (sum(table[d].values()), d)) if r.days else None
    shares = ", ".join(
        f"{s.label} {sum(table[d].get(s.key, 0) for d in r.days) / total:.0%}"
        for s in series
        if total
    )
    desc = (
        f"{total:,} tokens (input and output) over {plural(len(r.days), 'day')}"
        + (f"; the busiest day {busiest} with {sum(table[busiest].values()):,}" if total else "")
        + (f"; by trigger: {shares}." if shares else "; no runs in these days.")
    )
    title = "Tokens per day, by trigger"
    chart = bar_chart(
        f"{vid}-tokens",
        title,
        desc,
        r.days,
        series,
        lambda day, key: table[day].get(key, 0),
        "tokens",
        label=lambda day: day[5:],
    )
    legend = _legend([(s.style, s.label) for s in series])
    return Html("<figure><h3>{}</h3>{}{}{}<figcaption>{}</figcaption></figure>").format(
        title, chart, legend, _tokens_table(r), desc
    )


def _tokens_table(r: VolumeReport) -> Html:
    rows = EMPTY.join(
        Html(
            '<tr><td>{}</td><td>{}</td><td class="n">{:,}</td><td class="n">{:,}</td>'
            '<td class="n">{:,}</td></tr>'
        ).format(t.day, t.trigger, t.runs, t.input_tokens, t.output_tokens)
        for t in r.tokens
    )
    return Html(
        '<details><summary>The figures</summary><div class="scroll"><table><thead><tr>'
        '<th scope="col">day</th><th scope="col">trigger</th><th scope="col" class="n">runs</th>'
        '<th scope="col" class="n">input tokens</th><th scope="col" class="n">output tokens</th>'
        "</tr></thead><tbody>{}</tbody></table></div></details>"
    ).format(rows)


def _bins(r: VolumeReport) -> list[tuple[str, float, float, bool]]:
    """(label, low, high, over) for the distribution chart: fractions of the threshold, or
    tenths of the largest figure when compaction is off."""
    threshold = r.threshold
    if threshold is not None:
        edges = [threshold * f for f in FRACTION_BINS] + [float("inf")]
        labels = [f"{f:.0%}" for f in FRACTION_BINS[:-1]] + [f"≥{FRACTION_BINS[-1]:.0%}"]
        return [
            (labels[n], edges[n], edges[n + 1], edges[n] >= threshold)
            for n in range(len(FRACTION_BINS))
        ]
    top = max([t.figure for t in r.threads if t.figure is not None] + [1])
    step = top / 10
    return [
        (compact(step * n), step * n, step * (n + 1) if n < 9 else float("inf"), False)
        for n in range(10)
    ]


def _threshold_figure(vid: str, r: VolumeReport) -> Html:
    threshold = r.threshold
    counts = _counts(r)
    figures = [t for t in r.threads if t.figure is not None]
    bins = _bins(r)
    histogram = {label: 0 for label, *_ in bins}
    lows = [b[1] for b in bins]
    for t in figures:
        histogram[bins[max(bisect.bisect_right(lows, t.figure) - 1, 0)][0]] += 1
    over_labels = {b[0] for b in bins if b[3]}
    if threshold is not None:
        setting = f"threshold {threshold:,} input tokens"
        summary = (
            f"{plural(len(r.threads), 'active thread')}: {counts['due']:,} due for compaction now, "
            f"{counts['over']:,} at or over the threshold but not due (fewer than 3 live turns),"
            f" {counts['under']:,} under it, {counts['none']:,} with no figure yet (no run since"
            " their last compaction, or none reported)."
        )
    else:
        setting = "compaction is off in this config"
        summary = (
            f"{plural(len(r.threads), 'active thread')}; {len(figures):,} with a reported figure. "
            "Compaction is off in this config (scope: none or compact_at_tokens: false)."
        )
    title = "Active threads by their last input tokens" + (
        ", as a share of the threshold" if threshold is not None else ""
    )
    distribution = bar_chart(
        f"{vid}-sizes",
        title,
        summary,
        [b[0] for b in bins],
        [Series("under", "under the threshold", PLAIN), Series("over", "at or over", ALERT)],
        lambda label, key: histogram[label] if (label in over_labels) == (key == "over") else 0,
        "threads",
        height=220,
        whole=True,
        labels=len(bins),
    )
    nearest = sorted(figures, key=lambda t: (-(t.figure or 0), t.session_id))[:TOP_THREADS]
    bars = [_bar(t, threshold) for t in nearest]
    top_title = f"The {plural(len(bars), 'active thread')} nearest compaction"
    top_desc = "; ".join(f"{b.label}: {b.value:,.0f} ({b.state})" for b in bars[:10]) or "none"
    top = (
        hbar_chart(
            f"{vid}-nearest",
            top_title,
            f"Largest last input tokens first. {top_desc}.",
            bars,
            threshold,
            setting,
            "last input tokens",
        )
        if bars
        else Html("<p>No active thread has a reported figure.</p>")
    )
    legend = _legend([(PLAIN, "under the threshold"), (ALERT, "at or over it")])
    return Html(
        "<figure><h3>{title}</h3><p>{summary}</p>{distribution}{legend}<h3>{top_title}</h3>"
        "{top}<figcaption>Each bar is a thread's last input tokens against the {setting}; the"
        " words beside it say what compaction will do.</figcaption></figure>"
    ).format(
        title=title,
        summary=summary,
        distribution=distribution,
        legend=legend,
        top_title=top_title,
        top=top,
        setting=setting,
    )


def _bar(t: ThreadSize, threshold: int | None) -> Bar:
    """A thread's bar, with its state in words: due now, over but not due (and why), or
    under (with its share of the threshold)."""
    figure = t.figure or 0
    if threshold is None:
        state = ""
    elif t.due_now:
        state = "due now"
    elif figure >= threshold and t.due is not None:
        state = "over, " + t.due.reason.split(";")[0]
    else:
        state = f"under ({figure / threshold:.0%})"
    return Bar(
        t.conversation_key,
        figure,
        state,
        threshold is not None and figure >= threshold,
        f"{t.conversation_key} ({t.channel}, thread {t.session_id}): {figure:,} input tokens"
        + (f"; {t.due.reason}" if t.due is not None else ""),
    )


def _compactions_figure(vid: str, r: VolumeReport) -> Html:
    days = {c.day: c for c in r.compactions}
    ok = sum(c.ok for c in r.compactions)
    failed = sum(c.failed for c in r.compactions)
    undone = sum(c.undone for c in r.compactions)
    saved = sum(c.saved_tokens for c in r.compactions)
    failed_days = [c.day for c in r.compactions if c.failed]
    summary = (
        f"{plural(ok, 'compaction')} standing, {failed:,} failed, {undone:,} undone over"
        f" {plural(len(r.days), 'day')}; about {saved:,} tokens saved"
        + (
            f"; failures on {plural(len(failed_days), 'day')}, the last {failed_days[-1]}"
            if failed
            else ""
        )
        + "."
    )
    if not ok + failed + undone:
        return Html(
            "<figure><h3>Compactions over time</h3><p>{}</p>"
            "<p>No compaction ran in these days.</p></figure>"
        ).format(summary)
    saved_chart = bar_chart(
        f"{vid}-saved",
        "Tokens saved by compaction, per day",
        f"About {saved:,} tokens saved over {plural(len(r.days), 'day')} (each compaction's own"
        " estimate; undone ones not counted).",
        r.days,
        [Series("saved", "tokens saved", 4)],
        lambda day, key: days[day].saved_tokens,
        "tokens saved",
        label=lambda day: day[5:],
        height=200,
    )
    runs_chart = bar_chart(
        f"{vid}-compactions",
        "Compaction runs per day: standing and failed",
        summary,
        r.days,
        [Series("ok", "standing", PLAIN), Series("failed", "failed", ALERT)],
        lambda day, key: days[day].ok if key == "ok" else days[day].failed,
        "runs",
        label=lambda day: day[5:],
        height=200,
        whole=True,
    )
    legend = _legend([(4, "tokens saved"), (PLAIN, "compactions standing"), (ALERT, "failed")])
    failures = EMPTY.join(
        Html("<li>{}: {:,} failed</li>").format(c.day, c.failed) for c in r.compactions if c.failed
    )
    listed = (
        Html("<ul>{}</ul>").format(failures)
        if failures
        else Html("<p>No compaction failed in these days.</p>")
    )
    return Html(
        "<figure><h3>Compactions over time</h3><p>{}</p>{}{}{}{}<figcaption>Failed compactions"
        " left their threads as they were; <code>volumetool audit VOLUME --event compaction"
        " --action failed</code> says why.</figcaption></figure>"
    ).format(summary, saved_chart, runs_chart, legend, listed)


def _largest_table(vid: str, r: VolumeReport) -> Html:
    columns = (
        ("conversation_key", "conversation key", False),
        ("channel", "channel", False),
        ("status", "status", False),
        ("messages_total", "messages", True),
        ("messages", "live", True),
        ("turns", "live turns", True),
        ("last_input_tokens", "last input tokens", True),
        ("compactions", "compactions", True),
        ("updated_at", "updated", False),
    )
    head = EMPTY.join(
        Html('<th scope="col" class="{}">{}</th>').format("n" if numeric else "", label)
        for _, label, numeric in columns
    )
    rows = []
    for row in r.largest:
        cells = []
        for key, _, numeric in columns:
            value = row.get(key)
            shown = "—" if value is None else (f"{value:,}" if numeric else str(value))
            if key == "updated_at" and is_timestamp(value):
                shown = f"{value[:10]} {value[11:16]}"
            css = "n" if numeric else {"conversation_key": "key", "updated_at": "when"}.get(key, "")
            cells.append(Html('<td class="{}">{}</td>').format(css, shown))
        rows.append(Html("<tr>{}</tr>").format(EMPTY.join(cells)))
    body = EMPTY.join(rows) or Html('<tr><td colspan="{}">No messages.</td></tr>').format(
        len(columns)
    )
    return Html(
        '<h3 id="{vid}-largest">The largest threads</h3><div class="scroll"><table'
        ' aria-labelledby="{vid}-largest"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        "</table></div>"
    ).format(vid=vid, head=head, body=body)

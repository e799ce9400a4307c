"""A transcript read as a conversation: the text view a terminal shows, and Markdown for a ticket.

Rows are what `listings.transcript` yields. Both renderings share one arrangement: each tool
result moves under the call it answers (matched by call id, wherever it arrives), a result
without its call stays where it is and is marked orphaned, tool calls that are not a list of
calls are shown raw and marked. Summary rows (role `summary`) may sit anywhere: first (the
current summary) or after the folded stretch they replaced (summary history).

Content comes from chat users and model servers, so it is hostile: every control character is
escaped, a body line never starts where a header line does (headers start at the margin, bodies
are indented), and in Markdown nothing renders as HTML or leaves its block.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from wcwidth import wcswidth, wcwidth

from volumetool.text import escape_control, json_value, plural

RULE = "──"
SUMMARY_RULE = "══"
GUTTER = "┊ "  # in front of every line of a folded message: visible without colour
INDENT = "  "
CALL = "→ "
RESULT = "← "
ARG_WIDTH = 40  # an argument value wider than this is shortened unless full_args
LABEL_WIDTH = 32  # a role or tool name wider than this is shortened
TAB_SIZE = 8
MIN_WIDTH = 20

# SGR codes: bold role colours, dim for folded messages and for what is not the message.
ROLE_COLORS = {"user": "36", "assistant": "32", "system": "33", "tool": "35", "summary": "34"}
BOLD, DIM, WARN = "1", "2", "31"


@dataclass(frozen=True)
class ViewOptions:
    """How to render: the text view's width and colour, and how much of long text to show."""

    width: int = 80
    color: bool = False
    full_args: bool = False
    max_chars: int | None = None  # None: every character of every message


@dataclass
class Call:
    """One tool call of a message, with the result rows that answer it."""

    name: str | None  # None: the element is not a call, and `raw` shows it
    arguments: object = None
    call_id: str | None = None
    arguments_are_json: bool = True
    raw: str = ""
    results: list[dict] = field(default_factory=list)


@dataclass
class Entry:
    """One block of the view: a message (with its calls and their results), or a summary."""

    row: dict
    calls: list[Call]
    malformed: str | None = None  # tool_calls that are not a list, as their text
    orphan: bool = False

    @property
    def folded(self) -> bool:
        return self.row.get("folded_by") is not None


def _as_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _call(item: object) -> Call:
    function = item.get("function") if isinstance(item, dict) else None
    source = function if isinstance(function, dict) else item
    name = source.get("name") if isinstance(source, dict) else None
    if not isinstance(name, str):
        return Call(None, raw=_as_json(item))
    arguments = source.get("arguments", source.get("input"))
    parsed = True
    if isinstance(arguments, str):
        text, arguments = arguments, json_value(arguments)
        parsed = arguments is not text  # the text itself when it is not JSON to show as such
    call_id = item.get("id")
    return Call(name, arguments, call_id if isinstance(call_id, str) else None, parsed)


def _calls(tool_calls: object) -> tuple[list[Call], str | None]:
    """A row's tool calls, or the text of tool_calls that are not a list of calls."""
    if tool_calls is None:
        return [], None
    if isinstance(tool_calls, str):  # listings passes text that is not JSON as it is
        return [], tool_calls
    if not isinstance(tool_calls, list):
        return [], _as_json(tool_calls)
    return [_call(item) for item in tool_calls], None


def arrange(rows: Iterable[dict]) -> list[Entry]:
    """The blocks of the view in order, each tool result moved under the call it answers."""
    entries = [Entry(row, *_calls(row.get("tool_calls"))) for row in rows]
    calls: dict[str, Call] = {}
    for entry in entries:
        if entry.row.get("role") != "tool":
            for call in entry.calls:
                if call.call_id is not None:
                    calls.setdefault(call.call_id, call)
    shown = []
    for entry in entries:
        if entry.row.get("role") == "tool":
            call_id = entry.row.get("tool_call_id")
            call = calls.get(call_id) if isinstance(call_id, str) else None
            if call is not None:
                call.results.append(entry.row)
                continue
            entry.orphan = True
        shown.append(entry)
    return shown


# --- text shared by both renderings ---------------------------------------------------------


def display_width(text: str) -> int:
    """Columns `text` takes on a terminal (wide characters 2, combining characters 0)."""
    if text.isascii():
        return len(text)
    width = wcswidth(text)
    return width if width >= 0 else sum(max(wcwidth(char), 0) for char in text)


def _chunks(text: str, width: int) -> list[str]:
    """`text` cut into pieces of at most `width` columns, never before a combining character."""
    if text.isascii():
        return [text[i : i + width] for i in range(0, len(text), width)] or [""]
    chunks, start, used = [], 0, 0
    for i, char in enumerate(text):
        size = max(wcwidth(char), 0)
        if used + size > width and i > start:
            chunks.append(text[start:i])
            start, used = i, 0
        used += size
    chunks.append(text[start:])
    return chunks


def shorten(text: str, width: int) -> str:
    """`text` cut to `width` columns, ending in "…" when it was cut."""
    if display_width(text) <= width:
        return text
    return _chunks(text, max(width - 1, 1))[0] + "…"


_TOKENS = re.compile(r"\S+|\s+")


def wrap_line(line: str, width: int) -> list[str]:
    """One line of text wrapped at spaces to `width` columns; a longer word is cut."""
    if display_width(line) <= width:
        return [line]
    lines: list[str] = []
    parts: list[str] = []
    used = 0
    for token in _TOKENS.findall(line):
        size = display_width(token)
        if used + size <= width:
            parts.append(token)
            used += size
        elif token.isspace():
            if parts:
                lines.append("".join(parts).rstrip())
            parts, used = [], 0
        else:
            if "".join(parts).strip():
                lines.append("".join(parts).rstrip())
            pieces = _chunks(token, width)
            lines.extend(pieces[:-1])
            parts, used = [pieces[-1]], display_width(pieces[-1])
    if parts:
        lines.append("".join(parts).rstrip())
    return lines or [""]


def wrap(text: str, width: int) -> list[str]:
    """Text of several lines, each wrapped to `width` columns."""
    return [piece for line in text.split("\n") for piece in wrap_line(line, width)]


def _field(value: object, width: int = LABEL_WIDTH) -> str:
    """A header field (a role, a name, an id): one line, escaped, shortened."""
    return shorten(escape_control(str(value)), width)


def content_text(value: object, max_chars: int | None) -> str:
    """Message text made safe to lay out: controls escaped but for line breaks, tabs expanded,
    cut after `max_chars` characters with a note of how many more there were."""
    text = "" if value is None else value if isinstance(value, str) else str(value)
    note = ""
    if max_chars is not None and len(text) > max_chars:
        note = f" [… {plural(len(text) - max_chars, 'more character')}]"
        text = text[:max_chars]
    text = text.replace("\r\n", "\n").expandtabs(TAB_SIZE)
    return escape_control(text, keep="\n") + note


_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})")


def _when(stamp: object) -> str | None:
    """A message's time to the minute, labelled UTC, as every volume timestamp is (SPEC 2)."""
    if stamp is None:
        return None
    match = _STAMP.match(str(stamp))
    return f"{match[1]} {match[2]} UTC" if match else _field(stamp)


def header_fields(entry: Entry) -> tuple[str, list[str], list[str], list[str]]:
    """A block's header: its role, its facts (time, message id), its notes (folded) and its
    warnings (an orphaned result, malformed tool calls)."""
    row = entry.row
    role = row.get("role")
    facts = [when] if (when := _when(row.get("created_at"))) else []
    if row.get("id") is not None and role != "summary":
        facts.append(f"#{_field(row['id'])}")
    notes = []
    if entry.folded:
        verb = "superseded" if role == "summary" else "folded"
        notes.append(f"{verb} by run #{_field(row['folded_by'])}")
    warnings = []
    if entry.orphan:
        call_id = row.get("tool_call_id")
        warnings.append(
            "orphaned result: no call id"
            if call_id is None
            else f"orphaned result: no call {_field(call_id)} in this transcript"
        )
    if entry.malformed is not None:
        warnings.append("malformed tool_calls, shown raw")
    return _field("" if role is None else role), facts, notes, warnings


def _argument(value: object, full: bool) -> str:
    text = escape_control(_as_json(value))
    if full or display_width(text) <= ARG_WIDTH:
        return text
    if isinstance(value, str):  # keep the closing quote: `value="a long te…"`
        return shorten(text[:-1], ARG_WIDTH - 1) + '"'
    return shorten(text, ARG_WIDTH)


def call_text(call: Call, full_args: bool) -> str:
    """A tool call as one line: `remember(key="…", value="…")`, long values shortened."""
    if call.name is None:
        raw = escape_control(call.raw)
        return raw if full_args else shorten(raw, 2 * ARG_WIDTH)
    arguments = call.arguments
    if isinstance(arguments, dict):
        inner = ", ".join(
            f"{_field(key)}={_argument(value, full_args)}" for key, value in arguments.items()
        )
    elif arguments is None:
        inner = ""
    elif isinstance(arguments, str):  # not JSON: the raw text
        inner = escape_control(arguments)
        inner = inner if full_args else shorten(inner, ARG_WIDTH)
    else:
        inner = _argument(arguments, full_args)
    return f"{_field(call.name)}({inner})"


def call_note(call: Call) -> str | None:
    """What is wrong with a call, if anything."""
    if call.name is None:
        return "not a tool call, shown raw"
    if not call.arguments_are_json:
        return "arguments are not JSON, shown raw"
    return None


# --- the text view --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Paint:
    """SGR colour for one block; every painted piece resets, so a line never bleeds."""

    color: bool
    dim: bool = False

    def __call__(self, text: str, *codes: str) -> str:
        if self.dim:  # bold and dim cancel out on many terminals: folded text is only dim
            codes = (DIM, *(code for code in codes if code not in (BOLD, DIM)))
        codes = tuple(code for code in codes if code)
        if not self.color or not text or not codes:
            return text
        return f"\x1b[{';'.join(codes)}m{text}\x1b[0m"


def _text_header(entry: Entry, paint: _Paint) -> str:
    role, facts, notes, warnings = header_fields(entry)
    kind = str(entry.row.get("role"))
    rule = SUMMARY_RULE if kind == "summary" else RULE
    line = paint(f"{rule} {role}".rstrip(), BOLD, ROLE_COLORS.get(kind, ""))
    for fact in [*facts, *notes]:
        line += paint(f" · {fact}", DIM)
    for warning in warnings:
        line += paint(" · ", DIM) + paint(warning, BOLD, WARN)
    return line


def _hanging(first: str, text: str, width: int, indent: str, paint: _Paint) -> Iterator[str]:
    """`first` then the text, its lines after the first aligned under the text."""
    hang = " " * display_width(first)
    for n, line in enumerate(wrap(text, max(width - len(indent) - len(hang), MIN_WIDTH // 2))):
        yield (indent + (paint(first, DIM) if n == 0 else hang) + paint(line)).rstrip(" ")


def _text_results(call: Call, width: int, opts: ViewOptions, paint: _Paint) -> Iterator[str]:
    indent = INDENT * 2
    if not call.results:
        yield indent + paint(RESULT + "(no result in this transcript)", DIM)
    for row in call.results:
        yield from _hanging(
            RESULT, content_text(row.get("content"), opts.max_chars), width, indent, paint
        )


def _text_body(entry: Entry, width: int, opts: ViewOptions, paint: _Paint) -> Iterator[str]:
    content = entry.row.get("content")
    text = content_text(content, opts.max_chars)
    if entry.orphan:
        yield from _hanging(RESULT, text, width, INDENT, paint)
        return
    if text:
        for line in wrap(text, width - len(INDENT)):
            yield INDENT + paint(line) if line else ""
    elif not (entry.calls or entry.malformed is not None):
        yield INDENT + paint("(no text)" if content is None else "(empty)", DIM)
    for call in entry.calls:
        note = call_note(call)
        line = call_text(call, opts.full_args) + (f"  [{note}]" if note else "")
        yield from _hanging(CALL, line, width, INDENT, paint)
        if call.name is not None:
            yield from _text_results(call, width, opts, paint)
    if entry.malformed is not None:
        for line in wrap(content_text(entry.malformed, opts.max_chars), width - len(INDENT)):
            yield INDENT + paint(line) if line else ""


def _text_block(entry: Entry, opts: ViewOptions) -> list[str]:
    paint = _Paint(opts.color, dim=entry.folded)
    width = max(opts.width, MIN_WIDTH) - (len(GUTTER) if entry.folded else 0)
    lines = [_text_header(entry, paint), *_text_body(entry, width, opts, paint)]
    if entry.folded:
        lines = [paint(GUTTER) + line if line else paint(GUTTER.rstrip()) for line in lines]
    return lines


def text_lines(rows: Iterable[dict], options: ViewOptions | None = None) -> Iterator[str]:
    """The text view, line by line: a header per message at the margin, its text indented and
    wrapped to `options.width` columns, tool calls as `→ name(args)` with their results `←`
    under them; every line of a folded message behind a gutter."""
    opts = options or ViewOptions()
    entries = arrange(rows)
    if not entries:
        yield _Paint(opts.color)("(no messages)", DIM)
        return
    for n, entry in enumerate(entries):
        if n:  # the gutter runs on between folded messages: a folded stretch reads as one
            between = entry.folded and entries[n - 1].folded
            yield _Paint(opts.color, dim=True)(GUTTER.rstrip()) if between else ""
        yield from _text_block(entry, opts)


# --- Markdown -------------------------------------------------------------------------------

# An underscore inside a word (snake_case) cannot start emphasis; anywhere else it is escaped.
_MD_INLINE = re.compile(r"[\\`*\[\]|~<&]|(?<![^\W_])_|_(?![^\W_])")
_MD_ENTITIES = {"<": "&lt;", "&": "&amp;"}
# What opens a block at the start of a line: heading, quote, list, setext underline, rule.
_MD_BLOCK_START = re.compile(r"^(?:[#>+=-]|\d{1,9}(?=[.)]))")
# A heading's closing sequence: trailing #s after a space would vanish.
_MD_CLOSING = re.compile(r"(?:^|(?<= ))#+ *$")
# What GitHub's Markdown links without brackets: a scheme's "://", and "www." at a word's start
# (escaping "<" already rules out CommonMark's own autolinks). A bare e-mail address it links
# whatever is escaped; docs/inspecting.md says so.
_MD_AUTOLINK = re.compile(r":(?=//)|(?<=(?<![A-Za-z0-9])[wW]{3})\.")


def md_inline(text: str) -> str:
    """One line of text as Markdown that renders as exactly that text: no HTML, no emphasis,
    no link, no block of its own."""
    stripped = text.lstrip(" ")
    escaped = _MD_INLINE.sub(lambda m: _MD_ENTITIES.get(m[0], "\\" + m[0]), stripped)
    escaped = _MD_AUTOLINK.sub(lambda m: "\\" + m[0], escaped)
    escaped = _MD_BLOCK_START.sub(
        lambda m: m[0] + "\\" if m[0][0].isdigit() else "\\" + m[0], escaped
    )
    # Leading spaces would start a code block or vanish; non-breaking spaces keep the indent.
    return "&nbsp;" * (len(text) - len(stripped)) + escaped


def md_paragraphs(text: str) -> list[str]:
    """Text as Markdown paragraphs that keep its line breaks (a backslash ends each line)."""
    lines = text.split("\n")
    out = []
    for n, line in enumerate(lines):
        if not line.strip():
            out.append("")
            continue
        follows = n + 1 < len(lines) and lines[n + 1].strip()
        out.append(md_inline(line.rstrip(" ")) + ("\\" if follows else ""))
    return out


def _longest_run(text: str, char: str) -> int:
    return max((len(run) for run in re.findall(f"{re.escape(char)}+", text)), default=0)


def code_span(text: str) -> str:
    """`text` (one line) as a code span, delimited by more backticks than any run inside."""
    if not text:
        return "*(empty)*"
    fence = "`" * (_longest_run(text, "`") + 1)
    # One space each side is stripped when both are there, unless the span is only spaces.
    pad = " " if (text[0] in "` " or text[-1] in "` ") and text.strip(" ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def code_block(text: str, indent: str = "") -> list[str]:
    """`text` as a fenced code block that no line of it can close."""
    fence = "`" * max(3, _longest_run(text, "`") + 1)
    return [indent + fence, *(indent + line for line in text.split("\n")), indent + fence]


def _md_call(call: Call, opts: ViewOptions) -> list[str]:
    """A call as a list item; one-line results under it as code spans (a trailing backslash
    breaks the line), longer results as code blocks."""
    note = call_note(call)
    lines = [f"- {CALL}{code_span(call_text(call, opts.full_args))}"]
    if note:
        lines[0] += f" *({note})*"
    if call.name is None:
        return lines
    if not call.results:
        return [lines[0] + "\\", f"  {RESULT}*(no result in this transcript)*"]
    after_block = False
    for row in call.results:
        text = content_text(row.get("content"), opts.max_chars)
        if "\n" in text:
            lines += ["", *code_block(text, "  ")]
        elif after_block:
            lines += ["", f"  {RESULT}{code_span(text)}"]
        else:
            lines[-1] += "\\"
            lines.append(f"  {RESULT}{code_span(text)}")
        after_block = "\n" in text
    return lines


def _md_body(entry: Entry, opts: ViewOptions) -> list[str]:
    content = entry.row.get("content")
    text = content_text(content, opts.max_chars)
    if entry.orphan:
        return code_block(text) if "\n" in text else [f"{RESULT}{code_span(text)}"]
    lines: list[str] = []
    if text:
        lines += md_paragraphs(text)
    elif not (entry.calls or entry.malformed is not None):
        lines.append("*(no text)*" if content is None else "*(empty)*")
    if entry.calls:
        lines += [""] if lines else []
        lines += [line for call in entry.calls for line in _md_call(call, opts)]
    if entry.malformed is not None:
        lines += [""] if lines else []
        lines += code_block(content_text(entry.malformed, opts.max_chars))
    return lines


def md_heading(text: str, level: int) -> str:
    escaped = md_inline(text) or "\\(empty\\)"
    return "#" * level + " " + _MD_CLOSING.sub(lambda m: m[0].replace("#", "\\#"), escaped)


def _md_block(entry: Entry, opts: ViewOptions) -> list[str]:
    role, facts, notes, warnings = header_fields(entry)
    lines = [md_heading(" · ".join([role, *facts, *notes, *warnings]), 2), ""]
    lines += _md_body(entry, opts)
    while lines and not lines[-1]:
        lines.pop()
    if entry.folded:  # a folded stretch is one quote block, set apart from the live messages
        lines = [f"> {line}" if line else ">" for line in lines]
    return lines


def markdown(
    rows: Iterable[dict], options: ViewOptions | None = None, title: str | None = None
) -> str:
    """The transcript as a Markdown document: a heading per message, tool calls as code spans,
    results as code, folded messages quoted. Nothing in the content renders as HTML."""
    opts = options or ViewOptions()
    entries = arrange(rows)
    out = [md_heading(escape_control(title), 1), ""] if title else []
    if not entries:
        out.append("*No messages.*")
    for n, entry in enumerate(entries):
        if n:
            out.append(">" if entry.folded and entries[n - 1].folded else "")
        out.extend(_md_block(entry, opts))
    return "\n".join(out) + "\n"

"""The output layer shared by every listing: table, json, nl, csv, tsv, and any tabulate format.

Rows are dicts with the listing's fields in order. JSON keeps nested values (an audit detail,
tool calls) as JSON; the flat formats write them as compact JSON text, NULL as an empty cell.
Tables are for people: every cell goes through `escape_control`, since volume text comes from
chat users and model servers. The machine formats keep every character exactly: CSV quoted as
RFC 4180, TSV with escapes (one row a line), JSON as strict UTF-8.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

FLAT_WIDTH = 72  # table cells wider than this wrap, so long content stays readable

# What must never reach a terminal raw: C0 and C1 controls (ESC starts every terminal command:
# clipboard writes, screen clears), DEL, line and paragraph separators, and the bidirectional
# controls that make text display in another order than it reads ("Trojan Source"), and lone
# surrogates (not Unicode at all: no terminal, file or SQLite text column can take them).
CONTROL_CHARS = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
BIDI_CHARS = r"\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
SURROGATES = r"\ud800-\udfff"
_UNSAFE = re.compile(f"[{CONTROL_CHARS}{BIDI_CHARS}{SURROGATES}]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, as Python holds it (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return _NAMED_ESCAPES.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape_control(text: str, keep: str = "") -> str:
    """Text from a volume, a config or a model server made safe for a terminal: every control,
    separator or bidi character written as an escape (`\\x1b`, `\\n`, `\\u202e`). `keep` names
    characters left as they are (a view that lays out lines itself keeps "\\n")."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape_one(m.group()), text)


@dataclass(frozen=True)
class OutputFormat:
    kind: str = "table"  # table | json | nl | csv | tsv
    tablefmt: str = "simple"


# tabulate formats that write a cell's text into HTML as it is: a volume's `<script>` would run
# in the page (SPEC 13). `html` escapes it.
RAW_HTML_FORMATS = ("unsafehtml",)


def table_formats() -> list[str]:
    """The tabulate formats `--fmt` takes: all but those that pass raw HTML."""
    import tabulate

    return [name for name in tabulate.tabulate_formats if name not in RAW_HTML_FORMATS]


def _json_default(value: object) -> str:
    """A BLOB where text belongs (a damaged or planted file) as SQLite writes a blob literal."""
    if isinstance(value, bytes):
        return f"x'{value.hex()}'"
    raise TypeError(f"{type(value).__name__} is not JSON")


_LONE_SURROGATE = re.compile(f"[{SURROGATES}]")


def dumps(value: object, indent: int | None = None) -> str:
    """JSON text that is strict UTF-8 whatever the value holds: a lone surrogate (a path's byte
    that is not UTF-8, as Python holds it) is written as the text of its escape (`\\xff`, as
    error lines show it), never as the raw byte or an escaped surrogate no strict parser takes."""
    text = json.dumps(value, ensure_ascii=False, indent=indent, default=_json_default)
    if not _LONE_SURROGATE.search(text):
        return text
    # Surrogates occur only inside JSON strings, where the escape's backslash is written "\\".
    return _LONE_SURROGATE.sub(lambda m: "\\" + _escape_one(m.group()), text)


# Stored JSON deeper than this is shown as its text: Python's parser and writer recurse, and a
# planted detail a thousand levels deep would otherwise end a listing half written.
JSON_MAX_DEPTH = 100
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def json_value(text: str | None) -> object:
    """A JSON column (an audit detail, tool calls) as its value, when that value is what the
    text says and writes back as valid JSON; else the text as it is. Shown as text: text that
    is not JSON, a name given twice (SQLite's json_extract reads the first, Python the last),
    NaN, Infinity and numbers no float holds (1e400), an escaped lone surrogate (`\\ud800`: no
    UTF-8 output can hold it), and nesting deeper than JSON_MAX_DEPTH."""
    if text is None:
        return None
    try:
        value = json.loads(
            text, object_pairs_hook=_distinct, parse_constant=_no_constant, parse_float=_finite
        )
    except (ValueError, RecursionError):
        return text
    if text.count("[") + text.count("{") > JSON_MAX_DEPTH and _depth(value) > JSON_MAX_DEPTH:
        return text  # first: no deeper value is written again, even to be checked
    if _SURROGATE_ESCAPE.search(text) and _has_surrogate(value):
        return text
    return value


def _distinct(pairs: list[tuple[str, object]]) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("a name given twice")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if math.isinf(value):
        raise ValueError(f"{number} is out of range")
    return value


def _has_surrogate(value: object) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return True
    return False


def _depth(value: object) -> int:
    """How deeply lists and objects nest in a value (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list) and children:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def flat(value: object) -> str:
    """One cell of a table, CSV or TSV."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_json_default)
    if isinstance(value, bytes):
        return _json_default(value)
    return str(value)


@dataclass
class Listing:
    """What a listing command shows: its rows (read once, lazily), its columns, at most
    `limit` rows (None: all), and, once shown, whether more rows existed than were shown.

    A listing's query reads one row past the limit (`listing_limit`), so that the cut is known
    without counting; the cut is seen here and nowhere else."""

    rows: Iterable[dict]
    columns: Sequence[str]
    limit: int | None = None
    truncated: bool = False

    def shown(self) -> Iterator[dict]:
        for count, row in enumerate(self.rows):
            if self.limit is not None and count >= self.limit:
                self.truncated = True
                return
            yield row


def listing_limit(limit: int | None) -> int:
    """The SQL LIMIT of a listing of at most `limit` rows: one more, so that a cut can be told;
    -1 (SQLite's "no limit") for None. Every listing query takes its LIMIT from here."""
    return -1 if limit is None else limit + 1


def render_document(value: object, out: TextIO) -> None:
    """One JSON document (an object, not a listing): `status --json`, `check --json`."""
    out.write(dumps(value, indent=2) + "\n")


def _first_fetched(rows: Iterator[dict]) -> Iterator[dict]:
    """The same rows with the first one already fetched, so that a query that fails does so
    before anything is written: never half a JSON document or a lone CSV header."""
    first = list(itertools.islice(rows, 1))
    return itertools.chain(first, rows)


# TSV as `cut`, `awk` and PostgreSQL's COPY read it: one row is one line, its cells split by
# tabs, and the four characters that would break that written as escapes. No quoting: a `"`
# is a `"`.
_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_line(cells: Iterable[str]) -> str:
    """One row of TSV: backslash, tab, newline and CR in a cell written as `\\\\`, `\\t`,
    `\\n`, `\\r`."""
    return "\t".join(cell.translate(_TSV_ESCAPES) for cell in cells) + "\n"


def render(listing: Listing, fmt: OutputFormat, out: TextIO) -> None:
    """Write a listing to `out` in one format; `listing.truncated` says afterwards whether the
    limit cut it."""
    columns = listing.columns
    shown = _first_fetched(listing.shown())
    if fmt.kind == "json":
        out.write("[")
        for n, row in enumerate(shown):
            out.write((",\n " if n else "\n ") + dumps(row))
        out.write("\n]\n")
    elif fmt.kind == "nl":
        for row in shown:
            out.write(dumps(row) + "\n")
    elif fmt.kind == "csv":
        writer = csv.writer(out, lineterminator="\n")
        # csv quotes a field only for the characters of its line terminator; a bare \r would
        # then break the row for every reader, so rows holding one are quoted whole.
        quoting = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
        writer.writerow(columns)
        for row in shown:
            cells = [flat(row.get(column)) for column in columns]
            (quoting if any("\r" in cell for cell in cells) else writer).writerow(cells)
    elif fmt.kind == "tsv":
        out.write(tsv_line(columns))
        for row in shown:
            out.write(tsv_line(flat(row.get(column)) for column in columns))
    else:
        import tabulate

        table = [[_cell(row.get(column)) for column in columns] for row in shown]
        out.write(
            tabulate.tabulate(
                table, headers=list(columns), tablefmt=fmt.tablefmt, disable_numparse=True
            )
            + "\n"
        )


def _cell(value: object) -> str:
    """One table cell: escaped, so it is one line of text; long ones wrap at FLAT_WIDTH."""
    text = escape_control(flat(value))
    if len(text) <= FLAT_WIDTH:
        return text
    import textwrap

    return "\n".join(textwrap.wrap(text, FLAT_WIDTH) or [""])


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """A count and its noun, in the singular for 1: `1 thread`, `2 threads`, `1 summary`,
    `3 summaries`, `1,200 messages`. `nouns` gives a plural that is not -s or consonant-y -ies."""
    if count == 1:
        return f"{count:,} {noun}"
    if nouns is None:
        last = noun.rsplit(" ", 1)[-1]
        consonant_y = last.endswith("y") and len(last) > 1 and last[-2] not in "aeiou"
        nouns = noun[:-1] + "ies" if consonant_y else noun + "s"
    return f"{count:,} {nouns}"


def one_line(text: str, limit: int = 500) -> str:
    """Text from elsewhere (a server's error, a planted value) as one escaped line of at most
    `limit` characters, safe to print and to store."""
    line = escape_control(text)
    return line if len(line) <= limit else line[: limit - 1] + "…"

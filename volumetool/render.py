"""The output layer shared by every listing: table, json, nl, csv, tsv, and any tabulate format.

Rows are dicts with the listing's fields in order. JSON keeps nested values (an audit detail,
tool calls) as JSON; the flat formats write them as compact JSON text, NULL as an empty cell.
Tables are for people: every cell goes through `text.escape_control`, since volume text comes
from chat users and model servers. The machine formats keep every character exactly: CSV
quoted as RFC 4180, TSV with escapes (one row a line), JSON as strict UTF-8 (`text.dumps`).
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

from volumetool.text import dumps, escape_control, json_default

FLAT_WIDTH = 72  # table cells wider than this wrap, so long content stays readable


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


def flat(value: object) -> str:
    """One cell of a table, CSV or TSV."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=json_default)
    if isinstance(value, bytes):
        return json_default(value)
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

"""Reading volumetool's TSV as `cut` and `awk` see it: one row a line, cells split at tabs, and
the escapes `\\\\`, `\\t`, `\\n`, `\\r` turned back into the characters they stand for."""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"\\(.)", re.S)
_MEANING = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


def unescape(cell: str) -> str:
    def one(match: re.Match) -> str:
        assert match.group(1) in _MEANING, f"an unknown escape in {cell!r}"
        return _MEANING[match.group(1)]

    assert "\\" not in _ESCAPE.sub("", cell), f"a lone backslash in {cell!r}"
    return _ESCAPE.sub(one, cell)


def read_tsv(text: str) -> list[dict[str, str]]:
    """The rows of a TSV listing, by its header; every line has the header's number of cells."""
    assert text.endswith("\n") and "\r" not in text, repr(text[-200:])
    lines = text[:-1].split("\n")
    header = [unescape(cell) for cell in lines[0].split("\t")]
    rows = []
    for line in lines[1:]:
        cells = line.split("\t")
        assert len(cells) == len(header), f"a row that is not one line: {line!r}"
        rows.append(dict(zip(header, (unescape(cell) for cell in cells), strict=True)))
    return rows

"""What a search asks for, as pure data: the FTS5 expression, the words a result must hold
literally, and which kinds of text to look in. No SQLite here, so that properties can test it.

A plain query matches its words literally: `INV-2024.05` finds that identifier and not
`INV 2024 05`, `refund` finds `Refund` but not `refunds`. Each word becomes an FTS5 phrase of
its tokens, which finds every candidate quickly, and each candidate must then hold each word
itself, whole, ignoring letter case. `--fts` passes an FTS5 expression through as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from volumetool.errors import UnusableInput

KINDS = ("messages", "summaries", "memories")
# A quoted stretch is one literal (spaces included); anything else splits on white space.
_WORD = re.compile(r'"([^"]+)"|(\S+)')


@dataclass(frozen=True)
class Query:
    expression: str  # for FTS5 MATCH
    literals: tuple[str, ...] = ()  # each result holds each of these, whole, ignoring case
    patterns: tuple[re.Pattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(_whole(word) for word in self.literals))


def _whole(word: str) -> re.Pattern:
    """`word`, lowercased, where it is not part of a longer run of letters and digits (the
    characters FTS5's unicode61 tokenizer keeps in a token)."""
    lowered = word.lower()
    before = r"(?<![^\W_])" if lowered[0].isalnum() else ""
    after = r"(?![^\W_])" if lowered[-1].isalnum() else ""
    return re.compile(before + re.escape(lowered) + after)


def _phrase(word: str) -> str:
    # FTS5 reads its query as a C string: a NUL would end it inside the quotes.
    return '"' + word.replace('"', '""').replace("\x00", " ") + '"'


def parse_query(text: str, fts: bool = False) -> Query:
    """The search a QUERY argument asks for; UnusableInput (exit 2) when it asks for nothing."""
    if not text.strip():
        raise UnusableInput("the query is empty", "give a word to search for")
    if fts:
        return Query(text)
    words = [quoted or bare for quoted, bare in _WORD.findall(text)]
    searchable = [word for word in words if any(c.isalnum() for c in word)]
    if not searchable:
        raise UnusableInput(
            f"nothing to search for in {text!r}: no word has a letter or a digit",
            "search for a word, or pass --fts for an FTS5 expression",
        )
    return Query(" AND ".join(_phrase(word) for word in searchable), tuple(words))


def holds_literally(query: Query, *texts: str | None) -> bool:
    """Whether every literal word of the query occurs whole in one of `texts`, ignoring
    case."""
    lowered = [t.lower() for t in texts if t]
    return all(any(p.search(t) for t in lowered) for p in query.patterns)


def parse_kinds(text: str) -> tuple[str, ...]:
    """`--in messages,summaries,memories`: the kinds named, in KINDS order."""
    named = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(named - set(KINDS))
    if unknown or not named:
        raise UnusableInput(
            f"--in {text!r}: {', '.join(unknown) or 'nothing'} is not a kind of text",
            f"name one or more of {', '.join(KINDS)}, separated by commas",
        )
    return tuple(kind for kind in KINDS if kind in named)

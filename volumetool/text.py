"""Text from elsewhere (a volume, a config, a model server), made safe and read: terminal
escaping (`escape_control`, `one_line`), JSON both ways (`dumps` writes strict UTF-8,
`json_value` reads a stored JSON column), and counts with their nouns (`plural`).

A utility for every layer: it imports nothing but the standard library.
"""

from __future__ import annotations

import json
import math
import re

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


def json_default(value: object) -> str:
    """A BLOB where text belongs (a damaged or planted file) as SQLite writes a blob literal."""
    if isinstance(value, bytes):
        return f"x'{value.hex()}'"
    raise TypeError(f"{type(value).__name__} is not JSON")


_LONE_SURROGATE = re.compile(f"[{SURROGATES}]")


def dumps(value: object, indent: int | None = None) -> str:
    """JSON text that is strict UTF-8 whatever the value holds: a lone surrogate (a path's byte
    that is not UTF-8, as Python holds it) is written as the text of its escape (`\\xff`, as
    error lines show it), never as the raw byte or an escaped surrogate no strict parser takes."""
    text = json.dumps(value, ensure_ascii=False, indent=indent, default=json_default)
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

"""Token usage as a provider reports it, and what of it may be stored.

A provider's figures are data from the network: anything that is not a non-negative integer a
JSON number can hold exactly (below 2^53) is stored as NULL, never as 0 and never as a number
SQLite would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_COUNT = 2**53


def count(value: object) -> int | None:
    """A reported token count, or None when it is missing or not a sane count."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT:
        return value
    return None


def total_sql(column: str, when: str | None = None, signed: bool = False) -> str:
    """SQL for the total of a token column over the rows `when` holds, read as `count` reads
    a figure: what is not one (text, a real, a negative count, a figure past 2^53, all of which
    an agent's rows may hold) adds nothing. Never SQLite's "integer overflow", which stops
    sum() past 2^63: total() adds as a float, exact below 2^53. `signed`: a difference (saved
    tokens) may be negative."""
    low = -(MAX_COUNT - 1) if signed else 0
    sane = f"typeof({column}) = 'integer' AND {column} BETWEEN {low} AND {MAX_COUNT - 1}"
    condition = f"{when} AND {sane}" if when else sane
    return f"CAST(total(CASE WHEN {condition} THEN {column} END) AS INTEGER)"


@dataclass(frozen=True)
class Usage:
    """Tokens of one model call, or of every call of one run added up. None: not reported."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    last_input_tokens: int | None = None  # the input of the run's last call that reported one

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            _sum(self.input_tokens, other.input_tokens),
            _sum(self.output_tokens, other.output_tokens),
            other.last_input_tokens
            if other.last_input_tokens is not None
            else self.last_input_tokens,
        )

    @classmethod
    def of_call(cls, input_tokens: object, output_tokens: object) -> Usage:
        """One call's figures, each checked."""
        prompt = count(input_tokens)
        return cls(prompt, count(output_tokens), prompt)

    @property
    def reported(self) -> bool:
        return self.input_tokens is not None or self.output_tokens is not None


def _sum(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return count(a + b)

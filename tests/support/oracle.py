"""The compaction oracle: SPEC section 6 in its own words, written without the planner, for the
tests to hold the code to. Messages are rows: (id, session_id, role, content, tool_calls,
tool_call_id, ...).
"""

from __future__ import annotations

import json


def turns_of(live: list[tuple]) -> tuple[list[tuple], list[list[tuple]]]:
    """'A turn is a user message and every message after it up to the next user message.
    Messages before a thread's first user message form a prefix that is never folded.'"""
    first = next((i for i, m in enumerate(live) if m[2] == "user"), len(live))
    turns: list[list[tuple]] = []
    for message in live[first:]:
        if message[2] == "user":
            turns.append([])
        turns[-1].append(message)
    return live[:first], turns


def expected_fold(live: list[tuple]) -> list[tuple]:
    """'Every live turn except the last two is folded' — except that 'no boundary — prefix |
    fold | kept turns — may separate a tool call from its result ... however many turns later
    the result arrives': a call and its result are both folded or both stay live (the prefix
    and the kept turns replay together, after the summary), and a call with no result yet
    stays live (its result, when it comes, is live). The largest such fold."""
    _, turns = turns_of(live)

    def side(message_id: int, cut: int) -> str:
        folded = any(m[0] == message_id for turn in turns[:cut] for m in turn)
        return "fold" if folded else "live"

    calls = {c["id"]: m[0] for m in live if m[4] for c in json.loads(m[4]) if isinstance(c, dict)}
    pairs = [(calls[m[5]], m[0]) for m in live if m[5] in calls]
    answered = {m[5] for m in live if m[5] in calls}
    waiting = [call for call_id, call in calls.items() if call_id not in answered]
    for cut in range(len(turns) - 2, 0, -1):
        if all(side(call, cut) == side(result, cut) for call, result in pairs) and all(
            side(call, cut) == "live" for call in waiting
        ):
            return [m for turn in turns[:cut] for m in turn]
    return []


def tokens(text: str) -> int:
    """The README's estimate: a quarter of a token a character, rounded up, plus half a token
    for each UTF-8 byte past a character's first, rounded down."""
    extra = len(text.encode("utf-8", "surrogatepass")) - len(text)
    return -(-len(text) // 4) + extra // 2


def replaced_tokens(summary: str | None, fold: list[tuple]) -> int:
    """'a summary not shorter than what it replaces', in estimated tokens: the old summary
    and each folded message's text and tool calls."""
    return tokens(summary or "") + sum(tokens(m[3]) + tokens(m[4] or "") for m in fold)

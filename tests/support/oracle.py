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

    pairs, waiting = pair_calls(live)
    for cut in range(len(turns) - 2, 0, -1):
        if all(side(call, cut) == side(result, cut) for call, result in pairs) and all(
            side(call, cut) == "live" for call in waiting
        ):
            return [m for turn in turns[:cut] for m in turn]
    return []


def pair_calls(live: list[tuple]) -> tuple[list[tuple[int, int]], list[int]]:
    """(call message, result message) pairs, and the call messages still waiting for a result.
    Ids are reused (one constant id, `call_0` in every answer): a result answers the most
    recent call of its id that has no result yet; a result with none waiting (a duplicate)
    goes with the most recent call of its id."""
    pairs: list[tuple[int, int]] = []
    calls: list[tuple[str, int]] = []  # (id, message) of every call made so far, in order
    answered: list[bool] = []
    for message in live:
        if message[5] is not None:
            mine = [n for n, (call_id, _) in enumerate(calls) if call_id == message[5]]
            open_ = [n for n in mine if not answered[n]]
            if mine:
                n = open_[-1] if open_ else mine[-1]
                answered[n] = True
                pairs.append((calls[n][1], message[0]))
        for call in json.loads(message[4]) if message[4] else []:
            if isinstance(call, dict) and call.get("id") is not None:
                calls.append((str(call["id"]), message[0]))
                answered.append(False)
    return pairs, [message for n, (_, message) in enumerate(calls) if not answered[n]]


def tokens(text: str) -> int:
    """The estimate docs/compaction.md gives: a quarter of a token a character, rounded up,
    plus half a token for each UTF-8 byte past a character's first, rounded down."""
    extra = len(text.encode("utf-8", "surrogatepass")) - len(text)
    return -(-len(text) // 4) + extra // 2


def replaced_tokens(summary: str | None, fold: list[tuple]) -> int:
    """'a summary not shorter than what it replaces', in estimated tokens: the old summary
    and each folded message's text and tool calls."""
    return tokens(summary or "") + sum(tokens(m[3]) + tokens(m[4] or "") for m in fold)

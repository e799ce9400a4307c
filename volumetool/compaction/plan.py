"""The pure core of compaction: is a thread due, and which of its messages fold.

Nothing here touches SQLite, HTTP or the clock, so property tests can run it over thousands of
random transcripts a second. The store reads the inputs; apply writes the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from volumetool.settings import MemorySettings

MIN_LIVE_TURNS = 3
KEPT_TURNS = 2


@dataclass(frozen=True)
class Message:
    id: int
    role: str
    content: str
    tool_calls: str | None = None  # JSON array, as stored
    tool_call_id: str | None = None

    def call_ids(self) -> list[str]:
        """The ids of the tool calls this message makes (none when tool_calls is not JSON)."""
        if not self.tool_calls:
            return []
        try:
            calls = json.loads(self.tool_calls)
        except ValueError:
            return []
        if not isinstance(calls, list):
            return []
        return [str(c["id"]) for c in calls if isinstance(c, dict) and c.get("id") is not None]


@dataclass(frozen=True)
class RunFact:
    """What the trigger needs to know of one run of the thread."""

    id: int
    trigger: str
    status: str
    last_input_tokens: int | None


@dataclass(frozen=True)
class Due:
    due: bool
    reason: str
    last_input_tokens: int | None = None
    threshold: int | None = None


def split_turns(live: Sequence[Message]) -> tuple[list[Message], list[list[Message]]]:
    """The prefix (messages before the first user message) and the turns: each a user message
    and everything after it up to the next user message."""
    prefix: list[Message] = []
    turns: list[list[Message]] = []
    for message in live:
        if message.role == "user":
            turns.append([message])
        elif turns:
            turns[-1].append(message)
        else:
            prefix.append(message)
    return prefix, turns


def check_due(
    settings: MemorySettings,
    runs: Iterable[RunFact],
    live_turns: int,
    active: bool = True,
) -> Due:
    """Whether a thread is due for compaction, and why (or why not).

    The figure is the last_input_tokens of the thread's latest successful run that is not a
    compaction run and is newer than its latest successful compaction. Compaction runs never
    count: a large summary call must not re-trigger itself.
    """
    threshold = settings.compact_at_tokens
    if not active:
        return Due(False, "the thread is archived", threshold=threshold)
    if settings.scope != "thread":
        return Due(False, "memory.scope is not thread: there is no history to compact")
    if threshold is None:
        return Due(False, "compaction is disabled (compact_at_tokens: false)")
    runs = list(runs)
    compacted = max(
        (r.id for r in runs if r.trigger == "compaction" and r.status == "ok"), default=0
    )
    newer = [r for r in runs if r.trigger != "compaction" and r.status == "ok" and r.id > compacted]
    if not newer:
        reason = "no agent run since the last compaction" if compacted else "no successful run"
        return Due(False, reason, threshold=threshold)
    figure = max(newer, key=lambda r: r.id).last_input_tokens
    if figure is None:
        return Due(False, "the latest run reported no input token count", threshold=threshold)
    if figure < threshold:
        return Due(False, f"{figure:,} < {threshold:,} input tokens", figure, threshold)
    if live_turns < MIN_LIVE_TURNS:
        return Due(
            False,
            f"only {live_turns} live turn(s); at least {MIN_LIVE_TURNS} are needed",
            figure,
            threshold,
        )
    return Due(True, f"{figure:,} >= {threshold:,} input tokens", figure, threshold)


@dataclass(frozen=True)
class FoldPlan:
    prefix: tuple[Message, ...]
    fold: tuple[Message, ...]
    keep: tuple[Message, ...]
    folded_turns: int

    @property
    def empty(self) -> bool:
        return not self.fold


def plan_fold(live: Sequence[Message]) -> FoldPlan:
    """Fold every live turn except the last two; the prefix and those turns stay as they are.

    A tool call and its result never part: when a kept message answers a call made in a turn
    that would fold, that turn is kept too.
    """
    prefix, turns = split_turns(live)
    cut = max(len(turns) - KEPT_TURNS, 0)
    while cut > 0:
        folded_calls = {cid for turn in turns[:cut] for m in turn for cid in m.call_ids()}
        kept_answers = {m.tool_call_id for turn in turns[cut:] for m in turn if m.tool_call_id}
        split = folded_calls & kept_answers
        if not split:
            break
        cut = next(
            n
            for n, turn in enumerate(turns)
            if any(cid in split for m in turn for cid in m.call_ids())
        )
    fold = tuple(m for turn in turns[:cut] for m in turn)
    keep = tuple(m for turn in turns[cut:] for m in turn)
    return FoldPlan(tuple(prefix), fold, keep, cut)


def estimate_tokens(previous_summary: str | None, fold: Sequence[Message]) -> int:
    """A rough token count (four characters a token) of what a summary would replace."""
    return replaced_chars(previous_summary, fold) // 4


def replaced_chars(previous_summary: str | None, fold: Sequence[Message]) -> int:
    """The size, in characters, of what the summary replaces: the old summary and the fold."""
    return len(previous_summary or "") + sum(len(m.content) + len(m.tool_calls or "") for m in fold)

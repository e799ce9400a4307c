"""The pure core of compaction: is a thread due, may it be tried now, and which of its messages
fold.

Nothing here touches SQLite, HTTP or the clock (the time is passed in), so property tests can
run it over thousands of random transcripts a second. The store reads the inputs; apply writes
the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from volumetool.settings import MemorySettings
from volumetool.text import plural

MIN_LIVE_TURNS = 3
KEPT_TURNS = 2
BACKOFF_BASE = timedelta(minutes=15)
BACKOFF_MAX = timedelta(hours=24)


@dataclass(frozen=True)
class Message:
    """A message as the plan saw it. All of it but `id` is compared again at commit: after a
    /reset SQLite may give a new message the id of a deleted one."""

    id: int
    role: str
    content: str
    tool_calls: str | None = None  # JSON array, as stored
    tool_call_id: str | None = None
    created_at: str = ""

    def call_ids(self) -> list[str]:
        """The ids of the tool calls this message makes (none when tool_calls is not JSON)."""
        if not self.tool_calls:
            return []
        try:
            calls = json.loads(self.tool_calls)
        except (ValueError, RecursionError):
            return []
        if not isinstance(calls, list):
            return []
        return [str(c["id"]) for c in calls if isinstance(c, dict) and c.get("id") is not None]

    def identity(self) -> tuple:
        return (
            self.id,
            self.role,
            self.content,
            self.tool_calls,
            self.tool_call_id,
            self.created_at,
        )


@dataclass(frozen=True)
class RunFact:
    """What the trigger needs to know of one run of the thread."""

    id: int
    trigger: str
    status: str
    last_input_tokens: int | None


@dataclass(frozen=True)
class Due:
    is_due: bool
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
            f"only {plural(live_turns, 'live turn')}; at least {MIN_LIVE_TURNS} are needed",
            figure,
            threshold,
        )
    return Due(True, f"{figure:,} >= {threshold:,} input tokens", figure, threshold)


def backoff_until(failures: int, last_failure_at: datetime | None) -> datetime | None:
    """When a thread whose latest `failures` compaction runs (since its last successful one)
    all failed may be tried again: min(15 min × 2^(n−1), 24 h) after the last failure."""
    if failures < 1 or last_failure_at is None:
        return None
    wait = BACKOFF_BASE * 2 ** min(failures - 1, 16)
    return last_failure_at + min(wait, BACKOFF_MAX)


@dataclass(frozen=True)
class FoldPlan:
    prefix: tuple[Message, ...]
    fold: tuple[Message, ...]
    keep: tuple[Message, ...]
    folded_turns: int

    @property
    def empty(self) -> bool:
        return not self.fold

    @property
    def why_empty(self) -> str:
        """Why nothing folds: too few turns, or a tool call that keeps its turn live."""
        if sum(m.role == "user" for m in self.keep) > KEPT_TURNS:
            return (
                "nothing to fold: a tool call is not yet answered, or answered in a turn that stays"
            )
        return "nothing to fold: the last two turns are kept"


PREFIX = -1  # the segment index of the prefix, before turn 0


def _pairs(prefix: Sequence[Message], turns: Sequence[Sequence[Message]]) -> list[tuple[int, int]]:
    """(segment of a tool call, segment of its result) for every call, where a segment is the
    index of the turn holding the message, PREFIX for the prefix. A call with no result yet
    is paired with the turns to come (`len(turns)`): its result may arrive any number of turns
    later, and must then be on the call's side (SPEC 6, "Tool pairs").

    Servers reuse ids (one constant id, or `call_0` in every answer), so a result answers the
    most recent call of its id still waiting for one; a result with no call waiting (a
    duplicate) stays with the most recent call of its id."""
    segments = [(PREFIX, prefix), *enumerate(turns)]
    waiting: dict[str, list[int]] = {}  # per id, the segments of its unanswered calls, in order
    latest: dict[str, int] = {}  # per id, the segment of its most recent call
    pairs = []
    for segment, messages in segments:
        for message in messages:
            call_id = message.tool_call_id
            if call_id is not None and call_id in latest:
                calls = waiting[call_id]
                pairs.append((calls.pop() if calls else latest[call_id], segment))
            for call_id in message.call_ids():
                waiting.setdefault(call_id, []).append(segment)
                latest[call_id] = segment
    pairs.extend((call, len(turns)) for calls in waiting.values() for call in calls)
    return pairs


def fold_cut(prefix: Sequence[Message], turns: Sequence[Sequence[Message]]) -> int:
    """How many turns fold: all but the last two, less whatever keeps a tool call and its
    result on the same side of every boundary (prefix | fold | kept turns)."""
    pairs = _pairs(prefix, turns)
    cut = max(len(turns) - KEPT_TURNS, 0)
    moved = True
    while moved and cut > 0:
        moved = False
        for call, result in pairs:
            if call == PREFIX and 0 <= result < cut:  # a prefix call answered in the fold
                cut, moved = result, True
            elif 0 <= call < cut <= result:  # a folded call answered in a kept turn
                cut, moved = call, True
    return cut


def plan_fold(live: Sequence[Message]) -> FoldPlan:
    """Fold every live turn except the last two; the prefix and those turns stay as they are,
    and no tool call is parted from its result."""
    prefix, turns = split_turns(live)
    cut = fold_cut(prefix, turns)
    fold = tuple(m for turn in turns[:cut] for m in turn)
    keep = tuple(m for turn in turns[cut:] for m in turn)
    return FoldPlan(tuple(prefix), fold, keep, cut)


def estimate_text_tokens(text: str) -> int:
    """A rough token count: four characters a token for ASCII, more for other scripts (a CJK
    character is a token or more), so that estimates err on the large side."""
    if text.isascii():  # a flag of the string: no encoding to count the extra bytes
        return (len(text) + 3) // 4
    extra = len(text.encode("utf-8", "surrogatepass")) - len(text)
    return (len(text) + 3) // 4 + extra // 2


def estimate_tokens(previous_summary: str | None, fold: Sequence[Message]) -> int:
    """A rough token count of what a summary would replace: the old summary and the fold."""
    return estimate_text_tokens(previous_summary or "") + sum(
        estimate_text_tokens(m.content) + estimate_text_tokens(m.tool_calls or "") for m in fold
    )

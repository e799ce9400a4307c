"""Asking the model for one thread's summary: in one request, or — when the fold is larger than a
request may carry, or the endpoint says the prompt is too long — in parts, in order, each
request carrying the summary so far. Every call's usage adds into the result, failed or not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from volumetool.compaction.plan import Message, estimate_text_tokens
from volumetool.compaction.prompt import (
    Budget,
    SummaryRejected,
    accept_answer,
    check_shorter,
    cut_pieces,
    first_part,
    parts_needed,
    render_fold,
    render_request,
)
from volumetool.model_client import (
    Completion,
    EndpointUnusable,
    ModelClient,
    ModelError,
)
from volumetool.providers.errors import located
from volumetool.text import one_line
from volumetool.usage import Usage

MAX_HALVINGS = 6  # "prompt too long" answers before giving up: a 64th of the first budget
# Real tokens for each one estimated, until the model's server has reported a figure
# (docs/compaction.md, "Long folds"): SmolLM2's tokenizer counted 1.44 (1,880 for 1,308 estimated).
DEFAULT_TOKEN_SCALE = 1.5


@dataclass(frozen=True)
class Summary:
    text: str
    usage: Usage
    tokens_per_estimate: float | None = None  # what the server counted for each one estimated


class SummaryFailed(Exception):
    """No summary; `usage` is what the requests that were sent cost."""

    def __init__(self, reason: str, usage: Usage, unusable: bool = False) -> None:
        super().__init__(reason)
        self.usage = usage
        self.unusable = unusable  # the endpoint was known unusable before this thread's call


@dataclass
class Spent:
    """What one thread's requests have cost so far, kept by the caller: when the summarizing is
    cancelled (Ctrl-C) midway, it still knows whether a request went out, and what the calls
    that answered reported."""

    sent: bool = False
    usage: Usage = field(default_factory=Usage)
    estimated: int = 0  # estimated input tokens of the calls that reported theirs
    reported: int = 0  # and what those calls reported

    def add(self, usage: Usage, estimated: int) -> None:
        """One answered call: its usage, and its input as estimated beside the one reported."""
        self.usage += usage
        if usage.input_tokens is not None:
            self.estimated += estimated
            self.reported += usage.input_tokens

    @property
    def tokens_per_estimate(self) -> float | None:
        if not self.estimated or not self.reported:
            return None
        return round(self.reported / self.estimated, 4)


@dataclass(frozen=True)
class Limits:
    max_input_tokens: int = 100_000
    max_summary_tokens: int = 4096
    token_scale: float = DEFAULT_TOKEN_SCALE  # real tokens for each one estimated


def accept_summary(api: str, completion: Completion) -> str:
    """The answer's text if it is a summary (prompt.accept_answer); SummaryRejected if not. A
    refusal written as text ("I'm sorry, but I can't help with that.") with a normal finish is
    refused as a refusal field is (SPEC 6): it would replace what it never read. The fact
    scanner's module is imported on first use (see run.fold_facts)."""
    from volumetool.compaction.retention import is_refusal

    text = accept_answer(
        api, completion.text, completion.finish, completion.refusal, completion.tool_call
    )
    if is_refusal(text):
        raise SummaryRejected(f"the model refused: {one_line(text, 200)}")
    return text


async def summarize(
    client: ModelClient,
    system: str,
    previous_summary: str | None,
    fold: Sequence[Message],
    limits: Limits = Limits(),
    spent: Spent | None = None,
) -> Summary:
    """The summary of `previous_summary` + `fold`, or SummaryFailed with the reason, the usage
    of every call made and how many were made; `spent` follows them as they go."""
    api = client.endpoint.api
    spent = Spent() if spent is None else spent
    calls, parts = 0, 0
    summary_so_far = previous_summary
    remaining = render_fold(fold)
    halvings = 0
    too_long: Exception | None = None  # the last "prompt too long" answer
    system_tokens = estimate_text_tokens(system)
    ceiling: int | None = None  # conversation tokens a request may hold, once the model said
    where: tuple[int, int] | None = None  # the part under way and how many, until it answered
    try:
        while remaining:
            budget = _budget(limits, system_tokens, summary_so_far, ceiling)
            remaining, take, total = _cut(remaining, budget, too_long)
            conversation = "\n\n".join(remaining[:take])
            where = (parts + 1, parts + total)
            user = render_request(summary_so_far, conversation, *where)
            try:
                spent.sent = True  # from here the provider may receive it, and bill it
                completion = await client.complete(system, user)
                calls += 1
                spent.add(completion.usage, system_tokens + estimate_text_tokens(user))
                text = _located(
                    client, accept_summary, api, completion, request_id=completion.request_id
                )
            except (ModelError, SummaryRejected) as exc:
                if isinstance(exc, ModelError):
                    calls += 0 if isinstance(exc, EndpointUnusable) else exc.attempts
                    spent.usage += exc.usage
                if not exc.too_long or halvings >= MAX_HALVINGS:
                    raise
                too_long, halvings = exc, halvings + 1
                ceiling = min(budget, estimate_text_tokens(conversation)) // 2
                continue
            summary_so_far, remaining, parts = text, remaining[take:], parts + 1
            where = None
        if summary_so_far is None:  # nothing to fold: the plan never asks for this
            raise SummaryRejected("nothing to summarize")
        summary = _located(client, check_shorter, summary_so_far, previous_summary, fold)
    except EndpointUnusable as exc:
        reason = str(exc) if calls == 0 else _in_part(str(exc), where, too_long)
        raise SummaryFailed(reason, spent.usage, unusable=calls == 0) from None
    except (ModelError, SummaryRejected) as exc:
        raise SummaryFailed(_in_part(str(exc), where, too_long), spent.usage) from None
    return Summary(summary, spent.usage, spent.tokens_per_estimate)


def _located(
    client: ModelClient, check: Callable[..., str], *args: object, request_id: str | None = None
) -> str:
    """`check(*args)`, the summary it accepts; an answer it refuses is refused naming the
    request that answered it, as a failed request is (SPEC 13)."""
    try:
        return check(*args)
    except SummaryRejected as exc:
        reason = located(str(exc), client.endpoint.where, request_id)
        raise SummaryRejected(reason, too_long=exc.too_long) from None


def _budget(
    limits: Limits, system_tokens: int, summary_so_far: str | None, ceiling: int | None
) -> int:
    """The estimated conversation tokens the next request may carry: --max-input-tokens in
    real tokens, turned into estimated ones by the scale learned for the model; the summary so
    far takes the room of the answer it will become; never more than the model said it takes."""
    scale = limits.token_scale
    room = max(
        estimate_text_tokens(summary_so_far or ""), math.ceil(limits.max_summary_tokens / scale)
    )
    budget = Budget(int(limits.max_input_tokens / scale), system_tokens, room).conversation_tokens
    return budget if ceiling is None else min(budget, ceiling)


def _cut(
    remaining: list[str], budget: int, too_long: Exception | None
) -> tuple[list[str], int, int]:
    """The pieces cut to the budget, how many of them the next request carries, and how many
    requests they make."""
    try:
        pieces = cut_pieces(remaining, budget)
    except SummaryRejected:
        if too_long is None:
            raise
        raise SummaryRejected(f"{too_long} (still too long in the smallest parts)") from None
    return pieces, first_part(pieces, budget), parts_needed(pieces, budget)


def _in_part(reason: str, where: tuple[int, int] | None, too_long: Exception | None) -> str:
    """A failure of a fold sent in parts: which part failed, and that the server's "prompt too
    long" came first, when it did (the parts are its doing, not --max-input-tokens')."""
    if where is None:
        return reason
    part, total = where
    told = (
        [f"the server said the prompt was too long; split into {total} parts"] if too_long else []
    )
    if total > 1:
        told.append(f"part {part} of {total}")
    return "; ".join(told) + f": {reason}" if told else reason

"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

import json

from hypothesis import event
from hypothesis import strategies as st

from volumetool.compaction.plan import Message

# How a server names its tool calls: a fresh id for each, `call_N` numbered within each answer
# (so every answer reuses `call_0`), or one constant id (llama.cpp has returned one).
ID_SCHEMES = ("unique", "per_answer", "constant")
# When a call's result arrives: at once, 1 to 3 turns later, or not yet (the call is waiting).
DELAYS = (0, 0, 0, 0, 0, 1, 2, 3, None)


@st.composite
def transcripts(draw, max_turns: int = 8) -> list[Message]:
    """Live transcripts: a prefix (sometimes with a tool call), then turns with tool calls and
    results. A result may arrive at once, turns later, or not yet; ids may be reused."""
    text = st.text(max_size=12)
    scheme = draw(st.sampled_from(ID_SCHEMES))
    event(f"tool call ids: {scheme}")
    messages: list[tuple] = []
    pending: list[tuple[str, int | None]] = []  # (call id, turns until its result)
    made = iter(range(10**6))

    def calls(n: int) -> list[str]:
        if scheme == "unique":
            return [f"c{next(made)}" for _ in range(n)]
        return [f"call_{i}" if scheme == "per_answer" else "call" for i in range(n)]

    def deliver() -> None:
        """The results due now, in the order their calls were made."""
        nonlocal pending
        messages.extend(("tool", draw(text), None, c) for c, wait in pending if wait == 0)
        pending = [(c, wait) for c, wait in pending if wait != 0]

    def answer_with_calls() -> None:
        ids = calls(draw(st.integers(1, 2)))
        body = [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ]
        messages.append(("assistant", "", json.dumps(body), None))
        pending.extend((i, draw(st.sampled_from(DELAYS))) for i in ids)
        deliver()

    for _ in range(draw(st.integers(0, 2))):
        messages.append(("system", draw(text), None, None))
    if draw(st.booleans()):
        messages.append(("assistant", draw(text), None, None))
    if draw(st.integers(0, 3)) == 0:
        event("a tool call in the prefix")
        answer_with_calls()
    for _ in range(draw(st.integers(0, max_turns))):
        messages.append(("user", draw(text), None, None))
        pending = [(c, w if w is None else w - 1) for c, w in pending]
        deliver()
        for _ in range(draw(st.integers(0, 2))):
            answer_with_calls()
        if draw(st.booleans()):
            messages.append(("assistant", draw(text), None, None))
    if pending:
        event("a call still waiting for its result")
    return [Message(n + 1, *m) for n, m in enumerate(messages)]

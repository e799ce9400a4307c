"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from volumetool.compaction.plan import Message


@st.composite
def transcripts(draw, max_turns: int = 8) -> list[Message]:
    """Live transcripts: a prefix, then turns with tool calls and results. Sometimes a result
    arrives after the next user message, as when the agent is busy."""
    text = st.text(max_size=12)
    messages: list[tuple] = []
    for _ in range(draw(st.integers(0, 2))):
        messages.append(("system", draw(text), None, None))
    if draw(st.booleans()):
        messages.append(("assistant", draw(text), None, None))
    late: list[str] = []
    call = 0
    for _ in range(draw(st.integers(0, max_turns))):
        messages.append(("user", draw(text), None, None))
        for pending in late:
            messages.append(("tool", draw(text), None, pending))
        late = []
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"c{call + n}" for n in range(draw(st.integers(1, 2)))]
            call += len(ids)
            calls = json.dumps(
                [
                    {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    for i in ids
                ]
            )
            messages.append(("assistant", "", calls, None))
            for i in ids:
                if draw(st.integers(0, 9)) == 0:
                    late.append(i)
                else:
                    messages.append(("tool", draw(text), None, i))
        if draw(st.booleans()):
            messages.append(("assistant", draw(text), None, None))
    return [Message(n + 1, *m) for n, m in enumerate(messages)]

"""What the summarizer is asked, and whether what it answered may replace the history.

The model sees the previous summary (if any) and the folded messages with their tool calls and
results rendered as text; it never sees tool definitions, so it cannot call a tool on purpose.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from volumetool.compaction.plan import Message, replaced_chars

DEFAULT_PROMPT = """\
You maintain the memory of a long conversation between a user and an AI agent. The older part \
of the conversation is about to be replaced by your summary; only the summary and the most \
recent turns will remain, so anything you leave out is gone for good.

Write a summary that preserves:
- the user's goals, requests and stated preferences;
- decisions made, and why;
- facts, names, numbers, dates, identifiers, file paths, URLs, commands and code references, \
copied verbatim;
- what the agent did (tools it called and what they returned, briefly) and the results;
- open tasks, promises and questions still waiting for an answer.

If a previous summary is given, fold it in: keep what still matters, drop what was resolved. \
Write plain prose or short bullet lists in the conversation's language. Answer with the \
summary only, no preamble, and keep it much shorter than the text it replaces."""


class SummaryRejected(ValueError):
    """A model answer that must not replace the history; the message is the reason."""


def render_message(message: Message) -> str:
    if message.role == "tool":
        head = f"[tool result{f' for {message.tool_call_id}' if message.tool_call_id else ''}]"
        return f"{head}\n{message.content}"
    lines = [f"[{message.role}]"] if message.content or not message.tool_calls else []
    if message.content:
        lines.append(message.content)
    if message.tool_calls:
        lines.extend(_render_calls(message))
    return "\n".join(lines)


def _render_calls(message: Message) -> list[str]:
    try:
        calls = json.loads(message.tool_calls or "[]")
    except ValueError:
        return [f"[{message.role} called tools] {message.tool_calls}"]
    rendered = []
    for call in calls if isinstance(calls, list) else [calls]:
        function = call.get("function", call) if isinstance(call, dict) else {}
        name = function.get("name", "?") if isinstance(function, dict) else "?"
        arguments = (
            function.get("arguments", function.get("input", ""))
            if isinstance(function, dict)
            else ""
        )
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = call.get("id") if isinstance(call, dict) else None
        rendered.append(
            f"[{message.role} called tool {name}{f' ({call_id})' if call_id else ''}] {arguments}"
        )
    return rendered


def render_request(previous_summary: str | None, fold: Sequence[Message]) -> str:
    """The user message of the summary request."""
    parts = []
    if previous_summary:
        parts.append(f"Previous summary:\n{previous_summary}")
    parts.append(
        "Conversation to fold into the summary:\n\n" + "\n\n".join(render_message(m) for m in fold)
    )
    return "\n\n---\n\n".join(parts)


def accept_summary(
    text: str | None, finish: str, previous_summary: str | None, fold: Sequence[Message]
) -> str:
    """The summary, if it may replace the history; SummaryRejected says why not."""
    if finish == "tool_call":
        raise SummaryRejected("the model answered with a tool call instead of a summary")
    if finish == "length":
        raise SummaryRejected(
            "the summary was cut off at the token limit (raise --max-summary-tokens)"
        )
    if text is None or not text.strip():
        raise SummaryRejected("the model returned an empty summary")
    summary = text.strip()
    replaced = replaced_chars(previous_summary, fold)
    if len(summary) >= replaced:
        raise SummaryRejected(
            f"the summary ({len(summary):,} characters) is not shorter than "
            f"what it replaces ({replaced:,})"
        )
    return summary

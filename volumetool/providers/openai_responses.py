"""OpenAI's Responses API (`POST {base_url}/responses`): `instructions` and `input` in,
`max_output_tokens`; the answer is the `output_text` parts of `output[].content[]`, and only
`status: "completed"` is a finished one (`incomplete` says why in `incomplete_details.reason`);
usage `input_tokens`/`output_tokens`. Streamed as `response.*` events, the last of which
(`response.completed`, `.incomplete` or `.failed`) carries the whole response."""

from __future__ import annotations

from types import MappingProxyType

from volumetool.providers.base import (
    USAGE,
    Completion,
    EventStream,
    Malformed,
    Provider,
    mapping,
    reported_usage,
)
from volumetool.usage import Usage

# The HTTP status a failed response's error code stands for: what decides a retry.
CODE_STATUS = {"server_error": 500, "rate_limit_exceeded": 429}


class OpenAIResponses(Provider):
    name = "openai-responses"
    called = "Responses"
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    auth = "bearer"
    path = "/responses"
    max_tokens_field = "max_output_tokens"
    finished = ("completed",)
    reasons = MappingProxyType({"max_output_tokens": "length"})

    def body(self, model: str, system: str, user: str, max_tokens: int, field: str) -> dict:
        return {
            "model": model,
            "instructions": system,
            "input": user,
            "max_output_tokens": max_tokens,
            "stream": True,
            "store": False,  # a summary is of someone's conversation: not kept by the provider
        }

    def parse(self, payload: dict, request_id: str | None) -> Completion:
        usage = reported_usage(payload.get("usage"), "input_tokens", "output_tokens")
        items = payload.get("output")
        if not isinstance(items, list):
            raise Malformed("no output list", usage)
        texts: list[str] = []
        refusals: list[str] = []
        tool_call = False
        for item in items:
            item = mapping(item, "an output item", usage)
            kind = item.get("type")
            tool_call |= isinstance(kind, str) and kind.endswith("_call")
            if kind == "message":
                _read_message(item, texts, refusals, usage)
        return Completion(
            "".join(texts) if texts else None,
            _finish(payload),
            usage,
            refusal="".join(refusals) or None,
            tool_call=tool_call,
            request_id=request_id,
        )

    def events(self) -> ResponseEvents:
        return ResponseEvents()

    def error_of(self, payload: dict) -> dict | None:
        if payload.get("status") == "failed":
            return failure(payload.get("error"), payload.get("usage"))
        if "output" in payload or "status" in payload:
            return None
        return super().error_of(payload)


def _read_message(item: dict, texts: list[str], refusals: list[str], usage: Usage) -> None:
    content = item.get("content")
    if not isinstance(content, list):
        raise Malformed("a message item without a content list", usage)
    for part in content:
        part = mapping(part, "a content item", usage)
        if part.get("type") == "output_text":
            if part.get("text") is None:  # LiteLLM's for a message with no content (a tool call)
                continue
            if not isinstance(part["text"], str):
                raise Malformed("an output_text item whose text is not a string", usage)
            texts.append(part["text"])
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            refusals.append(part["refusal"])


def _finish(payload: dict) -> str | None:
    """`completed`; for an incomplete response its reason (max_output_tokens,
    content_filter); any other status as it is."""
    status = payload.get("status")
    if status == "incomplete":
        details = payload.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return reason if isinstance(reason, str) else status
    return status if isinstance(status, str) else None


def failure(error: object, usage: object = None) -> dict:
    """The error body a failed response stands for: its code, and the HTTP status the code
    means (a server error is retried as a 500 is); with the usage it reports (`USAGE`), as a
    failed call may be billed."""
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    message = error.get("message")
    return {
        "error": {
            "message": message if isinstance(message, str) else "the response failed",
            "type": code if isinstance(code, str) else None,
            "code": CODE_STATUS.get(code) if isinstance(code, str) else None,
        },
        USAGE: reported_usage(usage, "input_tokens", "output_tokens"),
    }


class ResponseEvents(EventStream):
    """`response.*` events: text deltas as they come (for the repetition check), the whole
    response from the last event. A stream whose last event carries no output, or an empty
    output list (as some servers send after streaming the text), is read from its deltas."""

    def __init__(self) -> None:
        super().__init__()
        self._response: dict | None = None
        self._refusal = ""
        self._tool_call = False

    def error_of(self, event: dict) -> dict | None:
        kind = event.get("type")
        if kind == "error":
            error = event.get("error")
            return failure(error if isinstance(error, dict) else event)
        if kind == "response.failed":
            response = event.get("response")
            if not isinstance(response, dict):
                return failure(None)
            return failure(response.get("error"), response.get("usage"))
        if isinstance(kind, str) and kind.startswith("response."):
            return None
        return super().error_of(event)

    def event(self, event: dict) -> None:
        kind = event.get("type")
        delta = event.get("delta")
        if kind == "response.output_text.delta" and isinstance(delta, str):
            self.write(delta)
        elif kind == "response.refusal.delta" and isinstance(delta, str):
            self._refusal += delta
        elif kind == "response.output_item.added" and isinstance(event.get("item"), dict):
            item_kind = event["item"].get("type")
            self._tool_call |= isinstance(item_kind, str) and item_kind.endswith("_call")
        elif kind in ("response.completed", "response.incomplete") and isinstance(
            event.get("response"), dict
        ):
            self._response = event["response"]

    def payload(self) -> dict:
        if self._response is None:
            return {}
        if self._response.get("output"):  # a non-empty list, or what parse() calls malformed
            return self._response
        content = [{"type": "output_text", "text": self.text}] if self.text else []
        if self._refusal:
            content.append({"type": "refusal", "refusal": self._refusal})
        output: list[dict] = [{"type": "message", "content": content}]
        if self._tool_call:
            output.append({"type": "function_call"})
        return {**self._response, "output": output}


PROVIDER = OpenAIResponses()

"""Anthropic messages (`POST {base_url}/v1/messages`, `x-api-key` and `anthropic-version`), as
Anthropic, OpenRouter and llama.cpp speak it: `content` blocks, `stop_reason`, usage whose
prompt size adds the cache tokens (SPEC 6); streamed as message_start, content_block_start and
_delta, message_delta and message_stop."""

from __future__ import annotations

from types import MappingProxyType

from volumetool.providers.base import (
    Completion,
    EventStream,
    Malformed,
    Provider,
    index,
    mapping,
    reported_usage,
)
from volumetool.usage import Usage

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicMessages(Provider):
    name = "anthropic"
    called = "messages"
    base_url = "https://api.anthropic.com"
    api_key_env = "ANTHROPIC_API_KEY"
    auth = "x-api-key"
    path = "/v1/messages"
    headers = MappingProxyType({"anthropic-version": ANTHROPIC_VERSION})
    max_tokens_field = "max_tokens"
    finished = ("end_turn", "stop_sequence")

    def body(self, model: str, system: str, user: str, max_tokens: int, field: str) -> dict:
        return {
            "model": model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": [{"role": "user", "content": user}],
            "stream": True,
        }

    def parse(self, payload: dict, request_id: str | None) -> Completion:
        usage = _usage(payload.get("usage"))
        blocks = payload.get("content")
        if not isinstance(blocks, list):
            raise Malformed("no content list", usage)
        texts = []
        tool_call = False
        for block in blocks:
            block = mapping(block, "a content block", usage)
            kind = block.get("type")
            if kind == "text":
                if not isinstance(block.get("text"), str):
                    raise Malformed("a text block without text", usage)
                texts.append(block["text"])
            elif kind in ("tool_use", "server_tool_use"):
                tool_call = True
        stop = payload.get("stop_reason")
        return Completion(
            "".join(texts) if texts else None,
            stop if isinstance(stop, str) else None,
            usage,
            tool_call=tool_call,
            request_id=request_id,
        )

    def events(self) -> MessageEvents:
        return MessageEvents()


def _usage(raw_usage: object) -> Usage:
    """The prompt's real size: cached and cache-creating tokens are input too. A figure that
    is absent is none; one that is not a count leaves the size unknown."""
    if not isinstance(raw_usage, dict):
        return Usage()
    call = reported_usage(raw_usage, "input_tokens", "output_tokens")
    prompt = call.input_tokens
    for name in ("cache_creation_input_tokens", "cache_read_input_tokens"):
        if prompt is not None and raw_usage.get(name) is not None:
            cached = Usage.of_call(raw_usage[name], None).input_tokens
            prompt = None if cached is None else prompt + cached
    return Usage.of_call(prompt, call.output_tokens)


class MessageEvents(EventStream):
    """Message events, gathered into the message they stream."""

    def __init__(self) -> None:
        super().__init__()
        self._usage: dict = {}
        self._finish: object = None
        self._message = False  # whether message_start came
        self._blocks: dict[int, dict] = {}

    def event(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self._message = True
            self._take_usage(event["message"].get("usage"))
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            self._blocks[index(event)] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            delta = event["delta"]
            block = self._blocks.setdefault(index(event), {"type": "text", "text": ""})
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                block["text"] = str(block.get("text") or "") + delta["text"]
                self.write(delta["text"])
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and "stop_reason" in delta:
                self._finish = delta["stop_reason"]
            self._take_usage(event.get("usage"))

    def _take_usage(self, usage: object) -> None:
        """Input figures in message_start, the output count (cumulative, and sometimes the
        input ones again) in message_delta; the latest of each counts."""
        if isinstance(usage, dict):
            self._usage.update(usage)

    def payload(self) -> dict:
        payload: dict = {"usage": self._usage} if self._usage else {}
        if self._message:
            blocks = [self._blocks[i] for i in sorted(self._blocks)]
            payload.update(content=blocks, stop_reason=self._finish)
        return payload


PROVIDER = AnthropicMessages()

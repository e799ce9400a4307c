"""OpenAI chat completions (`POST {base_url}/chat/completions`), as OpenAI, Azure OpenAI,
OpenRouter, LiteLLM, vLLM, Ollama and llama.cpp speak it: `choices[0].message`, its
`finish_reason`, usage `prompt_tokens`/`completion_tokens`; streamed as chat completion chunks
(`choices[].delta`) and a last chunk with `usage` (`stream_options.include_usage`)."""

from __future__ import annotations

from volumetool.providers.base import (
    Completion,
    EventStream,
    Malformed,
    Provider,
    mapping,
    reported_usage,
)


class OpenAIChat(Provider):
    name = "openai"
    called = "chat completions"
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    auth = "bearer"
    path = "/chat/completions"
    finished = ("stop",)

    def body(self, model: str, system: str, user: str, max_tokens: int, field: str) -> dict:
        return {
            "model": model,
            field: max_tokens,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    def parse(self, payload: dict, request_id: str | None) -> Completion:
        usage = reported_usage(payload.get("usage"), "prompt_tokens", "completion_tokens")
        choices = payload.get("choices")
        if not isinstance(choices, list):
            raise Malformed("no choices", usage)
        if not choices:
            raise Malformed("an empty choices list", usage)
        choice = mapping(choices[0], "choices[0]", usage)
        message = mapping(choice.get("message"), "choices[0].message", usage)
        content = message.get("content")
        if isinstance(content, list):  # some compatible servers answer with content parts
            content = "".join(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        if content is not None and not isinstance(content, str):
            raise Malformed("message.content is neither text nor null", usage)
        refusal = message.get("refusal")
        finish = choice.get("finish_reason")
        return Completion(
            content,
            finish if isinstance(finish, str) else None,
            usage,
            refusal=refusal if isinstance(refusal, str) and refusal else None,
            tool_call=bool(message.get("tool_calls") or message.get("function_call")),
            request_id=request_id,
        )

    def events(self) -> ChatEvents:
        return ChatEvents()


class ChatEvents(EventStream):
    """Chat completion chunks: the first choice's deltas, its finish reason, the usage chunk."""

    def __init__(self) -> None:
        super().__init__()
        self._usage: dict = {}
        self._choices: list | None = None  # None until a chunk carries choices
        self._refusal = ""
        self._tool_call = False
        self._finish: object = None

    def event(self, event: dict) -> None:
        if isinstance(event.get("usage"), dict):
            self._usage = event["usage"]
        choices = event.get("choices")
        if not isinstance(choices, list):
            return
        self._choices = self._choices or []
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            self._choices = [choice]
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            if isinstance(delta.get("refusal"), str):
                self._refusal += delta["refusal"]
            self._tool_call |= bool(delta.get("tool_calls") or delta.get("function_call"))
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
            if isinstance(delta.get("content"), str):
                self.write(delta["content"])

    def payload(self) -> dict:
        payload: dict = {"usage": self._usage} if self._usage else {}
        if self._choices is not None:
            message: dict = {"content": self.text if self.text else None}
            if self._refusal:
                message["refusal"] = self._refusal
            if self._tool_call:
                message["tool_calls"] = [{"type": "function"}]
            choices = [{"message": message, "finish_reason": self._finish}]
            payload["choices"] = choices if self._choices else []
        return payload


PROVIDER = OpenAIChat()

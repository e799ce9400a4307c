"""The error dialect every provider shares: what a failed request is (`ModelError`), the error
bodies servers send (OpenAI, Anthropic, `{"error": "text"}`, vLLM, FastAPI, HTML), which of
them are quota, context-length or retryable errors, and how long a server asks to wait.
Compatible servers and proxies mix the APIs' bodies, so every provider reads all of them; a
provider says only where its answers carry an error (`Provider.error_of`).

Pure: headers are any mapping of lower-case names (httpx's are).
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from collections.abc import Mapping

from volumetool.text import one_line
from volumetool.usage import Usage

QUOTA_ERRORS = (
    "insufficient_quota",
    "billing_hard_limit_reached",
    "billing_not_active",
    "billing_error",
)
QUOTA_TEXT = re.compile(r"quota|billing|spend limit|insufficient credits", re.IGNORECASE)
KEY_LIKE = re.compile(r"(sk-[A-Za-z0-9_*.-]{8,}|[A-Za-z0-9_-]{32,})")
# What providers say when the prompt does not fit the model: OpenAI, vLLM, OpenRouter and
# DeepSeek ("maximum context length"), Anthropic ("prompt is too long", "exceed context limit"),
# llama.cpp ("exceeds the available context size"), newer OpenAI models ("context window").
TOO_LONG_CODES = (
    "context_length_exceeded",
    "string_above_max_length",
    "request_too_large",
    "exceed_context_size_error",
)
TOO_LONG_TEXT = re.compile(
    r"prompt is too long|maximum context length|exceeds? (the )?(available )?context"
    r"|context (limit|size|window)|too many tokens",
    re.IGNORECASE,
)
NEVER_RETRIED = frozenset({400, 401, 403, 413})


class ModelError(Exception):
    """A request that did not produce a completion. Carries status, error type and request id,
    never the key; `endpoint_wide` means no other request to this endpoint can succeed now,
    `too_long` that the prompt did not fit the model."""

    def __init__(
        self,
        reason: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        request_id: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        usage: Usage | None = None,
        endpoint_wide: bool = False,
        too_long: bool = False,
        where: str | None = None,
    ) -> None:
        self.reason = reason
        self.status = status
        self.error_type = error_type
        self.request_id = request_id
        self.retryable = retryable
        self.retry_after = retry_after
        self.usage = usage or Usage()
        self.endpoint_wide = endpoint_wide
        self.too_long = too_long
        self.where = where
        self.attempts = 1
        super().__init__(reason)

    def hide(self, secret: str) -> None:
        """Takes the key out of all the server chose to say: an error's type or code, a request
        id and a redirect's target can echo it as well as its message."""
        if secret:
            self.reason = self.reason.replace(secret, "[redacted]")
            if self.error_type:
                self.error_type = self.error_type.replace(secret, "[redacted]")
            if self.request_id:
                self.request_id = self.request_id.replace(secret, "[redacted]")

    def __str__(self) -> str:
        text = located(self.reason, self.where, self.request_id)
        if self.attempts > 1:
            text += f" after {self.attempts} attempts"
        return one_line(text)


def located(reason: str, where: str | None, request_id: str | None = None) -> str:
    """An error of a model call as it is stored and printed: the reason, then the request
    (method and URL) and the server's request id — for failed requests and refused answers
    alike (SPEC 13)."""
    context = [c for c in (where, request_id and f"request {request_id}") if c]
    return one_line(reason + (f" ({', '.join(context)})" if context else ""))


def redact(text: str, secret: str) -> str:
    if secret:
        text = text.replace(secret, "[redacted]")
    return KEY_LIKE.sub("[redacted]", text)


def _seconds(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


# Where servers say how long to wait: their own headers first, then what LiteLLM relays of
# the upstream's (it renames them llm_provider-*); milliseconds before seconds.
RETRY_AFTER_HEADERS = ("retry-after-ms", "retry-after", "llm_provider-retry-after-ms")
RETRY_AFTER_HEADERS += ("llm_provider-retry-after",)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from the first of RETRY_AFTER_HEADERS that holds a number of
    milliseconds, seconds or an HTTP date; None when none does (`soon`, negative, not finite)."""
    for name in RETRY_AFTER_HEADERS:
        value = (headers.get(name) or "").strip()
        if not value:
            continue
        if name.endswith("-ms"):
            millis = _seconds(value)
            if millis is not None:
                return millis / 1000
            continue
        seconds = _seconds(value)
        if seconds is None:
            seconds = _http_date_wait(value)
        if seconds is not None:
            return seconds
    return None


def _http_date_wait(value: str) -> float | None:
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if moment is None or moment.tzinfo is None:
        return None
    return max(moment.timestamp() - time.time(), 0.0)


def error_details(data: bytes) -> tuple[str | None, str | None]:
    """(message, type or code) from any common error body: OpenAI and LiteLLM
    `{"error": {...}}`, Anthropic `{"type": "error", "error": {...}}`, `{"error": "text"}`,
    vLLM `{"object": "error", ...}`, FastAPI `{"detail": ...}`, or plain text / HTML."""
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError):
        text = data[:2000].decode("utf-8", "replace")
        text = re.sub(r"<[^>]*>", " ", text)  # an HTML error page: its text
        words = " ".join(text.split())
        return (words[:300] or None), None
    if not isinstance(payload, dict):
        return None, None
    error = payload.get("error")
    if isinstance(error, dict):
        return _text(error.get("message")), _kind(error)
    if isinstance(error, str):
        return error, None
    if payload.get("object") == "error":
        return _text(payload.get("message")), _kind(payload)
    for key in ("detail", "message"):
        if key in payload:
            return _text(payload[key]), None
    return None, None


def _kind(error: dict) -> str | None:
    """The error's code when it is a word (OpenAI: invalid_api_key), else its type; numeric
    codes (vLLM, OpenRouter, LiteLLM's "400") and LiteLLM's "None" say nothing the status
    does not."""
    for value in (error.get("code"), error.get("type")):
        if isinstance(value, str) and value and value != "None" and not value.isdigit():
            return value[:80]
    return None


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)[:300]


def classify(
    status: int,
    message: str | None,
    kind: str | None,
    *,
    secret: str,
    where: str,
    request_id: str | None,
    retry_after: float | None,
    should_retry: str | None = None,
) -> ModelError:
    """The ModelError of an HTTP error answer (or an error body under a 200)."""
    text = f"{kind or ''} {message or ''}"
    quota = status == 402 or kind in QUOTA_ERRORS or bool(QUOTA_TEXT.search(text))
    too_long = status == 413 or kind in TOO_LONG_CODES or bool(TOO_LONG_TEXT.search(text))
    retryable = not (quota or too_long) and (status in (408, 409, 429) or status >= 500)
    if should_retry in ("true", "false"):  # the server's own word (OpenAI, Anthropic)
        retryable = should_retry == "true" and not (quota or too_long)
    if status in NEVER_RETRIED:  # SPEC 6, whatever the server says
        retryable = False
    reason = f"HTTP {status}"
    if kind:
        reason += f" {kind}"
    if message:
        reason += f": {redact(message, secret)[:300]}"
    # A reasoning model refuses max_tokens on every request, not just this one.
    wrong_param = "max_completion_tokens" in (message or "") and status == 400
    if wrong_param:
        reason += " — set model.max_tokens_param: max_completion_tokens"
    return ModelError(
        reason,
        status=status,
        error_type=kind,
        request_id=request_id,
        retryable=retryable,
        retry_after=retry_after,
        endpoint_wide=quota or wrong_param or status in (401, 403, 404),
        too_long=too_long and not quota,
        where=where,
    )

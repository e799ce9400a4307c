"""One text completion from an OpenAI-compatible (chat completions) or Anthropic (messages)
endpoint, over httpx: auth headers, max_tokens, no tools, usage, bounded retries.

The API key travels only in the auth header. It is never part of an exception, a log line or a
repr, and error text that comes back from a server is redacted before anyone sees it.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

ANTHROPIC_VERSION = "2023-06-01"
QUOTA_ERRORS = ("insufficient_quota", "billing_hard_limit_reached", "billing_not_active")
KEY_LIKE = re.compile(r"(sk-[A-Za-z0-9_*.-]{8,}|[A-Za-z0-9_-]{32,})")


@dataclass(frozen=True)
class Endpoint:
    api: str  # openai | anthropic
    base_url: str
    model: str
    api_key: str = field(repr=False)
    max_tokens: int = 4096
    timeout: float = 60.0


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class Completion:
    text: str | None
    finish: str  # stop | length | tool_call
    usage: Usage
    request_id: str | None = None


class ModelError(Exception):
    """A request that did not produce a completion. Carries status, error type and request id,
    never the key."""

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
    ) -> None:
        self.reason = reason
        self.status = status
        self.error_type = error_type
        self.request_id = request_id
        self.retryable = retryable
        self.retry_after = retry_after
        self.usage = usage or Usage()
        self.attempts = 1
        super().__init__(reason)

    def __str__(self) -> str:
        text = self.reason
        if self.request_id:
            text += f" (request {self.request_id})"
        if self.attempts > 1:
            text += f" after {self.attempts} attempts"
        return text


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and full jitter; Retry-After is honoured."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    jitter: Callable[[], float] = random.random

    def delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1)) * self.jitter()
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_delay) + backoff / 4
        return backoff


def redact(text: str, secret: str) -> str:
    if secret:
        text = text.replace(secret, "[redacted]")
    return KEY_LIKE.sub("[redacted]", text)


def parse_retry_after(headers: httpx.Headers) -> float | None:
    if "retry-after-ms" in headers:
        try:
            return float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        moment = email.utils.parsedate_to_datetime(value) if value else None
        return max(moment.timestamp() - time.time(), 0.0) if moment else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class ModelClient:
    """Summary requests to one endpoint. Tests pass a transport; production uses the network."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 16,
    ) -> None:
        self.endpoint = endpoint
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(endpoint.timeout),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _request(self, system: str, user: str) -> tuple[str, dict, dict]:
        e = self.endpoint
        base = e.base_url.rstrip("/")
        if e.api == "anthropic":
            return (
                f"{base}/v1/messages",
                {"x-api-key": e.api_key, "anthropic-version": ANTHROPIC_VERSION},
                {
                    "model": e.model,
                    "max_tokens": e.max_tokens,
                    "system": system,
                    "messages": [{"role": "user", "content": user}],
                },
            )
        return (
            f"{base}/chat/completions",
            {"authorization": f"Bearer {e.api_key}"},
            {
                "model": e.model,
                "max_tokens": e.max_tokens,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
            },
        )

    async def complete(self, system: str, user: str) -> Completion:
        """One completion, retried on 429/5xx/connection errors/timeouts, never on 4xx."""
        attempt = 1
        while True:
            try:
                return await self._attempt(system, user)
            except ModelError as exc:
                exc.attempts = attempt
                if not exc.retryable or attempt >= self.retry.attempts:
                    raise
                await self.retry.sleep(self.retry.delay(attempt, exc.retry_after))
                attempt += 1

    async def _attempt(self, system: str, user: str) -> Completion:
        url, headers, body = self._request(system, user)
        timeout = self.endpoint.timeout
        try:
            response = await asyncio.wait_for(
                self._http.post(url, headers=headers, json=body), timeout
            )
        except (TimeoutError, httpx.TimeoutException):
            raise ModelError(f"no response within {timeout:g}s", retryable=True) from None
        except httpx.TransportError as exc:
            raise ModelError(f"connection error ({type(exc).__name__})", retryable=True) from None
        request_id = response.headers.get("x-request-id") or response.headers.get("request-id")
        if response.status_code >= 400:
            raise self._http_error(response, request_id)
        try:
            payload = response.json()
        except ValueError:
            raise ModelError("malformed response: not JSON", request_id=request_id) from None
        try:
            if self.endpoint.api == "anthropic":
                return self._anthropic(payload, request_id)
            return self._openai(payload, request_id)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelError(f"malformed response: missing {exc}", request_id=request_id) from None

    def _http_error(self, response: httpx.Response, request_id: str | None) -> ModelError:
        status = response.status_code
        error_type = message = None
        try:
            error = response.json().get("error")
            if isinstance(error, dict):
                error_type = error.get("code") or error.get("type")
                message = error.get("message")
        except (ValueError, AttributeError):
            pass
        quota = error_type in QUOTA_ERRORS or "quota" in str(message or "").lower()
        retryable = (status == 429 and not quota) or status == 408 or status >= 500
        reason = f"HTTP {status}"
        if error_type:
            reason += f" {error_type}"
        if message:
            reason += f": {redact(str(message), self.endpoint.api_key)[:300]}"
        return ModelError(
            reason,
            status=status,
            error_type=error_type,
            request_id=request_id,
            retryable=retryable,
            retry_after=parse_retry_after(response.headers),
        )

    @staticmethod
    def _openai(payload: dict, request_id: str | None) -> Completion:
        choice = payload["choices"][0]
        message = choice["message"]
        usage = payload.get("usage") or {}
        content = message.get("content")
        if isinstance(content, list):  # some compatible servers answer with content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if message.get("tool_calls") or message.get("function_call"):
            finish = "tool_call"
        elif choice.get("finish_reason") == "length":
            finish = "length"
        else:
            finish = "stop"
        if content is not None and not isinstance(content, str):
            raise TypeError("content")
        return Completion(
            content,
            finish,
            Usage(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))),
            request_id,
        )

    @staticmethod
    def _anthropic(payload: dict, request_id: str | None) -> Completion:
        blocks = payload["content"]
        text = "".join(b["text"] for b in blocks if b.get("type") == "text")
        tool_use = any(b.get("type") == "tool_use" for b in blocks)
        stop = payload.get("stop_reason")
        finish = (
            "tool_call"
            if tool_use or stop == "tool_use"
            else ("length" if stop == "max_tokens" else "stop")
        )
        usage = payload.get("usage") or {}
        prompt = _int(usage.get("input_tokens"))
        if prompt is not None:
            # The prompt's real size: cached and cache-creating tokens are input too.
            prompt += sum(
                _int(usage.get(k)) or 0
                for k in ("cache_creation_input_tokens", "cache_read_input_tokens")
            )
        return Completion(
            text if blocks else None,
            finish,
            Usage(prompt, _int(usage.get("output_tokens"))),
            request_id,
        )

"""One text completion from a model endpoint, over httpx: the transport (timeouts, the bounded
body reader, streamed answers read as they arrive), bounded retries, and a breaker that stops a
run from calling an endpoint that cannot work. What is said on the wire — bodies, answers,
events, error bodies — is the provider's (volumetool/providers/); this module only carries it.

Answers stream (server-sent events), so the timeout bounds each wait for the next bytes and a
model that repeats itself is stopped early; a plain JSON answer is read as well. Everything a
server sends is untrusted: bodies are read to at most 8 MiB, and error text is one escaped line
that names the method and URL and never the key.
"""

from __future__ import annotations

import asyncio
import errno
import json
import random
import re
import socket
import ssl
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import httpx

from volumetool import __version__
from volumetool.providers import AUTH_HEADERS, PROVIDERS, Provider
from volumetool.providers.base import (
    REPEATED,
    USAGE,
    Completion,
    EventStream,
    Malformed,
    Repeated,
    StreamError,
    repeating,
)
from volumetool.providers.errors import ModelError, classify, error_details, parse_retry_after
from volumetool.text import one_line
from volumetool.usage import Usage

USER_AGENT = f"volumetool/{__version__}"
MAX_BODY_BYTES = 8 * 1024 * 1024
# The body codings read (each bounded by MAX_BODY_BYTES as it is decoded: a few kB of stacked
# gzip can inflate to gigabytes); requests ask for none, and others pass through as httpx's do.
_GZIP = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = {"gzip": _GZIP, "x-gzip": _GZIP, "deflate": zlib.MAX_WBITS}


@dataclass(frozen=True)
class Endpoint:
    api: str  # a key of PROVIDERS
    base_url: str
    model: str
    api_key: str = field(repr=False)
    max_tokens: int = 4096
    timeout: float = 60.0  # the longest wait for the next bytes of an answer
    max_answer: float = 600.0  # the longest a whole answer may take, however steady
    auth: str | None = None  # a key of AUTH_HEADERS; None: the api's own
    api_version: str | None = None  # Azure OpenAI's api-version query parameter
    max_tokens_param: str = "max_tokens"  # max_completion_tokens for OpenAI reasoning models

    @property
    def provider(self) -> Provider:
        return PROVIDERS[self.api]

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.provider.path

    @property
    def where(self) -> str:
        """The request as error text names it: method and URL, no query, no key."""
        return f"POST {self.url}"

    def headers(self) -> dict[str, str]:
        headers = {"user-agent": USER_AGENT}
        if self.api_key:  # a local server (llama.cpp, Ollama, vLLM) may need no key
            auth = AUTH_HEADERS[self.auth or self.provider.auth]
            headers[auth.name] = auth.value(self.api_key)
        headers["accept-encoding"] = "identity"  # answers are small; see _decoded
        headers.update(self.provider.headers)
        return headers

    def body(self, system: str, user: str) -> dict:
        """The request; answers stream (SSE), so that a model still writing is told apart
        from one that hangs. A server that answers plain JSON anyway is read as well."""
        field = self.provider.max_tokens_field or self.max_tokens_param
        return self.provider.body(self.model, system, user, self.max_tokens, field)

    def params(self) -> dict[str, str]:
        return {"api-version": self.api_version} if self.api_version else {}


class EndpointUnusable(ModelError):
    """Not sent: an earlier request of this run found the endpoint unusable."""


@dataclass
class Breaker:
    """Opens on the first endpoint-wide failure; then no further request is started."""

    reason: str | None = None

    def trip(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and full jitter; Retry-After is honoured in
    full, and one longer than `max_retry_wait` is not waited for at all."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_wait: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    jitter: Callable[[], float] = random.random

    def delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1)) * self.jitter()
        if retry_after is not None:
            return retry_after + backoff / 4
        return backoff


def _decoded(data: bytes, encoding: str) -> bytes:
    """The body undone from its content codings, last applied first, never past
    MAX_BODY_BYTES (OverflowError); a coding other than gzip and deflate passes through."""
    for coding in reversed([c.strip().lower() for c in encoding.split(",")]):
        wbits = _ZLIB_WBITS.get(coding)
        if wbits is None:
            continue
        try:
            data = _inflate(data, wbits)
        except zlib.error:
            if coding != "deflate":
                raise
            data = _inflate(data, -zlib.MAX_WBITS)  # deflate without its zlib header
    return data


def _inflate(data: bytes, wbits: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    out = inflater.decompress(data, MAX_BODY_BYTES + 1)
    if len(out) > MAX_BODY_BYTES or inflater.unconsumed_tail:
        raise OverflowError
    return out


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)


def connection_failure(exc: BaseException, where: str) -> ModelError:
    """A request that never got an answer. DNS, TLS and a refused connection are the
    endpoint's, not this request's: nothing else will get through either."""
    causes = list(_causes(exc))
    text = " ".join(str(c) for c in causes)
    if any(isinstance(c, socket.gaierror) for c in causes) or re.search(
        r"name or service not known|nodename nor servname|name resolution|getaddrinfo", text, re.I
    ):
        return ModelError("DNS failure: the host does not resolve", endpoint_wide=True, where=where)
    if any(isinstance(c, ssl.SSLError) for c in causes) or re.search(r"\bSSL\b|certificate", text):
        return ModelError("TLS failure", endpoint_wide=True, where=where)
    refused = any(
        isinstance(c, ConnectionRefusedError)
        or (isinstance(c, OSError) and c.errno == errno.ECONNREFUSED)
        for c in causes
    ) or re.search(r"connection refused|all connection attempts failed", text, re.I)
    if refused:
        # Nothing listens there: every retry would be refused too (SPEC 13).
        return ModelError("connection refused", endpoint_wide=True, where=where)
    return ModelError(f"connection error ({type(exc).__name__})", retryable=True, where=where)


def _event_stream(data: bytes) -> bool:
    """Whether a body is an event stream: its first non-blank line, after the byte order mark a
    stream may begin with, is a field (data, event, id, retry) or a comment."""
    head = data.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip()
    return head.startswith((b"data:", b"event:", b"id:", b"retry:", b":"))


class ModelClient:
    """Summary requests to one endpoint. Tests pass a transport; production uses the network."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 16,
        breaker: Breaker | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or Breaker()
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

    async def complete(self, system: str, user: str) -> Completion:
        """One completion, retried on 429/5xx/connection errors/timeouts, never on other 4xx.
        An endpoint-wide failure opens the breaker; an open breaker sends nothing."""
        attempt = 1
        while True:
            if self.breaker.reason is not None:
                raise EndpointUnusable(f"endpoint unusable: {self.breaker.reason}")
            try:
                return (await self._attempt(system, user)).hidden(self.endpoint.api_key)
            except ModelError as exc:
                exc.hide(self.endpoint.api_key)
                exc.attempts = attempt
                if exc.retryable and (exc.retry_after or 0) > self.retry.max_retry_wait:
                    exc.reason = (
                        f"rate limited: asked to wait {exc.retry_after:g} s "
                        f"(more than --max-retry-wait {self.retry.max_retry_wait:g} s)"
                    )
                    exc.retryable, exc.endpoint_wide = False, True
                if not exc.retryable or attempt >= self.retry.attempts:
                    if exc.endpoint_wide:
                        self.breaker.trip(exc.reason)
                    raise
                if self.breaker.reason is None:
                    await self.retry.sleep(self.retry.delay(attempt, exc.retry_after))
                if self.breaker.reason is not None:  # found meanwhile by another request
                    exc.reason += f"; not retried: endpoint unusable: {self.breaker.reason}"
                    raise
                attempt += 1

    async def _attempt(self, system: str, user: str) -> Completion:
        """One request. `--timeout` bounds each wait for the next bytes (httpx's read
        timeout); the whole answer, however steadily it streams, is bounded by max_answer."""
        longest = self.endpoint.max_answer
        try:  # not wait_for: before Python 3.12 it can lose a cancellation (gh-86296)
            async with asyncio.timeout(longest):
                completion = await self._exchange(system, user)
        except TimeoutError:
            raise ModelError(
                f"the answer took longer than {longest:g}s (raise --max-answer-seconds)",
                where=self.endpoint.where,
            ) from None
        cut_off = self.endpoint.provider.cut_off(completion.finish)
        if cut_off and completion.text and repeating(completion.text):
            raise ModelError(REPEATED, usage=completion.usage, where=self.endpoint.where)
        return completion

    def _idle(self) -> ModelError:
        return ModelError(
            f"no response within {self.endpoint.timeout:g}s (--timeout, the longest wait for "
            "the model's next bytes: raise it for a slow model)",
            retryable=True,
            where=self.endpoint.where,
        )

    async def _exchange(self, system: str, user: str) -> Completion:
        e = self.endpoint
        try:
            request = self._http.build_request(
                "POST", e.url, params=e.params(), headers=e.headers(), json=e.body(system, user)
            )
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
            raise ModelError(f"invalid URL ({exc})", endpoint_wide=True, where=e.where) from None
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TimeoutException:
            raise self._idle() from None
        except (httpx.HTTPError, OSError) as exc:
            raise connection_failure(exc, e.where) from None
        try:
            if _streamed(response):
                return await self._stream(response)
            data = await self._read(response)
        finally:
            await response.aclose()
        return self._answer(response, data)

    async def _stream(self, response: httpx.Response) -> Completion:
        """An event stream read as it arrives: each event is taken in, a model that repeats
        itself is stopped as soon as that is clear, and no more than MAX_BODY_BYTES is read."""
        events = self.endpoint.provider.events()
        size = 0
        try:
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise self._too_large()
                events.feed(chunk)
            events.close()
        except httpx.TimeoutException:
            raise self._idle() from None
        except (httpx.HTTPError, OSError) as exc:
            raise connection_failure(exc, self.endpoint.where) from None
        except Repeated as exc:
            exc.usage = exc.usage or self._reported(events)
            raise self._stream_failure(response, exc) from None
        except Malformed as exc:
            raise self._stream_failure(response, exc) from None
        return self._streamed_answer(response, events)

    def _reported(self, events: EventStream) -> Usage | None:
        """What a stream stopped midway had reported it spent (Anthropic's message_start
        carries the prompt's tokens): a failed call's cost is recorded too (SPEC 6)."""
        try:
            return self.endpoint.provider.parse(events.payload(), None).usage
        except Malformed as exc:
            return exc.usage

    def _streamed_answer(self, response: httpx.Response, events: EventStream) -> Completion:
        request_id = _request_id(response)
        try:
            return self.endpoint.provider.parse(events.payload(), request_id)
        except Malformed as exc:
            raise self._stream_failure(response, exc) from None

    def _stream_failure(self, response: httpx.Response, exc: Malformed) -> ModelError:
        request_id = _request_id(response)
        if isinstance(exc, StreamError):  # an error event: read as an error body is
            return self._error_payload(exc.payload, response, request_id)
        if isinstance(exc, Repeated):
            return ModelError(
                str(exc), where=self.endpoint.where, request_id=request_id, usage=exc.usage
            )
        return self._malformed(f"{exc} (in an event stream)", request_id, exc.usage)

    def _too_large(self) -> ModelError:
        return ModelError(
            f"the response body is larger than {MAX_BODY_BYTES // 2**20} MiB",
            where=self.endpoint.where,
        )

    async def _read(self, response: httpx.Response) -> bytes:
        declared = response.headers.get("content-length", "")
        too_large = self._too_large()
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise too_large
        chunks, size = [], 0
        try:
            async for chunk in response.aiter_raw():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise too_large
                chunks.append(chunk)
        except httpx.TimeoutException:
            raise self._idle() from None
        except (httpx.HTTPError, OSError) as exc:
            raise connection_failure(exc, self.endpoint.where) from None
        encoding = response.headers.get("content-encoding", "")
        try:
            return _decoded(b"".join(chunks), encoding)
        except zlib.error:
            raise ModelError(
                f"malformed response: the body does not decode as {one_line(encoding, 40)}",
                where=self.endpoint.where,
            ) from None
        except OverflowError:
            raise too_large from None

    def _answer(self, response: httpx.Response, data: bytes) -> Completion:
        e = self.endpoint
        request_id = _request_id(response)
        status = response.status_code
        if 300 <= status < 400:
            location = response.headers.get("location", "")
            target = "another URL"
            path = e.provider.path
            advice = f"point base_url at it (requests go to base_url + {path})"
            if location:  # where it points, without the credentials or query it may carry
                moved = response.url.join(location)
                target = str(moved.copy_with(userinfo=b"", query=None, fragment=None))
                if target.endswith(path):  # the base_url that sends there
                    advice = f"set base_url to {target[: -len(path)]}"
            raise ModelError(
                f"endpoint redirected to {target}: {advice}",
                status=status,
                endpoint_wide=True,
                where=e.where,
            )
        if status >= 400:
            message, kind = error_details(data)
            raise self._error(status, message, kind, request_id, response.headers)
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" in content_type or _event_stream(data):
            events = e.provider.events()  # compressed, or labelled as something else
            try:
                events.feed(data)
                events.close()
            except Malformed as exc:
                raise self._stream_failure(response, exc) from None
            return self._streamed_answer(response, events)
        try:
            payload = json.loads(data)
        except RecursionError:
            raise self._malformed("JSON nested too deeply", request_id) from None
        except ValueError:
            raise self._malformed("not JSON", request_id) from None
        if not isinstance(payload, dict):
            raise self._malformed("not a JSON object", request_id)
        error = e.provider.error_of(payload)
        if error is not None:
            raise self._error_payload(error, response, request_id)
        try:
            return e.provider.parse(payload, request_id)
        except Malformed as exc:
            raise self._malformed(str(exc), request_id, exc.usage) from None

    def _error_payload(
        self, payload: dict, response: httpx.Response, request_id: str | None
    ) -> ModelError:
        """The error of an error body under a 200, or of an error event in a stream: its own
        code, when it gives one, is the status."""
        payload = dict(payload)
        spent = payload.pop(USAGE, None)
        message, kind = error_details(json.dumps(payload).encode())
        code = payload["error"].get("code") if isinstance(payload.get("error"), dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else response.status_code
        error = self._error(status, message, kind, request_id, response.headers)
        if isinstance(spent, Usage):
            error.usage = spent
        return error

    def _error(
        self,
        status: int,
        message: str | None,
        kind: str | None,
        request_id: str | None,
        headers: httpx.Headers,
    ) -> ModelError:
        return classify(
            status,
            message,
            kind,
            secret=self.endpoint.api_key,
            where=self.endpoint.where,
            request_id=request_id,
            retry_after=parse_retry_after(headers),
            should_retry=(headers.get("x-should-retry") or "").strip().lower() or None,
        )

    def _malformed(
        self, what: str, request_id: str | None, usage: Usage | None = None
    ) -> ModelError:
        return ModelError(
            f"malformed response: {what}",
            where=self.endpoint.where,
            request_id=request_id,
            usage=usage,
        )


def _request_id(response: httpx.Response) -> str | None:
    return response.headers.get("x-request-id") or response.headers.get("request-id")


def _streamed(response: httpx.Response) -> bool:
    """Whether an answer is read as an event stream as it arrives: a 2xx labelled so, in no
    content coding (a compressed or mislabelled one is read whole, then as a stream)."""
    content_type = response.headers.get("content-type", "")
    coding = response.headers.get("content-encoding", "").strip().lower()
    return (
        response.is_success and "text/event-stream" in content_type and coding in ("", "identity")
    )

"""One text completion from an OpenAI-compatible (chat completions) or Anthropic (messages)
endpoint, over httpx: auth, max tokens, no tools, usage, bounded retries, and a breaker that
stops a run from calling an endpoint that cannot work. Answers stream (server-sent events), so
the timeout bounds each wait for the next bytes and a model that repeats itself is stopped
early; a plain JSON answer is read as well.

Everything a server sends is untrusted: bodies are read to at most 8 MiB, JSON of any shape is
checked field by field, usage figures that are not sane counts become None, and error text is
one escaped line that names the method and URL and never the key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import email.utils
import errno
import json
import math
import random
import re
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import httpx

from volumetool import __version__
from volumetool.render import one_line
from volumetool.settings import API_DEFAULTS
from volumetool.usage import Usage

ANTHROPIC_VERSION = "2023-06-01"
USER_AGENT = f"volumetool/{__version__}"
MAX_BODY_BYTES = 8 * 1024 * 1024
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
AUTH_HEADERS = {"bearer": "authorization", "api-key": "api-key", "x-api-key": "x-api-key"}
NEVER_RETRIED = frozenset({400, 401, 403, 413})
# The body codings read (each bounded by MAX_BODY_BYTES as it is decoded: a few kB of stacked
# gzip can inflate to gigabytes); requests ask for none, and others pass through as httpx's do.
_GZIP = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = {"gzip": _GZIP, "x-gzip": _GZIP, "deflate": zlib.MAX_WBITS}


@dataclass(frozen=True)
class Endpoint:
    api: str  # openai | anthropic
    base_url: str
    model: str
    api_key: str = field(repr=False)
    max_tokens: int = 4096
    timeout: float = 60.0  # the longest wait for the next bytes of an answer
    max_answer: float = 600.0  # the longest a whole answer may take, however steady
    auth: str | None = None  # bearer | api-key | x-api-key; None: the api's own
    api_version: str | None = None  # Azure OpenAI's api-version query parameter
    max_tokens_param: str = "max_tokens"  # max_completion_tokens for OpenAI reasoning models

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + API_DEFAULTS[self.api].path

    @property
    def where(self) -> str:
        """The request as error text names it: method and URL, no query, no key."""
        return f"POST {self.url}"

    def headers(self) -> dict[str, str]:
        headers = {"user-agent": USER_AGENT}
        if self.api_key:  # a local server (llama.cpp, Ollama, vLLM) may need no key
            auth = self.auth or ("x-api-key" if self.api == "anthropic" else "bearer")
            value = f"Bearer {self.api_key}" if auth == "bearer" else self.api_key
            headers[AUTH_HEADERS[auth]] = value
        headers["accept-encoding"] = "identity"  # answers are small; see _decoded
        if self.api == "anthropic":
            headers["anthropic-version"] = ANTHROPIC_VERSION
        return headers

    def body(self, system: str, user: str) -> dict:
        """The request; answers stream (SSE), so that a model still writing is told apart
        from one that hangs. A server that answers plain JSON anyway is read as well."""
        if self.api == "anthropic":
            return {
                "model": self.model,
                "max_tokens": self.max_tokens,
                "system": system,
                "messages": [{"role": "user", "content": user}],
                "stream": True,
            }
        return {
            "model": self.model,
            self.max_tokens_param: self.max_tokens,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    def params(self) -> dict[str, str]:
        return {"api-version": self.api_version} if self.api_version else {}


@dataclass(frozen=True)
class Completion:
    text: str | None
    finish: str | None  # the provider's own finish_reason / stop_reason, None when absent
    usage: Usage
    refusal: str | None = None  # OpenAI's message.refusal
    tool_call: bool = False  # the answer calls a tool
    request_id: str | None = None

    def hidden(self, secret: str) -> Completion:
        """This answer with the key taken out of all the server chose to say: a summary, a
        refusal, a finish reason or a request id can echo it as well as an error can."""
        if not secret:
            return self
        texts = (self.text, self.finish, self.refusal, self.request_id)
        text, finish, refusal, request_id = (
            t.replace(secret, "[redacted]") if t else t for t in texts
        )
        return dataclasses.replace(
            self, text=text, finish=finish, refusal=refusal, request_id=request_id
        )


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


def parse_retry_after(headers: httpx.Headers) -> float | None:
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


def _event_stream(data: bytes) -> bool:
    """Whether a body is an event stream: its first non-blank line, after the byte order mark a
    stream may begin with, is a field (data, event, id, retry) or a comment."""
    head = data.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip()
    return head.startswith((b"data:", b"event:", b"id:", b"retry:", b":"))


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


# The httpcore trace events after which a request is written and only waits for its answer.
WRITTEN_EVENTS = frozenset(
    {"http11.send_request_body.complete", "http2.send_request_body.complete"}
)


class Traffic:
    """The client's requests on their way out, from the start of a send until the request is
    written (or the send ends). A run's background work (planning the next thread, reading a
    fold's facts) waits for `quiet` first: interleaved with the loop turns and the GIL that a
    request being written needs, it held up every first request of a run by a thread's
    planning or a fold's reading at each step. Never longer than `patience`, so that slow
    uploads do not starve it."""

    def __init__(self, patience: float = 0.05) -> None:
        self.patience = patience
        self.writing = 0
        self._quiet = asyncio.Event()
        self._quiet.set()

    def start(self) -> Callable[[], None]:
        """Count a request going out; the function returned says it is written (once counts)."""
        self.writing += 1
        self._quiet.clear()
        written = False

        def done() -> None:
            nonlocal written
            if not written:
                written = True
                self.writing -= 1
                if not self.writing:
                    self._quiet.set()

        return done

    async def quiet(self) -> None:
        """Once no request is being written, or `patience` has passed."""
        if self.writing:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.patience):
                    await self._quiet.wait()


def _trace(written: Callable[[], None]) -> Callable[[str, dict], Awaitable[None]]:
    """httpcore's trace extension: `written` is called once the request body is sent."""

    async def trace(event: str, info: dict) -> None:
        if event in WRITTEN_EVENTS:
            written()

    return trace


class TlsContext:
    """The TLS context of a run's client, built in a thread from the moment the run knows it
    will call a model: OpenSSL reads the CA bundle (about 50 ms) without holding the GIL, so
    that it overlaps reading the config and planning instead of delaying the first request.
    It is the context httpx builds by default (certifi's bundle, or SSL_CERT_FILE or
    SSL_CERT_DIR); whatever stops it from being built is raised where it is needed."""

    def __init__(self) -> None:
        self._built: concurrent.futures.Future[ssl.SSLContext] = concurrent.futures.Future()
        threading.Thread(target=self._build, name="volumetool-tls").start()

    def _build(self) -> None:
        try:
            self._built.set_result(httpx.create_ssl_context())
        except BaseException as exc:
            self._built.set_exception(exc)

    def get(self) -> ssl.SSLContext:
        if not self._built.done():
            # Meanwhile, import what httpx imports when the client is made (httpcore and h11,
            # about 20 ms of the GIL) instead of after: OpenSSL does not need the GIL.
            import httpcore  # noqa: F401

        return self._built.result()


class ModelClient:
    """Summary requests to one endpoint. Tests pass a transport; production uses the network,
    over `tls` when it is given (else httpx builds the same context itself)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 16,
        breaker: Breaker | None = None,
        tls: TlsContext | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or Breaker()
        self.traffic = Traffic()
        self._http = httpx.AsyncClient(
            transport=transport,
            verify=tls.get() if tls is not None and transport is None else True,
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
        if completion.finish in CUT_OFF and completion.text and repeating(completion.text):
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
        written = self.traffic.start()
        request.extensions["trace"] = _trace(written)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TimeoutException:
            raise self._idle() from None
        except (httpx.HTTPError, OSError) as exc:
            raise connection_failure(exc, e.where) from None
        finally:
            written()
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
        events = EventStream(self.endpoint.api)
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
        except _Malformed as exc:
            raise self._stream_failure(response, exc) from None
        return self._streamed_answer(response, events)

    def _streamed_answer(self, response: httpx.Response, events: EventStream) -> Completion:
        request_id = _request_id(response)
        parse = _anthropic if self.endpoint.api == "anthropic" else _openai
        try:
            return parse(events.payload(), request_id)
        except _Malformed as exc:
            raise self._stream_failure(response, exc) from None

    def _stream_failure(self, response: httpx.Response, exc: _Malformed) -> ModelError:
        request_id = _request_id(response)
        if isinstance(exc, _StreamError):  # an error event: read as an error body is
            return self._error_payload(exc.payload, response, request_id)
        if isinstance(exc, _Repeated):
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
            path = API_DEFAULTS[e.api].path
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
            events = EventStream(e.api)  # compressed, or labelled as something else
            try:
                events.feed(data)
                events.close()
            except _Malformed as exc:
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
        if "error" in payload and not ("choices" in payload or "content" in payload):
            raise self._error_payload(payload, response, request_id)
        parse = _anthropic if e.api == "anthropic" else _openai
        try:
            return parse(payload, request_id)
        except _Malformed as exc:
            raise self._malformed(str(exc), request_id, exc.usage) from None

    def _error_payload(
        self, payload: dict, response: httpx.Response, request_id: str | None
    ) -> ModelError:
        """The error of an error body under a 200, or of an error event in a stream: its own
        code, when it gives one, is the status."""
        message, kind = error_details(json.dumps(payload).encode())
        code = payload["error"].get("code") if isinstance(payload.get("error"), dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else response.status_code
        return self._error(status, message, kind, request_id, response.headers)

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


class _Malformed(ValueError):
    def __init__(self, what: str, usage: Usage | None = None) -> None:
        super().__init__(what)
        self.usage = usage


class _StreamError(_Malformed):
    """An error event in a stream (OpenAI `{"error": ...}`, Anthropic `event: error`)."""

    def __init__(self, payload: dict) -> None:
        super().__init__("an error event")
        self.payload = payload


class _Repeated(_Malformed):
    """The model writes the same passage over and over: stopped there."""


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


# Finish reasons of an answer cut off at its token limit.
CUT_OFF = frozenset({"length", "max_tokens"})
REPEATED = "the model repeated itself: its answer is one passage over and over, not a summary"
# A repetition is clear when the end of the answer is one passage (of UNIT characters) written
# at least REPEATS times over at least SPAN characters: a sentence said three times, a phrase
# many times. Checked each time the answer grows by CHECK_EVERY characters.
UNIT = (8, 600)
REPEATS = 3
SPAN = 240
CHECK_EVERY = 32


def repeating(text: str) -> bool:
    """Whether the text ends in one passage written over and over (see UNIT, REPEATS, SPAN):
    its last `span` characters equal themselves shifted by the passage's length.

    Only lengths at which the text's last UNIT[0] characters occur again are tried: a text
    that repeats a passage of length u ends in characters that stood u earlier too. So a check
    costs a few `rfind`s, not one comparison for every length from UNIT[0] to UNIT[1]: it runs
    every CHECK_EVERY characters of a streamed answer."""
    end = len(text)
    if end < SPAN:  # every span is at least SPAN long
        return False
    probe = text[-UNIT[0] :]
    start = max(0, end - UNIT[0] - UNIT[1])
    found = text.rfind(probe, start, end - 1)
    while found != -1:
        unit = end - UNIT[0] - found
        span = max(unit * REPEATS, SPAN)
        if unit >= UNIT[0] and span <= end:
            tail = text[-span:]
            if tail[unit:] == tail[:-unit] and not tail.isspace():
                return True
        found = text.rfind(probe, start, found + UNIT[0] - 1)
    return False


class EventStream:
    """A streamed answer (server-sent events) taken in as it arrives and turned into the
    answer a plain JSON response would have been, for the same checks: OpenAI chat completion
    chunks (`choices[].delta`, a last chunk with `usage`), Anthropic message events
    (message_start, content_block_start/delta, message_delta, message_stop). An error event
    raises _StreamError; an answer that repeats itself raises _Repeated as soon as it is."""

    def __init__(self, api: str) -> None:
        self.api = api
        self._buffer = b""
        self._data: list[str] = []
        self._first = True
        self.text = ""  # every text delta so far, for the repetition check
        self._checked = 0
        self._usage: dict = {}
        self._choices: list | None = None  # OpenAI: None until a chunk carries choices
        self._refusal = ""
        self._tool_call = False
        self._finish: object = None
        self._message = False  # Anthropic: whether message_start came
        self._blocks: dict[int, dict] = {}

    def feed(self, chunk: bytes) -> None:
        if self._first:
            chunk = chunk.removeprefix(b"\xef\xbb\xbf")
            self._first = False
        *lines, self._buffer = (self._buffer + chunk).split(b"\n")
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def close(self) -> None:
        """The end of the stream: what is left is the last line and event."""
        if self._buffer:
            self._line(self._buffer.rstrip(b"\r"))
            self._buffer = b""
        self._dispatch()

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
            return
        field, _, value = line.partition(b":")
        if field == b"data":
            self._data.append(value.removeprefix(b" ").decode("utf-8", "replace"))

    def _dispatch(self) -> None:
        if not self._data:
            return
        data, self._data = "\n".join(self._data), []
        if data.strip() == "[DONE]":
            return
        try:
            event = json.loads(data)
        except RecursionError:
            raise _Malformed("JSON nested too deeply") from None
        except ValueError:
            raise _Malformed("not JSON") from None
        if not isinstance(event, dict):
            raise _Malformed("not a JSON object")
        if "error" in event and "choices" not in event:
            raise _StreamError(event)
        if self.api == "anthropic":
            self._anthropic(event)
        else:
            self._openai(event)

    def _write(self, text: str) -> None:
        self.text += text
        if len(self.text) - self._checked >= CHECK_EVERY:
            self._checked = len(self.text)
            if repeating(self.text):
                raise _Repeated(f"{REPEATED} (stopped after {len(self.text):,} characters)")

    def _openai(self, event: dict) -> None:
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
                self._write(delta["content"])

    def _anthropic(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self._message = True
            self._take_usage(event["message"].get("usage"))
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            self._blocks[_index(event)] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            delta = event["delta"]
            block = self._blocks.setdefault(_index(event), {"type": "text", "text": ""})
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                block["text"] = str(block.get("text") or "") + delta["text"]
                self._write(delta["text"])
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and "stop_reason" in delta:
                self._finish = delta["stop_reason"]
            self._take_usage(event.get("usage"))

    def _take_usage(self, usage: object) -> None:
        """Anthropic's figures: input ones in message_start, the output count (cumulative,
        and sometimes the input ones again) in message_delta; the latest of each counts."""
        if isinstance(usage, dict):
            self._usage.update(usage)

    def payload(self) -> dict:
        """The answer as the API's plain JSON response would have carried it."""
        payload: dict = {"usage": self._usage} if self._usage else {}
        if self.api == "anthropic":
            if self._message:
                blocks = [self._blocks[i] for i in sorted(self._blocks)]
                payload.update(content=blocks, stop_reason=self._finish)
            return payload
        if self._choices is not None:
            message: dict = {"content": self.text if self.text else None}
            if self._refusal:
                message["refusal"] = self._refusal
            if self._tool_call:
                message["tool_calls"] = [{"type": "function"}]
            choices = [{"message": message, "finish_reason": self._finish}]
            payload["choices"] = choices if self._choices else []
        return payload


def _index(event: dict) -> int:
    index = event.get("index")
    return index if isinstance(index, int) else 0


def _mapping(value: object, what: str, usage: Usage) -> dict:
    if not isinstance(value, dict):
        raise _Malformed(f"{what} is not an object", usage)
    return value


def _openai(payload: dict, request_id: str | None) -> Completion:
    raw_usage = payload.get("usage")
    usage = (
        Usage.of_call(raw_usage.get("prompt_tokens"), raw_usage.get("completion_tokens"))
        if isinstance(raw_usage, dict)
        else Usage()
    )
    choices = payload.get("choices")
    if not isinstance(choices, list):
        raise _Malformed("no choices", usage)
    if not choices:
        raise _Malformed("an empty choices list", usage)
    choice = _mapping(choices[0], "choices[0]", usage)
    message = _mapping(choice.get("message"), "choices[0].message", usage)
    content = message.get("content")
    if isinstance(content, list):  # some compatible servers answer with content parts
        content = "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    if content is not None and not isinstance(content, str):
        raise _Malformed("message.content is neither text nor null", usage)
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


def _anthropic(payload: dict, request_id: str | None) -> Completion:
    raw_usage = payload.get("usage")
    usage = Usage()
    if isinstance(raw_usage, dict):
        call = Usage.of_call(raw_usage.get("input_tokens"), raw_usage.get("output_tokens"))
        prompt = call.input_tokens
        # The prompt's real size: cached and cache-creating tokens are input too. A figure
        # that is absent is none; one that is not a count leaves the size unknown.
        for name in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            if prompt is not None and raw_usage.get(name) is not None:
                cached = Usage.of_call(raw_usage[name], None).input_tokens
                prompt = None if cached is None else prompt + cached
        usage = Usage.of_call(prompt, call.output_tokens)
    blocks = payload.get("content")
    if not isinstance(blocks, list):
        raise _Malformed("no content list", usage)
    texts = []
    tool_call = False
    for block in blocks:
        block = _mapping(block, "a content block", usage)
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise _Malformed("a text block without text", usage)
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

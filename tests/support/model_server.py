"""A real model endpoint on 127.0.0.1 for tests and benchmarks: OpenAI chat completions,
Anthropic messages and OpenAI's Responses API (`/responses`, which errs as OpenAI does),
answering the way real providers and the servers people put in front of
them answer (see FAULTS), switched per request.

    with ModelServer() as server:
        server.queue("500", "429")        # the next two requests fail, the third succeeds
        server.fault = "truncated"        # ...or every request, until reset
        server.context_limit = 4000       # ...and prompts longer than this are "too long"
        server.chunk_delay = 0.2          # streamed answers: a pause before each event
        server.plain = True               # answer plain JSON even when asked to stream

Answers stream (server-sent events, as each API sends them) when the request asks for it, the
way real providers stream: OpenAI chat completion chunks and a usage chunk, Anthropic's
message_start … message_stop, the Responses API's `response.*` events; `streams` records
how much of each stream went out.

The bodies follow the providers' documented and observed shapes: OpenAI and Azure
(`{"error": {message, type, param, code}}`), Anthropic (`{"type": "error", "error": {...}}`),
vLLM (`{"object": "error", ...}`), LiteLLM (string codes), OpenRouter (200 with an error body),
FastAPI (`{"detail": ...}`), proxies (HTML), event streams, and broken transports.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Reply:
    status: int = 200
    payload: object = None  # JSON; or `raw` bytes
    raw: bytes | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def _openai_error(message: str, kind: str, code: str | None = None, param=None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _anthropic_error(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_a1"}


# fault -> (status, openai body, anthropic body, headers): error answers of each API.
HTTP_ERRORS: dict[str, tuple[int, dict, dict, dict]] = {
    "400": (
        400,
        _openai_error("Invalid value for 'messages'.", "invalid_request_error"),
        _anthropic_error("invalid_request_error", "messages: field required"),
        {},
    ),
    "401": (
        401,
        _openai_error(
            "Incorrect API key provided: {key}.", "invalid_request_error", "invalid_api_key"
        ),
        _anthropic_error("authentication_error", "invalid x-api-key {key}"),
        {},
    ),
    "403": (
        403,
        _openai_error("Country, region, or territory not supported", "permission_denied"),
        _anthropic_error("permission_error", "Your API key does not have permission"),
        {},
    ),
    "404": (
        404,
        _openai_error("The model `m` does not exist.", "invalid_request_error", "model_not_found"),
        _anthropic_error("not_found_error", "model: m"),
        {},
    ),
    "402": (
        402,
        {"error": {"code": 402, "message": "Insufficient credits. Add more credits."}},
        _anthropic_error("billing_error", "Billing error"),
        {},
    ),
    "413": (
        413,
        _openai_error("Request too large", "invalid_request_error", "request_too_large"),
        {"error": {"type": "request_too_large", "message": "Request exceeds the maximum size"}},
        {},
    ),
    "429": (
        429,
        _openai_error(
            "Rate limit reached for m on tokens per min (TPM). Please try again in 1.574s.",
            "tokens",
            "rate_limit_exceeded",
        ),
        _anthropic_error("rate_limit_error", "This request would exceed the rate limit"),
        {"retry-after": "{retry_after}"},
    ),
    "quota": (
        429,
        _openai_error(
            "You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota",
            "insufficient_quota",
        ),
        _anthropic_error("billing_error", "Your credit balance is too low"),
        {},
    ),
    "500": (
        500,
        _openai_error("The server had an error processing your request.", "server_error"),
        _anthropic_error("api_error", "Internal server error"),
        {},
    ),
    "503": (
        503,
        {
            "error": {
                "code": "server_is_overloaded",
                "message": "Our servers are currently overloaded.",
                "param": None,
                "type": "service_unavailable_error",
            }
        },
        _anthropic_error("overloaded_error", "Overloaded"),
        {},
    ),
    "529": (
        529,
        _openai_error("Overloaded", "server_error"),
        _anthropic_error("overloaded_error", "Overloaded"),
        {"x-should-retry": "true"},
    ),
    "context_length": (
        400,
        _openai_error(
            "This model's maximum context length is 4097 tokens. However, your messages "
            "resulted in 4294 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            "context_length_exceeded",
            "messages",
        ),
        _anthropic_error(
            "invalid_request_error", "prompt is too long: 191989 tokens > 180000 maximum"
        ),
        {},
    ),
    "max_tokens_param": (
        400,
        _openai_error(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
            "'max_completion_tokens' instead.",
            "invalid_request_error",
            "unsupported_parameter",
            "max_tokens",
        ),
        _anthropic_error("invalid_request_error", "max_tokens: unsupported"),
        {},
    ),
    "vllm_error": (
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 32768 tokens. However, you "
            "requested 39197 tokens in the messages, Please reduce the length of the messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        _anthropic_error("invalid_request_error", "prompt is too long: 3 tokens > 2 maximum"),
        {},
    ),
    "litellm_400": (
        400,
        {
            "error": {
                "message": "litellm.BadRequestError: AnthropicException - max_tokens: 21333 > "
                "4096.\nReceived Model Group=m",
                "type": "None",
                "param": "None",
                "code": "400",
            }
        },
        _anthropic_error("invalid_request_error", "max_tokens: 21333 > 4096"),
        {},
    ),
    "azure_content_filter": (
        400,
        {
            "error": {
                "message": "The response was filtered due to the prompt triggering Azure "
                "OpenAI's content management policy.",
                "type": None,
                "param": "prompt",
                "code": "content_filter",
                "status": 400,
                "innererror": {"code": "ResponsibleAIPolicyViolation"},
            }
        },
        _anthropic_error("invalid_request_error", "Output blocked by content filtering policy"),
        {},
    ),
    "string_error": (500, {"error": "something broke"}, {"error": "something broke"}, {}),
    "detail_error": (
        422,
        {"detail": [{"loc": ["body", "messages"], "msg": "field required"}]},
        {"detail": [{"loc": ["body", "messages"], "msg": "field required"}]},
        {},
    ),
    "retry_after_soon": (
        429,
        _openai_error("Slow down", "tokens", "rate_limit_exceeded"),
        _anthropic_error("rate_limit_error", "Slow down"),
        {"retry-after": "soon"},
    ),
    "retry_after_long": (
        429,
        _openai_error("Slow down", "tokens", "rate_limit_exceeded"),
        _anthropic_error("rate_limit_error", "Slow down"),
        {"retry-after": "120"},
    ),
    # LiteLLM in front of a provider: the upstream's Retry-After relayed under its own name.
    "litellm_429": (
        429,
        {
            "error": {
                "message": "litellm.RateLimitError: RateLimitError: OpenAIException - Rate "
                "limit reached",
                "type": "None",
                "param": "None",
                "code": "429",
            }
        },
        _anthropic_error("rate_limit_error", "Rate limit reached"),
        {"llm_provider-retry-after": "120", "retry-after": "soon"},
    ),
    "should_retry_false": (
        500,
        _openai_error("The server had an error", "server_error"),
        _anthropic_error("api_error", "Internal server error"),
        {"x-should-retry": "false"},
    ),
    # A server that echoes the key where no message is: as the error's type and code, and in
    # its request id.
    "key_echoed": (
        400,
        _openai_error("Invalid request.", "{key}", "{key}"),
        _anthropic_error("{key}", "Invalid request."),
        {"x-request-id": "req_{key}", "request-id": "req_{key}"},
    ),
}

# Faults answered with a 200 whose body is a (more or less) well-formed completion.
COMPLETION_FAULTS = (
    "empty",
    "whitespace",
    "overlong",
    "surrogate",
    "control_chars",
    "truncated",
    "tool_call",
    "content_filter",
    "refusal",
    "pause_turn",
    "window_exceeded",
    "finish_null",
    "finish_unknown",
    "content_list",
    "stop_sequence",
    "choices_empty",
    "usage_huge",
    "usage_negative",
    "usage_float",
    "usage_string",
    "error_in_200",
    "malformed_shape",
    "cache_usage_invalid",
    # What a server may echo where it should not: the key in a refusal (with a terminal's
    # escapes and a bidi override) or as the finish reason, and in an accepted summary.
    "refusal_echo",
    "finish_echo",
    "summary_echo",
    # A "summary" with nothing visible in it: escapes, zero-width and format characters.
    "invisible",
    # Fewer characters than the fold, more tokens: CJK.
    "wide_summary",
)
# Faults of a streamed answer: it stops mid-way and the connection stays open; or the model
# writes one sentence over and over up to its token limit (as a 135M model does).
STREAM_FAULTS = ("stall", "repeat")
# Faults of the transport or the body's encoding.
RAW_FAULTS = (
    "hang",
    "drop",
    "redirect",
    "gzip_garbage",
    "event_stream",
    "sse_mislabelled",
    "sse_id",
    "sse_bom",
    "redirect_secret",
    "huge_body",
    "huge_chunked",
    "deep_json",
    "not_json",
    "json_not_object",
    "empty_body",
    "malformed",
    "html_502",
    "gzip_bomb",
)
# Completions a client must accept as a summary (normal finish, odd but valid shape).
ACCEPTED = (
    "content_list",
    "stop_sequence",
    "usage_huge",
    "usage_negative",
    "usage_float",
    "usage_string",
    "cache_usage_invalid",
    "control_chars",
    "summary_echo",
)
FAULTS = tuple(HTTP_ERRORS) + COMPLETION_FAULTS + RAW_FAULTS + STREAM_FAULTS
REPEATED_SENTENCE = "The user wants to deploy the service and the agent helps with the deploy. "
REPEAT_TIMES = 400
# What SmolLM2-135M wrote for a fold of the demo volume: fluent, none of its facts, and a URL,
# a command and a path found nowhere in the conversation.
SMALL_MODEL_SUMMARY = (
    "The chat is here: https://dev.to/maven-tools/chat-history-2024. The user and the agent "
    "talked about the project and agreed to run `npm run build:all` in /opt/app/releases, "
    "then to check the results later."
)
# The summary of the control_chars fault: a clipboard write, a screen clear, a newline, a bell.
CONTROL_SUMMARY = "Summary \x1b]52;c;cHduZWQ=\x07 with\nlines \x1b[2J and a bell\x07."
ECHOED_REFUSAL = "I won't; your key {key} is logged \x1b[2J\x1b]52;c;eA==\x07 \u202eevil\x00 \x9b."
INVISIBLE_SUMMARY = "\x1b[2J\x1b[H \u200b\u200d\ufeff \u202e\x00\n\x1b]0;title\x07"
# Two layers of gzip around 64 MiB of zeros: 1 kB on the wire (bomb() makes it once).
_BOMB: list[bytes] = []


def bomb() -> bytes:
    if not _BOMB:
        import gzip

        _BOMB.append(gzip.compress(gzip.compress(bytes(64 * 2**20))))
    return _BOMB[0]


def wide(i: int) -> str:
    """The i-th character of a CJK text that does not repeat itself."""
    return chr(0x4E00 + i * i * 7919 % 20_000)


def payload_of(data: str) -> dict:
    payload = json.loads(data)
    return payload if isinstance(payload, dict) else {}


def openai_events(reply: dict) -> list[dict]:
    """A chat completion as OpenAI streams it: a chunk per piece of the message (role first),
    the finish reason in the last, then a chunk of usage alone (stream_options.include_usage).
    A body that is no completion (an error, a stranger shape) is one event as it is."""
    if not isinstance(reply.get("choices"), list):
        return [reply]
    head = {k: reply[k] for k in ("id", "created", "model") if k in reply}
    head["object"] = "chat.completion.chunk"
    events = []
    for choice in reply["choices"]:
        message = choice["message"]
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part["text"] for part in content)
        deltas: list[dict] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": piece} for piece in _pieces(content or "")]
        if message.get("refusal"):
            deltas.append({"refusal": message["refusal"]})
        if message.get("tool_calls"):
            deltas.append({"tool_calls": [{"index": 0, **message["tool_calls"][0]}]})
        events += [
            {**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
        ]
        last = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
        events.append({**head, "choices": [last]})
    if not reply["choices"]:
        events.append({**head, "choices": []})
    if "usage" in reply:
        events.append({**head, "choices": [], "usage": reply["usage"]})
    return events


def anthropic_events(reply: dict) -> list[dict]:
    """A message as Anthropic streams it: message_start with the input usage, each content
    block's start, deltas and stop, message_delta with the stop reason and output tokens,
    message_stop. An error is the `error` event; a stranger shape one event as it is."""
    if reply.get("type") != "message":
        return [reply]
    usage = dict(reply.get("usage") or {})
    output = {"output_tokens": usage.pop("output_tokens")} if "output_tokens" in usage else None
    start = {**reply, "content": [], "stop_reason": None}
    start.pop("usage", None)
    if "usage" in reply:
        start["usage"] = {**usage, "output_tokens": 1}
    events: list[dict] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(reply["content"]):
        kind = block["type"]
        opened = {**block, "text": ""} if kind == "text" else block
        if kind == "thinking":
            opened = {**block, "thinking": ""}
        events.append({"type": "content_block_start", "index": index, "content_block": opened})
        if kind == "text":
            events += [
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": p},
                }
                for p in _pieces(block["text"])
            ]
        elif kind == "thinking":
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    stop = {"stop_reason": reply["stop_reason"], "stop_sequence": reply.get("stop_sequence")}
    events.append({"type": "message_delta", "delta": stop, **({"usage": output} if output else {})})
    events.append({"type": "message_stop"})
    return events


def responses_events(reply: dict) -> list[dict]:
    """A response as the Responses API streams it: response.created, each output item added,
    its content parts' deltas (output_text, refusal) and done events, then the whole response
    in response.completed, .incomplete or .failed. A body that is no response, one event."""
    if reply.get("object") != "response":
        return [reply]
    events: list[dict] = [
        {"type": "response.created", "response": {**reply, "status": "in_progress", "output": []}}
    ]
    for n, item in enumerate(reply["output"]):
        parts = item.get("content") if item["type"] == "message" else None
        opened = {**item, "content": []} if parts is not None else item
        events.append({"type": "response.output_item.added", "output_index": n, "item": opened})
        for c, part in enumerate(parts or []):
            at = {"item_id": item.get("id"), "output_index": n, "content_index": c}
            if part["type"] == "output_text":
                empty = {**part, "text": ""}
                events.append({"type": "response.content_part.added", **at, "part": empty})
                events += [
                    {"type": "response.output_text.delta", **at, "delta": piece}
                    for piece in _pieces(part["text"])
                ]
                events.append({"type": "response.output_text.done", **at, "text": part["text"]})
            elif part["type"] == "refusal":
                delta = {"type": "response.refusal.delta", **at, "delta": part["refusal"]}
                events.append(delta)
            events.append({"type": "response.content_part.done", **at, "part": part})
        events.append({"type": "response.output_item.done", "output_index": n, "item": item})
    last = {"incomplete": "response.incomplete", "failed": "response.failed"}
    events.append({"type": last.get(reply["status"], "response.completed"), "response": reply})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


EVENTS = {"openai": openai_events, "anthropic": anthropic_events}
EVENTS["openai-responses"] = responses_events


def _pieces(text: str, size: int = 24) -> list[str]:
    """Text cut as a model streams it: a few words at a time."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def _key(handler: BaseHTTPRequestHandler) -> str:
    """The key a request carries, as a server that echoes it would read it."""
    key = handler.headers.get("authorization") or handler.headers.get("x-api-key") or ""
    return key.removeprefix("Bearer ")


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # socketserver's default of 5 refuses bursts of connections
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # a killed client is no news


class ModelServer:
    def __init__(self, latency: float = 0.0) -> None:
        self.latency = latency
        self.fault: str | None = None
        self._queue: deque[str | None] = deque()
        self.summary = "The user asked about the deploy; decided weekly backups; a review is open."
        self.usage = {"input": 1200, "output": 80, "cache_creation": 30, "cache_read": 70}
        self.retry_after = "0.05"
        self.omit_usage = False
        self.plain = False  # answer JSON even when the request asks for a stream
        self.chunk_delay = 0.0  # seconds before each event of a streamed answer
        self.streams: list[dict] = []  # per streamed answer: events sent, of how many, closed
        # A local server run without a key (llama.cpp, Ollama, vLLM): a request that carries
        # one anyway is answered 401, so that a test sees any key sent.
        self.keyless = False
        self.context_limit: int | None = None  # characters of conversation a request may hold
        self.fail_every: tuple[int, str] | None = None  # (n, fault): every nth request fails
        self.answer: Callable[[dict], str] | None = None  # the summary, from the request
        self.requests: list[dict] = []
        self.on_request: Callable[[dict], None] | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes; without this, Nagle's algorithm and
                # the client's delayed ACK stall every response by ~40 ms.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:
                server._handle(self)

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def queue(self, *faults: str | None) -> None:
        self._queue.extend(faults)

    def __enter__(self) -> ModelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def faithful(self, body: dict) -> str:
        """A summary that keeps the hard facts of what it was asked to fold and invents none:
        what a good model writes, for tests about something else than the quality gate."""
        from volumetool.compaction.retention import extract_facts

        lines = self.conversation(body).splitlines()[1:]  # after the data tag's line
        data = "\n".join(line for line in lines if not line.startswith("<<<"))  # fences
        found = extract_facts(data.split("\n\n"))
        return "Summary: " + ", ".join(dict.fromkeys(fact.text for fact in found)) + "."

    def conversation(self, body: dict) -> str:
        """The user message of a request (what the summarizer was asked to fold)."""
        if isinstance(body.get("input"), str):  # the Responses API
            return body["input"]
        messages = body.get("messages") or [{}]
        return str(messages[-1].get("content", ""))

    # -- one request ----------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length", 0))
        body = json.loads(handler.rfile.read(length) or b"{}")
        url = urlsplit(handler.path)
        api = "anthropic" if url.path.endswith("/v1/messages") else "openai"
        api = "openai-responses" if url.path.endswith("/responses") else api
        with self._lock:
            fault = self._queue.popleft() if self._queue else self.fault
            if self.fail_every and len(self.requests) % self.fail_every[0] == 0:
                fault = self.fail_every[1]
            if self.keyless and any(
                h in handler.headers for h in ("authorization", "x-api-key", "api-key")
            ):
                fault = "401"
            if (
                fault is None
                and self.context_limit is not None
                and len(self.conversation(body)) > self.context_limit
            ):
                fault = "context_length"
            self.requests.append(
                {
                    "path": url.path,
                    "query": parse_qs(url.query),
                    "headers": {k.lower(): v for k, v in handler.headers.items()},
                    "body": body,
                    "fault": fault,
                }
            )
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.on_request:
                self.on_request(body)
            if self.latency:
                time.sleep(self.latency)
            self._respond(handler, fault, api, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on a long answer, as it should
        finally:
            with self._lock:
                self.in_flight -= 1

    def _respond(self, handler, fault: str | None, api: str, body: dict) -> None:
        anthropic = api == "anthropic"
        if fault in RAW_FAULTS:
            self._raw(handler, fault)
            return
        if fault in HTTP_ERRORS:
            status, openai_body, anthropic_body, headers = HTTP_ERRORS[fault]
            # Real servers echo part of a bad key; the client must not pass it on.
            text = json.dumps(anthropic_body if anthropic else openai_body).replace(
                "{key}", _key(handler)
            )
            headers = {
                k: v.replace("{retry_after}", self.retry_after).replace("{key}", _key(handler))
                for k, v in headers.items()
            }
            self._send_raw(handler, Reply(status, raw=text.encode(), headers=headers))
            return
        text = self.answer(body) if self.answer else self.summary
        if fault == "empty":
            text = ""
        elif fault == "whitespace":
            text = "  \n\t "
        elif fault == "overlong":  # words that do not repeat: too long, not repetitive
            text = " ".join(f"w{i * 7919 % 100_003:x}" for i in range(len(json.dumps(body)) // 3))
        elif fault == "control_chars":
            text = CONTROL_SUMMARY
        elif fault == "summary_echo":
            text += " The key was {key}."
        elif fault == "invisible":
            text = INVISIBLE_SUMMARY
        elif fault == "wide_summary":
            text = "".join(wide(i) for i in range(len(self.conversation(body)) // 2))
        elif fault == "repeat":
            text = REPEATED_SENTENCE * REPEAT_TIMES
        answer = {"anthropic": self._anthropic, "openai-responses": self._responses}
        payload = answer.get(api, self._openai)(text, fault)
        data = json.dumps(payload).replace("{key}", _key(handler))
        if fault == "surrogate":  # JSON may escape a lone surrogate; Python decodes it
            data = data.replace("SURROGATE", "\\ud800")
        if body.get("stream") and not self.plain:
            payload = json.loads(data)  # the key and surrogate as the JSON would carry them
            events = EVENTS[api](payload)
            self._send_events(handler, events, api, stall=fault == "stall")
            return
        if self.chunk_delay:  # a model writes as slowly whether it streams or not
            time.sleep(self.chunk_delay * len(openai_events(payload_of(data))))
        self._send_raw(handler, Reply(200, raw=data.encode()))

    def _send_events(self, handler, events: list[dict], api: str, stall: bool) -> None:
        """A streamed answer, one event per chunk, paced by chunk_delay; a stalled one stops
        after its first events and keeps the connection open."""
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("transfer-encoding", "chunked")
        handler.send_header("x-request-id", "req_test_1")
        handler.end_headers()
        record = {"events": 0, "of": len(events), "closed": False}
        self.streams.append(record)
        frames = [
            (f"event: {e['type']}\n" if api != "openai" and "type" in e else "")
            + f"data: {json.dumps(e)}\n\n"
            for e in events
        ]
        if api == "openai":
            frames.append("data: [DONE]\n\n")
        try:
            for n, frame in enumerate(frames):
                if stall and n == 3:
                    self._stop.wait(30)
                    return
                if self.chunk_delay:
                    time.sleep(self.chunk_delay)
                data = frame.encode()
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                handler.wfile.flush()
                record["events"] = min(n + 1, len(events))
            handler.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            record["closed"] = True
            raise

    def _openai(self, text: str, fault: str | None) -> dict:
        message: dict = {"role": "assistant", "content": text, "refusal": None}
        choice: dict = {"index": 0, "message": message, "finish_reason": "stop"}
        usage: dict = {
            "prompt_tokens": self.usage["input"],
            "completion_tokens": self.usage["output"],
            "total_tokens": self.usage["input"] + self.usage["output"],
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        reply: dict = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1730000000,
            "model": "m",
            "choices": [choice],
            "usage": usage,
        }
        if fault == "tool_call":
            message.update(
                content=None,
                tool_calls=[
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"},
                    }
                ],
            )
            choice["finish_reason"] = "tool_calls"
        elif fault in ("truncated", "window_exceeded", "repeat"):
            choice["finish_reason"] = "length"
        elif fault == "content_filter":
            message["content"] = "Summary: the user asked the agent to"
            choice["finish_reason"] = "content_filter"
        elif fault == "refusal":
            message.update(content=None, refusal="I'm sorry, I can't help with that.")
        elif fault == "refusal_echo":
            message.update(content=None, refusal=ECHOED_REFUSAL)
        elif fault == "finish_echo":
            choice["finish_reason"] = "{key}"
        elif fault == "finish_null":
            choice["finish_reason"] = None
        elif fault in ("finish_unknown", "pause_turn"):
            choice["finish_reason"] = "abort"
        elif fault == "content_list":
            message["content"] = [
                {"type": "text", "text": text[:10]},
                {"type": "text", "text": text[10:]},
            ]
        elif fault == "choices_empty":
            reply["choices"] = []
        elif fault == "surrogate":
            message["content"] = "Summary SURROGATE here."
        elif fault == "error_in_200":
            return {"error": {"code": 502, "message": "Provider returned error"}}
        elif fault == "malformed_shape":
            return {"id": "x", "object": "nothing here"}
        elif fault == "cache_usage_invalid":  # prompt_tokens counts the cached ones already
            usage["prompt_tokens_details"] = {"cached_tokens": "900"}
        self._odd_usage(usage, fault, "prompt_tokens", "completion_tokens")
        return self._usage(reply)

    def _anthropic(self, text: str, fault: str | None) -> dict:
        content: list[dict] = [{"type": "text", "text": text}]
        usage: dict = {
            "input_tokens": self.usage["input"],
            "cache_creation_input_tokens": self.usage["cache_creation"],
            "cache_read_input_tokens": self.usage["cache_read"],
            "output_tokens": self.usage["output"],
        }
        reply: dict = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": content,
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        stops = {
            "tool_call": "tool_use",
            "truncated": "max_tokens",
            "repeat": "max_tokens",
            "content_filter": "refusal",
            "refusal": "refusal",
            "pause_turn": "pause_turn",
            "window_exceeded": "model_context_window_exceeded",
            "finish_null": None,
            "finish_unknown": "weird_reason",
            "stop_sequence": "stop_sequence",
            "refusal_echo": "refusal",
            "finish_echo": "{key}",
        }
        if fault in stops:
            reply["stop_reason"] = stops[fault]
        if fault == "tool_call":
            reply["content"] = [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]
        elif fault in ("content_filter", "refusal", "window_exceeded"):
            content[0]["text"] = "Summary: the user asked the agent to"
        elif fault == "refusal_echo":
            content[0]["text"] = ECHOED_REFUSAL
        elif fault == "content_list":
            reply["content"] = [
                {"type": "thinking", "thinking": "let me see", "signature": "EqQB"},
                {"type": "redacted_thinking", "data": "xyz"},
                {"type": "text", "text": text[:10]},
                {"type": "text", "text": text[10:]},
            ]
        elif fault == "choices_empty":
            reply["content"] = []
        elif fault == "surrogate":
            content[0]["text"] = "Summary SURROGATE here."
        elif fault == "error_in_200":
            return {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        elif fault == "malformed_shape":
            return {"id": "x", "object": "nothing here"}
        elif fault == "cache_usage_invalid":  # the prompt's size is unknown, not input_tokens
            usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"] = "900", -3
        self._odd_usage(usage, fault, "input_tokens", "output_tokens")
        return self._usage(reply)

    def _responses(self, text: str, fault: str | None) -> dict:
        if fault in ("error_in_200", "malformed_shape"):  # no response: as chat completions'
            return self._openai(text, fault)
        content: list[dict] = [{"type": "output_text", "text": text, "annotations": []}]
        message = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant"}
        usage: dict = {
            "input_tokens": self.usage["input"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": self.usage["output"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.usage["input"] + self.usage["output"],
        }
        reply: dict = {
            "id": "resp_1",
            "object": "response",
            "created_at": 1730000000,
            "status": "completed",
            "error": None,
            "incomplete_details": None,
            "model": "m",
            "output": [{**message, "content": content}],
            "usage": usage,
        }
        # Why an incomplete response stopped: incomplete_details.reason.
        incomplete = {
            "truncated": "max_output_tokens",
            "window_exceeded": "max_output_tokens",
            "repeat": "max_output_tokens",
            "content_filter": "content_filter",
            "pause_turn": "abort",
            "finish_unknown": "abort",
        }
        if fault in incomplete:
            reply["status"] = "incomplete"
            reply["incomplete_details"] = {"reason": incomplete[fault]}
        if fault == "tool_call":
            reply["output"] = [
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "read_file",
                    "arguments": "{}",
                    "status": "completed",
                }
            ]
        elif fault == "content_filter":
            content[0]["text"] = "Summary: the user asked the agent to"
        elif fault in ("refusal", "refusal_echo"):
            said = ECHOED_REFUSAL if fault == "refusal_echo" else "I'm sorry, I can't help."
            content[:] = [{"type": "refusal", "refusal": said}]
        elif fault == "finish_echo":
            reply["status"] = "{key}"
        elif fault == "finish_null":
            reply["status"] = None
        elif fault == "content_list":
            reply["output"].insert(0, {"type": "reasoning", "id": "rs_1", "summary": []})
            content[:] = [
                {"type": "output_text", "text": text[:10], "annotations": []},
                {"type": "output_text", "text": text[10:], "annotations": []},
            ]
        elif fault == "choices_empty":
            reply["output"] = []
        elif fault == "surrogate":
            content[0]["text"] = "Summary SURROGATE here."
        elif fault == "cache_usage_invalid":  # input_tokens counts the cached ones already
            usage["input_tokens_details"] = {"cached_tokens": "900"}
        self._odd_usage(usage, fault, "input_tokens", "output_tokens")
        return self._usage(reply)

    @staticmethod
    def _odd_usage(usage: dict, fault: str | None, prompt: str, output: str) -> None:
        odd = {
            "usage_huge": 10**30,
            "usage_negative": -5,
            "usage_float": 12.5,
            "usage_string": "12",
        }
        if fault in odd:
            usage[prompt] = usage[output] = odd[fault]

    def _usage(self, reply: dict) -> dict:
        if self.omit_usage:
            del reply["usage"]
        return reply

    def _raw(self, handler, fault: str) -> None:
        if fault == "hang":
            self._stop.wait(30)
            return
        if fault == "drop":
            handler.close_connection = True
            handler.wfile.flush()
            handler.connection.shutdown(2)
            return
        if fault in ("huge_body", "huge_chunked"):
            self._huge(handler, chunked=fault == "huge_chunked")
            return
        replies = {
            "redirect": Reply(307, raw=b"", headers={"location": "/v2/elsewhere"}),
            "gzip_garbage": Reply(
                200, raw=b"\x1f\x8b\x08\x00garbage, not gzip", headers={"content-encoding": "gzip"}
            ),
            "event_stream": Reply(
                200,
                raw=b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\ndata: [DONE]\n\n',
                content_type="text/event-stream",
            ),
            "sse_mislabelled": Reply(200, raw=b'data: {"choices":[]}\n\ndata: [DONE]\n\n'),
            # Event streams may begin with an id or retry field, or with a byte order mark.
            "sse_id": Reply(200, raw=b'id: 1\nevent: message\ndata: {"choices":[]}\n\n'),
            "sse_bom": Reply(200, raw=b'\xef\xbb\xbfdata: {"choices":[]}\n\n'),
            "redirect_secret": Reply(
                307,
                raw=b"",
                headers={"location": "http://user:pw@127.0.0.1:9/v2/elsewhere?api_key={key}#top"},
            ),
            "deep_json": Reply(200, raw=b"[" * 200_000 + b"]" * 200_000),
            "not_json": Reply(200, raw=b"OK", content_type="text/plain"),
            "json_not_object": Reply(200, raw=b'"a string"'),
            "empty_body": Reply(200, raw=b""),
            "malformed": Reply(200, raw=b'{"choices": ['),
            "gzip_bomb": Reply(200, raw=bomb(), headers={"content-encoding": "gzip, gzip"}),
            "html_502": Reply(
                502,
                raw=b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad "
                b"Gateway</h1></body></html>",
                content_type="text/html",
            ),
        }
        reply = replies[fault]
        reply.headers = {k: v.replace("{key}", _key(handler)) for k, v in reply.headers.items()}
        self._send_raw(handler, reply)

    def _huge(self, handler, chunked: bool) -> None:
        """A 9 MiB body, streamed: the client must stop reading at its limit."""
        size = 9 * 2**20
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        if chunked:
            handler.send_header("transfer-encoding", "chunked")
        else:
            handler.send_header("content-length", str(size))
        handler.end_headers()
        block = b" " * 65536
        for _ in range(size // len(block)):
            if chunked:
                handler.wfile.write(b"%x\r\n" % len(block) + block + b"\r\n")
            else:
                handler.wfile.write(block)
        if chunked:
            handler.wfile.write(b"0\r\n\r\n")

    @staticmethod
    def _send_raw(handler, reply: Reply) -> None:
        data = reply.raw if reply.raw is not None else json.dumps(reply.payload).encode()
        handler.send_response(reply.status)
        handler.send_header("content-type", reply.content_type)
        handler.send_header("content-length", str(len(data)))
        headers = {"x-request-id": "req_test_1", "request-id": "req_test_1", **reply.headers}
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

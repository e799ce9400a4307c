"""A real model endpoint on 127.0.0.1 for tests and benchmarks: OpenAI chat completions and
Anthropic messages, with faults switched on per request.

    with ModelServer() as server:
        server.queue("500", "429")        # the next two requests fail, the third succeeds
        server.fault = "truncated"        # ...or every request, until reset
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = (
    "500",
    "503",
    "429",
    "quota",
    "401",
    "400",
    "413",
    "hang",
    "drop",
    "malformed",
    "malformed-shape",
    "empty",
    "whitespace",
    "tool_call",
    "truncated",
    "overlong",
)


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
        self.summary = "The user asked about the deploy; decided weekly backups. Open: PR #204."
        self.usage = {"input": 1200, "output": 80, "cache_creation": 30, "cache_read": 70}
        self.retry_after = "0.05"
        self.omit_usage = False
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

    # -- one request ----------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length", 0))
        body = json.loads(handler.rfile.read(length) or b"{}")
        anthropic = handler.path.endswith("/v1/messages")
        with self._lock:
            fault = self._queue.popleft() if self._queue else self.fault
            self.requests.append(
                {
                    "path": handler.path,
                    "headers": dict(handler.headers),
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
            self._respond(handler, fault, anthropic, body)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _respond(self, handler, fault: str | None, anthropic: bool, body: dict) -> None:
        if fault == "hang":
            self._stop.wait(30)
            return
        if fault == "drop":
            handler.close_connection = True
            handler.wfile.flush()
            handler.connection.shutdown(2)
            return
        if fault in ("500", "503", "429", "quota", "401", "403", "400", "413"):
            status = 429 if fault == "quota" else int(fault)
            kind = {
                "429": "rate_limit_exceeded",
                "quota": "insufficient_quota",
                "401": "invalid_api_key",
                "403": "permission_denied",
                "400": "invalid_request_error",
                "413": "request_too_large",
            }.get(fault, "server_error")
            key = handler.headers.get("authorization", handler.headers.get("x-api-key", ""))
            # Real servers echo part of a bad key; the client must not pass it on.
            message = f"{kind} for key {key.removeprefix('Bearer ')}"
            headers = {"retry-after": self.retry_after} if fault == "429" else {}
            self._send(
                handler,
                status,
                {"error": {"type": kind, "code": kind, "message": message}},
                headers,
            )
            return
        if fault == "malformed":
            self._send_raw(handler, 200, b'{"choices": [', "application/json")
            return
        if fault == "malformed-shape":
            self._send(handler, 200, {"id": "x", "object": "nothing here"})
            return
        text = self.summary
        if fault == "empty":
            text = ""
        elif fault == "whitespace":
            text = "  \n\t "
        elif fault == "overlong":
            text = "x" * (len(json.dumps(body)) * 2)
        if anthropic:
            self._send(handler, 200, self._anthropic(text, fault))
        else:
            self._send(handler, 200, self._openai(text, fault))

    def _openai(self, text: str, fault: str | None) -> dict:
        message: dict = {"role": "assistant", "content": text}
        finish = "stop"
        if fault == "tool_call":
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"},
                    }
                ],
            }
            finish = "tool_calls"
        elif fault == "truncated":
            finish = "length"
        return self._usage(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": self.usage["input"],
                    "completion_tokens": self.usage["output"],
                },
            }
        )

    def _anthropic(self, text: str, fault: str | None) -> dict:
        content: list[dict] = [{"type": "text", "text": text}]
        stop = "end_turn"
        if fault == "tool_call":
            content = [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}]
            stop = "tool_use"
        elif fault == "truncated":
            stop = "max_tokens"
        return self._usage(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": content,
                "stop_reason": stop,
                "usage": {
                    "input_tokens": self.usage["input"],
                    "cache_creation_input_tokens": self.usage["cache_creation"],
                    "cache_read_input_tokens": self.usage["cache_read"],
                    "output_tokens": self.usage["output"],
                },
            }
        )

    def _usage(self, reply: dict) -> dict:
        if self.omit_usage:
            del reply["usage"]
        return reply

    @staticmethod
    def _send(handler, status: int, payload: dict, headers: dict | None = None) -> None:
        ModelServer._send_raw(
            handler,
            status,
            json.dumps(payload).encode(),
            "application/json",
            {"x-request-id": "req_test_1", **(headers or {})},
        )

    @staticmethod
    def _send_raw(
        handler, status: int, data: bytes, content_type: str, headers: dict | None = None
    ) -> None:
        handler.send_response(status)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

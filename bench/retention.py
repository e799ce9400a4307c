"""How long the fact-retention check takes on a 1 MB fold, beside the rest of compaction's
local work on the same fold.

    .venv/bin/python bench/retention.py     # both folds, medians of 7 runs

Two folds of about 1 MB built from the conversations of the retention corpus
(tests/data/retention), their digits varied copy by copy: an agent thread, where conversation
is a tenth of the bytes and tool results (log files read) the rest, and a worst case made of
conversation only, where every byte is read for facts. The baseline is what compaction does
locally on that fold besides the model call: read the thread from SQLite, plan the fold,
render the request and encode it as JSON, and the commit transaction (folded_by, the run, the
summary).
"""

from __future__ import annotations

import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from volumetool.compaction.plan import Message, plan_fold  # noqa: E402
from volumetool.compaction.retention import (  # noqa: E402
    _parsed,
    facts_of_fold,
    measure,
    retention_of,
)
from volumetool.compaction.store import commit_summary, conflict_reason, load_thread  # noqa: E402
from volumetool.compaction.summarize import DEFAULT_PROMPT, render_request  # noqa: E402
from volumetool.create import create_volume  # noqa: E402
from volumetool.model_client import Usage  # noqa: E402

SIZE = 1_000_000
RUNS = 7

CORPUS = ROOT / "tests" / "data" / "retention"


def corpus_messages() -> list[list[Message]]:
    """The conversations of the retention corpus, one list of messages a fold."""
    folds = []
    for path in sorted(CORPUS.glob("*.json")):
        data = json.loads(path.read_text())
        folds.append(
            [
                Message(0, m["role"], m["content"], m["tool_calls"], m["tool_call_id"])
                for m in data["messages"]
            ]
        )
    return folds


def varied(rng: random.Random, text: str) -> str:
    """The same text with other digits, so that copies hold other values."""
    return "".join(str(rng.randrange(10)) if c.isdigit() else c for c in text)


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


def numbered(messages: list[Message]) -> list[Message]:
    return [
        Message(n + 1, m.role, m.content, m.tool_calls, m.tool_call_id)
        for n, m in enumerate(messages)
    ]


def agent_fold(rng: random.Random, size: int = SIZE, conversation: float = 0.1) -> list[Message]:
    """The corpus conversations, their digits varied, with a large tool result after each, so
    that conversation is about `conversation` of the bytes, as in agent threads that grow to
    1 MB: mostly files read, logs and search results."""
    messages: list[Message] = []
    total = 0
    folds = corpus_messages()
    while total < size:
        fold = folds[rng.randrange(len(folds))]
        batch = [
            Message(0, m.role, varied(rng, m.content), m.tool_calls, m.tool_call_id) for m in fold
        ]
        talk = sum(len(m.content) for m in batch if m.role != "tool")
        call = f"call_read_{len(messages)}"
        arguments = json.dumps({"path": "logs/api.log"})
        calls = json.dumps(
            [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": arguments},
                }
            ]
        )
        batch.append(Message(0, "assistant", "", calls))
        batch.append(Message(0, "tool", dump(rng, int(talk / conversation) - talk), None, call))
        messages.extend(batch)
        total += sum(len(m.content) + len(m.tool_calls or "") for m in batch)
    return numbered(messages)


def chat_fold(rng: random.Random, size: int = SIZE) -> list[Message]:
    """The worst case: the corpus conversations alone, user and assistant text, every byte of
    which is read for facts."""
    messages: list[Message] = []
    total = 0
    texts = [m for fold in corpus_messages() for m in fold if m.role in ("user", "assistant")]
    while total < size:
        for m in texts:
            content = varied(rng, m.content)
            messages.append(Message(0, m.role, content))
            total += len(content)
    return numbered(messages)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


class LocalWork:
    """Compaction's local work on one thread, model call excluded: read the thread, plan the
    fold, render the request and encode it as JSON, then the commit transaction. After each
    run the fold is made live again (untimed), so every run compacts the same thread."""

    def __init__(self, fold: list[Message], directory: Path) -> None:
        path = directory / "agent.db"
        create_volume(path, "bench")
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute(
            "INSERT INTO sessions (id, conversation_key, channel, status, created_at,"
            " updated_at) VALUES (1, 'bench', 'cli', 'active', '2026-11-30T00:00:00.000Z',"
            " '2026-11-30T00:00:00.000Z')"
        )
        kept = [Message(0, "user", "And now?"), Message(0, "assistant", "Done.")] * 2
        self.conn.executemany(
            "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id,"
            " created_at) VALUES (1, ?, ?, ?, ?, '2026-11-30T00:00:00.000Z')",
            [(m.role, m.content, m.tool_calls, m.tool_call_id) for m in [*fold, *kept]],
        )

    def once(self) -> float:
        start = time.perf_counter()
        thread = load_thread(self.conn, 1)
        plan = plan_fold(thread.live)
        body = {
            "model": "bench",
            "messages": [
                {"role": "system", "content": DEFAULT_PROMPT},
                {"role": "user", "content": render_request(thread.summary, plan.fold)},
            ],
        }
        json.dumps(body).encode()
        self.conn.execute("BEGIN IMMEDIATE")
        assert conflict_reason(self.conn, thread, plan.fold) is None
        commit_summary(self.conn, thread, plan.fold, "summary", "bench", Usage(1, 1), "t0", "t1")
        self.conn.execute("COMMIT")
        seconds = time.perf_counter() - start
        self.conn.execute("UPDATE messages SET folded_by = NULL")
        self.conn.execute("UPDATE sessions SET summary = NULL")
        self.conn.execute("DELETE FROM runs")
        return seconds


def timed(action: Callable[[], object]) -> float:
    """Seconds the action takes from a cold start: the parse cache is emptied first."""
    _parsed.cache_clear()
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def report(name: str, fold: list[Message]) -> None:
    """Runs the retention check and compaction's local work in turns, so that both see the
    same load on a shared machine, and prints their medians."""
    size = sum(len(m.content) + len(m.tool_calls or "") for m in fold)
    facts = facts_of_fold(None, fold)
    summary = " ".join(f.text for f in facts[: len(facts) // 2])  # keeps half the facts
    samples: dict[str, list[float]] = {"facts": [], "summary": [], "measure": [], "local": []}
    with tempfile.TemporaryDirectory() as directory:
        local = LocalWork(fold, Path(directory))
        for _ in range(RUNS):
            samples["local"].append(local.once())
            samples["measure"].append(timed(lambda: measure(None, fold, summary)))
            samples["facts"].append(timed(lambda: facts_of_fold(None, fold)))
            samples["summary"].append(timed(lambda: retention_of(facts, summary)))
        local.conn.close()
    check, work = median_ms(samples["measure"]), median_ms(samples["local"])
    print(
        f"{name}: {len(fold):,} messages, {size / 1e6:.2f} MB, "
        f"{sum(len(m.content) for m in fold if m.role != 'tool') / 1e3:,.0f} kB of conversation, "
        f"{len(facts):,} facts\n"
        f"  measure {check:.1f} ms (facts_of_fold {median_ms(samples['facts']):.1f} ms, "
        f"retention_of {median_ms(samples['summary']):.1f} ms); compaction's local work "
        f"{work:.1f} ms; ratio {check / work:.0%}"
    )


def main() -> None:
    rng = random.Random(14)
    report("agent thread", agent_fold(rng))
    report("conversation only (worst case)", chat_fold(rng))


if __name__ == "__main__":
    main()

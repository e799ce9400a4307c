"""The agent's wait: how long an agent writing a turn every 10 ms waits for each write while a
volumetool command runs on its file (SPEC sections 11 and 13, issue 31). The goal is 50 ms at
most for every command but `migrate` (the agent must be stopped for it) and an explicit
`--vacuum` (a maintenance-window step), measured here anyway.

    python -m bench.run --only waits           # writes its section of BENCHMARKS.md
    python -m bench.run --only waits --quick   # small fixtures: printed only
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.run import (
    AGENT_TURNS,
    CACHE,
    FOLD_SUMMARY,
    NO_GATE,
    PY,
    UNDO_MESSAGES,
    VT,
    AgentWait,
    Scale,
    _agent_wait,
    _copy,
    _tenth,
    cached,
    call,
    compaction_config,
    compaction_fixture,
    erasable_fixture,
    fold_fixture,
    indexed_fixture,
    memories_jsonl,
    undo_fixture,
)
from tests.support.model_server import ModelServer

GOAL = 0.05  # seconds
HEADING = "## The agent's wait while a command runs"
BEHIND = 25_000  # agent turns (two messages each) the index lacks before a refresh


@dataclass
class WaitRow:
    command: str
    wait: AgentWait
    exception: str = ""  # why the goal does not hold for this command
    # Why it may hold the agent longer (the work the SPEC makes one transaction, which grows
    # with what the command is given): said in the table when the goal is missed.
    why: str = ""

    @property
    def met(self) -> bool | None:
        return None if self.exception else self.wait.longest <= GOAL

    @property
    def verdict(self) -> str:
        return "exception" if self.met is None else ("goal met" if self.met else "goal MISSED")


def report_wait(row: WaitRow) -> WaitRow:
    print(
        f"agent's wait: {row.command:<52} longest {row.wait.longest * 1e3:7.1f} ms, p99 "
        f"{row.wait.p99 * 1e3:7.1f} ms over {row.wait.turns:,} turns in "
        f"{row.wait.command_seconds:.2f}s, load {row.wait.load:.1f}  [{row.verdict}]",
        flush=True,
    )
    return row


def _behind(indexed: Path, target: Path) -> None:
    """The indexed volume after the agent wrote BEHIND turns: a search refreshes the index."""
    shutil.copyfile(indexed, target)
    call(PY, "-c", AGENT_TURNS, target, BEHIND, 0)


def _removing(*paths: Path, then: Callable[[], None]) -> Callable[[], None]:
    def setup() -> None:
        for path in paths:
            path.unlink(missing_ok=True)
        then()

    return setup


def wait_rows(scale: Scale, large: Path) -> list[WaitRow]:
    from bench.retention import KEY, compact_command

    indexed = indexed_fixture(scale, large)
    before, tenth = _tenth(large)
    erasable = erasable_fixture(scale, indexed, tenth)
    behind = cached(f"demo-{scale.sessions}-indexed-behind.db", lambda p: _behind(indexed, p))
    fold, compacted = fold_fixture(), undo_fixture()
    threads = compaction_fixture(scale)
    work = CACHE / "wait-work.db"
    copy = CACHE / "wait-backup.db"
    rows = []

    def row(
        name: str,
        command: Sequence[object],
        source: Path,
        exception: str = "",
        why: str = "",
        **kw,
    ):
        setup = _removing(copy, then=_copy(source, work))
        wait = _agent_wait(command, setup, work, **kw)
        rows.append(report_wait(WaitRow(name, wait, exception, why)))

    # The floor: the agent alone, what this machine's scheduling and disk cost it.
    row(
        "no command (the agent alone, for 3 s)",
        [PY, "-c", "import time; time.sleep(3)"],
        large,
        exception="the floor: nothing else runs",
    )
    with ModelServer(latency=scale.latency) as server:
        server.summary = FOLD_SUMMARY
        row(
            f"compact 1 thread (a fold of {UNDO_MESSAGES:,} messages)",
            [*compact_command(work, server.url), *NO_GATE],
            fold,
            why=f"a compaction's success is one transaction (SPEC 6): here it marks"
            f" {UNDO_MESSAGES:,} messages folded; the more a fold holds, the longer",
        )
        config = compaction_config(server)
        due = call(VT, "compact", threads, "--config", config, "--dry-run", "--json").count(
            '"would_compact"'
        )
        row(
            f"compact {due} due threads, concurrency 16",
            [VT, "compact", work, "--config", config, "--concurrency", 16, *NO_GATE],
            threads,
            why="each thread's success is one transaction (SPEC 6), and 16 end"
            " at about the same moment: the agent may wait for several in a row",
        )
    row(
        f"prune a tenth of the messages ({len(tenth):,} threads)",
        [VT, "prune", work, "--archived-before", before],
        indexed,
        why="short transactions, 5 ms of work each; but FTS5 merges the index's segments"
        " within some of those that take its text out, whatever their size (up to 85 ms"
        " of work measured at load 6)",
    )
    row(
        f"prune a tenth of the messages ({len(tenth):,} threads) --vacuum",
        [VT, "prune", work, "--archived-before", before, "--vacuum"],
        indexed,
        exception="--vacuum rewrites the file: a maintenance-window step",
    )
    row(
        f"erase a key holding a tenth of the messages ({len(tenth):,} threads)",
        [VT, "erase", work, "--key", "bench:erase", "--yes"],
        erasable,
        why="its delete is one transaction (SPEC 13), here of a tenth of the messages; then"
        " VACUUM rewrites the file under the write lock so that no byte of the erased text"
        " stays: the longest wait. A page-level scrub instead (issue 31) is not done yet",
    )
    row(
        f"memories import ({scale.memories:,})",
        [VT, "memories", "import", work, memories_jsonl(scale)],
        large,
        why=f"the whole file is written in one transaction (SPEC 7): here"
        f" {scale.memories:,} memories, some 5 µs each (by proportion, over 50 ms from"
        " about 10,000)",
    )
    row("first search: builds the index", [VT, "search", work, "deploy", "-n", "1"], large)
    row(
        f"search refreshes the index ({BEHIND * 2:,} messages behind)",
        [VT, "search", work, "deploy", "-n", "1"],
        behind,
    )
    row(
        f"thread undo of a compaction of {UNDO_MESSAGES:,} messages",
        [VT, "thread", "undo", work, KEY, "--yes"],
        compacted,
        why=f"one BEGIN IMMEDIATE transaction (SPEC 10): here it makes"
        f" {UNDO_MESSAGES:,} folded messages live again",
    )
    row(
        f"backup ({scale.sessions:,} threads)",
        [VT, "backup", work, copy],
        large,
        why="it takes no write lock (one read snapshot beside the agent, SQLite's online"
        " backup): the agent waited for the machine, busy writing the copy",
    )
    row(f"check ({scale.sessions:,} threads)", [VT, "check", work], large)
    for path in (*CACHE.glob("wait-work.db*"), copy):
        path.unlink(missing_ok=True)
    return rows


def section(rows: list[WaitRow], scale: Scale) -> str:
    """The section of BENCHMARKS.md that holds the agent's waits."""
    lines = [
        HEADING,
        "",
        "An agent writing a turn every 10 ms (two messages, a run and an audit event in one "
        "transaction, as `bench.run.AGENT_TURNS` does) while each command runs on its file: "
        "the longest time one of its writes took, waiting for the write lock included, and the "
        "99th percentile, over the turns that overlapped the command. Goal: 50 ms at most, "
        "except `migrate` (the agent must be stopped) and an explicit `--vacuum` (a "
        f"maintenance-window step). Fixtures: the demo volume of {scale.sessions:,} threads "
        "(indexed where the command reads the index), the bench's compaction volume and its "
        f"{UNDO_MESSAGES:,}-message thread, {scale.memories:,} memories. Load: the machine's "
        f"1-minute load average as the command ended ({os.cpu_count()} cores, shared). A command "
        "over the goal whose work the SPEC makes one transaction says so: it holds the agent "
        "for as long as that transaction takes, which grows with what it is given.",
        "",
        "| command | agent's longest wait | p99 | agent turns | command time | load | "
        "<= 50 ms | when over: why |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met, why = "yes", ""
        if r.met is None:
            met, why = "exception", r.exception
        elif not r.met:
            met, why = "**no**", r.why or "not yet in short transactions"
        lines.append(
            f"| {r.command} | {r.wait.longest * 1e3:.1f} ms | {r.wait.p99 * 1e3:.1f} ms | "
            f"{r.wait.turns:,} | {r.wait.command_seconds:.2f} s | {r.wait.load:.1f} | "
            f"{met} | {why} |"
        )
    return "\n".join(lines) + "\n"


def replace_section(text: str, new: str) -> str:
    """`text` (BENCHMARKS.md) with its section of waits replaced by `new`, or `new` inserted
    before its notes when it has none."""
    found = re.search(rf"^{re.escape(HEADING)}\n.*?(?=^## |\Z)", text, re.M | re.S)
    if found:
        return text[: found.start()] + new + "\n" + text[found.end() :]
    notes = text.find("\n## Notes")
    at = notes + 1 if notes >= 0 else len(text)
    return text[:at] + new + "\n" + text[at:]

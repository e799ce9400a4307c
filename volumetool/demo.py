"""`volumetool demo`: a realistic sample volume, the same rows for the same seed.

It doubles as the fixture builder of tests and benchmarks, so it scales: each conversation is a
generator of timestamped batches of records (a turn: its messages, its run, its audit events
and the compaction that may follow it; a thread's end at /new or at the end of the span). The
records are small dataclasses shaped like the rows they become; the batches of all
conversations are merged in time order so that ids follow append order as in a live file, and
the writer gives each record its id and bulk-inserts the rows in one transaction of a staged
file. Only the migration records (when each migration ran) differ between two builds.

What it holds: threads on several channels with tool calls and their permission events, an
optional system prefix, archived threads left by /new, threads the agent already compacted
(folded messages, a summary, a compaction run and what it wrote), threads past the compaction
threshold that are due, a failed agent run and a failed compaction, scheduled runs without a
thread, memories with their remember/forget events.
"""

from __future__ import annotations

import heapq
import json
import os
import random
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from volumetool.atomic import (
    SIDE_FILES,
    create_volume,
    made_directories,
    refuse_existing,
    refuse_side_files,
    remove_stage,
)
from volumetool.errors import UnusableInput
from volumetool.output import OutputTarget

THRESHOLD = 50_000
MAIN_MODEL = "gpt-4.1"
SMALL_MODEL = "gpt-4.1-mini"
SPAN_END_MS = int(datetime(2026, 11, 30, tzinfo=UTC).timestamp() * 1000)
SPAN_MS = 60 * 24 * 3600 * 1000
SPAN_START_MS = SPAN_END_MS - SPAN_MS
SCHEDULED_RUNS_PER_THREAD = 10
FLUSH_ROWS = 20_000

CHANNELS = ("discord", "slack", "telegram", "webhook", "repl")
PEOPLE = (
    "Ana",
    "Bram",
    "Chen",
    "Dalia",
    "Emeka",
    "Freya",
    "Goran",
    "Hana",
    "Ines",
    "Jonas",
    "Kemal",
    "Lea",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tomás",
    "Uma",
    "Vikram",
    "Wen",
    "Yusuf",
    "Zofia",
    "Zoë",
)
ASKS = (
    "Can you check why the nightly export to {bucket} failed again?",
    "Please draft the release notes for {version}, keep them short.",
    "What changed in {service} since yesterday's deploy?",
    "Schedule the {service} database backup weekly instead of daily.",
    "Summarize the open incidents tagged {tag} for the standup.",
    "Is {service} still pinned to {version}? I thought we bumped it.",
    "Open an issue for the flaky test in {service}, assign it to me.",
    "Make it weekly instead, Mondays at 09:00 {tz}.",
    "Remind me what we decided about the {service} rate limits.",
    "Read {path} and tell me which settings differ from staging.",
    "Translate the customer reply into German — keep it friendly: «{quote}»",
    "How many 5xx did {service} return in the last hour?",
)
REPLIES = (
    "Done. The export to {bucket} failed because the credentials rotated at 02:00; I re-ran "
    "it and it finished in 4m12s.",
    "Here's a draft for {version}:\n\n- Faster startup for {service}\n- Fixed the retry loop "
    "in the uploader\n- Docs: new section on memory scopes",
    "{service} has two changes since the last deploy: the connection pool went from 20 to 50, "
    "and the health check path moved to /healthz.",
    "Updated: the {service} backup now runs weekly on Mondays at 09:00 {tz}.",
    "There are 3 open incidents tagged {tag}; the oldest is 6 days old and waiting on a vendor "
    "reply.",
    "Yes — {service} is still pinned to {version} in deploy/values.yaml (line 42).",
    "Opened issue #{number} for the flaky test in {service} and assigned it to you.",
    "We agreed to cap {service} at 300 requests per minute per tenant and to revisit after the "
    "{version} rollout.",
    "The settings differ in two places: pool_size (50 vs 20) and log_level (debug vs info).",
    "Hier ist die Antwort: „Vielen Dank für Ihre Geduld — wir melden uns bis Freitag.“ 🙂",
    "{service} returned 37 responses with status 5xx in the last hour, 0.4% of traffic.",
)
TOOLS = (
    (
        "read_file",
        lambda f: {"path": f["path"]},
        "{path}:\npool_size = 50\nlog_level = debug\nregion = {region}\nretries = 3\n",
    ),
    (
        "run_shell",
        lambda f: {"command": f"kubectl get pods -n {f['service']}"},
        "NAME READY STATUS RESTARTS AGE\n{service}-7d9f 1/1 Running 0 2d\n{service}-8c1a 1/1 "
        "Running 1 2d",
    ),
    (
        "web_search",
        lambda f: {"query": f"{f['service']} {f['version']} changelog"},
        "1. {service} {version} release notes — fixes connection leak\n2. Upgrade guide",
    ),
    (
        "create_issue",
        lambda f: {"title": f"Flaky test in {f['service']}", "assignee": "me"},
        '{{"number": {number}, "url": "https://git.example.com/ops/{service}/issues/{number}"}}',
    ),
    (
        "http_get",
        lambda f: {"url": f"https://status.example.com/{f['service']}"},
        '{{"service": "{service}", "status": "degraded", "error_rate": 0.004}}',
    ),
)
SERVICES = ("billing", "search", "ingest", "auth", "notifier", "uploader", "gateway", "reports")
MEMORY_FACTS = {
    "timezone": ("Europe/Berlin", "America/Los_Angeles", "Asia/Kolkata", "UTC"),
    "deploy_region": ("always deploy to us-east", "eu-central-1 only (data residency)"),
    "preferred_language": ("answers in English, code comments in German", "日本語で返信する"),
    "oncall_channel": ("the on-call rotation is in #incidents", "page via #sre-pager"),
    "seat_preference": ("prefers window seats", "aisle seat, front of the plane"),
    "standup_time": ("standup at 09:30 CET", "no meetings before 10:00 on Mondays"),
    "open_task": (
        "waiting on PR #204 to merge before continuing the migration",
        "follow up with the vendor on ticket 88121 on Friday",
    ),
    "report_format": ("short bullet lists", "a table first, then one paragraph — no emoji"),
    "escalation_contact": ("escalate to Priya after 30 minutes", "Sven owns billing incidents"),
    "review_style": ("prefers “smart quotes” and em dashes in docs", "喜欢简短的回答"),
}
ATTRIBUTES = tuple(MEMORY_FACTS)
SYSTEM_PREFIXES = (
    "Channel context: this thread is the #ops-{service} channel; keep replies brief.",
    "You are helping the {service} team. Never run destructive commands without asking.",
)


_DAYS: dict[int, str] = {}


def iso_ms(ms: int) -> str:
    """The volume's timestamp format for epoch milliseconds (fast: demo makes millions)."""
    day, rest = divmod(ms, 86_400_000)
    date = _DAYS.get(day)
    if date is None:
        date = _DAYS[day] = datetime.fromtimestamp(day * 86_400, UTC).strftime("%Y-%m-%d")
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{date}T{hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}Z"


@dataclass
class DemoCounts:
    """The rows written, by table (`sessions`: one a thread)."""

    sessions: int = 0
    messages: int = 0
    runs: int = 0
    audit: int = 0
    memories: int = 0


# The records a conversation hands the writer. Each table's ids follow append order as in a
# live file, so ids are given by the writer, in merge order; a record that names another (a
# message its thread, an audit event its run) reads that id once it is given.


@dataclass(slots=True, eq=False)
class Thread:
    """A `sessions` row; numbered when its thread starts, written when the demo is done with it."""

    key: str
    channel: str
    created_at: str
    updated_at: str
    status: str = "active"
    summary: str | None = None
    archived_at: str | None = None
    id: int | None = None


@dataclass(slots=True, eq=False)
class ThreadDone:
    """The thread's status, summary and times are final: write its row."""

    thread: Thread


@dataclass(slots=True, eq=False)
class Message:
    """A `messages` row, live until a fold names it."""

    thread: Thread
    role: str
    content: str
    created_at: str
    tool_calls: str | None = None
    tool_call_id: str | None = None


@dataclass(slots=True, eq=False)
class Run:
    """A `runs` row: a turn's model calls, a compaction, or a scheduled run without a thread."""

    thread: Thread | None
    trigger: str
    model: str
    started_at: str
    status: str = "ok"
    input_tokens: int | None = None
    output_tokens: int | None = None
    last_input_tokens: int | None = None
    error: str | None = None
    finished_at: str | None = None
    id: int | None = None


@dataclass(slots=True, eq=False)
class AuditEvent:
    """An `audit` row; a detail that names an id is written once that id is given."""

    ts: str
    event: str
    detail: str | Callable[[], str]
    thread: Thread | None
    run: Run | None
    actor: str = "agent"


@dataclass(slots=True, eq=False)
class Fold:
    """A successful compaction run folds these messages into its thread's summary. They are
    named by their places in the thread: the conversation keeps no message once written."""

    run: Run
    thread: Thread
    places: range


@dataclass(slots=True, eq=False)
class Compaction:
    """A `compactions` row: the summary a compaction run wrote and the tokens it saved."""

    run: Run
    thread: Thread
    summary: str
    saved_tokens: int


@dataclass(slots=True, eq=False)
class Memory:
    """A `memories` row: a fact the agent remembered and still holds."""

    key: str
    value: str
    created_at: str
    updated_at: str


Record = Thread | ThreadDone | Message | Run | AuditEvent | Fold | Compaction | Memory
Batch = tuple[int, int, list[Record]]  # (time, tiebreak, records): merged in time order


def _weight(text: str) -> int:
    """Tokens a text adds to what the model reads: a rough 4 characters a token, plus framing."""
    return len(text) // 4 + 8


@dataclass(slots=True, eq=False)
class LiveTurn:
    """A turn the model still reads: where it starts in its thread, and its weight."""

    first: int  # the place of its user message among the thread's messages (0 is the first)
    weight: int = 0


class Context:
    """What the model reads of a thread (the pinned prefix, the summary once there is one, the
    live turns) and what that costs in input tokens."""

    def __init__(self, base_tokens: int, growth: int) -> None:
        self.base_tokens = base_tokens
        self.growth = growth
        self.said = 0  # the thread's messages so far: the place of the next one
        self.prefix_weight = 0  # what comes before the first turn: never folded
        self.summary_weight = 0  # until a compaction writes a summary, there is none
        self.turns: list[LiveTurn] = []
        self.weight = 0  # prefix, summary and live turns

    def start_turn(self) -> None:
        self.turns.append(LiveTurn(self.said))

    def add(self, message: Message) -> None:
        weight = _weight(message.tool_calls or message.content)
        if self.turns:
            self.turns[-1].weight += weight
        else:
            self.prefix_weight += weight
        self.said += 1
        self.weight += weight

    def input_tokens(self) -> int:
        """A model call's input: the agent's instructions and tools, then the context."""
        return self.base_tokens + self.growth * self.weight

    def fold(self, summary_weight: int) -> tuple[range, int]:
        """Replace all live turns but the last two by a summary; the places of the messages
        folded, and their weight."""
        folded, self.turns = self.turns[:-2], self.turns[-2:]
        self.summary_weight = summary_weight
        live = sum(turn.weight for turn in self.turns)
        self.weight = self.prefix_weight + summary_weight + live
        return range(folded[0].first, self.turns[0].first), sum(turn.weight for turn in folded)


@dataclass(slots=True, eq=False)
class _Turn:
    """A turn being told: its records so far, its run, its clock, and its model calls' tokens."""

    thread: Thread
    context: Context
    number: int
    fields: dict[str, object]
    run: Run
    t: int
    batch: list[Record]
    calls_input: list[int]
    calls_output: int = 0
    _stamped: tuple[int, str] = (-1, "")

    def stamp(self) -> str:
        """The clock as the volume writes it; records of one moment share the text."""
        if self._stamped[0] != self.t:
            self._stamped = (self.t, iso_ms(self.t))
        return self._stamped[1]

    def say(
        self, role: str, content: str, tool_calls: str | None = None, call_id: str | None = None
    ) -> None:
        message = Message(self.thread, role, content, self.stamp(), tool_calls, call_id)
        self.batch.append(message)
        self.context.add(message)

    def audit(self, event: str, detail: str) -> None:
        self.batch.append(AuditEvent(self.stamp(), event, detail, self.thread, self.run))

    def call_model(self) -> None:
        """The model reads the context again, tool results included."""
        self.calls_input.append(self.context.input_tokens())


class _Conversation:
    """One conversation key: an optional archived thread (ended by /new), then the active one."""

    def __init__(self, seed: int, index: int, threads: int) -> None:
        self.rng = random.Random(f"volumetool-demo:{seed}:{index}")
        self.index = index
        self.threads = threads
        rng = self.rng
        self.channel = CHANNELS[index % len(CHANNELS)]
        self.key = self._key()
        self.person = PEOPLE[index % len(PEOPLE)]
        self.handle = f"{self.person.lower()}-{index}"
        self.base_tokens = rng.randint(2_500, 9_000)
        growth = (2, 4, 8, 16, 24, 32)
        self.growth = growth[rng.randrange(len(growth))]
        # Some agents compact on their own; the others leave it to `volumetool compact` (cron),
        # so their long threads stay due.
        self.agent_compacts = rng.random() < 0.6
        self.memories: dict[str, Memory] = {}
        self.start = SPAN_START_MS + rng.randrange(int(SPAN_MS * 0.8))
        # The first conversations pin what every demo must show, whatever its size.
        self.force_failed_compaction = index == 0
        self.force_failed_run = index == 1
        self.force_due = index == 2
        if index in (0, 2):
            self.growth, self.base_tokens = 24, rng.randint(30_000, 40_000)

    def _key(self) -> str:
        rng, i = self.rng, self.index
        if self.channel == "discord":
            return f"discord:{rng.randrange(10**17, 10**18)}/{rng.randrange(10**17, 10**18)}"
        if self.channel == "slack":
            return f"slack:T{rng.randrange(16**8):08X}/C{rng.randrange(16**9):09X}/{i}"
        if self.channel == "telegram":
            return f"telegram:{rng.randrange(10**9, 10**10)}"
        if self.channel == "webhook":
            return f"webhook:ticket-{rng.randrange(10**6)}-{i}"
        return f"repl:{rng.getrandbits(64):016x}"

    def fields(self) -> dict[str, object]:
        rng = self.rng
        service = SERVICES[rng.randrange(len(SERVICES))]
        return {
            "bucket": f"s3://exports-{service}",
            "version": f"v{rng.randrange(1, 4)}.{rng.randrange(20)}.{rng.randrange(10)}",
            "service": service,
            "tag": rng.choice(("sev2", "customer", "billing", "infra")),
            "tz": rng.choice(("CET", "UTC", "PST", "IST")),
            "path": f"deploy/{service}/values.yaml",
            "quote": "Thanks — the fix works on our side.",
            "number": rng.randrange(100, 9999),
            "region": rng.choice(("us-east-1", "eu-central-1", "ap-south-1")),
        }

    def batches(self) -> Iterator[Batch]:
        """The conversation's batches (a turn, with its compaction if any; a thread's end)."""
        # Each thread gets its own window of the conversation's time; /new ends all but the last.
        end = SPAN_END_MS - 600_000
        bounds = [self.start]
        for _ in range(self.threads - 1):
            bounds.append(
                self.rng.randrange(
                    bounds[-1] + (end - bounds[-1]) // 3, bounds[-1] + 2 * (end - bounds[-1]) // 3
                )
            )
        bounds.append(end)
        for number in range(self.threads):
            yield from self._thread(bounds[number], bounds[number + 1], number < self.threads - 1)

    def _thread(self, now: int, until: int, archived: bool) -> Iterator[Batch]:
        """A thread from its first turn to /new (archived) or to the end of the span (active)."""
        rng = self.rng
        turns = rng.randint(3, 20)
        if self.force_failed_compaction or self.force_due:
            turns = max(turns, 14)
        # Turns start at sorted random moments of the window; a turn lasts well under a minute.
        starts = sorted(
            rng.randrange(now + 1_000, max(until - 300_000, now + 2_000)) for _ in range(turns)
        )
        thread = Thread(self.key, self.channel, iso_ms(now), iso_ms(now))
        context = Context(self.base_tokens, self.growth)
        batch: list[Record] = [thread]
        if rng.random() < 0.3:
            prefix = SYSTEM_PREFIXES[rng.randrange(2)].format(**self.fields())
            message = Message(thread, "system", prefix, iso_ms(now))
            batch.append(message)
            context.add(message)
        for number, start in enumerate(starts):
            turn = self._begin_turn(thread, context, number, max(now + 1_000, start), batch)
            now = self._turn(turn, archived)
            yield (turn.t, self.index, batch)
            batch = []
        now, batch = self._end(thread, now, archived)
        yield (now, self.index, batch)

    def _begin_turn(
        self, thread: Thread, context: Context, number: int, t: int, batch: list[Record]
    ) -> _Turn:
        fields = self.fields()
        trigger = "webhook" if self.channel == "webhook" else "message"
        run = Run(thread, trigger, MAIN_MODEL, iso_ms(t + 150))
        return _Turn(thread, context, number, fields, run, t, batch, [])

    def _turn(self, turn: _Turn, archived: bool) -> int:
        """The user asks, the run answers (tool and memory calls, then a reply), and the agent
        may compact; returns when the next turn may start."""
        rng = self.rng
        ask = ASKS[rng.randrange(len(ASKS))].format(**turn.fields)
        turn.context.start_turn()
        turn.say("user", ask)
        turn.batch.append(turn.run)
        turn.call_model()
        if self.force_failed_run and turn.number == 1:
            self.force_failed_run = False
            return self._fail_run(turn)
        turn.t += 2_000
        if rng.random() < 0.6:
            self._tool_calls(turn)
        if rng.random() < 0.35 or (turn.number < 5 and len(self.memories) < turn.number + 1):
            self._memory_call(turn)
        self._reply(turn)
        now = turn.t + 500
        if self._due(turn, archived):
            now = self._compact(turn, now)
        return now

    @staticmethod
    def _fail_run(turn: _Turn) -> int:
        """The provider stays overloaded: the run fails after its retries, with no reply."""
        run, context = turn.run, turn.calls_input[0]
        run.status = "error"
        run.error = "provider error: 529 overloaded_error after 3 attempts"
        run.finished_at = iso_ms(turn.t + 31_000)
        run.input_tokens = run.last_input_tokens = context
        return turn.t + 31_000

    def _tool_calls(self, turn: _Turn) -> None:
        """The model calls one or two tools; each is allowed (rarely denied), then answers."""
        rng = self.rng
        calls: list[tuple[dict, str]] = []  # (tool call, its output's template)
        for n in range(rng.randint(1, 2)):
            name, args, output = TOOLS[rng.randrange(len(TOOLS))]
            arguments = json.dumps(args(turn.fields))
            call_id = f"call_{self.index}_{turn.number}_{n}"
            function = {"name": name, "arguments": arguments}
            calls.append(({"id": call_id, "type": "function", "function": function}, output))
        text = json.dumps([call for call, _ in calls])
        turn.say("assistant", "", tool_calls=text)
        turn.calls_output += len(text) // 4
        for call, output in calls:
            turn.t += rng.randrange(300, 4_000)
            name = call["function"]["name"]
            denied = rng.random() < 0.05
            turn.audit(
                "permission", json.dumps({"tool": name, "decision": "deny" if denied else "allow"})
            )
            if denied:
                answer = f"Permission denied: the operator policy does not allow {name} here."
            else:
                answer = output.format(**turn.fields)
            turn.say("tool", answer, call_id=call["id"])
        turn.call_model()

    def _memory_call(self, turn: _Turn) -> None:
        """The model remembers a fact about the person, or forgets one the agent holds."""
        rng = self.rng
        turn.t += rng.randrange(500, 3_000)
        forget = bool(self.memories) and rng.random() < 0.1
        if forget:
            key = sorted(self.memories)[rng.randrange(len(self.memories))]
            args = {"key": key}
        else:
            attribute = ATTRIBUTES[rng.randrange(len(ATTRIBUTES))]
            key = f"{self.handle}.{attribute}"
            facts = MEMORY_FACTS[attribute]
            args = {"key": key, "value": facts[rng.randrange(len(facts))]}
        action = "forget" if forget else "remember"
        call_id = f"call_{self.index}_{turn.number}_m"
        function = {"name": action, "arguments": json.dumps(args)}
        call = {"id": call_id, "type": "function", "function": function}
        turn.say("assistant", "", tool_calls=json.dumps([call], ensure_ascii=False))
        turn.t += rng.randrange(50, 400)
        stamp = turn.stamp()
        if forget:
            del self.memories[key]
        else:
            held = self.memories.get(key)
            created = held.created_at if held else stamp
            self.memories[key] = Memory(key, args["value"], created, stamp)
        turn.audit("memory", json.dumps({"action": action, "key": key}, ensure_ascii=False))
        turn.say("tool", f"{'Forgot' if forget else 'Remembered'} {key}.", call_id=call_id)
        turn.call_model()

    def _reply(self, turn: _Turn) -> None:
        """The model's answer ends the run, which reports its usage (now and then it does not)."""
        rng = self.rng
        turn.t += rng.randrange(2_000, 20_000)
        reply = REPLIES[rng.randrange(len(REPLIES))].format(**turn.fields)
        turn.say("assistant", reply)
        turn.calls_output += len(reply) // 4
        run = turn.run
        run.finished_at = iso_ms(turn.t + 120)
        if rng.random() >= 0.02:  # else the provider reported no usage: figures stay NULL
            run.input_tokens = sum(turn.calls_input)
            run.output_tokens = turn.calls_output
            run.last_input_tokens = turn.calls_input[-1]
        if self.channel != "webhook" and rng.random() < 0.05:
            run.trigger = "manual" if self.channel == "repl" else "schedule"

    def _due(self, turn: _Turn, archived: bool) -> bool:
        """Past the threshold with three live turns (the pinned due thread is left due)."""
        tokens = turn.run.last_input_tokens
        if tokens is None or tokens < THRESHOLD or len(turn.context.turns) < 3:
            return False
        return archived or not self.force_due

    def _compact(self, turn: _Turn, now: int) -> int:
        """The pinned failure, the agent's own compaction, or nothing (cron's `volumetool
        compact` will); returns when the next turn may start."""
        if self.force_failed_compaction:
            self.force_failed_compaction = False
            self._failed_compaction(turn, now)
        elif self.agent_compacts:
            self._compaction(turn, now)
            now += 4_000
        return now

    def _compaction(self, turn: _Turn, now: int) -> None:
        """The agent's own auto-compaction: fold all live turns but the last two."""
        rng = self.rng
        thread, context = turn.thread, turn.context
        decision = rng.choice(MEMORY_FACTS["deploy_region"])
        summary = (
            f"Summary of the earlier conversation with {self.person}: "
            f"{len(context.turns) - 2} turns about {rng.choice(SERVICES)} and "
            f"{rng.choice(SERVICES)} operations. Decided: {decision}. "
            f"Open task: follow up on issue #{rng.randrange(100, 9999)}."
        )
        if thread.summary:
            summary += " It continues the earlier summary: " + thread.summary.split(". ")[0] + "."
        output_tokens = len(summary) // 4
        folded, weight = context.fold(_weight(summary))
        folded_tokens = self.base_tokens // 4 + weight
        run = Run(
            thread,
            "compaction",
            SMALL_MODEL,
            iso_ms(now + 200),
            input_tokens=folded_tokens,
            output_tokens=output_tokens,
            last_input_tokens=folded_tokens,
            finished_at=iso_ms(now + 3_800),
        )
        saved = folded_tokens - output_tokens
        turn.batch += (run, Fold(run, thread, folded), Compaction(run, thread, summary, saved))
        thread.summary = summary

    @staticmethod
    def _failed_compaction(turn: _Turn, now: int) -> None:
        """The compaction model stays unreachable: a failed run and its audit event."""
        reason = (
            "HTTP 503 from https://api.openai.com/v1/chat/completions after 3 attempts "
            "(request req_7f3a9c)"
        )
        run = Run(
            turn.thread,
            "compaction",
            SMALL_MODEL,
            iso_ms(now + 200),
            status="error",
            error=reason,
            finished_at=iso_ms(now + 45_000),
        )
        detail = json.dumps({"action": "failed", "reason": reason})
        turn.batch += (
            run,
            AuditEvent(iso_ms(now + 45_010), "compaction", detail, turn.thread, run),
        )

    def _end(self, thread: Thread, now: int, archived: bool) -> tuple[int, list[Record]]:
        """/new archives the thread; the active one leaves the agent's memories behind."""
        if not archived:
            thread.updated_at = iso_ms(now)
            memories = [self.memories[key] for key in sorted(self.memories)]
            return now, [ThreadDone(thread), *memories]
        now += self.rng.randrange(60_000, 3600_000)
        thread.status = "archived"
        thread.archived_at = thread.updated_at = iso_ms(now)

        def detail() -> str:  # the thread's id is given when its first batch is written
            new = {"action": "new", "archived_session_id": thread.id, "conversation_key": self.key}
            return json.dumps(new)

        return now, [AuditEvent(iso_ms(now), "thread", detail, thread, None), ThreadDone(thread)]


def _scheduler(seed: int, count: int) -> Iterator[Batch]:
    """Scheduled runs without a thread (a daily digest, a status poll), each with a check."""
    rng = random.Random(f"volumetool-demo:{seed}:scheduler")
    step = SPAN_MS // max(count, 1)
    for n in range(count):
        t = SPAN_START_MS + n * step + rng.randrange(max(step // 2, 1))
        ok = rng.random() > 0.01
        context = rng.randint(3_000, 12_000)
        output = rng.randint(50, 600)
        run = Run(
            None,
            "schedule",
            MAIN_MODEL,
            iso_ms(t),
            status="ok" if ok else "error",
            input_tokens=context,
            output_tokens=output if ok else None,
            last_input_tokens=context,
            error=None if ok else "tool error: http_get timed out after 30s",
            finished_at=iso_ms(t + rng.randrange(2_000, 30_000)),
        )
        service = SERVICES[rng.randrange(len(SERVICES))]
        batch: list[Record] = [run]
        if rng.random() < 0.7:
            check = {
                "tool": "http_get",
                "decision": "allow",
                "url": f"https://status.example.com/{service}",
            }
            batch.append(AuditEvent(iso_ms(t + 900), "permission", json.dumps(check), None, run))
        yield (t, -1, batch)


class _Writer:
    """Gives each record its id in merge order and bulk-inserts the rows."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.counts = DemoCounts()
        self.messages: list[tuple] = []
        self.runs: list[tuple] = []
        self.audit: list[tuple] = []
        self.folds: list[tuple[int | None, int]] = []  # (run id, message id)
        self.compactions: list[tuple] = []
        self.sessions: list[tuple] = []
        self.memories: list[tuple] = []
        # The ids of an open thread's messages in order: a fold names them by their places.
        self.thread_messages: dict[int | None, list[int]] = {}
        self._take: dict[type, Callable] = {
            Message: self._message,
            Run: self._run,
            AuditEvent: self._audit,
            Thread: self._thread,
            ThreadDone: self._thread_done,
            Fold: self._fold,
            Compaction: self._compaction,
            Memory: self._memory,
        }

    def take(self, records: list[Record]) -> None:
        take = self._take
        for record in records:
            take[type(record)](record)
        if len(self.messages) >= FLUSH_ROWS:
            self.flush()

    def _message(self, m: Message) -> None:
        self.counts.messages += 1
        message_id, thread_id = self.counts.messages, m.thread.id
        self.messages.append(
            (message_id, thread_id, m.role, m.content, m.tool_calls, m.tool_call_id, m.created_at)
        )
        self.thread_messages[thread_id].append(message_id)

    def _run(self, r: Run) -> None:
        self.counts.runs += 1
        r.id = self.counts.runs
        self.runs.append(
            (
                r.id,
                r.thread.id if r.thread else None,
                r.trigger,
                r.model,
                r.status,
                r.input_tokens,
                r.output_tokens,
                r.last_input_tokens,
                r.error,
                r.started_at,
                r.finished_at,
            )
        )

    def _audit(self, a: AuditEvent) -> None:
        self.counts.audit += 1
        detail = a.detail if isinstance(a.detail, str) else a.detail()
        thread_id = a.thread.id if a.thread else None
        run_id = a.run.id if a.run else None
        self.audit.append((self.counts.audit, a.ts, a.event, detail, thread_id, run_id, a.actor))

    def _thread(self, t: Thread) -> None:
        self.counts.sessions += 1
        t.id = self.counts.sessions
        self.thread_messages[t.id] = []

    def _thread_done(self, done: ThreadDone) -> None:
        t = done.thread
        del self.thread_messages[t.id]
        self.sessions.append(
            (t.id, t.key, t.channel, t.status, t.summary, t.created_at, t.updated_at, t.archived_at)
        )

    def _fold(self, fold: Fold) -> None:
        ids = self.thread_messages[fold.thread.id]
        self.folds.extend((fold.run.id, ids[place]) for place in fold.places)

    def _compaction(self, c: Compaction) -> None:
        self.compactions.append((c.run.id, c.thread.id, c.summary, c.saved_tokens))

    def _memory(self, m: Memory) -> None:
        self.counts.memories += 1
        self.memories.append((m.key, m.value, m.created_at, m.updated_at))

    def flush(self) -> None:
        conn = self.conn
        conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, NULL)", self.messages)
        conn.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", self.runs)
        conn.executemany("INSERT INTO audit VALUES (?, ?, ?, ?, ?, ?, ?)", self.audit)
        conn.executemany("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self.sessions)
        conn.executemany("INSERT INTO memories VALUES (?, ?, ?, ?)", self.memories)
        conn.executemany("UPDATE messages SET folded_by = ? WHERE id = ?", self.folds)
        conn.executemany(
            "INSERT INTO compactions (run_id, session_id, summary, saved_tokens)"
            " VALUES (?, ?, ?, ?)",
            self.compactions,
        )
        for rows in (
            self.messages,
            self.runs,
            self.audit,
            self.sessions,
            self.memories,
            self.folds,
            self.compactions,
        ):
            rows.clear()


def fill(conn: sqlite3.Connection, threads: int, seed: int) -> DemoCounts:
    """Write a demo agent's threads, runs, audit trail and memories into an empty volume."""
    conversations: list[_Conversation] = []
    remaining, index = threads, 0
    while remaining > 0:
        pick = random.Random(f"volumetool-demo:{seed}:{index}:threads").random()
        its_threads = 2 if remaining >= 2 and (pick < 0.2 or index == 3) else 1
        conversations.append(_Conversation(seed, index, its_threads))
        remaining -= its_threads
        index += 1
    streams = [c.batches() for c in conversations]
    streams.append(_scheduler(seed, threads * SCHEDULED_RUNS_PER_THREAD))
    writer = _Writer(conn)
    conn.execute("PRAGMA cache_size = -65536")
    # Bulk load with the secondary indexes dropped, then rebuild them from their own SQL.
    indexes = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    ).fetchall()
    for name, _ in indexes:
        conn.execute(f'DROP INDEX "{name}"')
    for _, _, records in heapq.merge(*streams, key=lambda b: (b[0], b[1])):
        writer.take(records)
    writer.flush()
    for _, sql in indexes:
        conn.execute(sql)
    return writer.counts


AGENT_CONFIG = """\
# Agent config written by `volumetool demo` (seed {seed}); check it with `volumetool validate`.
{name_entry}
purpose: >
  Ops assistant for the platform team: answers questions about services, runs read-only
  checks, files issues, and remembers people's preferences.
model:
  name: {main}
  small: {small}
  api: openai
  base_url: https://api.openai.com/v1
  api_key_env: OPENAI_API_KEY
memory:
  scope: thread
  persistent: true
  compact_at_tokens: {threshold}
"""


def agent_config(seed: int, name: str) -> str:
    """The agent YAML that matches a demo volume."""
    return AGENT_CONFIG.format(
        seed=seed,
        name_entry=yaml_entry("name", name),
        main=MAIN_MODEL,
        small=SMALL_MODEL,
        threshold=THRESHOLD,
    )


def yaml_entry(key: str, value: str) -> str:
    """`key: value` as an entry of a top-level YAML mapping, written by the YAML emitter: any
    text (`a: b`, `#1`, `- x`, `yes`, a line break) loads back as itself."""
    import yaml

    from volumetool.config import Loader

    entry = {key: value}
    text = yaml.safe_dump(entry, allow_unicode=True, width=2**31)
    if yaml.load(text, Loader=Loader) != entry:
        # PyYAML's emitter writes some line breaks (U+0085) raw inside quotes, where they
        # fold; double quotes escape them.
        text = yaml.safe_dump(entry, allow_unicode=True, width=2**31, default_style='"')
    return text.removesuffix("\n")


def config_target(name: str) -> OutputTarget:
    """Where `--config-out NAME` writes the agent YAML: a new file (its directories are made
    as the volume's are), or stdout for `-`."""
    return OutputTarget(name, "agent config", "agent.yaml", mode=0o644, make_parents=True)


def build(
    path: Path,
    threads: int = 12,
    seed: int = 1,
    name: str = "demo-agent",
    config: OutputTarget | None = None,
) -> DemoCounts:
    """Write a demo volume at `path` (and its agent YAML to `config`). Never overwrites: both
    are checked before anything is written, and when the work fails midway what this call
    made (the volume, directories) is removed again."""
    counts = DemoCounts()

    def filler(conn: sqlite3.Connection) -> None:
        nonlocal counts
        counts = fill(conn, threads, seed)

    refuse_existing(path)
    refuse_side_files(path)
    if config is not None:
        config.check()
        refuse_clash(path, config)
    created = iso_ms(SPAN_START_MS - 86_400_000)
    with made_directories(path.parent):
        if config is None:
            create_volume(path, name, filler, created_at=created)
            return counts
        made = False
        try:
            if config.path is None:  # stdout: the YAML once the volume is there
                create_volume(path, name, filler, created_at=created)
                made = True
                with config.open() as out:
                    out.write(agent_config(seed, name).encode())
            else:
                with config.staged() as tmp:
                    tmp.write_text(agent_config(seed, name), encoding="utf-8")
                    create_volume(path, name, filler, created_at=created)
                    made = True
        except BaseException:
            if made:
                remove_stage(path)  # the volume this call published, and any side file
            raise
    return counts


def refuse_clash(volume: Path, config: OutputTarget) -> None:
    """Refuse (exit 2) a config file that is the volume, one of its side files, the directory
    the volume goes in, or under the volume's own name."""
    if config.path is None:
        return
    v, c = Path(os.path.realpath(volume)), Path(os.path.realpath(config.path))
    if c in {Path(f"{v}{suffix}") for suffix in ("", *SIDE_FILES)}:
        raise UnusableInput(
            f"{config.name}: is where the volume goes", "name another file for the config"
        )
    if c in v.parents:
        raise UnusableInput(
            f"{config.name}: the volume {volume} goes in that directory",
            f"name a file for the config, e.g. {config.path / 'agent.yaml'}",
        )
    if v in c.parents:
        raise UnusableInput(
            f"{config.name}: is under {volume}, the volume's file",
            "end VOLUME with / to make it a directory, or put the config elsewhere",
        )

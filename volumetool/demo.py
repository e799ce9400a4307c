"""`volumetool demo`: a realistic sample volume, the same bytes for the same seed.

It doubles as the fixture builder of tests and benchmarks, so it scales: each conversation is a
generator of timestamped batches (a turn, a compaction, a /new), the batches of all
conversations are merged in time order so that ids follow append order as in a live file, and
rows are bulk-inserted in one transaction of a staged file.

What it holds: threads on several channels with tool calls and their permission events, an
optional system prefix, archived threads left by /new, threads the agent already compacted
(folded messages, a summary, a compaction run), threads past the compaction threshold that
are due, a failed agent run and a failed compaction, scheduled runs without a thread,
memories with their remember/forget events.
"""

from __future__ import annotations

import heapq
import json
import random
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from volumetool.create import create_volume, staged_file

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
    sessions: int = 0
    messages: int = 0
    runs: int = 0
    audit: int = 0
    memories: int = 0


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
        self.memories: dict[str, list[str]] = {}
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

    def batches(self) -> Iterator[tuple[int, int, list]]:
        """(time, tiebreak, records) in time order; records are lists the writer numbers."""
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

    def _thread(self, now: int, until: int, archived: bool):
        rng = self.rng
        turns = rng.randint(3, 20)
        if self.force_failed_compaction or self.force_due:
            turns = max(turns, 14)
        # Turns start at sorted random moments of the window; a turn lasts well under a minute.
        starts = sorted(
            rng.randrange(now + 1_000, max(until - 300_000, now + 2_000)) for _ in range(turns)
        )
        session = [None, self.key, self.channel, "active", None, iso_ms(now), iso_ms(now), None]
        batch: list = [("session", session)]
        live: list[tuple[list, int]] = []  # (message record, token weight)
        turn_starts: list[int] = []  # indexes into `live` where each turn starts
        prefix_len = 0
        if rng.random() < 0.3:
            prefix_len = 1
            prefix = SYSTEM_PREFIXES[rng.randrange(2)].format(**self.fields())
            record = ["message", session, "system", prefix, None, None, iso_ms(now)]
            batch.append(record)
            live.append((record, len(prefix) // 4 + 8))
        pending_failure = self.force_failed_compaction
        for turn in range(turns):
            now = max(now + 1_000, starts[turn])
            f = self.fields()
            t = now
            ask = ASKS[rng.randrange(len(ASKS))].format(**f)
            user = ["message", session, "user", ask, None, None, iso_ms(t)]
            batch.append(user)
            turn_starts.append(len(live))
            live.append((user, len(ask) // 4 + 8))
            run = [
                None,
                session,
                "webhook" if self.channel == "webhook" else "message",
                MAIN_MODEL,
                "ok",
                None,
                None,
                None,
                None,
                iso_ms(t + 150),
                None,
            ]
            batch.append(("run", run))
            context = self.base_tokens + self.growth * sum(w for _, w in live)
            calls_input, calls_output = [context], 0
            failed = self.force_failed_run and turn == 1
            if failed:
                run[4] = "error"
                run[8] = "provider error: 529 overloaded_error after 3 attempts"
                run[10] = iso_ms(t + 31_000)
                run[5] = context
                run[7] = context
                self.force_failed_run = False
                now = t + 31_000
                yield (t, self.index, batch)
                batch = []
                continue
            t += 2_000
            if rng.random() < 0.6:
                calls = rng.randint(1, 2)
                tool_calls = []
                for n in range(calls):
                    name, args, _ = TOOLS[rng.randrange(len(TOOLS))]
                    tool_calls.append(
                        {
                            "id": f"call_{self.index}_{turn}_{n}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args(f))},
                        }
                    )
                text = json.dumps(tool_calls)
                assistant = ["message", session, "assistant", "", text, None, iso_ms(t)]
                batch.append(assistant)
                live.append((assistant, len(text) // 4 + 8))
                calls_output += len(text) // 4
                for call in tool_calls:
                    t += rng.randrange(300, 4_000)
                    name = call["function"]["name"]
                    denied = rng.random() < 0.05
                    batch.append(
                        [
                            "audit",
                            iso_ms(t),
                            "permission",
                            json.dumps({"tool": name, "decision": "deny" if denied else "allow"}),
                            session,
                            run,
                            "agent",
                        ]
                    )
                    output = (
                        f"Permission denied: the operator policy does not allow {name} here."
                        if denied
                        else next(o for n_, _, o in TOOLS if n_ == name).format(**f)
                    )
                    result = ["message", session, "tool", output, None, call["id"], iso_ms(t)]
                    batch.append(result)
                    live.append((result, len(output) // 4 + 8))
                calls_input.append(self.base_tokens + self.growth * sum(w for _, w in live))
            if rng.random() < 0.35 or (turn < 5 and len(self.memories) < turn + 1):
                t = self._memory_call(batch, live, session, run, t, turn, calls_input)
            t += rng.randrange(2_000, 20_000)
            reply = REPLIES[rng.randrange(len(REPLIES))].format(**f)
            assistant = ["message", session, "assistant", reply, None, None, iso_ms(t)]
            batch.append(assistant)
            live.append((assistant, len(reply) // 4 + 8))
            calls_output += len(reply) // 4
            run[10] = iso_ms(t + 120)
            if rng.random() < 0.02:
                pass  # the provider reported no usage for this run: figures stay NULL
            else:
                run[5], run[6], run[7] = sum(calls_input), calls_output, calls_input[-1]
            if self.channel != "webhook" and rng.random() < 0.05:
                run[2] = "manual" if self.channel == "repl" else "schedule"
            now = t + 500
            if (
                run[7] is not None
                and run[7] >= THRESHOLD
                and len(turn_starts) >= 3
                and not (self.force_due and not archived)
            ):
                if pending_failure:
                    pending_failure = False
                    self._failed_compaction(batch, session, now)
                    self.force_failed_compaction = False
                elif self.agent_compacts:
                    live, turn_starts = self._compaction(
                        batch, session, live, turn_starts, prefix_len, now
                    )
                    now += 4_000
            yield (t, self.index, batch)
            batch = []
        if archived:
            now += rng.randrange(60_000, 3600_000)
            session[3], session[7] = "archived", iso_ms(now)
            session[6] = iso_ms(now)
            batch.append(
                [
                    "audit",
                    iso_ms(now),
                    "thread",
                    lambda: json.dumps(
                        {
                            "action": "new",
                            "archived_session_id": session[0],
                            "conversation_key": self.key,
                        }
                    ),
                    session,
                    None,
                    "agent",
                ]
            )
        else:
            session[6] = iso_ms(now)
        batch.append(("session_done", session))
        if not archived:
            for key, (value, created, updated) in sorted(self.memories.items()):
                batch.append(("memory", key, value, created, updated))
        yield (now, self.index, batch)

    def _memory_call(self, batch, live, session, run, t, turn, calls_input) -> int:
        rng = self.rng
        t += rng.randrange(500, 3_000)
        forget = bool(self.memories) and rng.random() < 0.1
        if forget:
            key = sorted(self.memories)[rng.randrange(len(self.memories))]
            name, args = "forget", {"key": key}
        else:
            attribute = ATTRIBUTES[rng.randrange(len(ATTRIBUTES))]
            key = f"{self.handle}.{attribute}"
            facts = MEMORY_FACTS[attribute]
            value = facts[rng.randrange(len(facts))]
            name, args = "remember", {"key": key, "value": value}
        call_id = f"call_{self.index}_{turn}_m"
        text = json.dumps(
            [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            ],
            ensure_ascii=False,
        )
        assistant = ["message", session, "assistant", "", text, None, iso_ms(t)]
        batch.append(assistant)
        live.append((assistant, len(text) // 4 + 8))
        t += rng.randrange(50, 400)
        stamp = iso_ms(t)
        if forget:
            del self.memories[key]
        else:
            created = self.memories.get(key, (None, stamp))[1]
            self.memories[key] = [value, created, stamp]
        batch.append(
            [
                "audit",
                stamp,
                "memory",
                json.dumps({"action": name, "key": key}, ensure_ascii=False),
                session,
                run,
                "agent",
            ]
        )
        output = f"{'Forgot' if forget else 'Remembered'} {key}."
        result = ["message", session, "tool", output, None, call_id, stamp]
        batch.append(result)
        live.append((result, len(output) // 4 + 8))
        calls_input.append(self.base_tokens + self.growth * sum(w for _, w in live))
        return t

    def _compaction(self, batch, session, live, turn_starts, prefix_len, now):
        """The agent's own auto-compaction: fold all live turns but the last two."""
        rng = self.rng
        cut = turn_starts[-2]
        first = turn_starts[0]
        folded = [record for record, _ in live[first:cut]]
        folded_tokens = self.base_tokens // 4 + sum(w for _, w in live[first:cut])
        decision = rng.choice(MEMORY_FACTS["deploy_region"])
        summary = (
            f"Summary of the earlier conversation with {self.person}: "
            f"{len(turn_starts) - 2} turns about {rng.choice(SERVICES)} and "
            f"{rng.choice(SERVICES)} operations. Decided: {decision}. "
            f"Open task: follow up on issue #{rng.randrange(100, 9999)}."
        )
        if session[4]:
            summary += " It continues the earlier summary: " + session[4].split(". ")[0] + "."
        output_tokens = len(summary) // 4
        run = [
            None,
            session,
            "compaction",
            SMALL_MODEL,
            "ok",
            folded_tokens,
            output_tokens,
            folded_tokens,
            None,
            iso_ms(now + 200),
            iso_ms(now + 3_800),
        ]
        batch.append(("run", run))
        batch.append(("fold", run, folded))
        saved = folded_tokens - len(summary) // 4
        batch.append(("compaction", run, session, summary, saved))
        session[4] = summary
        summary_weight = len(summary) // 4 + 8
        # What the model sees next: the prefix, the summary, then the two kept turns.
        kept = [*live[:prefix_len], (["summary"], summary_weight), *live[cut:]]
        starts = [prefix_len + 1 + (s - cut) for s in turn_starts[-2:]]
        return kept, starts

    def _failed_compaction(self, batch, session, now) -> None:
        reason = (
            "HTTP 503 from https://api.openai.com/v1/chat/completions after 3 attempts "
            "(request req_7f3a9c)"
        )
        run = [
            None,
            session,
            "compaction",
            SMALL_MODEL,
            "error",
            None,
            None,
            None,
            reason,
            iso_ms(now + 200),
            iso_ms(now + 45_000),
        ]
        batch.append(("run", run))
        batch.append(
            [
                "audit",
                iso_ms(now + 45_010),
                "compaction",
                json.dumps({"action": "failed", "reason": reason}),
                session,
                run,
                "agent",
            ]
        )


def _scheduler(seed: int, count: int) -> Iterator[tuple[int, int, list]]:
    """Scheduled runs without a thread (a daily digest, a status poll), each with a check."""
    rng = random.Random(f"volumetool-demo:{seed}:scheduler")
    step = SPAN_MS // max(count, 1)
    for n in range(count):
        t = SPAN_START_MS + n * step + rng.randrange(max(step // 2, 1))
        ok = rng.random() > 0.01
        context = rng.randint(3_000, 12_000)
        output = rng.randint(50, 600)
        run = [
            None,
            None,
            "schedule",
            MAIN_MODEL,
            "ok" if ok else "error",
            context,
            output if ok else None,
            context,
            None if ok else "tool error: http_get timed out after 30s",
            iso_ms(t),
            iso_ms(t + rng.randrange(2_000, 30_000)),
        ]
        service = SERVICES[rng.randrange(len(SERVICES))]
        batch: list = [("run", run)]
        if rng.random() < 0.7:
            batch.append(
                [
                    "audit",
                    iso_ms(t + 900),
                    "permission",
                    json.dumps(
                        {
                            "tool": "http_get",
                            "decision": "allow",
                            "url": f"https://status.example.com/{service}",
                        }
                    ),
                    None,
                    run,
                    "agent",
                ]
            )
        yield (t, -1, batch)


class _Writer:
    """Numbers records in merge order and bulk-inserts them."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.counts = DemoCounts()
        self.messages: list[tuple] = []
        self.runs: list[tuple] = []
        self.audit: list[tuple] = []
        self.folds: list[tuple[int, int]] = []
        self.compactions: list[tuple] = []
        self.sessions: list[tuple] = []
        self.memories: list[tuple] = []
        self.last_archived: dict[str, int] = {}

    def take(self, records: list) -> None:
        c = self.counts
        for record in records:
            kind = record[0]
            if kind == "message":
                c.messages += 1
                record[0] = c.messages
                self.messages.append((c.messages, record[1][0], *record[2:7]))
                del record[2:]  # the generator keeps the record only for its id
            elif kind == "audit":
                c.audit += 1
                _, ts, event, detail, session, run, actor = record
                if callable(detail):  # it names ids that exist only once numbered
                    detail = detail()
                self.audit.append(
                    (
                        c.audit,
                        ts,
                        event,
                        detail,
                        session[0] if session else None,
                        run[0] if run else None,
                        actor,
                    )
                )
            elif kind == "run":
                run = record[1]
                c.runs += 1
                run[0] = c.runs
                session = run[1]
                self.runs.append((c.runs, session[0] if session else None, *run[2:]))
            elif kind == "session":
                c.sessions += 1
                record[1][0] = c.sessions
            elif kind == "session_done":
                self.sessions.append(tuple(record[1]))
            elif kind == "fold":
                run_id = record[1][0]
                self.folds.extend((run_id, message[0]) for message in record[2])
            elif kind == "compaction":
                _, run, session, summary, saved = record
                self.compactions.append((run[0], session[0], summary, saved))
            elif kind == "memory":
                c.memories += 1
                self.memories.append(record[1:])
        if len(self.messages) >= FLUSH_ROWS:
            self.flush()

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


def fill(conn: sqlite3.Connection, sessions: int, seed: int) -> DemoCounts:
    """Write a demo agent's threads, runs, audit trail and memories into an empty volume."""
    conversations: list[_Conversation] = []
    remaining, index = sessions, 0
    while remaining > 0:
        pick = random.Random(f"volumetool-demo:{seed}:{index}:threads").random()
        threads = 2 if remaining >= 2 and (pick < 0.2 or index == 3) else 1
        conversations.append(_Conversation(seed, index, threads))
        remaining -= threads
        index += 1
    streams = [c.batches() for c in conversations]
    streams.append(_scheduler(seed, sessions * SCHEDULED_RUNS_PER_THREAD))
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
name: {name}
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


def build(
    path: Path,
    sessions: int = 12,
    seed: int = 1,
    name: str = "demo-agent",
    config_out: Path | None = None,
) -> DemoCounts:
    """Write a demo volume at `path` (and its agent YAML at `config_out`); never overwrites."""
    counts = DemoCounts()

    def filler(conn: sqlite3.Connection) -> None:
        nonlocal counts
        counts = fill(conn, sessions, seed)

    created = iso_ms(SPAN_START_MS - 86_400_000)
    if config_out is not None:
        with staged_file(config_out, mode=0o644, make_parents=True) as tmp:
            tmp.write_text(
                AGENT_CONFIG.format(
                    seed=seed, name=name, main=MAIN_MODEL, small=SMALL_MODEL, threshold=THRESHOLD
                )
            )
            create_volume(path, name, filler, created_at=created)
    else:
        create_volume(path, name, filler, created_at=created)
    return counts

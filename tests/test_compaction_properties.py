"""Compaction over random threads, against the real test server and real files, checked by an
oracle written from SPEC section 6's words — not by calling the planner.

The generator builds threads that are due most of the time (the interesting path), with tool
calls in the prefix, results arriving turns late, system messages mid-thread, a previous
summary, both APIs, every failure kind, the agent appending (tool results too), /new, /reset
or its own summary during the call, and chains of compactions. `hypothesis.event` counts how
often each path is reached: run with `--hypothesis-show-statistics`.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.support.model_server import ACCEPTED, CONTROL_SUMMARY, ModelServer
from tests.support.oracle import expected_fold, pair_calls, replaced_tokens, tokens, turns_of
from tests.support.strategies import ID_SCHEMES
from tests.support.volumes import VolumeWriter, table_dump
from volumetool.compaction.run import Request, compact
from volumetool.model_client import RetryPolicy
from volumetool.providers import PROVIDERS
from volumetool.settings import AgentConfig, MemorySettings, ModelSettings

KEY = "sk-prop-0123456789abcdefghijklmnop"
THRESHOLD = 50_000
# Failure kinds, each once; None (a good answer) as often as all of them together.
FAILURES = (
    "500",
    "401",
    "400",
    "truncated",
    "content_filter",
    "refusal",
    "pause_turn",
    "finish_null",
    "tool_call",
    "empty",
    "malformed",
    "gzip_garbage",
    "error_in_200",
    "surrogate",
    "drop",
    "overlong",
    "usage_huge",
    "control_chars",
)


@dataclass(frozen=True)
class Spec:
    role: str
    content: str
    tool_calls: list | None = None
    tool_call_id: str | None = None


@st.composite
def threads(draw, turns: st.SearchStrategy[int] | None = None) -> list[Spec]:
    """A live transcript: a prefix (system messages, sometimes a tool call whose result comes
    turns later), then turns with tool calls, late results and system messages. Contents are
    unique, so the oracle can find each message in a request body."""
    counter = iter(range(10**6))

    def text(label: str) -> str:
        filler = draw(st.sampled_from([" " + "lorem " * 12, " — see deploy/values.yaml", ""]))
        return f"[{label} #{next(counter)}]{filler}"

    def call(ids: list[str]) -> Spec:
        calls = [
            {"id": i, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
            for i in ids
        ]
        return Spec("assistant", "", calls)

    messages: list[Spec] = [Spec("system", text("sys")) for _ in range(draw(st.integers(0, 2)))]
    pending: list[tuple[str, int]] = []  # (call id, turns until its result arrives)
    n_calls = iter(range(10**6))
    scheme = draw(st.sampled_from(ID_SCHEMES))  # ids are reused, as real servers do

    def ids(n: int) -> list[str]:
        if scheme == "unique":
            return [f"c{next(n_calls)}" for _ in range(n)]
        return [f"call_{i}" if scheme == "per_answer" else "call" for i in range(n)]

    if draw(st.sampled_from([False, False, False, True])):
        [call_id] = ids(1)
        messages.append(call([call_id]))
        pending.append((call_id, draw(st.sampled_from([3, 5, 0, 1]))))
        event("a tool call in the prefix")
    for _ in range(draw(turns if turns is not None else st.sampled_from([5, 4, 3, 6, 8]))):
        messages.append(Spec("user", text("user")))
        arrived = [(c, w) for c, w in pending if w <= 0]
        pending = [(c, w - 1) for c, w in pending if w > 0]
        for call_id, _ in arrived:
            messages.append(Spec("tool", text("late"), None, call_id))
        if draw(st.integers(0, 5)) == 0:
            messages.append(Spec("system", text("mid-system")))
        for _ in range(draw(st.integers(0, 2))):
            made = ids(draw(st.integers(1, 2)))
            messages.append(call(made))
            for call_id in made:
                delay = draw(st.sampled_from([0, 0, 0, 0, 0, 0, 1, 3]))
                if delay:
                    pending.append((call_id, delay - 1))
                else:
                    messages.append(Spec("tool", text("result"), None, call_id))
        if draw(st.booleans()):
            messages.append(Spec("assistant", text("answer")))
    return messages


# -- the test ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    with ModelServer() as s:
        yield s


@pytest.fixture(scope="module", autouse=True)
def key():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROP_KEY", KEY)
        yield


def request(server, api: str) -> Request:
    return Request(
        config=AgentConfig(
            MemorySettings("thread", True, THRESHOLD),
            ModelSettings(
                name="m", small="s", api=api, base_url=server.url, api_key_env="PROP_KEY"
            ),
        ),
        retry=RetryPolicy(attempts=1),
        min_fold_tokens=0,
        min_retention=0.0,  # the summaries are placeholders: no quality gate
        timeout=5.0,
    )


def write(path: Path, session: int, specs: list[Spec], figure: int | None, tag: str) -> int:
    """The agent appending `specs` (contents tagged by pass, so every one is unique) and a run
    that reported `figure`."""
    w = VolumeWriter(path)
    for m in specs:
        content = f"{tag}{m.content}" if m.content else ""
        w.message(session, m.role, content, m.tool_calls, m.tool_call_id)
    w.run(session, input_tokens=figure, last_input_tokens=figure)
    w.close()
    return session


def interfere(path: Path, session: int, kind: str, live: list[tuple]) -> None:
    """What the agent does while the summary is being written."""
    w = VolumeWriter(path)
    w.clock = w.clock.replace(day=25)
    if kind == "append":
        w.message(session, "user", "written during the call")
        w.message(session, "assistant", "answered during the call")
    elif kind == "append_result":
        _, waiting = pair_calls(live)
        ids = [c["id"] for m in live if m[0] in waiting for c in json.loads(m[4])]
        w.message(
            session, "tool", "a late result written during the call", None, [*ids, "orphan"][0]
        )
    elif kind == "new":
        w.conn.execute("UPDATE sessions SET status = 'archived' WHERE id = ?", (session,))
        w.thread("k")
    elif kind == "reset":
        w.conn.execute("DELETE FROM messages WHERE session_id = ?", (session,))
        w.conn.execute("UPDATE sessions SET summary = NULL WHERE id = ?", (session,))
        for n in range(len(live)):
            w.message(session, "user", f"after reset {n}")
    elif kind == "summary":
        w.conn.execute(
            "UPDATE sessions SET summary = 'the agent compacted' WHERE id = ?", (session,)
        )
    w.close()


def live_of(path: Path, session: int) -> list[tuple]:
    return [r for r in table_dump(path)["messages"] if r[1] == session and r[7] is None]


@pytest.mark.parametrize("api", list(PROVIDERS))
@pytest.mark.parametrize("kind", ["none", "append", "append_result", "new", "reset", "summary"])
@settings(max_examples=examples(15))
@given(
    specs=threads(),
    more=st.lists(threads(st.sampled_from([1, 2, 3])), max_size=2),
    figure=st.sampled_from([THRESHOLD + 10, 10**6, THRESHOLD, 90_000]),
    summary=st.sampled_from(["An earlier summary: PR #17 merged.", None]),
    faults=st.lists(st.sampled_from([None, *FAILURES]), min_size=3, max_size=3),
)
def test_compaction_obeys_the_spec(server, api, kind, specs, more, figure, summary, faults):
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "agent.db"
        w = VolumeWriter(path)
        session = w.thread("k", summary=summary)
        w.close()
        write(path, session, specs, figure, "p0")
        chain = [specs, *more]
        event(f"chain of {len(chain)} pass(es)")
        for n, fault in enumerate(faults[: len(chain)]):
            if n:
                write(path, session, chain[n], THRESHOLD + n, f"p{n}")  # new turns, a new run
            if not one_pass(server, path, session, api, fault, kind if n == 0 else "none", n):
                break
            event(f"compacted on pass {n + 1}")


@settings(max_examples=examples(40))
@given(
    specs=threads(st.integers(0, 6)),
    figure=st.sampled_from([THRESHOLD - 1, None, 0, THRESHOLD, 10**6]),
    memory=st.sampled_from(
        [
            MemorySettings("thread", True, THRESHOLD),
            MemorySettings("thread", True, None),  # compaction disabled
            MemorySettings("none", True, THRESHOLD),  # no thread history
        ]
    ),
    compacted_since=st.booleans(),
)
def test_no_op_below_threshold_under_three_turns_disabled_or_without_a_figure(
    server, specs, figure, memory, compacted_since
):
    """Nothing is called and not a byte changes unless the thread is due: below threshold,
    under 3 live turns, compaction disabled, no figure reported, or no agent run since the
    last compaction (whose own large figure never counts)."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "agent.db"
        w = VolumeWriter(path)
        session = w.thread("k")
        w.close()
        write(path, session, specs, figure, "p0")
        if compacted_since:
            w = VolumeWriter(path)
            w.run(session, trigger="compaction", input_tokens=10**7, last_input_tokens=10**7)
            w.close()
        turns = sum(1 for m in specs if m.role == "user")
        due = (
            memory.compaction_enabled
            and figure is not None
            and figure >= THRESHOLD
            and turns >= 3
            and not compacted_since
        )
        assume(not due)
        event(
            "not due: " + ("below threshold or no figure" if memory.compaction_enabled else "off")
        )
        before = table_dump(path)
        server.requests.clear()
        req = request(server, "openai")
        req = Request(**{**req.__dict__, "config": AgentConfig(memory, req.config.model)})
        assert compact([str(path)], req) == ([], 0)
        assert server.requests == [] and table_dump(path) == before


def one_pass(server, path, session, api, fault, kind, n) -> bool:
    """One compaction pass, checked; False when the chain cannot go on."""
    before = table_dump(path)
    thread = next(r for r in before["sessions"] if r[0] == session)
    live = live_of(path, session)
    _, turns = turns_of(live)
    runs = [r for r in before["runs"] if r[1] == session]
    last_compaction = max((r[0] for r in runs if r[2] == "compaction" and r[4] == "ok"), default=0)
    agent = [r for r in runs if r[2] != "compaction" and r[4] == "ok" and r[0] > last_compaction]
    figure = agent[-1][7] if agent else None
    failed_since = [r for r in runs if r[2] == "compaction" and r[0] > last_compaction]
    due = figure is not None and figure >= THRESHOLD and len(turns) >= 3 and not failed_since
    fold = expected_fold(live) if due else []
    _, waiting = pair_calls(live)
    event(f"a call without its result yet when planned: {bool(waiting)}")
    # SPEC 6: however many turns later its result arrives, it is on the call's side: live.
    assert not set(waiting) & {m[0] for m in fold}
    answer = f"S{n}: the summary of pass {n}, PR #204."
    server.answer = lambda body: answer
    server.fault = fault
    server.on_request = lambda body: interfere(path, session, kind, live)
    server.requests.clear()
    outcomes, code = compact([str(path)], request(server, api))
    server.on_request = None
    after = table_dump(path)
    if not due or not fold:
        event("not due" if not due else "due, but nothing may fold")
        assert server.requests == [] and after == before
        assert [o.status for o in outcomes] == ([] if not due else ["skipped"])
        return False
    [outcome] = outcomes
    event(f"outcome {outcome.status}")
    event(f"agent during the call: {kind}")
    [sent] = server.requests
    asked = server.conversation(sent["body"])
    # the summarizer sees the previous summary and every folded message, tool results too
    if thread[4]:
        assert thread[4] in asked
    for message in fold:
        assert message[3] in asked, message
    for message in live:
        if message not in fold and message[3]:
            assert message[3] not in asked, message  # nothing else is folded
    new_runs = after["runs"][len(before["runs"]) :]
    [run] = new_runs
    assert run[1:4] == (session, "compaction", "s")
    good = fault is None or fault in ACCEPTED
    text = CONTROL_SUMMARY if fault == "control_chars" else answer
    good = good and tokens(text) < replaced_tokens(thread[4], fold)
    conflict = kind in ("new", "reset", "summary")
    if good and not conflict:
        check_compacted(before, after, session, fold, run, outcome, api, fault, answer)
        return True
    assert code == 1 and run[4] == "error", outcome
    event("a failure" if not good else f"a conflict ({kind})")
    assert outcome.status == ("failed" if not good else "conflict"), (outcome.error, fault)
    # the transcript is as the agent left it: nothing folded, the summary untouched
    assert all(r[7] is None for r in after["messages"] if r[0] not in fold_ids(before))
    assert [r for r in after["messages"] if r[0] in fold_ids(before)] == [
        r for r in before["messages"] if r[0] in fold_ids(before)
    ] or kind == "reset"
    if kind in ("none", "append", "append_result"):
        assert [r[4] for r in after["sessions"]] == [r[4] for r in before["sessions"]]
    [audit] = after["audit"][len(before["audit"]) :]
    assert json.loads(audit[3])["action"] == outcome.status and audit[5] == run[0]
    return False


def fold_ids(dump: dict) -> set[int]:
    return {r[0] for r in dump["messages"] if r[7] is not None}


def check_compacted(before, after, session, fold, run, outcome, api, fault, answer) -> None:
    assert outcome.status == "compacted" and outcome.run_id == run[0]
    assert run[4] == "ok"
    if fault and fault.startswith("usage_"):
        assert run[5:8] == (None, None, None)
    else:
        prompt = 1200 + (30 + 70 if api == "anthropic" else 0)
        assert run[5:8] == (prompt, 80, prompt)
    original = {r[0]: r for r in before["messages"]}
    now = {r[0]: r for r in after["messages"]}
    folded_now = sorted(i for i, r in now.items() if r[7] == run[0])
    assert folded_now == [m[0] for m in fold]
    # nothing the agent wrote is lost, reordered or changed; prefix and kept turns untouched
    assert all(now[i][:7] == r[:7] for i, r in original.items())
    assert all(now[i][7] == r[7] for i, r in original.items() if i not in folded_now)
    extra = [r for i, r in now.items() if i not in original]
    assert all(r[7] is None for r in extra)
    [thread] = [r for r in after["sessions"] if r[0] == session]
    assert thread[4] == (CONTROL_SUMMARY if fault == "control_chars" else answer)

"""Compaction over random threads, against the real test server and real files, checked by an
oracle written from SPEC sections 6, 10 and 13's words — not by calling the planner.

The generator builds threads that are due most of the time (the interesting path), with tool
calls in the prefix, results arriving turns late or never, reused call ids, system messages
mid-thread, a previous summary, both APIs, every failure kind, the agent appending (tool
results too), /new, /reset or its own summary during the call, and chains of compactions with
`thread undo` between them: the hold after an undo, and back-off after failures (those before
an undone compaction do not count). `hypothesis.event` counts how often each path is reached:
run with `--hypothesis-show-statistics`.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.support.fixtures import compaction_request
from tests.support.model_server import ACCEPTED, CONTROL_SUMMARY
from tests.support.oracle import expected_fold, pair_calls, replaced_tokens, tokens, turns_of
from tests.support.strategies import ID_SCHEMES
from tests.support.volumes import VolumeWriter, table_dump, undo_in
from volumetool.compaction.run import Request, compact
from volumetool.errors import ProblemsFound
from volumetool.model_client import RetryPolicy
from volumetool.providers import PROVIDERS
from volumetool.settings import AgentConfig, MemorySettings

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


# When a call's result arrives: at once, or 1 to 3 turns later (the user writing meanwhile).
# A call that waits for good keeps its turn and every later one live, so only a chain's first
# transcript may be lossy (threads()): more would leave little that could ever fold.
LATE = (0,) * 10 + (1, 2, 3)


@dataclass(frozen=True)
class Spec:
    role: str
    content: str
    tool_calls: list | None = None
    tool_call_id: str | None = None


@st.composite
def threads(draw, turns: st.SearchStrategy[int] | None = None, first: bool = True) -> list[Spec]:
    """A live transcript (`first`) or the turns the agent adds to one: a prefix (system
    messages, sometimes a tool call whose result comes turns later or never), then turns with
    tool calls, results that arrive at once or turns later, and system messages. Ids are
    reused as real servers reuse them; each result comes before its id is used again, except
    in one `lossy` transcript in four, where one result never comes and a late one may come
    after a newer call of its id — and answers that one (SPEC 6), leaving the older call
    waiting for good. Contents are unique, so the oracle can find each message in a request
    body."""
    counter = iter(range(10**6))

    def text(label: str) -> str:
        filler = draw(st.sampled_from([" " + "lorem " * 12, " — see deploy/values.yaml", ""]))
        return f"[{label} #{next(counter)}]{filler}"

    prefix = draw(st.integers(0, 2)) if first else 0
    messages: list[Spec] = [Spec("system", text("sys")) for _ in range(prefix)]
    pending: list[tuple[str, int]] = []  # (call id, turns until its result arrives)
    n_calls = iter(range(10**6))
    scheme = draw(st.sampled_from(ID_SCHEMES))  # ids are reused, as real servers do
    lossy = first and draw(st.integers(0, 3)) == 3

    def deliver(arrived: list[tuple[str, int]]) -> None:
        nonlocal pending
        messages.extend(Spec("tool", text("late"), None, c) for c, _ in arrived)
        pending = [p for p in pending if p not in arrived]

    def call(n: int, unique: bool = False) -> list[str]:
        if scheme == "unique" or unique:
            made = [f"c{next(n_calls)}" for _ in range(n)]
        else:
            made = [f"call_{i}" if scheme == "per_answer" else "call_0" for i in range(n)]
        if not lossy:
            deliver([p for p in pending if p[0] in made])
        body = [
            {"id": i, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
            for i in made
        ]
        messages.append(Spec("assistant", "", body))
        return made

    def wait(call_id: str, delay: int | None) -> None:
        if delay is not None and delay > 1:
            event("a result more than one turn late")
        if delay == 0:
            messages.append(Spec("tool", text("result"), None, call_id))
        elif delay is not None:
            pending.append((call_id, delay))

    if first and draw(st.sampled_from([False, False, False, True])):
        # its own id, unless lossy: a newer call of its id would take its result (SPEC 6)
        [call_id] = call(1, unique=not lossy)
        wait(call_id, draw(st.sampled_from([None, None, 5, 3, 1])))
    for _ in range(draw(turns if turns is not None else st.sampled_from([5, 4, 3, 6, 8]))):
        messages.append(Spec("user", text("user")))
        pending = [(c, w - 1) for c, w in pending]
        deliver([p for p in pending if p[1] == 0])
        if draw(st.integers(0, 5)) == 0:
            messages.append(Spec("system", text("mid-system")))
        for _ in range(draw(st.integers(0, 2))):
            for call_id in call(draw(st.integers(1, 2))):
                wait(call_id, draw(st.sampled_from(LATE)))
        if draw(st.booleans()):
            messages.append(Spec("assistant", text("answer")))
    deliver(pending)  # the results still to come arrive before the agent's next run
    results = [n for n, m in enumerate(messages) if m.role == "tool"]
    if lossy and results:  # a result that never comes: its call waits for good
        del messages[draw(st.sampled_from(results[::-1]))]
    return messages


# -- the test ------------------------------------------------------------------------------


pytestmark = [pytest.mark.shared_server, pytest.mark.usefixtures("model_key")]


def request(server, api: str, key: str | None = None, force: bool = False) -> Request:
    return compaction_request(
        server,
        api,
        memory=MemorySettings("thread", True, THRESHOLD),
        retry=RetryPolicy(attempts=1),
        min_fold_tokens=0,
        min_retention=0.0,  # the summaries are placeholders: no quality gate
        timeout=5.0,
        key=key,
        force=force,
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


# The next step of a chain, weighted by how the last one ended, so that chains of compactions
# with undos between them are common, as are passes after an undo (held: cron skips it,
# --key releases it) and after a failure (backing off, unless --force): ("undo",) or
# ("pass", how it is started, whether the agent wrote new turns and a run first).
UNDO = ("undo",)
STEPS = {
    "compacted": [
        UNDO,
        ("pass", "cron", True),
        UNDO,
        ("pass", "key", True),
        ("pass", "cron", False),
    ],
    # by --force over a back-off: undone, the failures before it no longer count
    "forced": [UNDO, UNDO, ("pass", "cron", True), UNDO],
    "undone": [("pass", "key", False), UNDO, ("pass", "key", True), ("pass", "cron", False)],
    "failed": [
        ("pass", "force", False),
        UNDO,
        ("pass", "force", True),
        ("pass", "cron", True),
        ("pass", "key", False),
    ],
    "other": [("pass", "cron", True), ("pass", "key", True), UNDO, ("pass", "force", True)],
}


def next_step(data, last: str, standing: bool) -> tuple:
    """The step after one that ended `last`; with no compaction standing, an undo (refused)
    only one time in five."""
    steps = STEPS[last]
    if not standing and data.draw(st.integers(0, 4)) < 4:
        steps = [step for step in steps if step != UNDO]
    return data.draw(st.sampled_from(steps))


@dataclass
class History:
    """What the oracle knows of the thread's compactions: those that stand, oldest first, each
    with the summary it replaced; the run ids undone; and the steps so far ("C" a compaction,
    "U" an undo)."""

    standing: list[tuple[int, str | None]] = field(default_factory=list)
    undone: list[int] = field(default_factory=list)
    steps: str = ""

    @property
    def held(self) -> bool:
        """SPEC 13: after `thread undo` the thread is held until a compaction stands that is
        newer than the last one undone."""
        return max(self.undone, default=0) > max((r for r, _ in self.standing), default=0)


@pytest.mark.parametrize("api", list(PROVIDERS))
@settings(max_examples=examples(45))
@given(
    kind=st.sampled_from(["none", "append", "append_result", "new", "reset", "summary"]),
    specs=threads(),
    figure=st.sampled_from([THRESHOLD + 10, 10**6, THRESHOLD, 90_000]),
    summary=st.sampled_from(["An earlier summary: PR #17 merged.", None]),
    length=st.integers(3, 7),
    interfere_at=st.sampled_from([1, 0, 2]),
    data=st.data(),
)
def test_compaction_obeys_the_spec(
    server, api, kind, specs, figure, summary, length, interfere_at, data
):
    """A chain of three to seven steps on one thread — cron passes, passes by --key and by --force,
    new turns between them, `thread undo` — each checked against the oracle; the agent does
    `kind` during the model call of the pass that makes call number `interfere_at`. A
    conflict ends the chain, and so does a /new, /reset or summary of the agent's own."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "agent.db"
        w = VolumeWriter(path)
        session = w.thread("k", summary=summary)
        w.close()
        write(path, session, specs, figure, "p0")
        history = History()
        last, calls = "other", 0
        for n in range(length):
            step = next_step(data, last, bool(history.standing)) if n else ("pass", "cron", False)
            if step == UNDO:
                last = undo_step(path, session, history)
                continue
            _, mode, more = step
            if more:  # the agent's new turns, and a run that reported a figure
                turns = data.draw(threads(st.sampled_from([2, 3, 1]), first=False))
                due = data.draw(st.integers(0, 3)) < 3  # due again three times in four
                below = st.sampled_from([THRESHOLD - 1, None])
                reported = THRESHOLD + n if due else data.draw(below)
                write(path, session, turns, reported, f"p{n}")
            # a good answer three times in four: chains of compactions are the point
            failure = data.draw(st.integers(0, 3)) == 3
            fault = data.draw(st.sampled_from(FAILURES)) if failure else None
            during = kind if calls == interfere_at else "none"
            last, called = one_pass(server, path, session, api, fault, during, n, mode, history)
            calls += called
            if last == "conflict" or (called and during in ("new", "reset", "summary")):
                break  # the thread the oracle knows is gone, reset or summarized by the agent
        chain = history.steps.count("C")
        event(f"chain of {chain} compaction(s)" if chain < 4 else "chain of 4+ compactions")
        event(f"{history.steps.count('U')} undo(s)")
        if "CUC" in history.steps:
            event("a compaction, its undo, and another compaction")


def undo_step(path: Path, session: int, history: History) -> str:
    """`thread undo k`, checked: the latest standing compaction is reversed — the messages it
    folded are live again, the summary it replaced is back, its run stays — and nothing else
    changes (SPEC 10); with none standing it is refused and nothing changes."""
    before = table_dump(path)
    if not history.standing:
        event("undo with nothing to undo")
        with pytest.raises(ProblemsFound, match="no compaction to undo"):
            undo_in(path, "k")
        assert table_dump(path) == before
        return "other"
    run_id, replaced = history.standing.pop()
    event("undo after a chain" if history.standing else "undo of the only compaction")
    plan = undo_in(path, "k")
    after = table_dump(path)
    assert (plan.session_id, plan.run_id, plan.restored_summary) == (session, run_id, replaced)
    assert after["messages"] == [
        (*m[:7], None) if m[7] == run_id else m for m in before["messages"]
    ]
    assert plan.messages == sum(m[7] == run_id for m in before["messages"]) > 0
    assert [r[4] for r in after["sessions"] if r[0] == session] == [replaced]
    assert after["runs"] == before["runs"]  # its cost was real
    [audit] = after["audit"][len(before["audit"]) :]
    assert json.loads(audit[3])["action"] == "undo" and audit[5] == run_id
    history.undone.append(run_id)
    history.steps += "U"
    return "undone"


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


def one_pass(server, path, session, api, fault, kind, n, mode, history) -> tuple[str, bool]:
    """One compaction pass started by `mode`, checked: how it ended ("compacted", "failed",
    "conflict" or "other") and whether it called the model."""
    before = table_dump(path)
    thread = next(r for r in before["sessions"] if r[0] == session)
    live = live_of(path, session)
    prefix, turns = turns_of(live)
    runs = [r for r in before["runs"] if r[1] == session]
    compactions = [r for r in runs if r[2] == "compaction"]
    succeeded = [r[0] for r in compactions if r[4] == "ok"]
    assert sorted(succeeded) == sorted([r for r, _ in history.standing] + history.undone)
    # SPEC 6: the figure is the latest agent run's since the latest compaction that stands (an
    # undone one does not); back-off counts the failures since the last compaction that
    # succeeded, undone or not; SPEC 13: after an undo a cron pass skips the thread.
    standing = max((r for r, _ in history.standing), default=0)
    agent = [r for r in runs if r[2] != "compaction" and r[4] == "ok" and r[0] > standing]
    figure = agent[-1][7] if agent else None
    due = figure is not None and figure >= THRESHOLD and len(turns) >= 3
    failed_since = [r for r in compactions if r[4] == "error" and r[0] > max(succeeded, default=0)]
    held = history.held and mode == "cron"
    backing_off = bool(failed_since) and mode != "force"
    fold = expected_fold(live)
    _, waiting = pair_calls(live)
    event(f"a call without its result yet when planned: {bool(waiting)}")
    if {m[0] for turn in turns[: len(turns) - 2] for m in turn} & set(waiting):
        event("a call waiting in a foldable turn")
    if any(m[4] for m in prefix):
        event("a tool call in the kept prefix")
    # SPEC 6: however many turns later its result arrives, it is on the call's side: live.
    assert not set(waiting) & {m[0] for m in fold}
    answer = f"S{n}: the summary of pass {n}, PR #204."
    server.answer = lambda body: answer
    server.fault = fault
    server.on_request = lambda body: interfere(path, session, kind, live)
    server.requests.clear()
    key = None if mode == "cron" else "k"
    outcomes, code = compact([str(path)], request(server, api, key, mode == "force"))
    server.on_request = None
    after = table_dump(path)
    if not (due or mode == "force") or held or backing_off or not fold:
        assert server.requests == [] and after == before
        if not due and mode != "force":
            event(f"not due ({mode})")
            if mode == "cron":
                assert (outcomes, code) == ([], 0)
            else:
                [outcome] = outcomes
                assert (outcome.status, code) == ("skipped", 0) and "not due: " in outcome.error
            return "other", False
        [outcome] = outcomes
        assert outcome.status == "skipped"
        reason = "held_after_undo" if held else "backing_off" if backing_off else None
        event(f"skipped: {reason or 'nothing may fold'} ({mode})")
        assert (outcome.reason, code) == (reason, int(reason == "backing_off")), outcome
        return ("failed" if backing_off else "other"), False
    if mode != "force" and any(
        r[4] == "error" and r[0] < max(history.undone, default=0) for r in compactions
    ):
        event("failures before an undone compaction did not count")
    [outcome] = outcomes
    event(f"outcome {outcome.status} ({mode}{', held' if history.held else ''})")
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
        assert code == 0
        check_compacted(before, after, session, fold, run, outcome, api, fault, answer)
        if history.held:
            event("a compaction by --key releases the hold")
        history.standing.append((run[0], thread[4]))
        history.steps += "C"
        return ("forced" if failed_since else "compacted"), True
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
    return ("failed" if not good else "conflict"), True


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

"""Plan + apply over random transcripts, against the real test server and real files."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.model_server import FAULTS as SERVER_FAULTS
from tests.model_server import ModelServer
from tests.test_compaction_plan import transcripts
from tests.volumes import VolumeWriter, table_dump
from volumetool.compaction.plan import Message, plan_fold, replaced_chars
from volumetool.compaction.run import Request, compact
from volumetool.model_client import RetryPolicy
from volumetool.settings import AgentConfig, MemorySettings, ModelSettings

KEY = "sk-prop-0123456789abcdefghijklmnop"
# Every fault the server has but those that only wait (hang, and retried 503/429/quota
# errors, which the one attempt here makes plain failures anyway); no fault three times as often.
FAULTS = [None] * 3 + [f for f in SERVER_FAULTS if f not in ("hang", "503", "429", "quota")]


@pytest.fixture(scope="module")
def server():
    with ModelServer() as s:
        yield s


def request(server, threshold: int | None) -> Request:
    return Request(
        config=AgentConfig(
            MemorySettings("thread", True, threshold),
            ModelSettings(name="m", small="s", base_url=server.url, api_key_env="PROP_KEY"),
        ),
        retry=RetryPolicy(attempts=1),
    )


def write(directory: Path, live, figure: int | None, summary: str | None):
    w = VolumeWriter(directory / "agent.db")
    s = w.thread("k", summary=summary)
    for m in live:
        w.message(
            s,
            m.role,
            m.content * 20,
            json.loads(m.tool_calls) if m.tool_calls else None,
            m.tool_call_id,
        )
    w.run(s, input_tokens=figure, last_input_tokens=figure)
    w.close()
    return w.path, s


@settings(max_examples=60)
@given(
    live=transcripts(max_turns=7),
    figure=st.one_of(st.none(), st.integers(0, 100_000)),
    threshold=st.one_of(st.none(), st.integers(1, 100_000)),
    fault=st.sampled_from(FAULTS),
    appended=st.integers(0, 3),
    summary=st.one_of(st.none(), st.just("An earlier summary.")),
)
def test_plan_and_apply_invariants(
    server, monkeypatch_session, live, figure, threshold, fault, appended, summary
):
    with tempfile.TemporaryDirectory() as directory:
        path, session = write(Path(directory), live, figure, summary)
        before = table_dump(path)
        live = [Message(r[0], r[2], r[3], r[4], r[5]) for r in before["messages"]]
        plan = plan_fold(live)
        turns = sum(1 for m in live if m.role == "user")
        due = threshold is not None and figure is not None and figure >= threshold and turns >= 3

        def agent_appends(body):
            w = VolumeWriter(path)
            for n in range(appended):
                w.message(session, "user" if n % 2 == 0 else "assistant", f"during {n}")
            w.close()

        server.fault, server.on_request = fault, agent_appends
        server.requests.clear()
        outcomes, code = compact([str(path)], request(server, threshold))
        after = table_dump(path)

        if not due:  # below threshold, under 3 turns, disabled, no figure: a no-op
            assert outcomes == [] and code == 0 and server.requests == []
            assert after == before
            return
        [outcome] = outcomes
        if plan.empty:  # due, but a kept turn answers every older call: nothing may fold
            assert outcome.status == "skipped" and server.requests == [] and after == before
            return
        original = {r[0]: r[:7] for r in before["messages"]}
        now = {r[0]: r for r in after["messages"]}
        # nothing the agent wrote is lost, reordered or changed
        assert all(now[i][:7] == row for i, row in original.items())
        extra = [r for i, r in now.items() if i not in original]
        assert [r[3] for r in extra] == [f"during {n}" for n in range(appended)]
        assert all(r[7] is None for r in extra)
        new_runs = after["runs"][len(before["runs"]) :]
        assert len(new_runs) == 1 and new_runs[0][2] == "compaction"
        if outcome.status == "compacted":
            assert fault is None and code == 0
            folded = [i for i, r in now.items() if r[7] is not None]
            assert folded == [m.id for m in plan.fold]
            assert {r[7] for r in now.values() if r[7] is not None} == {new_runs[0][0]}
            kept = [m.id for m in plan.prefix + plan.keep]
            assert all(now[i][7] is None for i in kept)
            assert after["sessions"][0][4] == server.summary
            assert after["audit"] == before["audit"]
            # a second pass, with no new agent run since, never calls the model
            server.on_request = None
            requests = len(server.requests)
            assert compact([str(path)], request(server, threshold)) == ([], 0)
            assert len(server.requests) == requests
        else:
            too_long = len(server.summary) >= replaced_chars(summary, plan.fold)
            assert outcome.status == "failed" and (fault is not None or too_long) and code == 1
            # (the simulated agent's own appends move updated_at; nothing else may change)
            assert [r[:6] + r[7:] for r in after["sessions"]] == [
                r[:6] + r[7:] for r in before["sessions"]
            ]
            assert all(r[7] is None or original.get(r[0]) for r in after["messages"])
            assert [r[7] for r in after["messages"] if r[0] in original] == [
                r[7] for r in before["messages"]
            ]
            assert new_runs[0][4] == "error"
            new_audit = after["audit"][len(before["audit"]) :]
            assert [json.loads(a[3])["action"] for a in new_audit] == ["failed"]
        server.on_request = None


@pytest.fixture(scope="module")
def monkeypatch_session():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROP_KEY", KEY)
        yield mp

"""thread undo: a compaction reversed, against real files and the real test server (SPEC 10)."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.support.fixtures import compaction_request
from tests.support.volumes import VolumeWriter, due_thread, rows, table_dump, undo_in
from volumetool.compaction.run import Request, compact
from volumetool.compaction.store import thread_due
from volumetool.errors import ProblemsFound
from volumetool.model_client import RetryPolicy
from volumetool.settings import MemorySettings

ON = MemorySettings("thread", True, 50_000)


pytestmark = [pytest.mark.shared_server, pytest.mark.usefixtures("model_key")]


def request(server, **values) -> Request:
    return compaction_request(server, retry=RetryPolicy(attempts=1), min_fold_tokens=0, **values)


def state(path: Path, session: int) -> tuple:
    """What undo must restore: every message row, the summary, and the due state."""
    conn = sqlite3.connect(path)
    try:
        messages = conn.execute("SELECT * FROM messages ORDER BY id").fetchall()
        summary = conn.execute("SELECT summary FROM sessions WHERE id = ?", (session,)).fetchone()
        due = thread_due(conn, session, ON)
        return messages, summary, due
    finally:
        conn.close()


def agent_turn(path: Path, session: int, n: int, tokens: int = 60_000) -> None:
    w = VolumeWriter(path)
    w.clock = w.clock.replace(day=20)
    w.message(session, "user", f"Next question {n}: what about deploy/values.yaml? " * 3)
    w.message(session, "assistant", f"Next answer {n}: the pool size is unchanged. " * 3)
    w.run(session, input_tokens=tokens, last_input_tokens=tokens)
    w.close()


def test_undo_restores_messages_summary_and_due_state(server, tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    session = due_thread(w, "k", turns=6)
    w.close()
    before = state(w.path, session)
    assert before[2].is_due
    [outcome], _ = compact([str(w.path)], request(server))
    assert outcome.status == "compacted"
    assert state(w.path, session) != before
    audit_before = len(table_dump(w.path)["audit"])
    plan = undo_in(w.path, "k")
    assert (plan.run_id, plan.messages, plan.restored_summary) == (
        outcome.run_id,
        outcome.folded_messages,
        None,
    )
    assert state(w.path, session) == before
    dump = table_dump(w.path)
    [event_row] = dump["audit"][audit_before:]
    detail = json.loads(event_row[3])
    assert (event_row[2], detail["action"], event_row[6]) == ("compaction", "undo", "volumetool")
    assert detail["undone_run_id"] == outcome.run_id and detail["messages"] == plan.messages
    # the run stays: its cost was real
    assert any(r[0] == outcome.run_id and r[4] == "ok" for r in dump["runs"])
    # and it is due again: held after the undo (SPEC 13), it is compacted again by name
    [again], _ = compact([str(w.path)], request(server, key="k"))
    assert again.status == "compacted"


def test_undo_goes_back_one_compaction_at_a_time(server, tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    session = due_thread(w, "k", turns=6)
    w.close()
    states = [state(w.path, session)]
    for n in range(3):
        server.answer = lambda body, n=n: f"Summary number {n}: deploy/values.yaml, PR #204."
        [outcome], _ = compact([str(w.path)], request(server))
        assert outcome.status == "compacted", outcome
        agent_turn(w.path, session, n)
        states.append(state(w.path, session))
    server.answer = None
    # each undo reverses the latest standing compaction; messages the agent added since stay
    for n in range(3, 0, -1):
        undo_in(w.path, "k")
        messages, summary, _ = state(w.path, session)
        expected_summary = (
            f"Summary number {n - 2}: deploy/values.yaml, PR #204." if n > 1 else None
        )
        assert summary == (expected_summary,)
        later = [m for m in messages if m[0] not in {r[0] for r in states[n - 1][0]}]
        assert all(m[7] is None for m in later)  # appended since: live, where they were
    assert [m[:7] for m in state(w.path, session)[0]] == [m[:7] for m in states[-1][0]]
    assert all(m[7] is None for m in state(w.path, session)[0])
    with pytest.raises(ProblemsFound, match="no compaction to undo"):
        undo_in(w.path, "k")


def test_an_agent_compaction_before_volumetool_kept_summaries_cannot_be_undone_past(tmp_path):
    """The agent's own compaction left no summary behind; undoing the one after it would need
    it, so it is refused and nothing changes."""
    w = VolumeWriter(tmp_path / "agent.db")
    session = w.thread("k", summary="second summary")
    first = w.run(session, trigger="compaction")
    second = w.run(session, trigger="compaction")
    for n in range(3):
        w.message(session, "user", f"q{n}", folded_by=first if n == 0 else second)
    w.close()
    before = table_dump(w.path)
    with pytest.raises(ProblemsFound, match="unknown"):
        undo_in(w.path, "k")
    assert table_dump(w.path) == before


def test_undo_of_the_agents_only_compaction_restores_no_summary(tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    session = w.thread("k", summary="the agent's summary")
    run = w.run(session, trigger="compaction")
    w.message(session, "user", "folded", folded_by=run)
    w.message(session, "user", "live")
    w.close()
    undo_in(w.path, "k")
    messages, summary, _ = state(w.path, session)
    assert summary == (None,) and all(m[7] is None for m in messages)
    conn = sqlite3.connect(w.path)
    assert conn.execute("SELECT summary, undone_at IS NOT NULL FROM compactions").fetchall() == [
        ("the agent's summary", 1)
    ]


@pytest.mark.parametrize("before", ["the agent compacted", "a summary with no run behind it"])
def test_undo_restores_the_summary_volumetool_replaced_whoever_wrote_it(
    server, tmp_path, run_cli, before
):
    """The agent compacted by itself (a compaction run, no history row), or the thread has a
    summary no compaction run stands behind: compact, then undo brings that summary back."""
    w = VolumeWriter(tmp_path / "agent.db")
    session = w.thread("k", summary=f"Earlier: {before}, PR #17.")
    if before == "the agent compacted":
        run = w.run(session, trigger="compaction")
        w.message(session, "user", "folded by the agent", folded_by=run)
    w.close()
    for n in range(5):
        agent_turn(w.path, session, n)
    earlier = state(w.path, session)
    [outcome], _ = compact([str(w.path)], request(server))
    assert outcome.status == "compacted", outcome
    result = run_cli("thread", "undo", w.path, "k", "--yes")
    assert result.exit_code == 0, result
    assert "the summary" in result.stderr and "back" in result.stderr
    assert state(w.path, session)[:2] == earlier[:2]


def two_compactions_kept_before_m007(path: Path) -> tuple[int, int, int]:
    """A thread compacted twice, each run's history row from before m007 (replaced_kept 0),
    each folding two messages: (thread, first run, second run)."""
    w = VolumeWriter(path)
    session = w.thread("k", summary="second summary")
    first, second = (w.run(session, trigger="compaction") for _ in range(2))
    for run, text in ((first, "first summary"), (second, "second summary")):
        w.insert("compactions", run_id=run, session_id=session, summary=text)
        w.message(session, "user", f"folded by {run}", folded_by=run)
        w.message(session, "user", f"also folded by {run}", folded_by=run)
    w.close()
    return session, first, second


def test_a_compaction_kept_before_m007_restores_the_summary_of_the_one_before(tmp_path):
    """A history row from before the replaced summary was kept (replaced_kept 0): the summary
    before is the earlier compaction's, as it always was."""
    path = tmp_path / "agent.db"
    session, first, second = two_compactions_kept_before_m007(path)
    plan = undo_in(path, "k")
    assert (plan.run_id, plan.messages, plan.restored_run_id) == (second, 2, first)
    assert plan.restored_summary == "first summary"
    assert state(path, session)[1] == ("first summary",)
    detail = json.loads(table_dump(path)["audit"][-1][3])
    assert (detail["messages"], detail["restored_run_id"]) == (2, first)


def test_an_undo_confirmed_for_a_compaction_no_longer_the_latest_changes_nothing(tmp_path):
    """A person was asked about one compaction; another became the latest while they answered:
    their yes undoes nothing (the command asks again), and a yes about the latest undoes it."""
    path = tmp_path / "agent.db"
    session, first, second = two_compactions_kept_before_m007(path)
    before = table_dump(path)
    with pytest.raises(ProblemsFound, match=f"now run {second}, not run {first}"):
        undo_in(path, "k", confirmed=first)
    assert table_dump(path) == before
    plan = undo_in(path, "k", confirmed=second)
    assert (plan.run_id, plan.restored_summary) == (second, "first summary")
    assert state(path, session)[1] == ("first summary",)


def test_the_undo_event_and_the_compactions_mark_are_one_time_as_the_clock_ticks(
    tmp_path, monkeypatch
):
    """The audit event of an undo carries the moment the compaction was marked undone, even
    when the clock moves on between the two writes (a millisecond boundary)."""
    w = VolumeWriter(tmp_path / "agent.db")
    session = w.thread("k", summary="the agent's summary")
    run = w.run(session, trigger="compaction")
    w.message(session, "user", "folded", folded_by=run)
    w.close()
    ticks = iter(range(1, 100))
    clock = lambda: f"2026-01-01T00:00:00.{next(ticks):03d}Z"  # noqa: E731
    monkeypatch.setattr("volumetool.compaction.undo.now_iso", clock)
    monkeypatch.setattr("volumetool.audit.now_iso", clock)
    undo_in(w.path, "k")
    [(undone_at,)] = rows(w.path, "SELECT undone_at FROM compactions WHERE run_id = ?", run)
    assert table_dump(w.path)["audit"][-1][1] == undone_at


def test_a_summary_changed_since_the_compaction_is_not_undone(server, tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    session = due_thread(w, "k", turns=6)
    w.close()
    compact([str(w.path)], request(server))
    conn = sqlite3.connect(w.path)
    conn.execute("UPDATE sessions SET summary = 'the agent rewrote it' WHERE id = ?", (session,))
    conn.commit()
    conn.close()
    before = table_dump(w.path)
    with pytest.raises(ProblemsFound, match="changed after compaction run"):
        undo_in(w.path, "k")
    assert table_dump(w.path) == before


def test_no_active_thread_or_no_compaction_is_exit_1(tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    w.thread("k")
    w.close()
    for key, message in (("absent", "no active thread"), ("k", "no compaction to undo")):
        with pytest.raises(ProblemsFound, match=message) as caught:
            undo_in(w.path, key)
        assert caught.value.exit_code == 1


@settings(max_examples=examples(25))
@given(
    turns=st.lists(st.integers(4, 9), min_size=1, max_size=3),
    appended=st.integers(0, 3),
)
def test_compact_then_undo_restores_every_thread_exactly(server, turns, appended):
    """For any chain of compactions (with the agent writing between them), undoing every one
    restores the messages, the summary and the due state the thread had before each."""
    with tempfile.TemporaryDirectory() as directory:
        w = VolumeWriter(Path(directory) / "agent.db")
        session = due_thread(w, "k", turns=turns[0])
        w.close()
        history = []
        for n, count in enumerate(turns):
            history.append(state(w.path, session))
            server.answer = lambda body, n=n: f"Summary {n}: PR #204, deploy/values.yaml."
            [outcome], _ = compact([str(w.path)], request(server))
            if outcome.status != "compacted":
                event("not compacted: " + outcome.status)
                history.pop()
                break
            for extra in range(count if n + 1 < len(turns) else appended):
                agent_turn(w.path, session, extra)
        event(f"{len(history)} compaction(s) undone")
        appended_since = set()
        for previous in reversed(history):
            undo_in(w.path, "k")
            messages, summary, due = state(w.path, session)
            known = {m[0] for m in previous[0]}
            assert [m for m in messages if m[0] in known] == previous[0]
            appended_since |= {m[0] for m in messages if m[0] not in known}
            assert all(m[7] is None for m in messages if m[0] not in known)
            assert summary == previous[1]
            if not appended_since:
                assert due == previous[2]
        server.answer = None


def test_savings_are_totalled_in_status_and_leave_it_when_undone(server, tmp_path, run_cli):
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "a", turns=6)
    due_thread(w, "b", turns=7)
    w.close()
    outcomes, _ = compact([str(w.path)], request(server))
    saved = [o.saved_tokens for o in outcomes]
    assert all(s > 0 for s in saved)
    totals = json.loads(run_cli("status", w.path, "--json").stdout)
    assert totals["tokens"]["compaction_saved"] == sum(saved)
    undo_in(w.path, "a")
    totals = json.loads(run_cli("status", w.path, "--json").stdout)
    assert totals["tokens"]["compaction_saved"] == saved[1]


def test_the_undo_event_names_the_thread_the_run_and_the_restored_summary(server, tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    session = due_thread(w, "k", turns=6)
    w.close()
    [first], _ = compact([str(w.path)], request(server))
    agent_turn(w.path, session, 0)
    server.answer = lambda body: "The second summary: deploy/values.yaml, PR #204."
    [second], _ = compact([str(w.path)], request(server))
    server.answer = None
    plan = undo_in(w.path, "k")
    assert (plan.run_id, plan.restored_run_id) == (second.run_id, first.run_id)
    event_row = table_dump(w.path)["audit"][-1]
    _, ts, kind, detail, session_id, run_id, actor = event_row
    assert (kind, session_id, run_id, actor) == ("compaction", session, second.run_id, "volumetool")
    assert ts.endswith("Z") and ts[:4] == "20" + ts[2:4]
    # the event and the compaction's mark are one moment: the undo's transaction
    undone = sqlite3.connect(w.path).execute(
        "SELECT undone_at FROM compactions WHERE run_id = ?", (second.run_id,)
    )
    assert undone.fetchall() == [(ts,)]
    assert json.loads(detail) == {
        "action": "undo",
        "key": "k",
        "undone_run_id": second.run_id,
        "restored_run_id": first.run_id,
        "messages": plan.messages,
    }


def test_undo_never_brings_back_a_summary_a_reset_deleted(server, tmp_path):
    """SPEC 7: /reset deletes the transcript outright. A compaction before a reset went with
    it: undoing the compaction after the reset restores no summary (there was none), and
    undoing the one before is refused: its messages are gone."""
    w = VolumeWriter(tmp_path / "agent.db")
    session = due_thread(w, "k", turns=6)
    w.close()
    server.answer = lambda body: "SUMMARY OF PRE-RESET TALK"
    try:
        [first], _ = compact([str(w.path)], request(server))
        assert first.status == "compacted"
        w = VolumeWriter(w.path)
        w.conn.execute("DELETE FROM messages WHERE session_id = ?", (session,))  # the agent's
        w.conn.execute("UPDATE sessions SET summary = NULL WHERE id = ?", (session,))  # /reset
        w.close()
        for n in range(6):
            agent_turn(w.path, session, n)
        server.answer = lambda body: "Summary after the reset."
        [second], _ = compact([str(w.path)], request(server, force=True, key="k"))
        assert second.status == "compacted"
    finally:
        server.answer = None
    plan = undo_in(w.path, "k")
    assert (plan.run_id, plan.restored_run_id, plan.restored_summary) == (second.run_id, None, None)
    assert state(w.path, session)[1] == (None,)
    with pytest.raises(ProblemsFound, match="are gone"):
        undo_in(w.path, "k")


def test_a_compaction_whose_earlier_messages_came_back_during_its_call_is_a_conflict(
    server, tmp_path
):
    """`thread undo` of the compaction before, while the next one waits for its model: the
    summary text it restores may be the very text the thread had (A, B, A), but the messages
    it brings back lie before the new fold, which must not then be committed (they would
    replay after a summary of what follows them)."""
    w = VolumeWriter(tmp_path / "agent.db")
    session = due_thread(w, "k", turns=6)
    w.close()
    server.answer = lambda body: "The same summary every time."
    try:
        for n in range(2):
            [done], _ = compact([str(w.path)], request(server, force=True, key="k"))
            assert done.status == "compacted", done
            for m in range(3):
                agent_turn(w.path, session, 10 * n + m)
        before = state(w.path, session)[0]
        server.on_request = lambda body: undo_in(w.path, "k")
        [third], code = compact([str(w.path)], request(server, force=True, key="k"))
    finally:
        server.answer = server.on_request = None
    assert (third.status, code) == ("conflict", 1), third
    assert "became live again" in third.error
    live = [m for m in state(w.path, session)[0] if m[7] is None]
    assert [m[0] for m in live] == sorted(m[0] for m in live)
    folded_before_undo = {m[0] for m in before if m[7] is not None}
    assert all(m[7] is None or m[0] in folded_before_undo for m in state(w.path, session)[0])


def test_a_fold_of_one_message_is_checked_and_committed(server, tmp_path):
    """A question the agent never answered (it crashed, or the user sent another), then two
    turns: the fold is that one message. The commit's checks hold for a fold of any length
    (the live messages up to its last are those the plan saw), and undo brings it back."""
    w = VolumeWriter(tmp_path / "agent.db")
    session = w.thread("k")
    w.message(session, "system", "Channel context: #ops.")
    w.message(session, "user", "Is the rollout still on for today? " * 4)
    w.close()
    for n in range(2):
        agent_turn(w.path, session, n)
    before = state(w.path, session)
    server.answer = lambda body: "The user asked whether the rollout is on for today."
    try:
        [done], code = compact([str(w.path)], request(server, force=True, key="k"))
    finally:
        server.answer = None
    assert (done.status, done.folded_messages, code) == ("compacted", 1, 0), done
    folded = [m[2] for m in state(w.path, session)[0] if m[7] is not None]
    assert folded == ["user"]
    undo_in(w.path, "k")
    assert state(w.path, session)[:2] == before[:2]


@pytest.mark.parametrize("indexed", [True, False], ids=["index-built-before", "no-index"])
def test_search_does_not_find_undone_summaries(server, tmp_path, indexed):
    """SPEC 13: what `thread undo` took out of the thread is not found, whether the search
    index was built before the undo (and still holds it) or not."""
    from volumetool.search.find import SearchRequest, search

    w = VolumeWriter(tmp_path / "agent.db")
    session = due_thread(w, "k", turns=6)
    w.close()

    def found(word: str, **options) -> list[tuple]:
        rows = search(w.path, SearchRequest(word, kinds=("summaries",)), **options)
        return [(r["kind"], r["session_id"], r["folded"]) for r in rows]

    for n, word in enumerate(("zebrafirst", "quokkasecond")):
        server.answer = lambda body, word=word: f"Summary {word}: deploy/values.yaml, PR #204."
        [outcome], _ = compact([str(w.path)], request(server))
        assert outcome.status == "compacted", outcome
        agent_turn(w.path, session, n)
    server.answer = None
    if indexed:  # the index holds both: the current summary and the one it replaced
        assert found("zebrafirst") == [("summary", session, True)]
        assert found("quokkasecond") == [("summary", session, False)]
    undo_in(w.path, "k")  # the second: the first summary is the thread's again
    assert found("quokkasecond", write_index=False) == []  # the index as it was
    assert found("zebrafirst", write_index=False) == [("summary", session, False)]
    assert found("quokkasecond") == [] and found("zebrafirst") == [("summary", session, False)]
    undo_in(w.path, "k")  # the first: no summary at all
    assert found("zebrafirst", write_index=False) == [] and found("zebrafirst") == []
    with sqlite3.connect(w.path) as conn:  # the refreshed index keeps no copy of either
        texts = " ".join(t for (t,) in conn.execute("SELECT c0 FROM search_texts_content"))
    assert "zebrafirst" not in texts and "quokkasecond" not in texts


def test_a_thread_is_held_after_undo_until_compacted_by_name(server, tmp_path, run_cli):
    """SPEC 13: `thread undo` holds the thread. A pass without --key skips it (reason
    held_after_undo, exit 0, no call); sessions, status and report show it; `compact --key`
    compacts it and releases the hold."""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "k", turns=6)
    due_thread(w, "other", turns=6)
    w.close()
    compact([str(w.path)], request(server))
    assert run_cli("thread", "undo", w.path, "k", "--yes").exit_code == 0

    def shown() -> tuple:
        listed = json.loads(run_cli("sessions", w.path, "--json").stdout)
        totals = json.loads(run_cli("status", w.path, "--json").stdout)
        text = run_cli("status", w.path).stderr + run_cli("status", w.path).stdout
        page = tmp_path / "report.html"
        assert run_cli("report", w.path, "-o", page).exit_code == 0
        marked = "held after undo" in page.read_text()
        held = {row["conversation_key"]: row["held"] for row in listed}
        return held, totals["sessions"]["held"], "after thread undo" in text, marked

    assert shown() == ({"k": True, "other": False}, 1, True, True)
    server.requests.clear()
    outcomes, code = compact([str(w.path)], request(server))
    assert [(o.conversation_key, o.status, o.reason) for o in outcomes] == [
        ("k", "skipped", "held_after_undo")
    ]
    assert code == 0 and server.requests == [] and "compact --key" in outcomes[0].error
    [named], code = compact([str(w.path)], request(server, key="k"))
    assert (named.status, code) == ("compacted", 0)
    assert shown() == ({"k": False, "other": False}, 0, False, False)


def test_back_off_counts_no_failure_from_before_an_undone_compaction(server, tmp_path):
    """Two failures, then a compaction that succeeded (by --force) and was undone: the
    failures are not "the latest compaction runs since the last successful one" (SPEC 6)."""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "k", turns=6)
    w.close()
    server.fault = "500"
    try:
        for _ in range(2):
            [failed], _ = compact([str(w.path)], request(server, key="k", force=True))
            assert failed.status == "failed"
    finally:
        server.fault = None
    [forced], _ = compact([str(w.path)], request(server, key="k", force=True))
    assert forced.status == "compacted"
    undo_in(w.path, "k")
    [again], code = compact([str(w.path)], request(server, key="k"))
    assert (again.status, again.reason, code) == ("compacted", None, 0), again.error

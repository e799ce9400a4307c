"""prune and erase: retention by policy and erasure on request, each one transaction with its
audit event, runs and token totals kept, and erased text gone from the file's bytes."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_clean_error
from tests.support.volumes import VolumeWriter, file_digest, table_dump
from tests.test_backup import ROOT, VT, run_vt, vt_env
from tests.test_cli import SIGNALS
from tests.test_search import damage_search_index
from tests.test_threads import query
from volumetool.lifecycle import PRUNE_FIELDS
from volumetool.text import plural

# One token each, lowercase: the search index keeps it whole as a term (after the few first
# characters it may share with the term before it), so a grep for its tail finds it there too.
MARKER = "qzmarker7419x"  # written only into the conversation that is erased
OTHER = "yykept2025w"  # written into another one, which stays

# -- prune -------------------------------------------------------------------------------------


def old_and_new(tmp_path, threads: int = 6, size: int = 40) -> Path:
    """Archived threads from October and from late November, an active thread from October,
    each with messages, runs and audit events; half the October ones compacted."""
    w = VolumeWriter(tmp_path / "agent.db")
    w.clock = w.clock.replace(month=10)
    for n in range(threads):
        for status in ("archived", "active" if n == 0 else "archived"):
            key = f"k{n}:{status}"
            s = w.thread(key, status=status, summary=f"summary {n}" if n % 2 else None)
            run = w.run(s, trigger="compaction") if n % 2 else None
            for m in range(size):
                w.message(
                    s,
                    "user",
                    f"message {m} of {key} " + "x" * 200,
                    folded_by=run if m < 4 else None,
                )
            if run:
                w.insert("compactions", run_id=run, session_id=s, summary=f"kept {n}")
            w.run(s, input_tokens=1000 + n, output_tokens=10 + n)
            w.audit("permission", {"tool": "read_file"}, session=s)
        w.clock = w.clock.replace(month=10, day=20)
    w.clock = w.clock.replace(month=11, day=25)
    for n in range(2):
        s = w.thread(f"late:{n}", status="archived")
        w.turn(s, 1)
    w.close()
    return w.path


def test_prune_deletes_archived_threads_updated_before_when_and_nothing_else(tmp_path, run_cli):
    path = old_and_new(tmp_path)
    before = query(path, "SELECT id, conversation_key, status, updated_at FROM sessions")
    result = run_cli("prune", path, "--archived-before", "2026-11-01", "--json")
    assert result.exit_code == 0, result
    gone = {s for s, _, status, at in before if status == "archived" and at < "2026-11-01"}
    kept = {s for s, *_ in before} - gone
    assert {s for (s,) in query(path, "SELECT id FROM sessions")} == kept
    assert query(path, "SELECT count(*) FROM sessions WHERE status = 'active'") == [(1,)]
    assert query(
        path,
        "SELECT count(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)",
    ) == [(0,)]
    assert query(
        path, "SELECT count(*) FROM compactions WHERE session_id NOT IN (SELECT id FROM sessions)"
    ) == [(0,)]
    report = json.loads(result.stdout)
    assert report["threads"] == len(gone) and report["dry_run"] is False
    assert run_cli("check", path).exit_code == 0


def test_prune_keeps_runs_and_audit_events_detached_so_token_totals_do_not_change(
    tmp_path, run_cli
):
    path = old_and_new(tmp_path)
    status = json.loads(run_cli("status", path, "--json").stdout)
    runs = query(path, "SELECT id, trigger, input_tokens, output_tokens FROM runs ORDER BY id")
    audit_before = query(path, "SELECT id, detail FROM audit ORDER BY id")
    assert run_cli("prune", path, "--archived-before", "2026-11-01").exit_code == 0
    after = json.loads(run_cli("status", path, "--json").stdout)
    assert after["tokens"] == status["tokens"]
    assert after["runs"] == status["runs"]
    assert (
        query(path, "SELECT id, trigger, input_tokens, output_tokens FROM runs ORDER BY id") == runs
    )
    assert (
        query(path, "SELECT id, detail FROM audit ORDER BY id")[: len(audit_before)] == audit_before
    )
    assert query(path, "SELECT count(*) FROM runs WHERE session_id IS NULL")[0][0] > 0


@pytest.mark.parametrize(
    "deletion",
    [
        ("prune", "--archived-before", "2026-11-01"),
        ("erase", "--key", "k1:archived", "--yes"),
        ("erase", "--key", "k3:archived", "--yes"),
    ],
)
def test_prune_and_erase_keep_what_the_deleted_compactions_saved_in_the_status_total(
    tmp_path, run_cli, deletion
):
    """SPEC 11: token totals stay right. A deleted thread's `compactions` rows go with it; the
    total of what standing compactions saved (SPEC 10: tokens.compaction_saved) does not."""
    path = old_and_new(tmp_path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE compactions SET saved_tokens = 100 * run_id")
        conn.execute(
            "UPDATE compactions SET undone_at = 't' WHERE run_id = ?",
            (conn.execute("SELECT max(run_id) FROM compactions").fetchone()[0],),
        )
    conn.close()
    [(standing,)] = query(path, "SELECT sum(saved_tokens) FROM compactions WHERE undone_at IS NULL")
    before = json.loads(run_cli("status", path, "--json").stdout)["tokens"]
    assert before["compaction_saved"] == standing
    result = run_cli(*deletion[:1], path, *deletion[1:], "--json")
    assert result.exit_code == 0, result
    assert json.loads(result.stdout)["compaction_saved"] > 0
    after = json.loads(run_cli("status", path, "--json").stdout)["tokens"]
    assert after == before
    # the deleted rows are gone: the event is what keeps their savings
    [(left,)] = query(
        path, "SELECT coalesce(sum(saved_tokens), 0) FROM compactions WHERE undone_at IS NULL"
    )
    assert left < standing


def test_prune_writes_one_thread_event_with_the_counts(tmp_path, run_cli):
    path = old_and_new(tmp_path)
    result = run_cli("prune", path, "--archived-before", "2026-11-01", "--json")
    [(event, detail, session, actor)] = query(
        path,
        "SELECT event, detail, session_id, actor FROM audit WHERE id = (SELECT max(id) FROM audit)",
    )
    detail = json.loads(detail)
    assert (event, detail["action"], session, actor) == ("thread", "prune", None, "volumetool")
    assert detail["archived_before"] == "2026-11-01T00:00:00.000Z"
    report = json.loads(result.stdout)
    assert {k: detail[k] for k in report if k in detail} == {
        k: v for k, v in report.items() if k in detail
    }
    assert detail["threads"] == 11 and detail["messages"] == 11 * 40


def test_a_dry_run_predicts_the_prune_exactly_and_writes_nothing(tmp_path, run_cli):
    path = old_and_new(tmp_path)
    digest = file_digest(path)
    dry = run_cli("prune", path, "--archived-before", "2026-11-01", "--dry-run", "--json")
    assert dry.exit_code == 0, dry
    assert file_digest(path) == digest
    before = {s for (s,) in query(path, "SELECT id FROM sessions")}
    real = run_cli("prune", path, "--archived-before", "2026-11-01", "--json")
    predicted = json.loads(dry.stdout)
    listed = predicted.pop("thread_list")
    assert {**predicted, "dry_run": False} == json.loads(real.stdout)
    assert {row["id"] for row in listed} == before - {
        s for (s,) in query(path, "SELECT id FROM sessions")
    }
    assert "would prune 11 archived threads" in dry.stderr
    assert "pruned 11 archived threads" in real.stderr


# The counts a prune's --json has printed since it was added: scripts read them.
PRUNE_COUNTS = {
    "archived_before",
    "dry_run",
    "threads",
    "messages",
    "summaries",
    "kept_summaries",
    "runs_detached",
    "audit_detached",
    "compaction_saved",
    "finished_earlier",  # added: what an interrupted prune this one finished first deleted
}


def listed_ids(output: str, fmt: list[str]) -> list[int]:
    """The `id` column of a prune --dry-run listing in the format `fmt` names."""
    if fmt == ["--json"]:
        document = json.loads(output)
        assert set(document) == PRUNE_COUNTS | {"thread_list"}
        return [row["id"] for row in document["thread_list"]]
    if fmt == ["--nl"]:
        return [json.loads(line)["id"] for line in output.splitlines()]
    if fmt in (["--csv"], ["--tsv"]):
        lines = output.splitlines()
        rows = csv.reader(lines) if fmt == ["--csv"] else (line.split("\t") for line in lines)
        header, *cells = list(rows)
        assert header == list(PRUNE_FIELDS)
        return [int(row[0]) for row in cells]
    if fmt == ["--fmt", "github"]:  # | id | conversation_key | …, then |---|
        header, _, *rows = output.splitlines()
        assert header.split("|")[1].strip() == "id"
        return [int(row.split("|")[1]) for row in rows]
    header, _, *rows = output.splitlines()  # the plain table: a header, dashes, one row a line
    assert header.split()[:2] == ["id", "conversation_key"]
    return [int(row.split()[0]) for row in rows]


LISTING_FORMATS = [[], ["--table"], ["--fmt", "github"], ["--csv"], ["--tsv"], ["--nl"], ["--json"]]


@pytest.mark.parametrize("fmt", LISTING_FORMATS, ids=lambda f: " ".join(f) or "default")
def test_a_dry_run_lists_the_threads_it_would_prune_in_every_listing_format(tmp_path, run_cli, fmt):
    """SPEC 13: an operator reviews what a policy would delete, not only how much."""
    path = old_and_new(tmp_path)
    doomed = query(
        path,
        "SELECT id FROM sessions WHERE status = 'archived' AND updated_at < '2026-11-01'"
        " ORDER BY updated_at DESC, id DESC",
    )
    digest = file_digest(path)
    result = run_cli("prune", path, "--archived-before", "2026-11-01", "--dry-run", *fmt)
    assert result.exit_code == 0, result
    assert listed_ids(result.stdout, fmt) == [s for (s,) in doomed]
    assert "would prune 11 archived threads" in result.stderr
    assert file_digest(path) == digest


@pytest.mark.parametrize("fmt", LISTING_FORMATS, ids=lambda f: " ".join(f) or "default")
def test_a_dry_run_that_would_prune_nothing_is_an_empty_listing_in_every_format(
    tmp_path, run_cli, fmt
):
    path = old_and_new(tmp_path)
    digest = file_digest(path)
    result = run_cli("prune", path, "--archived-before", "2026-09-01", "--dry-run", *fmt)
    assert result.exit_code == 0, result
    assert listed_ids(result.stdout, fmt) == []
    assert "would prune 0 archived threads" in result.stderr
    assert file_digest(path) == digest
    if fmt == ["--json"]:
        assert json.loads(result.stdout)["threads"] == 0


def test_a_dry_run_lists_each_thread_as_sessions_does_with_what_it_folded(tmp_path, run_cli):
    """The columns a prune listing shares with `sessions` mean the same; folded_messages are
    the rest of what goes, so the rows add up to the counts."""
    path = old_and_new(tmp_path)
    result = run_cli(
        "prune", path, "--archived-before", "2026-11-01", "--dry-run", "--json", "-n", "0"
    )
    document = json.loads(result.stdout)
    listed = document["thread_list"]
    sessions = json.loads(run_cli("sessions", path, "--status", "all", "--json", "-n", "0").stdout)
    by_id = {row["id"]: row for row in sessions}
    for row in listed:
        assert list(row) == list(PRUNE_FIELDS)
        shared = {k: v for k, v in row.items() if k != "folded_messages"}
        assert shared == {k: by_id[row["id"]][k] for k in shared}
        assert by_id[row["id"]]["status"] == "archived"
    assert sum(r["messages"] + r["folded_messages"] for r in listed) == document["messages"]
    assert sum(r["folded_messages"] for r in listed) > 0  # the compacted ones folded some
    assert sum(r["has_summary"] for r in listed) == document["summaries"]


def test_a_dry_run_listing_is_cut_at_the_limit_but_counts_everything(tmp_path, run_cli):
    path = old_and_new(tmp_path)
    for fmt in (["--json"], ["--nl"]):
        result = run_cli(
            "prune", path, "--archived-before", "2026-11-01", "--dry-run", "-n", "3", *fmt
        )
        assert result.exit_code == 0, result
        assert len(listed_ids(result.stdout, fmt)) == 3
        assert "showing the first 3 threads; -n 0 shows all" in result.stderr
        assert "would prune 11 archived threads" in result.stderr


@pytest.mark.parametrize(
    "fmt", [["--csv"], ["--tsv"], ["--nl"], ["--table"], ["--fmt", "grid"], ["-n", "1"]]
)
def test_a_prune_takes_no_listing_format_but_json_and_deletes_nothing_then(tmp_path, run_cli, fmt):
    # -n is not "prune only N": refused rather than ignored, which deleted every thread.
    path = old_and_new(tmp_path)
    digest = file_digest(path)
    result = run_cli("prune", path, "--archived-before", "2026-11-01", *fmt)
    assert_clean_error(result, 2, fmt[0], "--dry-run")
    assert file_digest(path) == digest


def test_a_prunes_json_is_the_counts_object_it_always_was(tmp_path, run_cli):
    path = old_and_new(tmp_path)
    result = run_cli("prune", path, "--archived-before", "2026-11-01", "--json")
    assert result.exit_code == 0, result
    document = json.loads(result.stdout)
    assert set(document) == PRUNE_COUNTS
    assert result.stdout.startswith('{\n  "archived_before": ')  # indented, as before


def test_a_prune_with_nothing_to_prune_writes_nothing(tmp_path, run_cli):
    path = old_and_new(tmp_path)
    digest = file_digest(path)
    result = run_cli("prune", path, "--archived-before", "2026-09-01")
    assert result.exit_code == 0, result
    assert "pruned 0 archived threads" in result.stderr
    assert file_digest(path) == digest


def test_prune_vacuum_gives_the_space_back(tmp_path, run_cli):
    path = old_and_new(tmp_path, threads=40, size=60)
    size = path.stat().st_size
    assert run_cli("prune", path, "--archived-before", "2026-11-01").exit_code == 0
    assert path.stat().st_size >= size  # the pages are free, the file as large
    vacuumed = run_cli("prune", path, "--archived-before", "2026-11-01", "--vacuum")
    assert vacuumed.exit_code == 0, vacuumed
    assert path.stat().st_size < size / 4
    assert f"from {size:,}" in vacuumed.stderr


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ("2999-01-01", "in the future"),
        ("yesterday", "neither an ISO"),
        ("99999999999999w", "range"),
    ],
)
def test_a_when_in_the_future_or_unreadable_is_exit_2_and_changes_nothing(
    tmp_path, run_cli, when, message
):
    path = old_and_new(tmp_path)
    digest = file_digest(path)
    result = run_cli("prune", path, "--archived-before", when)
    assert result.exit_code == 2, result
    assert message in result.stderr and "Traceback" not in result.stderr
    assert file_digest(path) == digest


def test_prune_takes_pruned_text_out_of_the_search_index(tmp_path, run_cli):
    path = old_and_new(tmp_path)
    assert run_cli("search", path, "message").exit_code == 0  # builds the index
    assert run_cli("prune", path, "--archived-before", "2026-11-01").exit_code == 0
    left = query(path, "SELECT c0 FROM search_messages_content")
    assert sorted(left) == sorted(query(path, "SELECT content FROM messages"))
    found = json.loads(run_cli("search", path, "message", "--json", "-n", "0").stdout)
    assert {r["conversation_key"] for r in found} == {"k0:active"}


def test_prune_takes_text_out_of_the_index_in_transactions_sized_by_time(
    tmp_path, run_cli, monkeypatch
):
    """The pruned messages leave the search index in short transactions too, each sized by
    how long the one before held the write lock (here, when any work at all is too long,
    one index row each after the first), giving way after each."""
    from volumetool import volume as volumes
    from volumetool.search import index

    path = old_and_new(tmp_path, threads=2)  # three archived threads of 40 messages go
    assert run_cli("search", path, "message").exit_code == 0  # builds the index
    [(indexed,)] = query(path, "SELECT count(*) FROM search_messages_content")
    monkeypatch.setattr(volumes, "WORK_SECONDS", 0, raising=False)
    seen = []

    def between(seconds: float) -> None:
        seen.append(query(path, "SELECT count(*) FROM search_messages_content")[0][0])

    monkeypatch.setattr(index.time, "sleep", between)
    assert run_cli("prune", path, "--archived-before", "2026-11-01").exit_code == 0
    taken = sorted({indexed - left for left in seen if left < indexed})
    assert taken[:3] == [100, 101, 102] and taken[-1] == 3 * 40
    left = query(path, "SELECT c0 FROM search_messages_content")
    assert sorted(left) == sorted(query(path, "SELECT content FROM messages"))


def prune_states(path: Path, doomed: set[int]) -> tuple[int, int, list[dict]]:
    """The doomed threads and their messages still there, and the prune events."""
    marks = ",".join(map(str, doomed))
    [(threads, messages)] = query(
        path,
        f"SELECT (SELECT count(*) FROM sessions WHERE id IN ({marks})),"
        f" (SELECT count(*) FROM messages WHERE session_id IN ({marks}))",
    )
    events = query(
        path,
        "SELECT detail FROM audit WHERE event = 'thread' AND detail ->> 'action' = 'prune'",
    )
    return threads, messages, [json.loads(detail) for (detail,) in events]


def doomed_threads(path: Path, before: str = "2026-11-01") -> tuple[set[int], int]:
    doomed = {
        s
        for (s,) in query(
            path, "SELECT id FROM sessions WHERE status = 'archived' AND updated_at < ?", before
        )
    }
    return doomed, prune_states(path, doomed)[1]


def test_prune_commits_in_short_transactions_and_the_agent_writes_between_them(
    tmp_path, run_cli, monkeypatch
):
    """Between two of prune's transactions the write lock is free: an agent that does not
    wait at all (busy timeout 0) writes a turn there, and it stays. Each commit leaves the
    volume whole, its one event counting exactly what is gone so far, `"finished": false`
    until the last."""
    from volumetool import lifecycle

    path = old_and_new(tmp_path, size=450)
    doomed, messages = doomed_threads(path)
    monkeypatch.setattr(lifecycle, "WORK_SECONDS", 0, raising=False)  # one step each
    [(active,)] = query(path, "SELECT id FROM sessions WHERE status = 'active'")
    agent = sqlite3.connect(path, timeout=0, isolation_level=None)
    seen = []

    def agent_turn(seconds: float) -> None:
        agent.execute("BEGIN IMMEDIATE")
        agent.execute(
            "INSERT INTO messages (session_id, role, content, created_at)"
            " VALUES (?, 'user', 'agent turn', '2026-12-01T00:00:00.000Z')",
            (active,),
        )
        agent.execute("COMMIT")
        seen.append(prune_states(path, doomed))

    monkeypatch.setattr(lifecycle.time, "sleep", agent_turn)
    result = run_cli("prune", path, "--archived-before", "2026-11-01", "--json")
    agent.close()
    assert result.exit_code == 0, result
    assert len(seen) == len(doomed)  # a thread a commit, whole (then one that finds none left)
    for threads_left, messages_left, [event] in seen:
        assert event.pop("finished") is False
        assert event["threads"] == len(doomed) - threads_left
        assert event["messages"] == messages - messages_left
    assert [left for _, left, _ in seen] == sorted((left for _, left, _ in seen), reverse=True)
    [(turns,)] = query(path, "SELECT count(*) FROM messages WHERE content = 'agent turn'")
    assert turns == len(seen)
    [event] = prune_states(path, doomed)[2]
    assert "finished" not in event
    assert (event["threads"], event["messages"]) == (len(doomed), messages) == (11, 11 * 450)
    assert json.loads(result.stdout)["threads"] == 11
    assert run_cli("check", path).exit_code == 0


def test_a_thread_the_agent_makes_active_again_during_a_prune_keeps_every_message(
    tmp_path, run_cli, monkeypatch
):
    """A user comes back to an old archived thread while prune works through the others: the
    agent makes it active between two of prune's transactions. It must lose nothing (a thread
    deleted in parts lost its oldest messages): each thread is deleted whole or not at all."""
    from volumetool import lifecycle

    path = old_and_new(tmp_path, size=450)
    doomed, _ = doomed_threads(path)
    before = {s: n for s, n in query(path, "SELECT session_id, count(*) FROM messages GROUP BY 1")}
    monkeypatch.setattr(lifecycle, "WORK_SECONDS", 0, raising=False)
    agent = sqlite3.connect(path, timeout=0, isolation_level=None)
    revived = []

    def user_returns(seconds: float) -> None:
        if revived:
            return
        [(thread,)] = query(
            path,
            "SELECT id FROM sessions WHERE status = 'archived' AND updated_at < '2026-11-01'"
            " ORDER BY updated_at, id LIMIT 1",
        )
        agent.execute(
            "UPDATE sessions SET status = 'active', archived_at = NULL,"
            " updated_at = '2026-12-01T00:00:00.000Z' WHERE id = ?",
            (thread,),
        )
        revived.append(thread)

    monkeypatch.setattr(lifecycle.time, "sleep", user_returns)
    assert run_cli("prune", path, "--archived-before", "2026-11-01").exit_code == 0
    agent.close()
    [thread] = revived
    assert query(path, "SELECT count(*) FROM messages WHERE session_id = ?", thread) == [
        (before[thread],)
    ]
    left = {s for (s,) in query(path, "SELECT id FROM sessions")}
    assert left & doomed == {thread}


STALE_INDEX_ROWS = (
    "SELECT c.id FROM search_messages_content c LEFT JOIN messages m ON m.id = c.id"
    " WHERE m.content IS NOT c.c0"
)


def test_an_interrupted_prune_says_what_it_deleted_and_the_next_one_finishes_it(
    tmp_path, run_cli, monkeypatch
):
    """Ctrl-C (or SIGTERM) between two transactions: the threads deleted so far stay deleted,
    counted by the event, and the message says so; the next prune, whatever its WHEN, first
    finishes that one under its one event."""
    from volumetool import lifecycle

    path = old_and_new(tmp_path, size=450)
    doomed, messages = doomed_threads(path)
    assert run_cli("search", path, "anything").exit_code in (0, 1)  # the index is built
    monkeypatch.setattr(lifecycle, "WORK_SECONDS", 0, raising=False)
    sleep = time.sleep
    turns = []
    steps = 2  # two threads

    def interrupted(seconds: float) -> None:
        turns.append(seconds)
        if len(turns) == steps:
            raise KeyboardInterrupt

    monkeypatch.setattr(lifecycle.time, "sleep", interrupted)
    result = run_cli("prune", path, "--archived-before", "2026-11-01")
    monkeypatch.setattr(lifecycle.time, "sleep", sleep)
    assert_clean_error(result, 130)
    threads_left, messages_left, [event] = prune_states(path, doomed)
    assert 0 < event["threads"] == len(doomed) - threads_left < len(doomed)
    assert event["messages"] == messages - messages_left and event["finished"] is False
    assert result.stderr.startswith(
        f"volumetool: {path}: interrupted; pruned {plural(event['threads'], 'thread')}"
        " (committed), but"
        " not all of them yet — run the same prune again to finish it"
    ), result.stderr
    assert run_cli("check", path).exit_code == 0
    predicted = run_cli("prune", path, "--archived-before", "2026-10-05", "--dry-run", "--json")
    assert predicted.exit_code == 0, predicted
    assert "would first finish the prune interrupted earlier" in predicted.stderr
    again = run_cli("prune", path, "--archived-before", "2026-10-05", "--json")
    assert again.exit_code == 0, again
    assert "pruned 0 archived threads" in again.stderr
    # --json says what this prune finished first, as stderr does: its event's counts, in all
    report = json.loads(again.stdout)
    assert report["threads"] == 0 and report["finished_earlier"]["threads"] == 11
    assert {**json.loads(predicted.stdout), "dry_run": False, "thread_list": None} == report | {
        "thread_list": None
    }
    assert (
        "finished the prune interrupted earlier, which pruned 11 archived threads last updated"
        " before 2026-11-01T00:00:00.000Z (4,950 messages"
    ) in again.stderr
    # what it finished is out of the search index too, though this prune deleted nothing
    assert query(path, STALE_INDEX_ROWS) == []
    threads_left, messages_left, [event] = prune_states(path, doomed)
    assert (threads_left, messages_left) == (0, 0)
    assert (event["threads"], event["messages"]) == (11, 11 * 450)
    assert "finished" not in event and event["archived_before"] == "2026-11-01T00:00:00.000Z"
    assert report["finished_earlier"] == {k: v for k, v in event.items() if k != "action"}


def test_a_prune_locked_out_midway_says_what_it_deleted(tmp_path, run_cli, monkeypatch):
    """The agent holding the write lock past the busy timeout between two of prune's
    transactions: exit 4, saying how many threads are deleted (committed)."""
    from volumetool import lifecycle

    path = old_and_new(tmp_path, size=450)
    monkeypatch.setattr(lifecycle, "WORK_SECONDS", 0, raising=False)
    agent = sqlite3.connect(path, isolation_level=None)
    turns = []

    def agent_holds_the_lock(seconds: float) -> None:
        turns.append(seconds)
        if len(turns) == 5:
            agent.execute("BEGIN IMMEDIATE")

    monkeypatch.setattr(lifecycle.time, "sleep", agent_holds_the_lock)
    result = run_cli("prune", path, "--archived-before", "2026-11-01", "--busy-timeout", "0")
    agent.execute("ROLLBACK")
    agent.close()
    [event] = prune_states(path, doomed_threads(path)[0])[2]
    assert_clean_error(
        result, 4, f"pruned {plural(event['threads'], 'thread')} (committed), but not all"
    )
    assert "run the same prune again to finish it" in result.stderr


def test_a_prune_killed_midway_is_finished_by_the_next_under_its_one_event(tmp_path):
    """SIGKILL while a prune deletes: what it committed is whole and counted by its event;
    the same prune again ends where one uninterrupted prune ends, one event included."""
    path = old_and_new(tmp_path, threads=40, size=300)
    reference = tmp_path / "reference" / "agent.db"
    reference.parent.mkdir()
    shutil.copyfile(path, reference)
    assert run_vt("prune", reference, "--archived-before", "2026-11-01").returncode == 0
    doomed, messages = doomed_threads(path)
    prune = subprocess.Popen(
        [*VT, "prune", str(path), "--archived-before", "2026-11-01"],
        cwd=ROOT,
        env=vt_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while prune.poll() is None and not any(
        "finished" in event for event in prune_states(path, doomed)[2]
    ):
        time.sleep(0.005)
    prune.send_signal(signal.SIGKILL)
    assert prune.wait() == -signal.SIGKILL, "the prune ended before it could be killed midway"
    threads_left, messages_left, [event] = prune_states(path, doomed)
    assert event["finished"] is False and threads_left > 0
    assert event["threads"] == len(doomed) - threads_left
    assert event["messages"] == messages - messages_left
    assert run_vt("check", path).returncode == 0
    assert run_vt("prune", path, "--archived-before", "2026-11-01").returncode == 0
    tables = ("sessions", "messages", "runs", "compactions", "memories")
    assert table_dump(path, tables) == table_dump(reference, tables)
    events = "SELECT id, event, detail, session_id, run_id, actor FROM audit ORDER BY id"
    assert query(path, events) == query(reference, events)


# -- erase -------------------------------------------------------------------------------------

# Runs `volumetool erase` with the signal sent to itself as the file's free pages are to be
# scrubbed (VACUUM): the threads are deleted, committed, and the scrub does not finish.
SIGNALLED_IN_THE_SCRUB = """
import os, sys
from volumetool import lifecycle
from volumetool.cli import main

def signalled(volume):
    os.kill(os.getpid(), int(os.environ["SIGNAL"]))

lifecycle.vacuum = signalled
sys.argv[0] = "volumetool"
main()
"""


class Agent:
    """The runtime's own connection: no secure_delete, so what it deletes or rewrites stays in
    free space, as with any SQLite built without it."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA secure_delete = OFF")

    def run(self, sql: str, *params) -> int:
        return self.conn.execute(sql, params).lastrowid


def conversation(tmp_path, journal: str = "wal") -> tuple[Path, Agent]:
    """The conversation under `telegram:ana` holds MARKER everywhere text can be: live and
    folded messages, messages the agent itself reset, the current summary and the one before,
    a kept summary, the facts a compaction missed, an archived thread, a memory under `ana.`;
    `discord:bob` holds OTHER. The search index is built. The agent's connection stays open,
    so its last writes are still in the WAL."""
    w = VolumeWriter(tmp_path / "agent.db")
    w.conn.execute(f"PRAGMA journal_mode = {journal}")
    old = w.thread("telegram:ana", status="archived")
    w.message(old, "user", f"my card is {MARKER}, archived")
    bob = w.thread("discord:bob")
    w.message(bob, "user", f"bob says {OTHER}")
    w.memory("bob.note", f"bob {OTHER}")
    w.close()
    agent = Agent(w.path)
    ana = agent.run(
        "INSERT INTO sessions (conversation_key, channel, status, summary, created_at, updated_at)"
        " VALUES ('telegram:ana', 'telegram', 'active', ?, 't', 't')",
        f"first summary {MARKER}",
    )
    for n in range(30):
        agent.run(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, ?, ?, 't')",
            ana,
            "user" if n % 2 == 0 else "assistant",
            f"turn {n}: {MARKER} " + "y" * 300,
        )
    agent.run("DELETE FROM messages WHERE session_id = ? AND id % 5 = 0", ana)  # a /reset of some
    run = agent.run(
        "INSERT INTO runs (session_id, trigger, status, started_at) VALUES (?, 'compaction',"
        " 'ok', 't')",
        ana,
    )
    agent.run("UPDATE messages SET folded_by = ? WHERE session_id = ? AND id < 20", run, ana)
    agent.run(
        "INSERT INTO compactions (run_id, session_id, summary) VALUES (?, ?, ?)",
        run,
        ana,
        f"kept summary {MARKER}",
    )
    agent.run("UPDATE sessions SET summary = ? WHERE id = ?", f"second summary {MARKER}", ana)
    agent.run(
        "INSERT INTO audit (ts, event, detail, session_id, run_id) VALUES ('t', 'compaction', ?,"
        " ?, ?)",
        json.dumps({"action": "compacted", "missing_facts": [MARKER], "saved_tokens": 9}),
        ana,
        run,
    )
    agent.run("INSERT INTO memories VALUES ('ana.card', ?, 't', 't')", f"card {MARKER}")
    return w.path, agent


def raw_bytes(path: Path) -> dict[str, bytes]:
    return {
        suffix or "db": Path(f"{path}{suffix}").read_bytes()
        for suffix in ("", "-wal", "-shm", "-journal")
        if Path(f"{path}{suffix}").exists()
    }


def holds(path: Path, text: str) -> list[str]:
    """The files whose bytes hold `text` (its tail, which survives the index's compression)."""
    return [name for name, data in raw_bytes(path).items() if text[2:].encode() in data]


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_erased_text_is_in_no_byte_of_the_file_its_wal_or_shm(tmp_path, run_cli, journal):
    path, agent = conversation(tmp_path, journal)
    assert run_cli("search", path, MARKER).exit_code == 0  # the index holds it too
    agent.run(  # and keeps the copies of what the agent then deletes itself, for now
        "DELETE FROM messages WHERE id % 7 = 0 AND session_id IN"
        " (SELECT id FROM sessions WHERE conversation_key = 'telegram:ana')"
    )
    assert holds(path, MARKER)
    result = run_cli("erase", path, "--key", "telegram:ana", "--memories-prefix", "ana.", "--yes")
    assert result.exit_code == 0, result
    assert holds(path, MARKER) == []
    assert holds(path, OTHER)  # the rest is still there, and grep can see it
    found = json.loads(run_cli("search", path, OTHER, "--json").stdout)
    assert {r["conversation_key"] or r["key"] for r in found} == {"discord:bob", "bob.note"}
    agent.conn.close()
    assert run_cli("check", path).exit_code == 0


@pytest.mark.parametrize(
    "damage", ["malformed", *(f"no {suffix}" for suffix in ("data", "idx", "content", "config"))]
)
def test_an_erase_finishes_when_the_search_index_is_damaged(tmp_path, run_cli, damage):
    # the index is volumetool's own copy of the text: a damaged one must not keep the erased
    # text in the file for good (each erase again failing on it), nor one that lost a table
    # of its own to a hand (SQLite must open an FTS5 table to drop it)
    path, agent = conversation(tmp_path)
    agent.conn.close()
    assert run_cli("search", path, MARKER).exit_code == 0  # builds the index
    if damage == "malformed":
        damage_search_index(path)
    else:
        conn = sqlite3.connect(path)
        conn.execute(f"DROP TABLE search_messages_{damage.split()[1]}")
        conn.commit()
        conn.close()
    assert holds(path, MARKER)
    result = run_cli("erase", path, "--key", "telegram:ana", "--memories-prefix", "ana.", "--yes")
    assert result.exit_code == 0, result
    assert holds(path, MARKER) == []
    assert holds(path, OTHER)
    assert run_cli("check", path).exit_code == 0
    found = json.loads(run_cli("search", path, OTHER, "--json").stdout)
    assert {r["conversation_key"] or r["key"] for r in found} == {"discord:bob", "bob.note"}


def test_text_copied_from_the_conversation_into_runs_and_audit_is_erased_too(tmp_path, run_cli):
    """A failed compaction's error names the facts its summary missed, a refusal quotes the
    model, and the agent's own events may quote a tool's arguments: all of it text from the
    conversation, kept beside the thread's runs and events. The figures stay; the text goes."""
    path, agent = conversation(tmp_path)
    [(ana,)] = agent.conn.execute(
        "SELECT id FROM sessions WHERE conversation_key = 'telegram:ana' AND status = 'active'"
    ).fetchall()
    failed = agent.run(
        "INSERT INTO runs (session_id, trigger, model, status, input_tokens, started_at, error)"
        " VALUES (?, 'compaction', 'tiny', 'error', 1234, 't', ?)",
        ana,
        f"below --min-retention 0.9; missing: {MARKER}",
    )
    agent.run(
        "INSERT INTO audit (ts, event, detail, session_id, run_id) VALUES ('t', 'compaction', ?,"
        " ?, ?)",
        json.dumps(
            {
                "action": "failed",
                "reason": f"the model refused: {MARKER}",
                "model": "tiny",
                "retention": 0.5,
                "dry": False,
            }
        ),
        ana,
        failed,
    )
    agent.run(
        "INSERT INTO audit (ts, event, detail, session_id, actor) VALUES ('t', 'permission', ?,"
        " ?, 'agent')",
        json.dumps({"action": "allow", "tool": "shell", "args": f"echo {MARKER}"}),
        ana,
    )
    agent.run(
        "INSERT INTO audit (ts, event, detail, session_id, actor) VALUES ('t', 'note', ?, ?,"
        " 'agent')",
        f"not json {MARKER}",
        ana,
    )
    result = run_cli("erase", path, "--key", "telegram:ana", "--memories-prefix", "ana.", "--yes")
    assert result.exit_code == 0, result
    assert holds(path, MARKER) == []
    [(error, tokens, session)] = query(
        path, "SELECT error, input_tokens, session_id FROM runs WHERE id = ?", failed
    )
    assert (tokens, session) == (1234, None) and error and MARKER not in error
    details = query(path, "SELECT event, detail FROM audit WHERE session_id IS NULL ORDER BY id")
    assert [(event, json.loads(detail)) for event, detail in details if event != "erase"] == [
        ("compaction", {"action": "compacted", "saved_tokens": 9}),
        ("compaction", {"action": "failed", "model": "tiny", "retention": 0.5, "dry": False}),
        ("permission", {"action": "allow", "tool": "shell"}),
        ("note", {}),
    ]
    agent.conn.close()
    assert run_cli("check", path).exit_code == 0


def test_erase_deletes_every_thread_under_the_key_and_detaches_their_runs(tmp_path, run_cli):
    path, agent = conversation(tmp_path)
    others = table_dump(path, ("identity",))
    bob = query(
        path,
        "SELECT * FROM messages WHERE session_id IN"
        " (SELECT id FROM sessions WHERE conversation_key = 'discord:bob')",
    )
    runs = query(path, "SELECT id, trigger, input_tokens FROM runs ORDER BY id")
    result = run_cli(
        "erase", path, "--key", "telegram:ana", "--memories-prefix", "ana.", "--yes", "--json"
    )
    assert result.exit_code == 0, result
    assert query(path, "SELECT conversation_key FROM sessions") == [("discord:bob",)]
    assert query(path, "SELECT * FROM messages") == bob
    assert query(path, "SELECT count(*) FROM compactions") == [(0,)]
    assert query(path, "SELECT id, trigger, input_tokens FROM runs ORDER BY id") == runs
    assert query(path, "SELECT session_id FROM runs") == [(None,)]
    assert query(path, "SELECT key FROM memories") == [("bob.note",)]
    [(detail,)] = query(path, "SELECT detail FROM audit WHERE event = 'compaction'")
    assert json.loads(detail) == {"action": "compacted", "saved_tokens": 9}  # facts removed
    assert table_dump(path, ("identity",)) == others
    report = json.loads(result.stdout)
    assert report == {
        "key": "telegram:ana",
        "memories_prefix": "ana.",
        "keys": ["telegram:ana"],
        "memories_prefixes": ["ana."],
        "dry_run": False,
        "threads": 2,
        "messages": 25,
        "summaries": 1,
        "kept_summaries": 1,
        "runs_detached": 1,
        "audit_detached": 1,
        "compaction_saved": 0,  # its compactions row holds no estimate (the event's 9 is not it)
        "memories": 1,
        "finished_earlier": [],  # added: the earlier erases whose scrub this one finished
    }
    agent.conn.close()


def test_the_erase_event_names_the_key_and_counts_never_the_content(tmp_path, run_cli):
    path, _ = conversation(tmp_path)
    run_cli("erase", path, "--key", "telegram:ana", "--memories-prefix", "ana.", "--yes")
    [(event, detail, session, actor)] = query(
        path, "SELECT event, detail, session_id, actor FROM audit WHERE event = 'erase'"
    )
    assert (event, session, actor) == ("erase", None, "volumetool")
    assert MARKER not in detail
    detail = json.loads(detail)
    assert detail["key"] == "telegram:ana" and detail["memories_prefix"] == "ana."
    assert detail["threads"] == 2 and detail["messages"] == 25 and detail["memories"] == 1


def test_a_dry_run_predicts_the_erase_exactly_and_writes_nothing(tmp_path, run_cli):
    path, _ = conversation(tmp_path)
    digest = file_digest(path)
    options = ("--key", "telegram:ana", "--memories-prefix", "ana.", "--json")
    dry = run_cli("erase", path, *options, "--dry-run")
    assert dry.exit_code == 0, dry
    assert file_digest(path) == digest
    real = run_cli("erase", path, *options, "--yes")
    assert {**json.loads(dry.stdout), "dry_run": False} == json.loads(real.stdout)


def test_erase_asks_first_and_an_unanswered_prompt_erases_nothing(tmp_path, run_cli):
    path, _ = conversation(tmp_path)
    digest = file_digest(path)
    unanswered = run_cli("erase", path, "--key", "telegram:ana", input="")
    assert unanswered.exit_code == 1
    assert "Erase 2 threads under 'telegram:ana'" in unanswered.stderr
    assert (
        unanswered.stderr.splitlines()[-1].startswith("volumetool: no answer; nothing was changed")
        and "Aborted" not in unanswered.stderr
    )
    assert file_digest(path) == digest
    declined = run_cli("erase", path, "--key", "telegram:ana", input="n\n")
    assert declined.exit_code == 1 and file_digest(path) == digest
    accepted = run_cli("erase", path, "--key", "telegram:ana", input="y\n")
    assert accepted.exit_code == 0, accepted
    assert query(path, "SELECT count(*) FROM sessions WHERE conversation_key = 'telegram:ana'") == [
        (0,)
    ]


def test_a_prompt_with_stdin_closed_is_unanswered_and_erases_nothing(tmp_path):
    # cron and some service managers start a job with no stdin at all (fd 0 closed)
    path, agent = conversation(tmp_path)
    agent.conn.close()
    digest = file_digest(path)
    done = run_vt("erase", path, "--key", "telegram:ana", preexec_fn=lambda: os.close(0))
    assert done.returncode == 1, done
    assert b"internal error" not in done.stderr and b"Traceback" not in done.stderr
    assert b"Erase 2 threads under 'telegram:ana'" in done.stderr
    assert file_digest(path) == digest


def test_a_key_with_nothing_under_it_is_exit_1(tmp_path, run_cli):
    path, _ = conversation(tmp_path)
    digest = file_digest(path)
    assert_clean_error(run_cli("erase", path, "--key", "telegram:nobody", "--yes"), 1, "no thread")
    assert_clean_error(run_cli("erase", path, "--key", "telegram:nobody", "--dry-run"), 1)
    assert file_digest(path) == digest


@pytest.mark.parametrize(
    ("prefix", "erased", "kept"),
    [
        ("a_", ["a_b.x"], ["ab.x", "aXb"]),  # LIKE's wildcards are plain characters here
        ("a%", ["a%b"], ["ab.x", "a_b.x"]),
        ("a\\", ["a\\b"], ["ab.x", "a"]),
        ("caf\u00e9.", ["caf\u00e9.name"], ["cafe.name", "caf\u00e9"]),
        # the last character before the surrogates: the keys above it start at U+E000
        ("k\ud7ff", ["k\ud7ff.name"], ["k\ue000.name", "k\ud7fe.name"]),
        ("k\U0010ffff", ["k\U0010ffff.name"], ["l", "k\ue000.name"]),
    ],
)
def test_the_memories_prefix_erases_exactly_the_keys_that_start_with_it(
    tmp_path, run_cli, prefix, erased, kept
):
    path = tmp_path / "agent.db"
    w = VolumeWriter(path)
    w.message(w.thread("telegram:ana"), "user", "hello")
    for key in erased + kept:
        w.memory(key, "a fact")
    w.close()
    result = run_cli("erase", path, "--key", "telegram:ana", "--memories-prefix", prefix, "--yes")
    assert result.exit_code == 0, result
    assert sorted(k for (k,) in query(path, "SELECT key FROM memories")) == sorted(kept)


@pytest.mark.parametrize(
    "options",
    [
        ["--key", "telegram:\udcff"],  # a shell's bytes that are not UTF-8
        ["--key", "telegram:ana", "--memories-prefix", "ana.\udcff"],
    ],
)
def test_a_key_or_prefix_that_is_not_utf8_is_exit_2_naming_it(tmp_path, run_cli, options):
    path, _ = conversation(tmp_path)
    digest = file_digest(path)
    for mode in ("--dry-run", "--yes"):
        result = run_cli("erase", path, *options, mode)
        assert_clean_error(result, 2, options[-2], "not UTF-8")
    assert file_digest(path) == digest


def test_an_empty_memories_prefix_is_refused(tmp_path, run_cli):
    path, _ = conversation(tmp_path)
    result = run_cli("erase", path, "--key", "telegram:ana", "--memories-prefix", "", "--yes")
    assert_clean_error(result, 2, "every memory")


def test_an_erase_whose_scrub_could_not_finish_scrubs_when_run_again(tmp_path, run_cli):
    path, agent = conversation(tmp_path)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchone()  # holds the WAL
    busy = run_cli(
        "erase",
        path,
        "--key",
        "telegram:ana",
        "--yes",
        "--memories-prefix",
        "ana.",
        "--busy-timeout",
        "0.2",
    )
    assert_clean_error(busy, 4, "erased 2 threads", "not scrubbed yet")
    assert holds(path, MARKER)  # the rewritten pages wait in the WAL, the old ones in the file
    reader.execute("ROLLBACK")
    again = run_cli("erase", path, "--key", "telegram:ana", "--yes")
    assert again.exit_code == 0, again  # it finished what the earlier erase asked
    assert "finished the scrub of the erase at" in again.stderr
    assert holds(path, MARKER) == []
    once_more = run_cli("erase", path, "--key", "telegram:ana", "--yes")  # nothing left to do
    assert_clean_error(once_more, 1, "it was erased at")
    agent.conn.close()


@pytest.mark.parametrize("command", [("memories", "import", "VOL", "-"), ("validate", "-")])
def test_stdin_closed_reads_as_empty_input(tmp_path, command):
    """A job started with no stdin at all (fd 0 closed): `-` is an empty input, not a crash."""
    path, agent = conversation(tmp_path)
    agent.conn.close()
    digest = file_digest(path)
    args = [path if a == "VOL" else a for a in command]
    done = run_vt(*args, preexec_fn=lambda: os.close(0))
    assert b"internal error" not in done.stderr and b"Traceback" not in done.stderr, done
    assert done.returncode in (0, 1)
    assert file_digest(path) == digest  # nothing to import: nothing written


def test_prune_takes_the_conversations_words_out_of_what_stays(tmp_path, run_cli):
    """A pruned thread's runs and events stay for their figures; text copied from its
    conversation (a failure's missing facts, a tool's arguments) goes with it, so that a later
    erase of the key has nothing left to miss."""
    path = old_and_new(tmp_path)
    [(old,)] = query(
        path,
        "SELECT id FROM sessions WHERE status = 'archived' AND updated_at < '2026-11-01'"
        " ORDER BY id LIMIT 1",
    )
    conn = sqlite3.connect(path)
    run = conn.execute(
        "INSERT INTO runs (session_id, trigger, status, input_tokens, started_at, error)"
        " VALUES (?, 'compaction', 'error', 77, 't', ?)",
        (old, f"missing: {MARKER}"),
    ).lastrowid
    conn.execute(
        "INSERT INTO audit (ts, event, detail, session_id, actor) VALUES ('t', 'permission', ?,"
        " ?, 'agent')",
        (json.dumps({"tool": "shell", "decision": "allow", "args": MARKER}), old),
    )
    conn.commit()
    conn.close()
    assert run_cli("prune", path, "--archived-before", "2026-11-01").exit_code == 0
    assert query(path, "SELECT error, input_tokens FROM runs WHERE id = ?", run) == [
        ("deleted with its thread", 77)
    ]
    [(detail,)] = query(path, "SELECT detail FROM audit WHERE detail LIKE '%decision%'")
    assert json.loads(detail) == {"tool": "shell", "decision": "allow"}


def test_status_reads_a_volume_whose_audit_holds_details_that_are_not_json(tmp_path, run_cli):
    # The savings kept by prune and erase are read from volumetool's own events; a detail
    # that is not JSON (the agent wrote it, or a damaged row) counts nothing, fails nothing.
    path = old_and_new(tmp_path)
    before = json.loads(run_cli("status", path, "--json").stdout)["tokens"]
    conn = sqlite3.connect(path)
    with conn:
        for event in ("thread", "erase"):
            conn.execute(
                "INSERT INTO audit (ts, event, detail, actor) VALUES ('t', ?, ?, 'volumetool')",
                (event, '{"action": "prune", "compaction_saved": 5'),
            )
    conn.close()
    result = run_cli("status", path, "--json")
    assert result.exit_code == 0, result
    assert json.loads(result.stdout)["tokens"] == before


# -- repeated --key and --memories-prefix (SPEC 13: never last-wins) ---------------------------

NAMED = {"telegram:ana": "qzanamark31x", "discord:bob": "qzbobmark52x"}
PREFIXED = {"ana.": "qzanamemo64x", "bob.": "qzbobmemo85x"}


def four_sets(tmp_path) -> Path:
    """Threads under two keys and memories under two prefixes to erase, each with a marker of
    its own; a thread and a memory that stay."""
    w = VolumeWriter(tmp_path / "agent.db")
    for key, marker in NAMED.items():
        for status in ("archived", "active"):
            w.message(w.thread(key, status=status), "user", f"{key} says {marker} " + "z" * 200)
    w.message(w.thread("slack:cara"), "user", f"cara says {OTHER}")
    for prefix, marker in PREFIXED.items():
        w.memory(f"{prefix}card", f"card {marker}")
    w.memory("cara.note", f"cara {OTHER}")
    w.close()
    return w.path


def test_repeated_keys_and_prefixes_erase_everything_named_in_one_transaction(tmp_path, run_cli):
    path = four_sets(tmp_path)
    options = []
    for key in NAMED:
        options += ["--key", key]
    for prefix in PREFIXED:
        options += ["--memories-prefix", prefix]
    dry = run_cli("erase", path, *options, "--dry-run", "--json")
    assert dry.exit_code == 0, dry
    result = run_cli("erase", path, *options, "--yes", "--json")
    assert result.exit_code == 0, result
    assert {**json.loads(dry.stdout), "dry_run": False} == json.loads(result.stdout)
    for marker in [*NAMED.values(), *PREFIXED.values()]:
        assert holds(path, marker) == [], marker  # gone from every byte, as erase promises
    assert holds(path, OTHER)
    assert query(path, "SELECT conversation_key FROM sessions") == [("slack:cara",)]
    assert query(path, "SELECT key FROM memories") == [("cara.note",)]
    [(detail,)] = query(path, "SELECT detail FROM audit WHERE event = 'erase'")
    detail = json.loads(detail)
    assert detail["keys"] == list(NAMED) and detail["memories_prefixes"] == list(PREFIXED)
    assert (detail["threads"], detail["memories"]) == (4, 2) and "key" not in detail
    report = json.loads(result.stdout)
    assert (report["threads"], report["memories"], report["absent_keys"]) == (4, 2, [])
    assert "erased 4 threads under 'telegram:ana', 'discord:bob'" in result.stderr
    assert "2 memories under 'ana.', 'bob.'" in result.stderr


@SIGNALS
def test_an_erase_run_again_after_its_scrub_was_interrupted_finishes_it_and_exits_0(
    tmp_path, run_cli, signum, code
):
    """The threads deleted, the scrub of free pages interrupted (a real signal), the line said
    "run the same erase again": that run, finding nothing more under the key, finishes the
    scrub, says so (with --json too) and exits 0; the one after it has nothing to finish."""
    path, agent = conversation(tmp_path)
    agent.conn.close()
    options = ("--key", "telegram:ana", "--memories-prefix", "ana.", "--yes")
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_IN_THE_SCRUB, "erase", path, *options],
        env={**vt_env(None), "SIGNAL": str(int(signum))},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == code, done.stderr
    assert "the file is not scrubbed yet — run the same erase again" in done.stderr
    [(erased_at, detail)] = query(path, "SELECT ts, detail FROM audit WHERE event = 'erase'")
    assert json.loads(detail)["scrubbed"] is False
    dry = run_cli("erase", path, *options, "--dry-run", "--json")
    assert dry.exit_code == 0, dry
    again = run_cli("erase", path, *options, "--json")
    assert again.exit_code == 0, again
    assert again.stderr.splitlines() == [
        f"volumetool: finished the scrub of the erase at {erased_at}, which erased 2 threads"
        " under 'telegram:ana' (25 messages, 1 summary, 1 kept summary) and 1 memory under"
        " 'ana.'; 1 run and 1 audit event stay, detached",
        "volumetool: erased nothing more under 'telegram:ana'; the file is scrubbed",
    ]
    report = json.loads(again.stdout)
    assert {**json.loads(dry.stdout), "dry_run": False} == report
    event = {k: v for k, v in json.loads(detail).items() if k not in ("action", "scrubbed")}
    assert report["threads"] == 0 and report["finished_earlier"] == [
        {"erased_at": erased_at, **event}
    ]
    assert holds(path, MARKER) == []
    [(detail,)] = query(path, "SELECT detail FROM audit WHERE event = 'erase'")
    assert "scrubbed" not in json.loads(detail)  # the event is as a whole erase leaves it
    assert_clean_error(run_cli("erase", path, *options), 1, "it was erased at")


def test_an_erase_run_again_does_not_claim_memories_written_since(tmp_path, run_cli, monkeypatch):
    """Memories under the prefix written after the interrupted erase are not erased by a run
    that finds no thread: it finishes the scrub, and says why it exits 1."""
    from volumetool import lifecycle

    path, agent = conversation(tmp_path)
    agent.conn.close()
    vacuum = lifecycle.vacuum
    monkeypatch.setattr(
        lifecycle, "vacuum", lambda volume: (_ for _ in ()).throw(KeyboardInterrupt)
    )
    options = ("--key", "telegram:ana", "--memories-prefix", "ana.", "--yes")
    assert run_cli("erase", path, *options).exit_code == 130
    monkeypatch.setattr(lifecycle, "vacuum", vacuum)
    assert run_cli("memories", "remember", path, "ana.new", "again").exit_code == 0
    again = run_cli("erase", path, *options)
    assert_clean_error(
        again,
        1,
        "the scrub it left unfinished is done; not erased: 1 memory under 'ana.' written since",
    )
    assert holds(path, MARKER) == []


def test_a_repeated_key_with_nothing_under_it_erases_the_others_and_exits_1(tmp_path, run_cli):
    path = four_sets(tmp_path)
    result = run_cli("erase", path, "--key", "telegram:ana", "--key", "telegram:nobody", "--yes")
    assert result.exit_code == 1, result
    assert result.stderr.splitlines()[-1].startswith(
        "volumetool: no thread under key 'telegram:nobody'"
    )
    assert holds(path, NAMED["telegram:ana"]) == []
    again = run_cli("erase", path, "--key", "telegram:ana", "--key", "telegram:nobody", "--yes")
    assert_clean_error(again, 1, "no thread under key 'telegram:ana', 'telegram:nobody'")
    assert "one of them was erased at" in again.stderr


@pytest.mark.parametrize("command", ["erase", "prune"])
def test_an_interrupt_after_the_delete_committed_says_it_is_committed(
    tmp_path, run_cli, monkeypatch, command
):
    """Ctrl-C (or SIGTERM) while the file is scrubbed or vacuumed: the threads are deleted
    already, so the line says that and what did not finish, never "rolled back"; running
    the same command again finishes it."""
    from volumetool import lifecycle

    path, agent = conversation(tmp_path)
    agent.conn.close()
    vacuum = lifecycle.vacuum

    def interrupted(volume):
        raise KeyboardInterrupt  # as Ctrl-C during the VACUUM would

    monkeypatch.setattr(lifecycle, "vacuum", interrupted)
    args = {
        "erase": ["--key", "telegram:ana", "--memories-prefix", "ana.", "--yes"],
        "prune": ["--archived-before", "2100-01-01", "--vacuum"],
    }[command]
    if command == "prune":
        monkeypatch.setattr(lifecycle, "check_before", lambda before: before)
    result = run_cli(command, path, *args)
    assert_clean_error(result, 130)
    done = {
        "erase": "erased 2 threads under 'telegram:ana' (committed), but the file is not"
        " scrubbed yet — run the same erase again to scrub",
        "prune": "pruned 1 thread (committed), but the search index or the vacuum did not"
        " finish — run the same prune again",
    }[command]
    assert result.stderr.startswith(f"volumetool: {path}: interrupted; {done}"), result.stderr
    assert "rolled back" not in result.stderr
    status = "'archived'" if command == "prune" else "'active', 'archived'"
    assert query(
        path,
        f"SELECT count(*) FROM sessions WHERE conversation_key = 'telegram:ana'"
        f" AND status IN ({status})",
    ) == [(0,)]
    monkeypatch.setattr(lifecycle, "vacuum", vacuum)
    again = run_cli(command, path, *args)
    assert again.exit_code == 0, again
    if command == "erase":
        assert holds(path, MARKER) == []

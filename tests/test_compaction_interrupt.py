"""Ctrl-C during `compact` (SPEC 6, "Spend": every model call is accounted for in a run).

A request that has gone out may be billed whether or not its answer is read, so a compaction
interrupted while calls are under way records each of them as a failed run (with what the
calls that answered reported) and its audit event, commits no summary, and exits 130 with one
line that says so. The threads whose calls had not started are left as they were.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from tests.support.fixtures import KEY, write_config
from tests.support.volumes import VolumeWriter, due_thread, rows, table_dump
from tests.test_cli import SIGNALS, wait_for
from volumetool.compaction.run import INTERRUPTED, INTERRUPTED_AFTER, NOT_STARTED
from volumetool.errors import Interrupted


def start_compact(path, config, *args, ignore_sigint: bool = False) -> subprocess.Popen:
    # A background job without job control starts with SIGINT ignored: SIGTERM still stops it.
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    return subprocess.Popen(
        [sys.executable, "-m", "volumetool", "compact", str(path), "--config", str(config), *args],
        env={**os.environ, "TEST_MODEL_KEY": KEY},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=ignore,
    )


def due_volumes(tmp_path, *names: str, key: str = "{}:0") -> list:
    """One volume for each name, each with one due thread (its key `key` with the name)."""
    paths = []
    for name in names:
        w = VolumeWriter(tmp_path / f"{name}.db")
        due_thread(w, key.format(name))
        w.close()
        paths.append(w.path)
    return paths


def compaction_runs(path) -> list[tuple]:
    sql = "SELECT session_id, status, input_tokens, output_tokens, error FROM runs"
    return rows(path, sql + " WHERE trigger = 'compaction' ORDER BY id")


def compaction_events(path) -> list[tuple]:
    detail = "json_extract(detail, '$.action'), json_extract(detail, '$.reason')"
    sql = f"SELECT session_id, run_id, {detail} FROM audit WHERE event = 'compaction' ORDER BY id"
    return rows(path, sql)


def interrupt(proc: subprocess.Popen, signum: int = signal.SIGINT) -> tuple[int, str]:
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)  # well before the answers would come
    return proc.returncode, err.decode()


@pytest.mark.parametrize("settled", [0.0, 1.0], ids=["while-planning", "after-planning"])
def test_ctrl_c_records_each_call_under_way_and_leaves_the_others(tmp_path, server, settled):
    """Right after the calls went out, the Ctrl-C lands while the other threads are planned
    (or just after: both must end the same way); a second later, surely once planning is over
    and the run waits for the calls, beside the threads still waiting for their turn to call."""
    w = VolumeWriter(tmp_path / "agent.db")
    sessions = [due_thread(w, f"discord:{n}") for n in range(5)]
    w.close()
    config = write_config(tmp_path / "agent.yaml", server)
    server.latency = 60  # the answers would come long after the Ctrl-C
    before = table_dump(w.path)
    proc = start_compact(w.path, config, "--concurrency", "2", "--json")
    wait_for(lambda: server.in_flight == 2, proc)
    time.sleep(settled)
    code, err = interrupt(proc)
    assert code == 130, err
    assert err.splitlines() == [
        "volumetool: interrupted; the 2 model calls under way are recorded as failed runs"
        " (the provider may bill them); what was committed before stays"
    ]
    runs = compaction_runs(w.path)
    assert (
        len(runs) == 2 and len({r[0] for r in runs}) == 2 and {r[0] for r in runs} <= set(sessions)
    )
    for _, status, input_tokens, output_tokens, error in runs:
        # No answer was read: the tokens are unknown, never 0.
        assert (status, input_tokens, output_tokens, error) == ("error", None, None, INTERRUPTED)
    events = compaction_events(w.path)
    assert [(e[0], e[2], e[3]) for e in events] == [(r[0], "failed", INTERRUPTED) for r in runs]
    after = table_dump(w.path)
    assert after["messages"] == before["messages"] and after["sessions"] == before["sessions"]
    assert len(server.requests) == 2  # the three threads not started were not called


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_run_takes_a_signal_sent_twice_at_once_for_one(signum, monkeypatch):
    """The second of two signals a moment apart does not cut short what the first started:
    the run's own ending (recording the calls under way) finishes, then KeyboardInterrupt."""
    from volumetool.compaction import run
    from volumetool.compaction.run import run_until_stopped

    monkeypatch.setattr(run, "ONE_SIGNAL", 60.0)  # "a moment", however loaded the machine
    # restored after: the run sets it on SIGTERM, and the exit code of every later
    # in-process interrupt in this worker would be 143
    monkeypatch.setattr(Interrupted, "by", Interrupted.by)

    finished = []

    async def main() -> None:
        try:
            os.kill(os.getpid(), signum)
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            os.kill(os.getpid(), signum)  # the same signal again, as `timeout` sends it
            await asyncio.sleep(0.2)  # what the run does when stopped: records its calls
            finished.append(True)
            raise

    with pytest.raises(KeyboardInterrupt):
        run_until_stopped(main())
    assert finished == [True]


@SIGNALS
def test_a_signal_sent_twice_at_once_counts_once(tmp_path, server, signum, code):
    """`timeout` (and a kill of the process group) sends its signal to the process and to its
    group, one right after the other, as here: the process may take it twice. That is one
    stop, not "stop at once": the call under way is still recorded, and the message says so.
    (Whether the second copy arrives before or after the first was taken is the kernel's
    affair; test_the_run_takes_a_signal_sent_twice_at_once_for_one takes the second one after,
    always. A pause between the two here would be a wall time this test depends on.)"""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "discord:1")
    w.close()
    config = write_config(tmp_path / "agent.yaml", server)
    server.latency = 60
    proc = start_compact(w.path, config)
    wait_for(lambda: server.in_flight == 1, proc)
    proc.send_signal(signum)
    returned, err = interrupt(proc, signum)
    assert returned == code, err
    assert "the 1 model call under way is recorded as a failed run" in err
    assert [r[1:] for r in compaction_runs(w.path)] == [("error", None, None, INTERRUPTED)]


@SIGNALS
def test_an_interrupt_while_waiting_for_a_volume_lock_starts_nothing_more(
    tmp_path, server, signum, code
):
    """`compact ./a ./b --wait 60` while another volumetool holds ./a: Ctrl-C (or SIGTERM)
    during the wait ends the run there; ./b is not compacted, no call is made, and the line
    says that neither volume was finished."""
    from tests.test_cli import holds_open
    from volumetool.volume import lock_path, volume_lock

    paths = due_volumes(tmp_path, "a", "b", key="discord:{}")
    config = write_config(tmp_path / "agent.yaml", server)
    before = table_dump(paths[1])
    with volume_lock(paths[0]):
        proc = start_compact(paths[0], config, paths[1], "--wait", "60")
        wait_for(lambda: holds_open(proc.pid, lock_path(paths[0])), proc)
        exit_code, err = interrupt(proc, signum)
    assert exit_code == code, err
    assert err.splitlines() == [
        f"volumetool: {paths[0]}: interrupted; nothing was written; finished: none;"
        f" not finished: 2 ({paths[0]}, {paths[1]})"
    ]
    assert server.requests == [] and table_dump(paths[1]) == before


@pytest.mark.parametrize(
    ("signum", "code", "ignore_sigint"),
    [(signal.SIGINT, 130, False), (signal.SIGTERM, 143, False), (signal.SIGTERM, 143, True)],
    ids=["SIGINT", "SIGTERM", "SIGTERM-with-SIGINT-ignored"],
)
def test_ctrl_c_in_a_fold_sent_in_parts_keeps_what_the_parts_that_answered_reported(
    tmp_path, server, signum, code, ignore_sigint
):
    """SIGTERM (`timeout`, systemd, Kubernetes) ends it as Ctrl-C does, but for the exit code."""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "long", turns=30)
    w.close()
    config = write_config(tmp_path / "agent.yaml", server)
    second = threading.Event()

    def hold_the_second_part(body):
        if len(server.requests) >= 2:
            second.set()
            time.sleep(60)

    server.on_request = hold_the_second_part
    before = table_dump(w.path)
    proc = start_compact(w.path, config, "--max-input-tokens", "6000", ignore_sigint=ignore_sigint)
    wait_for(second.is_set)
    exit_code, err = interrupt(proc, signum)
    assert exit_code == code, err
    assert err.splitlines() == [
        "volumetool: interrupted; the 1 model call under way is recorded as a failed run"
        " (the provider may bill it); what was committed before stays"
    ]
    # The first part answered and reported its usage; the second is under way.
    [(_, status, input_tokens, output_tokens, error)] = compaction_runs(w.path)
    assert (status, error) == ("error", INTERRUPTED)
    assert (input_tokens, output_tokens) == (server.usage["input"], server.usage["output"])
    after = table_dump(w.path)
    assert after["messages"] == before["messages"] and after["sessions"] == before["sessions"]


@pytest.mark.parametrize("waiting_for", ["planning", "turn"])
def test_an_answer_waiting_to_be_written_at_ctrl_c_is_recorded_not_committed(
    monkeypatch, waiting_for
):
    """The writes wait for the planning and go one at a time: an answer that came back but
    still waits to be written when Ctrl-C comes is paid for, so it is recorded as a failure
    with its usage; it is not committed (the user asked to stop). A write under way finishes
    in its thread, and a call that never answered is recorded as it is."""
    from volumetool.compaction import run
    from volumetool.compaction.retention import Retention
    from volumetool.compaction.store import RunTimes
    from volumetool.compaction.summarize import Summary
    from volumetool.usage import Usage

    written: list[run.Ending] = []
    monkeypatch.setattr(run, "finish", lambda job, ending: written.append(ending) or ending)
    usage = Usage(1200, 80, 1200)
    times, kept = RunTimes("t0", "t1"), Retention(0.5, ["PR #204"], 2, 1)
    answered = run.Ending("m", times, summary=Summary("A summary.", usage), kept=kept)
    unanswered = run.Ending("m", RunTimes("t0", "t1"), failure=INTERRUPTED, usage=Usage())

    job = SimpleNamespace(volume=SimpleNamespace(path="agent.db"))  # what the writer reads

    async def scenario() -> None:
        writes = run._Writes()
        if waiting_for == "turn":
            writes.planned.set()
            await writes.turn.acquire()  # another thread's write holds the turn
        task = asyncio.ensure_future(writes.write(job, answered))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.01)
        writes.planned.set()
        if writes.turn.locked():
            writes.turn.release()
        assert (await task).failure == INTERRUPTED_AFTER
        # A call that never answered was already recorded as interrupted: Ctrl-C again stops it.
        again = asyncio.ensure_future(writes.write(job, unanswered))  # type: ignore[arg-type]
        await writes.turn.acquire()
        await asyncio.sleep(0)
        again.cancel()
        writes.turn.release()
        with pytest.raises(asyncio.CancelledError):
            await again

    asyncio.run(scenario())
    # Recorded with everything the answer had but its text: model, times, usage, retention.
    assert written == [run.Ending("m", times, failure=INTERRUPTED_AFTER, usage=usage, kept=kept)]


@pytest.mark.parametrize("answer", ["failure", "summary", "no call", "none yet"])
def test_ctrl_c_while_the_folds_facts_are_still_read_keeps_what_the_call_cost(monkeypatch, answer):
    """The fold's facts are read in a thread while the model writes; a fast answer may come
    back before that reading ends (a 1 MB fold takes tens of ms). Ctrl-C while the thread
    waits for it must not lose the call: a failure that came back is returned as it is, an
    answer as interrupted before it was committed (its facts were not all read), each with
    what the call reported; a call still waiting for its answer ("none yet") as interrupted
    during the call. A second Ctrl-C stops at once; so does the first when no call was made
    (the endpoint was known unusable)."""
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    from volumetool.compaction import run
    from volumetool.compaction.summarize import Summary, SummaryFailed
    from volumetool.usage import Usage

    usage = Usage(900, 40, 900)
    reading = threading.Event()

    async def summarize(client, system, previous, fold, limits, spent):
        if answer == "no call":
            raise SummaryFailed("the endpoint refused the key", Usage(), unusable=True)
        spent.sent, spent.usage = True, usage
        if answer == "failure":
            raise SummaryFailed("finish_reason content_filter", usage)
        if answer == "none yet":
            await asyncio.Event().wait()  # the model is still writing
        return Summary("A summary.", usage)

    def fold_facts(previous, fold, system=""):
        reading.wait(5)
        return []

    monkeypatch.setattr(run, "summarize", summarize)
    monkeypatch.setattr(run, "fold_facts", fold_facts)
    client = SimpleNamespace(endpoint=SimpleNamespace(model="m"))
    job = SimpleNamespace(thread=SimpleNamespace(summary=None), plan=SimpleNamespace(fold=()))

    async def scenario(presses: int) -> run.Ending:
        reading.clear()
        with ThreadPoolExecutor(1) as reader:
            task = asyncio.ensure_future(
                run.summarize_job(job, client, "system", run.Limits(), None, reader)  # type: ignore[arg-type]
            )
            await asyncio.sleep(0.05)  # answered; the facts are still being read
            for _ in range(presses):
                task.cancel()
                await asyncio.sleep(0.01)
            reading.set()
            return await task

    if answer == "no call":
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(scenario(1))
        return
    ending = asyncio.run(scenario(1))
    expected = {
        "failure": "finish_reason content_filter",
        "summary": INTERRUPTED_AFTER,
        "none yet": INTERRUPTED,
    }[answer]
    assert (ending.failure, ending.usage, ending.summary) == (expected, usage, None)
    assert ending.model == "m" and ending.times.started_at <= ending.times.finished_at
    if answer != "summary":  # it waits for the reading to end, and Ctrl-C again stops that
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(scenario(2))


# -- what an interrupted pass prints (SPEC 13: every signal says what happened) -------------


def hold_from(server, n: int) -> threading.Event:
    """The server answers the first n-1 requests and holds the others until the event is set."""
    release = threading.Event()

    def hold(body):
        if len(server.requests) >= n:
            release.wait(120)

    server.on_request = hold
    return release


def read_lines(proc: subprocess.Popen) -> tuple[list[bytes], threading.Thread]:
    """The lines of the process's stdout, read as they come, and the thread reading them (it
    ends with the process's stdout)."""
    lines: list[bytes] = []

    def read() -> None:
        for line in iter(proc.stdout.readline, b""):
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


def ok_runs(path) -> list[tuple]:
    return [r for r in compaction_runs(path) if r[1] == "ok"]


def parse_rows(output: str, out: bytes) -> list[dict]:
    if output == "--json":
        return json.loads(out)
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize(
    ("output", "signum", "code"),
    [(None, signal.SIGINT, 130), ("--json", signal.SIGTERM, 143), ("--nl", signal.SIGTERM, 143)],
    ids=["lines-SIGINT", "json-SIGTERM", "nl-SIGTERM"],
)
def test_an_interrupted_pass_shows_the_rows_it_decided(tmp_path, server, output, signum, code):
    """Two threads compacted and committed, one thread's call under way, one not started, one
    skipped while planning: the signal stops the pass, and its results still say all of it,
    in the chosen format (`--json` a whole array); the threads the signal stopped carry reason
    `interrupted`, and no thread not compacted reads as compacted."""
    w = VolumeWriter(tmp_path / "agent.db")
    sessions = {key: due_thread(w, key) for key in ("discord:0", "discord:1", "discord:2")}
    sessions["small"] = due_thread(w, "small", turns=3)  # nothing worth folding
    sessions["discord:3"] = due_thread(w, "discord:3")
    w.close()
    config = write_config(tmp_path / "agent.yaml", server)
    release = hold_from(server, 3)
    proc = start_compact(w.path, config, "--concurrency", "1", *[output] * bool(output))
    wait_for(lambda: len(server.requests) == 3 and len(ok_runs(w.path)) == 2, proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    release.set()
    assert proc.returncode == code, err
    # The second commit may still be on its way back from its thread when the signal comes:
    # then it is the write under way, and the line says it finished.
    said = re.sub(r"; the write under way finished \(discord:\d: compacted\)", "", err.decode())
    assert said.splitlines() == [
        "volumetool: interrupted; the 1 model call under way is recorded as a failed run"
        " (the provider may bill it); what was committed before stays"
    ]
    runs = {r[0]: r for r in compaction_runs(w.path)}
    if output is None:  # one line a thread: "VOLUME KEY: what became of it"
        lines = dict(
            line.removeprefix(f"{w.path} ").split(": ", 1) for line in out.decode().splitlines()
        )
        assert sorted(lines) == sorted(sessions)
        compacted = sorted(k for k, line in lines.items() if line.startswith("compacted "))
        assert lines["small"].startswith("skipped: nothing worth folding")
        stopped = sorted(line for line in lines.values() if "(interrupted)" in line)
        assert [line.split(" (run ")[0] for line in stopped] == [
            f"failed (interrupted): {INTERRUPTED}",
            f"skipped (interrupted): {NOT_STARTED}",
        ]
    else:
        rows = {row["conversation_key"]: row for row in parse_rows(output, out)}
        assert sorted(rows) == sorted(sessions)
        compacted = sorted(k for k, row in rows.items() if row["status"] == "compacted")
        for key in compacted:
            assert rows[key]["run_id"] is not None and rows[key]["reason"] is None
        assert (rows["small"]["status"], rows["small"]["reason"]) == ("skipped", None)
        stopped = [row for row in rows.values() if row["reason"] == "interrupted"]
        assert sorted((r["status"], r["error"]) for r in stopped) == [
            ("failed", INTERRUPTED),
            ("skipped", NOT_STARTED),
        ]
        [failed] = [r for r in stopped if r["status"] == "failed"]
        assert runs[failed["session_id"]][1:] == ("error", None, None, INTERRUPTED)
    # What reads as compacted is what was committed: two threads, no other.
    assert compacted == sorted(k for k, s in sessions.items() if s in runs and runs[s][1] == "ok")
    assert len(compacted) == 2


def test_nl_writes_each_row_as_soon_as_its_thread_is_done(tmp_path, server):
    """`--nl >> compact.jsonl` from cron: a thread's row is in the log once it is done, not at
    the end of the pass, so a job killed later (SIGKILL: nothing runs after it) has them."""
    w = VolumeWriter(tmp_path / "agent.db")
    for n in range(3):
        due_thread(w, f"discord:{n}")
    w.close()
    config = write_config(tmp_path / "agent.yaml", server)
    release = hold_from(server, 3)
    proc = start_compact(w.path, config, "--concurrency", "1", "--nl")
    lines, _ = read_lines(proc)
    wait_for(lambda: len(lines) == 2, proc)  # while the third thread's call is held
    proc.kill()
    proc.wait(timeout=60)
    release.set()
    rows = [json.loads(line) for line in lines]
    assert [row["status"] for row in rows] == ["compacted", "compacted"]
    assert sorted(row["run_id"] for row in rows) == sorted(
        r["id"] for r in dict_rows(w.path, "SELECT id FROM runs WHERE status = 'ok'")
    )


def dict_rows(path, sql: str) -> list[dict]:
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql + " AND trigger = 'compaction'")]
    finally:
        con.close()


@SIGNALS
def test_an_interrupted_pass_over_many_volumes_says_which_were_finished(
    tmp_path, server, signum, code
):
    """`compact a b c`: a's threads compacted, b's call under way, c's not started when the
    signal comes. The line says so, as migrate's does; the rows say what became of each."""
    paths = []
    for name, threads in (("a", 2), ("b", 1), ("c", 1)):
        w = VolumeWriter(tmp_path / f"{name}.db")
        for n in range(threads):
            due_thread(w, f"{name}:{n}")
        w.close()
        paths.append(w.path)
    config = write_config(tmp_path / "agent.yaml", server)
    release = hold_from(server, 3)
    proc = start_compact(paths[0], config, *paths[1:], "--concurrency", "1", "--nl")
    lines, reader = read_lines(proc)
    wait_for(lambda: len(lines) == 2 and len(server.requests) == 3, proc)
    proc.send_signal(signum)
    proc.wait(timeout=60)
    reader.join()
    release.set()
    err = proc.stderr.read().decode()
    assert proc.returncode == code, err
    assert err.splitlines() == [
        "volumetool: interrupted; the 1 model call under way is recorded as a failed run"
        " (the provider may bill it); what was committed before stays;"
        f" finished: 1 ({paths[0]}); not finished: 2 ({paths[1]}, {paths[2]})"
    ]
    rows = [json.loads(line) for line in lines]
    assert [(r["conversation_key"], r["status"], r["reason"]) for r in rows] == [
        ("a:0", "compacted", None),
        ("a:1", "compacted", None),
        ("c:0", "skipped", "interrupted"),
        ("b:0", "failed", "interrupted"),
    ]


def test_an_interrupted_pass_writes_its_metrics_and_keeps_the_last_success(tmp_path, server):
    """The metrics file says what the interrupted pass did (what it compacted, what its calls
    cost) and, as for any pass that did not end with exit 0, keeps the last success."""
    from tests.test_fleet import samples
    from volumetool.metrics import compaction_metrics

    w = VolumeWriter(tmp_path / "agent.db")
    for n in range(3):
        due_thread(w, f"discord:{n}")
    w.close()
    config = write_config(tmp_path / "agent.yaml", server)
    target = tmp_path / "volumetool-compact.prom"
    target.write_text(compaction_metrics([], 1.0, finished_at=1_780_000_000.0, succeeded=True))
    release = hold_from(server, 2)
    proc = start_compact(w.path, config, "--concurrency", "1", "--metrics-file", str(target))
    wait_for(lambda: len(server.requests) == 2 and len(ok_runs(w.path)) == 1, proc)
    code, err = interrupt(proc, signal.SIGTERM)
    release.set()
    assert code == 143, err
    found = samples(target.read_text())
    assert found["volumetool_compact_last_success_timestamp_seconds", ()] == 1_780_000_000.0
    by_status = {
        dict(labels)["status"]: n
        for (name, labels), n in found.items()
        if name == "volumetool_compact_threads"
    }
    assert by_status == {"compacted": 1, "failed": 1, "skipped": 1, "conflict": 0}
    assert found["volumetool_compact_model_input_tokens", ()] == server.usage["input"]


def test_a_write_under_way_at_ctrl_c_keeps_its_outcome(monkeypatch):
    """Ctrl-C while an ending is written in its thread: the write finishes there (it cannot be
    stopped), and its outcome is the thread's result row, not lost."""
    from volumetool.compaction import run

    started, release = threading.Event(), threading.Event()
    written = SimpleNamespace(status="compacted", unrecorded=None)

    def finish(job, ending):
        started.set()
        release.wait(5)
        return written

    job = SimpleNamespace(volume=SimpleNamespace(path="agent.db"))

    async def scenario():
        writes = run._Writes()
        writes.planned.set()
        task = asyncio.ensure_future(writes.write(job, SimpleNamespace(failure=None)))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        await asyncio.sleep(0.01)
        release.set()
        return await task

    monkeypatch.setattr(run, "finish", finish)
    assert asyncio.run(scenario()) is written


def test_an_interrupted_pass_does_not_turn_the_next_one_red(tmp_path, server):
    """`timeout 300 volumetool compact` in cron, or a pod evicted: the calls the signal stopped
    stay failed runs with their cost, but an interrupt is no failure of the endpoint, so the
    next pass does not back off for them (SPEC 13: only a broken endpoint stays red)."""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "discord:0")
    w.close()
    config = write_config(tmp_path / "agent.yaml", server)
    release = hold_from(server, 1)
    proc = start_compact(w.path, config, "--nl")
    wait_for(lambda: len(server.requests) == 1, proc)
    code, err = interrupt(proc, signal.SIGTERM)
    release.set()
    assert code == 143, err
    assert [r[1:] for r in compaction_runs(w.path)] == [("error", None, None, INTERRUPTED)]
    again = start_compact(w.path, config, "--nl")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    [row] = [json.loads(line) for line in out.splitlines()]
    assert (row["status"], row["reason"]) == ("compacted", None)
    assert [r[1] for r in compaction_runs(w.path)] == ["error", "ok"]


@SIGNALS
def test_a_volume_that_could_not_be_opened_is_not_finished(tmp_path, server, signum, code):
    """`compact nosuch a b` stopped while b's call is under way: a missing file was not
    compacted, so it is among the volumes not finished, beside b (its row says why)."""
    paths = [tmp_path / "nosuch.db", *due_volumes(tmp_path, "a", "b")]
    config = write_config(tmp_path / "agent.yaml", server)
    release = hold_from(server, 2)
    proc = start_compact(paths[0], config, *paths[1:], "--concurrency", "1", "--nl")
    wait_for(lambda: len(server.requests) == 2 and len(ok_runs(paths[1])) == 1, proc)
    code_, err = interrupt(proc, signum)
    release.set()
    assert code_ == code, err
    assert err.splitlines()[-1].endswith(
        f"; finished: 1 ({paths[1]}); not finished: 2 ({paths[0]}, {paths[2]})"
    ), err


def hold_the_write_lock_from(server, path, n: int) -> tuple[threading.Event, threading.Event]:
    """At the server's first request the agent takes the volume's write lock (so the first
    answer's commit waits for it, and the answers after it for their turn); the server answers
    the first n-1 requests and holds the others. Set the second event to release both."""
    taken, release = threading.Event(), threading.Event()
    agent = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def hold(body):
        if not taken.is_set():
            agent.execute("BEGIN IMMEDIATE")
            taken.set()
        if len(server.requests) >= n:
            release.wait(120)

    def let_go() -> None:
        release.wait(120)
        agent.execute("ROLLBACK")
        agent.close()

    server.on_request = hold
    threading.Thread(target=let_go, daemon=True).start()
    return taken, release


def test_the_message_counts_calls_under_way_and_answers_not_committed_apart(tmp_path, server):
    """SIGTERM while one answer's commit waits for the agent's lock, two answers wait for their
    turn and one call is under way: the write under way finishes (it is shielded) and says so,
    never "rolled back"; the answers are recorded as failed runs, counted apart from the call
    under way."""
    w = VolumeWriter(tmp_path / "agent.db")
    for n in range(4):
        due_thread(w, f"discord:{n}")
    w.close()
    config = write_config(tmp_path / "agent.yaml", server)
    taken, release = hold_the_write_lock_from(server, w.path, 4)
    proc = start_compact(w.path, config, "--concurrency", "4", "--busy-timeout", "60", "--nl")
    lines, reader = read_lines(proc)
    wait_for(lambda: taken.is_set() and len(server.requests) == 4, proc)
    time.sleep(1.0)  # the three answers come back: one waits for the lock, two for their turn
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    release.set()  # the agent lets go: the write under way commits
    proc.wait(timeout=60)
    reader.join()
    err = proc.stderr.read().decode()
    assert proc.returncode == 143, err
    runs = compaction_runs(w.path)
    calls = sum(r[4] == INTERRUPTED for r in runs)
    answers = sum(r[4] == INTERRUPTED_AFTER for r in runs)
    assert calls == 1 and len(runs) == calls + answers + 1, runs
    [written] = [json.loads(line) for line in lines if b'"compacted"' in line]
    committed = [r for r in runs if r[1] == "ok"]
    assert [r[0] for r in committed] == [written["session_id"]]
    said = "the 1 model call under way"
    if answers:
        said += f" and the {answers} answer{'s' * (answers > 1)} not yet committed"
    said += (
        " are recorded as failed runs (the provider may bill them)"
        if answers
        else " is recorded as a failed run (the provider may bill it)"  # under a heavy load
    )
    assert err.splitlines() == [
        f"volumetool: interrupted; {said}; the write under way finished"
        f" ({written['conversation_key']}: compacted); what was committed before stays"
    ]


def test_the_message_of_one_answer_not_committed_says_it():
    from volumetool.compaction.run import Outcome, _interrupted

    answer = Outcome("a.db", "k", 1, "failed", error=INTERRUPTED_AFTER, run_id=3)
    assert _interrupted([answer], [], True).message == (
        "interrupted; the 1 answer not yet committed is recorded as a failed run (the provider"
        " may bill it); what was committed before stays"
    )

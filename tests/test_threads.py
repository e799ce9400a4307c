"""thread new and thread reset: /new and /reset from the shell, audited."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

from tests.conftest import assert_clean_error
from tests.support.volumes import VolumeWriter
from tests.support.volumes import rows as query
from tests.test_cli import SIGNALS


@pytest.fixture
def vol(tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    s = w.thread("slack:T1/C2", channel="slack", summary="Earlier: budgets.")
    run = w.run(s, trigger="compaction")
    w.turn(s, 1, folded_by=run)
    w.turn(s, 2, tool=True)
    w.close()
    return {"path": w.path, "session": s, "run": run}


def test_new_archives_the_thread_and_starts_an_empty_one(vol, run_cli):
    result = run_cli("thread", "new", vol["path"], "slack:T1/C2")
    assert result.exit_code == 0, result
    sessions = query(
        vol["path"], "SELECT id, status, channel, summary, archived_at FROM sessions ORDER BY id"
    )
    (old, old_status, _, old_summary, archived_at), (new, status, channel, summary, _) = sessions
    assert (old, old_status, old_summary) == (vol["session"], "archived", "Earlier: budgets.")
    assert archived_at and (status, channel, summary) == ("active", "slack", None)
    assert query(vol["path"], "SELECT count(*) FROM messages WHERE session_id = ?", old) == [(6,)]
    [(detail, session_id, actor)] = query(
        vol["path"], "SELECT detail, session_id, actor FROM audit WHERE event = 'thread'"
    )
    assert json.loads(detail) == {
        "action": "new",
        "key": "slack:T1/C2",
        "archived_session_id": old,
        "session_id": new,
    }
    assert (session_id, actor) == (new, "volumetool")


def test_reset_deletes_messages_and_summary(vol, run_cli):
    result = run_cli("thread", "reset", vol["path"], "slack:T1/C2", "--yes")
    assert result.exit_code == 0, result
    assert query(vol["path"], "SELECT count(*) FROM messages") == [(0,)]
    assert query(vol["path"], "SELECT status, summary FROM sessions") == [("active", None)]
    assert query(vol["path"], "SELECT count(*) FROM runs") == [(1,)]
    [(detail, actor)] = query(vol["path"], "SELECT detail, actor FROM audit WHERE event = 'thread'")
    assert json.loads(detail) == {"action": "reset", "key": "slack:T1/C2", "messages_deleted": 6}
    assert actor == "volumetool"


def test_reset_asks_first(vol, run_cli):
    declined = run_cli("thread", "reset", vol["path"], "slack:T1/C2", input="n\n")
    assert declined.exit_code == 1
    assert "Delete the 6 messages" in declined.stderr
    assert query(vol["path"], "SELECT count(*) FROM messages") == [(6,)]
    closed = run_cli("thread", "reset", vol["path"], "slack:T1/C2", input="")
    assert closed.exit_code == 1
    assert query(vol["path"], "SELECT count(*) FROM messages") == [(6,)]
    accepted = run_cli("thread", "reset", vol["path"], "slack:T1/C2", input="y\n")
    assert accepted.exit_code == 0
    assert query(vol["path"], "SELECT count(*) FROM messages") == [(0,)]


def test_an_unanswered_or_declined_prompt_says_on_its_own_line_that_nothing_changed(vol):
    """`thread reset VOL KEY < /dev/null` (cron, a script): the prompt's line is ended, and
    the error line says nothing was changed (exit 1), not click's bare "Aborted!"."""
    import subprocess

    from tests.test_backup import run_vt

    prompt = "Delete the 6 messages and the summary of thread 1 (slack:T1/C2)? [y/N]: "
    for stdin, answer, line in (
        (subprocess.DEVNULL, "no answer (stdin at its end)", "no answer; nothing was changed"),
        (None, "", "declined; nothing was changed"),
    ):
        given = {"stdin": stdin} if stdin else {"input": b"n\n"}
        done = run_vt("thread", "reset", vol["path"], "slack:T1/C2", **given)
        assert done.returncode == 1, done
        [asked, said] = done.stderr.decode().splitlines()
        assert asked == prompt + answer and said.startswith(f"volumetool: {line}"), done.stderr
        assert b"Aborted" not in done.stderr and done.stdout == b""
    assert query(vol["path"], "SELECT count(*) FROM messages") == [(6,)]


@SIGNALS
def test_a_signal_at_the_prompt_says_on_its_own_line_that_nothing_changed(
    vol, tmp_path, signum, code
):
    """Ctrl-C (or `timeout`'s SIGTERM) while `thread reset` waits for its answer: the prompt's
    line is ended and the message says nothing was changed, 130 or 143."""
    import subprocess

    fifo = tmp_path / "answer"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the writer's open does not block
    writer = os.open(fifo, os.O_WRONLY)  # held open and never written: no answer, no EOF
    os.close(reader)
    try:
        with open(fifo, "rb") as answer:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "volumetool",
                    "thread",
                    "reset",
                    str(vol["path"]),
                    "slack:T1/C2",
                ],
                stdin=answer,
                stderr=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        asked = b""
        while not asked.endswith(b"[y/N]: "):  # the question is out: it waits for its answer
            asked += os.read(proc.stderr.fileno(), 1)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(writer)
    assert proc.returncode == code and out == b""
    lines = (asked + err).decode().splitlines()
    assert lines[0].endswith("[y/N]: ") and len(lines) == 2, lines
    assert lines[1] == "volumetool: interrupted at the question; nothing was changed", lines
    assert query(vol["path"], "SELECT count(*) FROM messages") == [(6,)]


@pytest.mark.parametrize("command", [["new"], ["reset", "--yes"]])
def test_a_key_without_an_active_thread_is_a_clear_error(vol, run_cli, command):
    result = run_cli("thread", command[0], vol["path"], "nope", *command[1:])
    assert_clean_error(result, 1, "no active thread under key 'nope'")


def compacted_thread(writer) -> int:
    """A thread that volumetool compacted: folded messages, a summary kept for its run."""
    s = writer.thread("k", summary="the summary of run 1")
    run = writer.run(s, trigger="compaction")
    writer.conn.execute(
        "INSERT INTO compactions (run_id, session_id, summary) VALUES (?, ?, ?)",
        (run, s, "the summary of run 1"),
    )
    writer.message(s, "user", "folded question", folded_by=run)
    writer.message(s, "assistant", "folded answer", folded_by=run)
    writer.message(s, "user", "live question")
    return s


def test_thread_undo_asks_then_reverses_the_latest_compaction(run_cli, writer):
    s = compacted_thread(writer)
    unanswered = run_cli("thread", "undo", writer.path, "k")  # no input: nothing changes
    assert unanswered.exit_code != 0
    assert writer.conn.execute("SELECT summary FROM sessions WHERE id = ?", (s,)).fetchone() == (
        "the summary of run 1",
    )
    result = run_cli("thread", "undo", writer.path, "k", input="y\n")
    assert result.exit_code == 0, result
    assert "2 messages live again" in result.stderr
    assert writer.conn.execute("SELECT summary FROM sessions WHERE id = ?", (s,)).fetchone() == (
        None,
    )
    assert writer.conn.execute(
        "SELECT count(*) FROM messages WHERE folded_by IS NOT NULL"
    ).fetchone() == (0,)
    again = run_cli("thread", "undo", writer.path, "k", "--yes")
    assert again.exit_code == 1 and "no compaction to undo" in again.stderr


def test_thread_undo_of_a_key_without_an_active_thread_is_exit_1(run_cli, writer):
    writer.thread("k", status="archived")
    result = run_cli("thread", "undo", writer.path, "k", "--yes")
    assert result.exit_code == 1 and "no active thread" in result.stderr


class AnswerAfter(io.BytesIO):
    """stdin whose first read (the answer to the prompt) waits for `meanwhile` to happen."""

    def __init__(self, answer: bytes, meanwhile) -> None:
        super().__init__(answer)
        self.meanwhile = meanwhile

    def _first(self, size) -> None:
        if size != 0 and self.meanwhile is not None:
            self.meanwhile, meanwhile = None, self.meanwhile
            meanwhile()

    def read(self, size=-1):
        self._first(size)
        return super().read(size)

    def read1(self, size=-1):
        self._first(size)
        return super().read1(size)

    def readline(self, size=-1):
        self._first(size)
        return super().readline(size)


def test_an_undo_confirmed_for_one_compaction_never_undoes_another(run_cli, writer):
    """The prompt names run 1; a cron pass commits run 2 before the answer: "y" confirmed
    run 1, so nothing is undone (exit 1) and the file is as run 2 left it."""
    s = compacted_thread(writer)

    def cron_compacts():
        run = writer.run(s, trigger="compaction")
        writer.conn.execute("UPDATE messages SET folded_by = ? WHERE folded_by IS NULL", (run,))
        writer.conn.execute("UPDATE sessions SET summary = 'run 2' WHERE id = ?", (s,))
        writer.insert("compactions", run_id=run, session_id=s, summary="run 2")

    answer = AnswerAfter(b"y\n", cron_compacts)
    result = run_cli("thread", "undo", writer.path, "k", input=answer)
    question, error = result.stderr.splitlines()
    assert question.startswith("Undo compaction run 1 of thread") and result.exit_code == 1
    assert "is now run 2, not run 1 that was confirmed" in error and "nothing was changed" in error
    conn = writer.conn
    assert conn.execute("SELECT summary FROM sessions").fetchall() == [("run 2",)]
    assert conn.execute("SELECT count(*) FROM compactions WHERE undone_at IS NULL").fetchone() == (
        2,
    )
    assert conn.execute("SELECT count(*) FROM messages WHERE folded_by IS NULL").fetchone() == (0,)

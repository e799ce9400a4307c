"""search, prune and erase while a simulated agent writes to the same file at a high rate."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.faults.kills import ERASE_MARKER, ROOT, VT, bulk_threads, integrity_ok, rows
from tests.support.agent import assert_all_ran_beside_it
from tests.support.volumes import VolumeWriter

AGENT_KEYS = ["live:1", "live:2", "live:3"]


def volume(tmp_path, journal: str):
    w = VolumeWriter(tmp_path / "agent.db")
    for key in AGENT_KEYS:
        w.thread(key)
    bulk_threads(w, [f"old:{n}" for n in range(200)], 50, summary="old summary about kiwi")
    bulk_threads(w, ["erase:me"] * 5, 50, text=ERASE_MARKER, summary=ERASE_MARKER)
    for n in range(500):
        w.memory(f"me.{n}", f"{ERASE_MARKER} {n}")
    w.conn.execute(
        "UPDATE sessions SET updated_at = '2026-10-01T00:00:00.000Z'"
        " WHERE conversation_key LIKE 'old:%'"
    )
    w.conn.execute(f"PRAGMA journal_mode = {journal}")
    w.close()
    return w.path


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*VT, *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_search_prune_and_erase_beside_the_agent_lose_nothing_and_lock_out_nobody(
    tmp_path, journal
):
    path = volume(tmp_path, journal)
    agent = subprocess.Popen(
        [sys.executable, "-m", "tests.support.agent", str(path), "6", *AGENT_KEYS],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    time.sleep(0.3)
    commands = [
        ["search", path, "kiwi", "-n", "1"],  # builds the index while the agent writes
        ["prune", path, "--archived-before", "2026-11-01", "--vacuum"],
        ["search", path, "agent-live", "--json", "-n", "0"],
        ["erase", path, "--key", "erase:me", "--memories-prefix", "me.", "--yes"],
        ["search", path, "agent-live", "--json", "-n", "0", "--in", "messages"],
    ]
    results = []
    for command in commands:
        results.append(run(*command))
        time.sleep(0.2)
    report = json.loads(agent.communicate(timeout=60)[0])
    assert_all_ran_beside_it(str(path), commands, results, report)
    assert integrity_ok(path)
    assert run("check", path).returncode == 0
    assert rows(path, "SELECT count(*) FROM sessions WHERE conversation_key LIKE 'old:%'") == [(0,)]
    assert not any(ERASE_MARKER[2:].encode() in p.read_bytes() for p in tmp_path.glob("agent.db*"))
    # what a search found while the agent wrote was there; once it stops, everything is found
    live = {m for (m,) in rows(path, "SELECT id FROM messages WHERE content LIKE 'agent-live-%'")}
    assert {r["message_id"] for r in json.loads(results[-1].stdout)} <= live
    after = run("search", path, "agent-live", "--json", "-n", "0", "--in", "messages")
    assert {r["message_id"] for r in json.loads(after.stdout)} == live

"""A simulated agent writing at a high rate while volumetool works on the same file."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.faults.kills import ROOT, VT
from tests.support.agent import assert_all_ran_beside_it
from tests.support.fixtures import KEY, THREAD_MEMORY, write_config
from tests.support.volumes import VolumeWriter, due_thread

NO_GATE = ("--min-retention", "0")  # the summary is a placeholder: no quality gate


pytestmark = pytest.mark.shared_server(latency=0.1, summary="Summary.")


def volume(tmp_path, journal: str):
    w = VolumeWriter(tmp_path / "agent.db")
    keys = [f"due:{n}" for n in range(6)]
    for key in keys:
        due_thread(w, key, turns=10)
    w.thread("other:1")
    for n in range(300):
        w.memory(f"existing.{n}", f"value {n}")
    w.conn.execute(f"PRAGMA journal_mode = {journal}")
    w.close()
    return w.path, keys


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_nothing_the_agent_writes_is_lost_and_nobody_is_locked_out(tmp_path, server, journal):
    path, keys = volume(tmp_path, journal)
    write_config(tmp_path / "agent.yaml", server, None, "small", THREAD_MEMORY, "big", agent=None)
    with open(tmp_path / "in.jsonl", "w") as out:
        for n in range(5_000):
            out.write(json.dumps({"key": f"imported.{n}", "value": f"v{n}"}) + "\n")
    env = {**os.environ, "TEST_MODEL_KEY": KEY, "PYTHONPATH": str(ROOT)}
    agent = subprocess.Popen(
        [sys.executable, "-m", "tests.support.agent", str(path), "4", *keys, "other:1"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    time.sleep(0.3)
    commands = [
        ["compact", path, "--config", tmp_path / "agent.yaml", "--concurrency", "3", *NO_GATE],
        ["memories", "import", path, tmp_path / "in.jsonl"],
        ["thread", "new", path, "other:1"],
        ["thread", "undo", path, "due:1", "--yes"],  # while the agent appends to due:1
        ["backup", path, tmp_path / "copy.db"],
        [
            "compact",
            path,
            "--config",
            tmp_path / "agent.yaml",
            "--key",
            "due:0",
            "--force",
            *NO_GATE,
        ],
    ]
    results = []
    for command in commands:
        results.append(
            subprocess.run(
                [*VT, *map(str, command)],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                timeout=60,
            )
        )
        time.sleep(0.1)
    report = json.loads(agent.communicate(timeout=60)[0])
    assert_all_ran_beside_it(str(path), commands, results, report)
    compacted = json.loads(
        subprocess.run(
            [*VT, "sessions", str(path), "--json", "--key", "due:*"],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout
    )
    assert all(row["has_summary"] != (row["conversation_key"] == "due:1") for row in compacted)
    conn = sqlite3.connect(path)
    undone = conn.execute(
        "SELECT count(*) FROM messages m JOIN sessions s ON s.id = m.session_id"
        " WHERE s.conversation_key = 'due:1' AND m.folded_by IS NOT NULL"
    ).fetchone()
    assert undone == (0,)  # every message of the undone compaction is live again
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("SELECT count(*) FROM memories WHERE key LIKE 'imported.%'").fetchone() == (
        5_000,
    )
    assert subprocess.run([*VT, "check", str(path)], cwd=ROOT).returncode == 0
    backup = sqlite3.connect(tmp_path / "copy.db")
    assert backup.execute("PRAGMA integrity_check").fetchone() == ("ok",)

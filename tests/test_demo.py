"""demo writes a realistic volume, the same for the same seed, and never overwrites."""

from __future__ import annotations

import json
import sqlite3

from tests.conftest import assert_clean_error
from tests.volumes import table_dump


def test_same_seed_same_volume_other_seed_other_volume(tmp_path, run_cli):
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        result = run_cli("demo", tmp_path / f"{name}.db", "--sessions", "30", "--seed", seed)
        assert result.exit_code == 0, result
    a, b, c = (table_dump(tmp_path / f"{n}.db") for n in "abc")
    assert a == b
    assert a["messages"] != c["messages"]


def test_demo_holds_what_the_spec_lists(tmp_path, run_cli):
    result = run_cli(
        "demo", f"{tmp_path}/vol/", "--sessions", "12", "--config-out", tmp_path / "agent.yaml"
    )
    assert result.exit_code == 0, result
    conn = sqlite3.connect(tmp_path / "vol" / "agent.db")
    one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert one("SELECT count(*) FROM sessions") == 12
    assert one("SELECT count(DISTINCT channel) FROM sessions") >= 4
    assert one("SELECT count(*) FROM sessions WHERE status = 'archived'") >= 1
    assert one("SELECT count(*) FROM messages WHERE tool_calls IS NOT NULL") > 0
    assert one("SELECT count(*) FROM messages WHERE role = 'tool'") > 0
    assert one("SELECT count(*) FROM messages WHERE folded_by IS NOT NULL") > 0
    assert one("SELECT count(*) FROM runs WHERE trigger = 'compaction' AND status = 'ok'") > 0
    assert one("SELECT count(*) FROM runs WHERE trigger = 'compaction' AND status = 'error'") >= 1
    assert one("SELECT count(*) FROM runs WHERE trigger != 'compaction' AND status = 'error'") >= 1
    assert one("SELECT count(*) FROM memories") > 0
    events = dict(conn.execute("SELECT event, count(*) FROM audit GROUP BY event"))
    assert events.keys() >= {"permission", "memory", "thread", "compaction"}
    # Some active thread is past the threshold with at least three live turns: due.
    due = one(
        """SELECT count(*) FROM sessions s WHERE s.status = 'active'
           AND (SELECT last_input_tokens FROM runs r WHERE r.session_id = s.id
                AND r.trigger != 'compaction' ORDER BY id DESC LIMIT 1) >= 50000
           AND (SELECT count(*) FROM messages m WHERE m.session_id = s.id
                AND m.folded_by IS NULL AND m.role = 'user') >= 3"""
    )
    assert due >= 1
    # Folded messages always point at a successful compaction run of their own thread.
    assert (
        one(
            """SELECT count(*) FROM messages m JOIN runs r ON r.id = m.folded_by
           WHERE r.trigger != 'compaction' OR r.status != 'ok' OR r.session_id != m.session_id"""
        )
        == 0
    )
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    config = (tmp_path / "agent.yaml").read_text()
    assert "compact_at_tokens: 50000" in config and "small: gpt-4.1-mini" in config
    details = [json.loads(d) for (d,) in conn.execute("SELECT detail FROM audit")]
    assert all(isinstance(d, dict) for d in details)


def test_demo_refuses_to_overwrite(tmp_path, run_cli):
    path = tmp_path / "agent.db"
    assert run_cli("demo", path).exit_code == 0
    before = path.read_bytes()
    assert_clean_error(run_cli("demo", path), 2, "already exists")
    assert path.read_bytes() == before
    config = tmp_path / "agent.yaml"
    config.write_text("mine")
    assert_clean_error(run_cli("demo", tmp_path / "new.db", "--config-out", config), 2)
    assert config.read_text() == "mine"
    assert not (tmp_path / "new.db").exists()

"""demo writes a realistic volume, the same for the same seed, and never overwrites."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import subprocess
import sys

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_clean_error, examples
from tests.support.volumes import table_dump
from volumetool import demo
from volumetool.config import Loader, check_source, load_config
from volumetool.config.secret import SECRET_VALUE
from volumetool.errors import UnusableInput


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


# Digests of every row the demo writes, recorded from the code before `_Conversation` was
# rewritten around dataclasses: the demo is the fixture of the golden files and the bench, so a
# refactor must leave every row of every table the same for every size and seed. Only
# _sqlite_migrations is left out: it records when each migration ran.
DEMO_DIGESTS = {
    (1, 1): "b227e6489be42561b1f73fd46084e42cf9a335ea1b75d6652bebdac01ef37be0",
    (12, 1): "cf899d0c54704f0dde6dbdefea5c6b561e483ac8b4aa3f17e0ec8eb5db2da0b9",
    (40, 1): "4f06abb73822de97b2abfbcba4a330fe9536be48521728424e6f41247bca42bc",
    (40, 7): "b3bd4b66f09e638ed7614e1d75272bba055ddfdfef2dcf61edf5a1058203bb41",
    (200, 3): "aa056765caa76145019ffeb6ed036f9d9f6c9b1cab5cd535d501544616aa02aa",
    # Over FLUSH_ROWS messages: the rows reach the file in more than one batch.
    (400, 5): "d5b7106ec59bc60a93325d83d57eee841d51b5c30e4a0e48e46d5551ca82bcf6",
}
DEMO_TABLES = ("identity", "sessions", "messages", "runs", "audit", "compactions", "memories")


def demo_digest(path) -> str:
    """One SHA-256 over every agent table's rows in id (or key) order."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    digest = hashlib.sha256()
    try:
        for table in DEMO_TABLES:
            digest.update(f"\x00{table}\x00".encode())
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1"):
                digest.update(repr(row).encode())
    finally:
        conn.close()
    return digest.hexdigest()


@pytest.mark.parametrize(("sessions", "seed"), sorted(DEMO_DIGESTS))
def test_demo_rows_are_the_same_for_the_same_size_and_seed(tmp_path, sessions, seed):
    path = tmp_path / "agent.db"
    counts = demo.build(path, threads=sessions, seed=seed)
    assert demo_digest(path) == DEMO_DIGESTS[sessions, seed]
    # The counts the command reports are the rows it wrote.
    conn = sqlite3.connect(path)
    written = {
        table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        for table in ("sessions", "messages", "runs", "audit", "memories")
    }
    conn.close()
    assert dataclasses.asdict(counts) == written
    assert counts.sessions == sessions


def test_the_agents_compactions_fold_whole_turns_and_never_the_prefix(tmp_path):
    path = tmp_path / "agent.db"
    demo.build(path, threads=40, seed=1)
    conn = sqlite3.connect(path)
    folding_threads = 0
    for (thread,) in conn.execute("SELECT DISTINCT session_id FROM messages"):
        rows = conn.execute(
            "SELECT role, folded_by FROM messages WHERE session_id = ? ORDER BY id", (thread,)
        ).fetchall()
        first_user = next(i for i, (role, _) in enumerate(rows) if role == "user")
        assert all(folded_by is None for _, folded_by in rows[:first_user])
        # A turn is a user message and everything up to the next one (SPEC section 2).
        turns: list[list] = []
        for role, folded_by in rows[first_user:]:
            if role == "user":
                turns.append([])
            turns[-1].append(folded_by)
        assert all(len(set(turn)) == 1 for turn in turns), "a fold splits a turn"
        folds = [turn[0] for turn in turns]
        live = folds.index(None)
        assert all(run is None for run in folds[live:]), "a live turn before a folded one"
        assert folds[:live] == sorted(folds[:live]), "a later fold before an earlier one"
        folding_threads += live > 0
    assert folding_threads > 0
    # Each successful compaction run left its compactions row; the latest is the summary.
    assert conn.execute(
        """SELECT count(*) FROM runs r LEFT JOIN compactions c ON c.run_id = r.id
           WHERE r.trigger = 'compaction' AND r.status = 'ok'
           AND (c.run_id IS NULL OR c.session_id != r.session_id)"""
    ).fetchone() == (0,)
    assert conn.execute(
        """SELECT count(*) FROM sessions s JOIN compactions c ON c.run_id =
             (SELECT max(run_id) FROM compactions WHERE session_id = s.id)
           WHERE c.summary IS NOT s.summary"""
    ).fetchone() == (0,)
    conn.close()


def test_demo_prints_the_config_on_stdout_for_dash(tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli("demo", "vol/", "--seed", "3", "--config-out", "-")
    assert result.exit_code == 0, result
    assert result.stdout == demo.agent_config(3, "demo-agent")
    assert "config stdout" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vol"]  # no file named `-`


@pytest.mark.parametrize(
    ("volume", "config", "says"),
    [
        ("d6/", "d6", "goes in that directory"),  # the config where the volume's directory goes
        ("d7", "d7/agent.yaml", "end VOLUME with /"),  # the config under the volume's file
        ("d8/", "d8/agent.db", "where the volume goes"),
        ("d9", "d9-wal", "where the volume goes"),
        ("d10/", "d10/", "names a directory"),
        ("d11", "f/agent.yaml", "no directory f"),  # f is a file
        ("d12/a/", "x\x00.yaml", "NUL"),
    ],
)
def test_demo_checks_both_outputs_before_writing_either(
    tmp_path, run_cli, monkeypatch, volume, config, says
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("mine")
    assert_clean_error(run_cli("demo", volume, "--config-out", config), 2, says)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_demo_that_fails_midway_removes_only_what_it_made(tmp_path, monkeypatch):
    (tmp_path / "kept").mkdir()
    path = tmp_path / "kept" / "new" / "deeper" / "agent.db"
    config = demo.config_target(str(tmp_path / "kept" / "conf" / "agent.yaml"))

    def broken(conn, threads, seed):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(demo, "fill", broken)
    with pytest.raises(OSError):
        demo.build(path, threads=2, config=config)
    assert list((tmp_path / "kept").iterdir()) == []
    # The config cannot be published (someone wrote that file meanwhile): the volume this run
    # made goes again, the other file stays.
    monkeypatch.undo()
    mine = tmp_path / "kept" / "agent.yaml"

    def theirs(conn, threads, seed):
        mine.write_text("theirs")
        return demo.DemoCounts()

    monkeypatch.setattr(demo, "fill", theirs)
    with pytest.raises(UnusableInput, match="already exists"):
        demo.build(tmp_path / "kept" / "v" / "agent.db", 2, config=demo.config_target(str(mine)))
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["agent.yaml"]
    assert mine.read_text() == "theirs"


@pytest.mark.parametrize("name", ["", "  ", "\t"])
def test_demo_and_init_refuse_a_blank_name(tmp_path, run_cli, name):
    for command in ("demo", "init"):
        result = run_cli(command, tmp_path / f"{command}.db", "--name", name)
        assert_clean_error(result, 2, "--name", "blank")
        assert list(tmp_path.iterdir()) == []


# Names the YAML would read as something else when written as they are: a mapping, a comment,
# a sequence, flow collections, quotes, an alias, an anchor, a tag, reserved indicators, a
# YAML 1.1 boolean or number, a second line, and line breaks the emitter must escape.
YAML_SPECIAL_NAMES = [
    "a: b",
    "#1 bot",
    "bot # ops",
    "- bot",
    "[bot",
    "{bot}",
    "'bot",
    '"bot"',
    "*bot",
    "&bot",
    "!bot",
    "%bot",
    "@bot",
    "`bot",
    "|",
    ">",
    "yes",
    "~",
    "0x1F",
    "1:20",
    " bot ",
    "ops\nbot",
    "ops\x85bot",
    "ops\u2028bot",
    "bot\x1b[31m",
    "café ☕",
]


@pytest.mark.parametrize("name", YAML_SPECIAL_NAMES)
def test_the_demo_config_holds_any_name_as_it_was_given(tmp_path, run_cli, name):
    config = tmp_path / "agent.yaml"
    result = run_cli("demo", tmp_path / "agent.db", "--name", name, "--config-out", config)
    assert result.exit_code == 0, result
    assert yaml.load(config.read_bytes(), Loader=Loader)["name"] == name
    load_config(str(config))
    assert run_cli("validate", config, "--strict").exit_code == 0
    conn = sqlite3.connect(tmp_path / "agent.db")
    assert conn.execute("SELECT value FROM identity WHERE key = 'name'").fetchone() == (name,)
    conn.close()


@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1))
@settings(max_examples=examples(300))
def test_the_demo_config_round_trips_every_name(name):
    assume(name.strip() and not SECRET_VALUE.search(name))
    text = demo.agent_config(1, name)
    assert yaml.load(text, Loader=Loader)["name"] == name
    findings, config = check_source(text.encode(), "agent.yaml")
    assert findings == [] and config is not None


def test_the_demo_config_is_utf8_whatever_the_locale(tmp_path):
    """Under an ASCII locale (LC_ALL=C, no UTF-8 mode) the file was written in the locale's
    encoding: a name such as 'café' failed with a traceback, after the volume was made."""
    probe = (
        "import sys; from pathlib import Path; from volumetool import demo; "
        "demo.build(Path(sys.argv[1]), 1, 1, 'caf\\u00e9', demo.config_target(sys.argv[2]))"
    )
    env = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    config = tmp_path / "agent.yaml"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(
        [sys.executable, "-c", probe, tmp_path / "agent.db", config], env=env, cwd=root, check=True
    )
    assert yaml.load(config.read_bytes(), Loader=Loader)["name"] == "café"

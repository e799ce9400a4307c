"""migrate, backup and check over real files, legacy runtime 0.x files included."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlite_utils

from tests.conftest import assert_clean_error
from tests.legacy import write_legacy
from tests.test_schema import ROOT, normalized_schema
from tests.volumes import VolumeWriter, file_digest, table_dump
from volumetool.create import create_volume
from volumetool.migrations import migrations

CALL = [
    {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
    }
]


def transcript(n: int, tag: str) -> list[dict]:
    elements = [
        {"role": "system", "content": f"Kanal #{tag}: sei kurz.", "ts": "2025-02-01T10:00:00.000Z"}
    ]
    for i in range(n):
        elements += [
            {
                "role": "user",
                "content": f"Frage {i} — «{tag}»\nzweite Zeile 🧠",
                "ts": f"2025-02-01T10:{i:02d}:01.000Z",
            },
            {
                "role": "assistant",
                "content": "",
                "tool_calls": CALL,
                "ts": f"2025-02-01T10:{i:02d}:02.000Z",
            },
            {
                "role": "tool",
                "content": "pool_size = 50\n\tlog = debug",
                "tool_call_id": "call_1",
                "ts": f"2025-02-01T10:{i:02d}:03.000Z",
            },
            {
                "role": "assistant",
                "content": f"Antwort {i}: ✓ עברית",
                "ts": f"2025-02-01T10:{i:02d}:04.000Z",
            },
        ]
    return elements


def legacy_file(path: Path, sizes=(0, 1, 3, 12)) -> tuple[Path, list[dict]]:
    threads = []
    for n, size in enumerate(sizes, 1):
        threads.append(
            {
                "id": n,
                "key": f"discord:{n % 2}",
                "archived": n < len(sizes) - 1,
                "transcript": transcript(size, f"t{n}"),
            }
        )
    runs = [
        (
            1,
            2,
            "message",
            "gpt-4.1",
            "ok",
            51000,
            300,
            None,
            "2025-02-01T10:00:00.000Z",
            "2025-02-01T10:00:05.000Z",
        ),
        (2, None, "schedule", None, "error", None, None, "boom", "2025-02-01T11:00:00.000Z", None),
    ]
    audit = [
        (
            1,
            "2025-02-01T10:00:03.000Z",
            "permission",
            json.dumps({"tool": "read_file", "decision": "allow"}),
            2,
            1,
        )
    ]
    memories = [
        ("deploy_region", "us-east\nalways", "2025-01-01T00:00:00.000Z", "2025-01-01T00:00:00.000Z")
    ]
    return write_legacy(path, threads, runs, audit, memories), threads


def test_a_legacy_file_migrates_message_by_message(tmp_path, run_cli):
    path, threads = legacy_file(tmp_path / "agent.db")
    result = run_cli("migrate", path)
    assert result.exit_code == 0, result
    backups = list(tmp_path.glob("agent.db.bak-*"))
    assert len(backups) == 1 and f"backup {backups[0]}" in result.stdout
    dump = table_dump(path)
    for thread in threads:
        rows = [r for r in dump["messages"] if r[1] == thread["id"]]
        assert len(rows) == len(thread["transcript"])
        assert [r[0] for r in rows] == sorted(r[0] for r in rows)
        for row, element in zip(rows, thread["transcript"], strict=True):
            _, _, role, content, tool_calls, tool_call_id, created_at, folded_by = row
            assert (role, content, created_at, folded_by) == (
                element["role"],
                element["content"],
                element["ts"],
                None,
            )
            assert (json.loads(tool_calls) if tool_calls else None) == element.get("tool_calls")
            assert tool_call_id == element.get("tool_call_id")
    sessions = {r[0]: r for r in dump["sessions"]}
    assert sessions[4][3] == "active" and sessions[4][7] is None
    assert sessions[1][3] == "archived" and sessions[1][7] == sessions[1][6]  # updated_at
    runs = {r[0]: r for r in dump["runs"]}
    assert runs[1][7] == 51000 and runs[2][7] is None  # last_input_tokens from input_tokens
    assert dump["audit"][0][6] == "agent"
    assert dump["memories"] == [
        ("deploy_region", "us-east\nalways", "2025-01-01T00:00:00.000Z", "2025-01-01T00:00:00.000Z")
    ]
    reference = sqlite3.connect(":memory:")
    reference.executescript((ROOT / "schema.sql").read_text())
    assert normalized_schema(sqlite3.connect(path)) == normalized_schema(reference)
    assert run_cli("check", path).exit_code == 0
    assert run_cli("status", path).exit_code == 0
    # the backup is the untouched legacy file
    assert "transcript" in {
        r[1] for r in sqlite3.connect(backups[0]).execute("PRAGMA table_info(sessions)")
    }


def test_sqlite_utils_migrate_does_the_same(tmp_path):
    ours, _ = legacy_file(tmp_path / "a.db")
    theirs, _ = legacy_file(tmp_path / "b.db")
    subprocess.run(
        [sys.executable, "-m", "volumetool", "migrate", str(ours), "--no-backup"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            Path(sys.executable).parent / "sqlite-utils",
            "migrate",
            str(theirs),
            str(ROOT / "volumetool" / "migrations.py"),
        ],
        check=True,
        capture_output=True,
    )
    assert table_dump(ours) == table_dump(theirs)
    assert normalized_schema(sqlite3.connect(ours)) == normalized_schema(sqlite3.connect(theirs))


def test_a_failing_migration_names_the_row_and_leaves_the_file_as_it_was(tmp_path, run_cli):
    path, threads = legacy_file(tmp_path / "agent.db")
    conn = sqlite3.connect(path)
    conn.execute('UPDATE sessions SET transcript = \'[{"role": "user", "content": \' WHERE id = 3')
    conn.commit()
    conn.close()
    before = table_dump(path, tables=("identity", "sessions", "runs", "audit", "memories"))
    result = run_cli("migrate", path, "--no-backup")
    assert_clean_error(
        result, 1, "m002_messages_from_transcripts failed", "sessions row 3", "not valid JSON"
    )
    assert table_dump(path, tables=("identity", "sessions", "runs", "audit", "memories")) == before
    state = sqlite3.connect(path).execute("SELECT name FROM _sqlite_migrations").fetchall()
    assert state == [("m001_runtime_0x_tables",)]  # the file as it was before m002
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # fix the row; a second migrate completes
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE sessions SET transcript = ? WHERE id = 3", (json.dumps(threads[2]["transcript"]),)
    )
    conn.commit()
    conn.close()
    assert run_cli("migrate", path, "--no-backup").exit_code == 0
    assert len(table_dump(path)["messages"]) == sum(len(t["transcript"]) for t in threads)


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ('UPDATE sessions SET transcript = \'{"role": "user"}\' WHERE id = 2', "not a JSON array"),
        (
            'UPDATE sessions SET transcript = \'[{"role": "function", "content": "x"}]\' '
            "WHERE id = 2",
            "unknown role 'function'",
        ),
        ("UPDATE sessions SET archived = 0", "more than one active thread"),
    ],
)
def test_other_bad_legacy_rows(tmp_path, run_cli, sql, fragment):
    path, _ = legacy_file(tmp_path / "agent.db")
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()
    assert_clean_error(run_cli("migrate", path, "--no-backup"), 1, fragment)


def test_dangling_references_are_refused_before_any_change(tmp_path, run_cli):
    path, _ = legacy_file(tmp_path / "agent.db")
    conn = sqlite3.connect(path)
    conn.execute("UPDATE runs SET session_id = 99 WHERE id = 1")
    conn.commit()
    conn.close()
    before = file_digest(path)
    assert_clean_error(run_cli("migrate", path), 1, "runs row 1 points to a missing sessions")
    assert file_digest(path) == before
    assert not list(tmp_path.glob("*.bak-*"))


def test_list_check_and_dry_run_change_nothing(tmp_path, run_cli):
    path, _ = legacy_file(tmp_path / "agent.db")
    before = file_digest(path)
    every = len(migrations.pending(sqlite_utils.Database(memory=True)))
    listed = json.loads(run_cli("migrate", path, "--list", "--json").stdout)
    assert [r["status"] for r in listed] == ["pending"] * every
    assert_clean_error(run_cli("migrate", path, "--list", "--json", "x"), 2)
    check = run_cli("migrate", path, "--check")
    assert check.exit_code == 1 and f"{every} pending" in check.stdout
    dry = run_cli("migrate", path, "--dry-run")
    assert dry.exit_code == 0 and "would apply" in dry.stdout
    assert file_digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.db"]
    missing = run_cli("migrate", tmp_path / "nope.db", "--list")
    assert missing.exit_code == 2 and not (tmp_path / "nope.db").exists()
    assert run_cli("migrate", path).exit_code == 0
    listed = json.loads(run_cli("migrate", path, "--list", "--json").stdout)
    assert [r["status"] for r in listed] == ["applied"] * every
    assert all(r["applied_at"] for r in listed)
    assert run_cli("migrate", path, "--check").exit_code == 0


def test_newer_files_are_refused(tmp_path, run_cli):
    path = create_volume(tmp_path / "agent.db", "a")
    conn = sqlite3.connect(path)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at)"
        " VALUES ('agent-volume', 'm900_future', 'x')"
    )
    conn.commit()
    conn.close()
    assert_clean_error(run_cli("migrate", path), 3, "newer")
    listed = json.loads(run_cli("migrate", path, "--list", "--json").stdout)
    assert listed[-1] == {
        "migration": "m900_future",
        "status": "unknown (newer)",
        "applied_at": "x",
    }


def test_many_volumes_in_one_call(tmp_path, run_cli):
    legacy, _ = legacy_file(tmp_path / "a.db")
    current = create_volume(tmp_path / "b.db", "b")
    result = run_cli("migrate", legacy, current, tmp_path / "missing.db", "--no-backup")
    assert result.exit_code == 2
    assert f"{current}: up to date" in result.stdout and f"{legacy}: applied" in result.stdout
    assert "1 failed, 1 migrated, 1 up to date" in result.stderr


def test_backup_never_overwrites(tmp_path, run_cli):
    source = create_volume(tmp_path / "agent.db", "a")
    dest = tmp_path / "copy.db"
    dest.write_text("mine")
    assert_clean_error(run_cli("backup", source, dest), 2, "already exists")
    assert dest.read_text() == "mine"


def test_backup_of_a_file_being_written_is_consistent(tmp_path, run_cli):
    w = VolumeWriter(tmp_path / "agent.db")
    session = w.thread("k")
    w.close()
    stop = threading.Event()
    written: list[int] = []

    def agent():
        conn = sqlite3.connect(tmp_path / "agent.db", isolation_level=None, timeout=10)
        n = 0
        while not stop.is_set():
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO messages (session_id, role, content, created_at)"
                " VALUES (?, 'user', ?, '2026-11-30T00:00:00.000Z')",
                (session, f"turn {n} " + "x" * 2000),
            )
            conn.execute("COMMIT")
            written.append(n)
            n += 1
            time.sleep(0.002)
        conn.close()

    writer = threading.Thread(target=agent)
    writer.start()
    try:
        time.sleep(0.2)
        copies = []
        for n in range(3):
            dest = tmp_path / f"copy{n}.db"
            result = run_cli("backup", tmp_path / "agent.db", dest)
            assert result.exit_code == 0, result
            copies.append(dest)
            time.sleep(0.05)
    finally:
        stop.set()
        writer.join()
    for dest in copies:
        conn = sqlite3.connect(dest)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        contents = [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY id")]
        assert contents == [f"turn {i} " + "x" * 2000 for i in range(len(contents))]  # a prefix
        assert oct(dest.stat().st_mode)[-3:] == "600"
    assert len(written) > 10


# -- check ---------------------------------------------------------------------------------


@pytest.fixture
def clean(tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    s = w.thread("k1")
    run = w.run(s, trigger="compaction")
    w.turn(s, 1, tool=True, folded_by=run)
    w.turn(s, 2)
    other = w.thread("k2")
    w.turn(other, 1)
    w.run(other)
    w.audit("memory", {"action": "remember", "key": "a"}, session=s, run=run)
    w.close()
    return w.path


def test_check_finds_nothing_in_a_clean_file(clean, run_cli):
    result = run_cli("check", clean)
    assert result.exit_code == 0
    assert json.loads(run_cli("check", clean, "--json").stdout) == []


PLANTED = [
    ("foreign-key", "messages", "UPDATE messages SET session_id = 99 WHERE id = 7"),
    ("foreign-key", "runs", "UPDATE runs SET session_id = 77 WHERE id = 2"),
    ("foreign-key", "messages", "UPDATE messages SET folded_by = 55 WHERE id = 2"),
    (
        "duplicate-active-thread",
        "sessions",
        "DROP INDEX sessions_one_active_per_key; UPDATE sessions SET conversation_key = 'k1'",
    ),
    (
        "folded-by-non-compaction",
        "messages",
        "INSERT INTO runs (session_id, trigger, status, started_at) VALUES (1, 'message', 'ok',"
        " 'x'); UPDATE messages SET folded_by = (SELECT max(id) FROM runs) WHERE id = 5",
    ),
    (
        "folded-by-other-thread",
        "messages",
        "INSERT INTO runs (session_id, trigger, status, started_at) VALUES (2, 'compaction',"
        " 'ok', 'x'); UPDATE messages SET folded_by = (SELECT max(id) FROM runs) WHERE id = 5",
    ),
    ("audit-detail-not-object", "audit", "UPDATE audit SET detail = '[1, 2]'"),
    ("audit-detail-not-object", "audit", "UPDATE audit SET detail = 'not json'"),
    ("tool-calls-not-array", "messages", "UPDATE messages SET tool_calls = '{}' WHERE id = 2"),
    ("audit-missing-run", "audit", "UPDATE audit SET run_id = 42"),
]


@pytest.mark.parametrize(("check", "table", "sql"), PLANTED, ids=[p[0] for p in PLANTED])
def test_check_finds_each_planted_problem(clean, run_cli, check, table, sql):
    conn = sqlite3.connect(clean)
    conn.executescript(sql)
    conn.close()
    result = run_cli("check", clean, "--json")
    assert result.exit_code == 1
    # (a duplicate needs the unique index dropped: check names that too)
    found = [p for p in json.loads(result.stdout) if p["check"] != "missing-schema-object"]
    assert [(p["check"], p["table"]) for p in found] == [(check, table)]
    assert found[0]["ids"]
    text = run_cli("check", clean).stdout
    assert f"[{check}]" in text and f"{table} rows" in text


def test_check_reports_a_damaged_file(clean, run_cli):
    conn = sqlite3.connect(clean)
    conn.execute("PRAGMA journal_mode = DELETE")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    conn.close()
    data = bytearray(clean.read_bytes())
    start = (root - 1) * page_size
    data[start + 3 : start + 5] = b"\xff\xff"  # the page claims 65535 cells
    clean.write_bytes(bytes(data))
    result = run_cli("check", clean)
    assert result.exit_code in (1, 2), result
    assert "Traceback" not in result.stderr
    assert "[integrity]" in result.stdout or "damaged" in result.stderr


def test_migrate_waits_for_or_refuses_another_volumetool(tmp_path, run_cli):
    from volumetool.volume import volume_lock

    path, _ = legacy_file(tmp_path / "agent.db")
    with volume_lock(path):
        assert_clean_error(run_cli("migrate", path), 4, "volume lock")
    assert run_cli("migrate", path, "--wait", "1").exit_code == 0


def test_odd_legacy_elements_keep_everything(tmp_path, run_cli):
    elements = [
        {"role": "user", "content": "hi", "ts": 1764480000},
        {"role": "assistant", "content": None, "tool_calls": CALL},
        {
            "role": "tool",
            "content": [{"type": "text", "text": "parts"}],
            "tool_call_id": 7,
            "ts": "2025-02-01T10:00:00Z",
        },
        {"role": "assistant", "content": '\u00e9\\"\n\u0000 end', "ts": 1764480000.5},
    ]
    path = write_legacy(
        tmp_path / "agent.db",
        [{"id": 1, "key": "k", "transcript": elements, "created_at": "2025-01-05T00:00:00.000Z"}],
    )
    assert run_cli("migrate", path, "--no-backup").exit_code == 0
    rows = [r[2:7] for r in table_dump(path)["messages"]]
    assert rows[0] == ("user", "hi", None, None, "2025-11-30T05:20:00.000Z")
    assert rows[1][:2] == ("assistant", "") and json.loads(rows[1][2]) == CALL
    assert rows[1][4] == "2025-01-05T00:00:00.000Z"  # no ts: the thread's creation time
    assert json.loads(rows[2][1]) == [{"type": "text", "text": "parts"}]
    assert rows[2][3] == "7" and rows[2][4] == "2025-02-01T10:00:00Z"
    assert rows[3][1] == '\u00e9\\"\n\u0000 end' and rows[3][4] == "2025-11-30T05:20:00.500Z"


# What the README says becomes of an element's content: (content in the 0.x element, text).
CONTENT_AS_TEXT = [
    ("a string", 'é \\"quoted\\" \n line', 'é \\"quoted\\" \n line'),
    ("an empty string", "", ""),
    ("the string null", "null", "null"),
    ("null", None, ""),
    ("missing", ..., ""),
    ("a list of parts", [{"type": "text", "text": "hi é"}], '[{"type":"text","text":"hi é"}]'),
    ("an object", {"a": 1, "b": [True, None]}, '{"a":1,"b":[true,null]}'),
    ("true", True, "true"),
    ("false", False, "false"),
    ("an integer", 5, "5"),
    ("a decimal", 1.5, "1.5"),
]


@pytest.mark.parametrize("nul", [False, True], ids=["sql", "python"])  # m002's two ways
@pytest.mark.parametrize(
    ("case", "content", "text"), CONTENT_AS_TEXT, ids=[c[0] for c in CONTENT_AS_TEXT]
)
def test_legacy_content_becomes_the_text_the_readme_says(
    tmp_path, run_cli, case, content, text, nul
):
    element = {"role": "assistant", "tool_calls": CALL, "ts": "2025-01-05T00:00:01.000Z"}
    if content is not ...:
        element["content"] = content
    elements = [element]
    if nul:  # a transcript holding an escaped NUL is moved in Python, not in SQL
        elements.append({"role": "user", "content": "nul \u0000"})
    path = write_legacy(tmp_path / "agent.db", [{"id": 1, "key": "k", "transcript": elements}])
    assert run_cli("migrate", path, "--no-backup").exit_code == 0
    assert table_dump(path)["messages"][0][3] == text

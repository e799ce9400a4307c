"""migrate, backup and check over real files, legacy runtime 0.x files included."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlite_utils
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_clean_error, examples
from tests.support.legacy import write_legacy
from tests.support.volumes import VolumeWriter, file_digest, table_dump
from tests.test_cli import SIGNALS, wait_for
from tests.test_schema import ROOT, normalized_schema
from volumetool import migrations as migrations_module
from volumetool.atomic import create_volume
from volumetool.format import MIGRATIONS
from volumetool.migrations import LEGACY_TABLES_0X, migrations
from volumetool.timefmt import is_timestamp

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
    # in the form of every other timestamp (SPEC 2), not sqlite-utils' `2026-… +00:00`
    assert all(is_timestamp(r["applied_at"]) for r in listed), listed
    table = run_cli("migrate", path, "--list").stdout
    assert "+00:00" not in table and listed[0]["applied_at"] in table
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


@SIGNALS
def test_an_interrupted_migrate_starts_no_next_volume_and_says_which_are_finished(
    tmp_path, signum, code
):
    """`migrate ./a ./b ./c && deploy`: Ctrl-C (or SIGTERM) while ./b migrates must not
    migrate ./c, nor exit 0; the one line names the volumes finished and those not."""
    first, _ = legacy_file(tmp_path / "a.db")
    threads = [
        {"id": n, "key": f"k:{n}", "transcript": transcript(20, f"t{n}")} for n in range(1, 1501)
    ]
    big = write_legacy(tmp_path / "b.db", threads)
    last, _ = legacy_file(tmp_path / "c.db")
    untouched = file_digest(last)
    proc = subprocess.Popen(
        [sys.executable, "-m", "volumetool", "migrate", first, big, last, "--no-backup"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    journal = Path(f"{big}-journal")  # a migration of ./b is under way
    wait_for(journal.exists, proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert f"{first}: applied" in out.decode() and str(big) not in out.decode()
    [line] = err.decode().splitlines()
    assert line.startswith(f"volumetool: {big}: interrupted; "), line
    assert line.endswith(
        f"; finished: 1 ({first}); not finished: 2 ({big}, {last}) — run migrate again"
    ), line
    assert file_digest(last) == untouched
    with sqlite3.connect(big) as conn:  # what committed is whole; the rest is as it was
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# Runs `volumetool migrate` with the signal sent to itself once every migration committed,
# just before the integrity_check that follows them.
SIGNALLED_BEFORE_THE_CHECK = """
import os, sys
from volumetool import upgrade
from volumetool.cli import main

check_after = upgrade._check_after

def signalled(volume, result):
    os.kill(os.getpid(), int(os.environ["SIGNAL"]))
    check_after(volume, result)

upgrade._check_after = signalled
sys.argv[0] = "volumetool"
main()
"""


@SIGNALS
def test_an_interrupt_after_the_last_migration_says_it_committed_and_how_to_run_the_check(
    tmp_path, run_cli, signum, code
):
    """Interrupted after the last migration committed, before its integrity_check: migrating
    again would find the file up to date and check nothing, so the line says the file is at
    the current format and names the command that runs the check that did not run."""
    path, _ = legacy_file(tmp_path / "agent.db")
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_BEFORE_THE_CHECK, "migrate", path, "--no-backup"],
        env={**os.environ, "SIGNAL": str(int(signum))},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == code, done.stderr
    last = MIGRATIONS[-1]
    said = (
        f"volumetool: {path}: interrupted; every migration applied (committed: the file is at"
        f" {last}, the current format, and its foreign_key_check passed), but its"
        " integrity_check did not run"
    )
    assert done.stderr.splitlines() == [f"{said} — run `volumetool check {path}`"], done.stderr
    # With a backup (the default), the line says where it is: the interrupted run printed none.
    again, _ = legacy_file(tmp_path / "again.db")
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_BEFORE_THE_CHECK, "migrate", again],
        env={**os.environ, "SIGNAL": str(int(signum))},
        capture_output=True,
        text=True,
        timeout=120,
    )
    [backup] = tmp_path.glob("again.db.bak-*")
    assert done.returncode == code and done.stdout == "", done.stderr
    assert done.stderr.splitlines() == [
        f"{said.replace(str(path), str(again))}; the backup taken first is {backup}"
        f" — run `volumetool check {again}`"
    ], done.stderr
    assert run_cli("migrate", path).stdout == f"{path}: up to date\n"
    checked = run_cli("check", path)  # the advice runs integrity_check and foreign_key_check
    assert checked.exit_code == 0, checked


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
    # Text that is not UTF-8: every other command calls the file damaged and stops there.
    (
        "integrity",
        "sessions",
        "UPDATE sessions SET conversation_key = CAST(x'6b6579ff' AS TEXT) WHERE id = 2",
    ),
    ("integrity", "messages", "UPDATE messages SET content = 'ok ' || x'c3' WHERE id = 3"),
    ("integrity", "messages", "UPDATE messages SET tool_call_id = CAST(x'610062ff' AS TEXT)"),
    (
        "integrity",
        "memories",
        "INSERT INTO memories VALUES (CAST(x'6d656dff' AS TEXT), 'v',"
        " '2026-11-30T00:00:00.000Z', '2026-11-30T00:00:00.000Z')",
    ),
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


# What docs/migrating.md says becomes of an element's content: (content in the 0.x element, text).
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


# -- m002's two ways of reading transcripts ------------------------------------------------

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
_timestamps = st.one_of(
    st.just("2025-02-01T10:00:00.000Z"),
    st.integers(min_value=-(2**34), max_value=2**34),
    st.floats(min_value=-1e10, max_value=1e10, allow_nan=False),
    st.text(max_size=6).map(lambda t: t if t[:1] not in "[{" else "[" + t),
    _json_values,
)
_elements = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
    optional={
        "content": _json_values,
        "tool_calls": _json_values,
        "tool_call_id": _json_values,
        "ts": _timestamps,
        "extra": _json_values,
    },
)
_transcripts = st.tuples(
    st.lists(_elements, max_size=5),
    st.booleans(),  # ensure_ascii: escaped (\\u00e9) or literal text, as 0.x files vary
    st.sampled_from([None, 1]),  # compact or indented JSON
)


def _legacy_memory_db(transcripts: list[str]) -> sqlite_utils.Database:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    db = sqlite_utils.Database(conn)
    for statement in LEGACY_TABLES_0X:
        conn.execute(statement)
    conn.executemany(
        "INSERT INTO sessions (id, conversation_key, channel, transcript, archived, created_at,"
        " updated_at) VALUES (?, ?, 'discord', ?, 1, '2025-01-05T00:00:00.000Z',"
        " '2025-01-06T00:00:00.000Z')",
        [(n * 3 + 1, f"k{n}", text) for n, text in enumerate(transcripts)],
    )
    return db


def _moved(transcripts: list[str], arrow: bool, monkeypatch) -> list[tuple] | str:
    """The messages m002 writes (every value with its storage class and bytes), or how it
    failed (a timestamp out of SQLite's or Python's range fails both ways alike)."""
    monkeypatch.setattr(migrations_module, "has_json_arrow", lambda conn: arrow)
    db = _legacy_memory_db(transcripts)
    try:
        migrations.apply(db, stop_before="m003_runs_last_input_tokens")
    except Exception as exc:  # how it failed is the outcome compared
        return f"{type(exc).__name__}: {exc}"
    exact = ", ".join(
        f"typeof({c}) || ':' || coalesce(hex({c}), '')"
        for c in ("role", "content", "tool_calls", "tool_call_id", "created_at", "folded_by")
    )
    return db.conn.execute(f"SELECT id, session_id, {exact} FROM messages ORDER BY id").fetchall()


# Elements that m002 refuses, naming the row: whichever way it reads, the same message.
BROKEN_ELEMENTS = {
    "role": '{"role": "function", "content": "x"}',
    "not-object": "5",
    "string-object": json.dumps(json.dumps({"role": "user", "content": "x"})),
}


def _appended(transcript: str, element: str) -> str:
    """A JSON array's text with one more element, written as given."""
    body = transcript.strip()[1:-1].strip()
    return "[" + (body + ", " if body else "") + element + "]"


def test_the_json_arrow_path_is_chosen_where_sqlite_has_it():
    conn = sqlite3.connect(":memory:")
    assert migrations_module.has_json_arrow(conn) == (sqlite3.sqlite_version_info >= (3, 38))


# Every branch of both statements at least once, whatever the draw.
EVERY_BRANCH = [
    {"role": "user", "content": True, "tool_calls": "caf\u00e9", "ts": "[not json"},
    {"role": "assistant", "content": False, "tool_calls": None, "ts": True},
    {"role": "tool", "content": 7, "tool_calls": 1.5e5, "tool_call_id": 7, "ts": [1]},
    {"role": "user", "content": 2.5, "tool_calls": [{"id": "x"}], "ts": 1764480000.25},
    {"role": "user", "content": None, "tool_calls": {"a": True}, "ts": 1764480000},
    {"role": "system", "content": [{"type": "text"}], "ts": None},
    {"role": "user", "content": {"k": "\u00e9"}, "ts": {"t": 1}},
    {"role": "user"},
]


@settings(max_examples=examples(300))
@example(
    threads=[(EVERY_BRANCH, True, None), (EVERY_BRANCH, False, 1)],
    nul=[False, True, False, False],
    broken=None,
)
@given(
    threads=st.lists(_transcripts, max_size=4),
    nul=st.lists(st.booleans(), min_size=4, max_size=4),
    broken=st.sampled_from([None, "role", "not-object", "string-object"]),
)
def test_m002_writes_the_same_bytes_with_arrow_and_with_json_extract(
    threads, nul, broken, monkeypatch
):
    transcripts = []
    for n, (elements, ascii_only, indent) in enumerate(threads):
        elements = [dict(e) for e in elements]
        if nul[n] and elements:  # an escaped NUL sends the thread through Python
            elements[-1]["content"] = "nul \u0000 here"
        transcripts.append(json.dumps(elements, ensure_ascii=ascii_only, indent=indent))
    if broken and transcripts:
        transcripts[-1] = _appended(transcripts[-1], BROKEN_ELEMENTS[broken])
    with_arrow = _moved(transcripts, True, monkeypatch)
    with_extract = _moved(transcripts, False, monkeypatch)
    assert with_arrow == with_extract
    if broken and transcripts:
        assert isinstance(with_extract, str)


@pytest.mark.parametrize(
    "faulty", ["m003_runs_last_input_tokens", "m007_compaction_replaced_summary"]
)
def test_a_row_left_pointing_nowhere_fails_the_migrate(tmp_path, run_cli, monkeypatch, faulty):
    """The whole file is checked once, before the last migration commits: a row that any
    migration of the run left pointing nowhere fails the migrate (exit 1), naming the row, and
    the last migration is not applied."""
    path, _ = legacy_file(tmp_path / "agent.db")
    migration = next(m for m in migrations._migrations if m.name == faulty)
    original = migration.fn

    def planting(db) -> None:
        original(db)
        db.conn.execute("UPDATE runs SET session_id = 99 WHERE id = 1")

    monkeypatch.setattr(migration, "fn", planting)
    assert_clean_error(
        run_cli("migrate", path, "--no-backup"),
        1,
        f"migration {migrations._migrations[-1].name} failed",
        "runs row 1 points to a missing sessions row",
    )
    recorded = sqlite3.connect(path).execute("SELECT name FROM _sqlite_migrations").fetchall()
    assert [name for (name,) in recorded] == [m.name for m in migrations._migrations[:-1]]


def test_the_arrow_path_moves_well_formed_transcripts_without_falling_back(monkeypatch):
    def fallback(conn):
        raise AssertionError("the json_extract path ran")

    monkeypatch.setattr(migrations_module, "check_transcripts", fallback)
    transcripts = [json.dumps(EVERY_BRANCH), json.dumps([{"role": "user", "content": "\u0000"}])]
    moved = _moved(transcripts, True, monkeypatch)
    assert isinstance(moved, list) and len(moved) == len(EVERY_BRANCH) + 1

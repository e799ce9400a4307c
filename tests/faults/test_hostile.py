"""Hostile files: every command fails with its documented exit code and one line, and never
makes the file worse."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.kills import ROOT, VT
from tests.support.legacy import write_legacy
from tests.support.volumes import VolumeWriter, file_digest, table_dump


def busy_volume(directory: Path) -> Path:
    w = VolumeWriter(directory / "agent.db")
    for t in range(20):
        s = w.thread(f"k{t}")
        for n in range(10):
            w.turn(s, n, tool=n % 3 == 0)
        w.run(s, last_input_tokens=1000)
    for n in range(200):
        w.memory(f"m{n}", "value " * 20)
    w.close()
    return w.path


def run(*args, preexec=None, env=None, stdin=None):
    return subprocess.run(
        [*VT, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        preexec_fn=preexec,
        env=env,
        input=stdin,
        timeout=60,
    )


def one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


COMMANDS = [
    ["status", "{db}"],
    ["sessions", "{db}"],
    ["memories", "list", "{db}"],
    ["memories", "remember", "{db}", "k", "v"],
    ["thread", "new", "{db}", "k1"],
    ["memories", "import", "{db}", "{dir}/in.jsonl"],
    ["migrate", "{db}"],
    ["check", "{db}"],
    ["backup", "{db}", "{dir}/copy.db"],
    ["memories", "export", "{db}", "-o", "{dir}/x.jsonl"],
]


def expand(command, path: Path):
    return [c.format(db=path, dir=path.parent) for c in command]


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[: len(data) // 2]
    else:
        page = 4096
        data[page * 3 : page * 6] = bytes(page * 3)  # zero-filled pages
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "zero-filled pages"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_damaged_files(tmp_path, how, command):
    path = busy_volume(tmp_path)
    sqlite3.connect(path).execute("PRAGMA journal_mode = DELETE").close()
    (tmp_path / "in.jsonl").write_text(json.dumps({"key": "a", "value": "b"}) + "\n")
    damage(path, how)
    before = file_digest(path)
    result = run(*expand(command, path))
    if command[0] == "check":  # the one command that reports damage instead of refusing
        assert result.returncode == 1, result.stderr
        assert "[integrity]" in result.stdout
        as_json = run(*expand(command, path), "--json")
        assert as_json.returncode == 1
        assert "integrity" in [p["check"] for p in json.loads(as_json.stdout)]
    elif result.returncode == 0:  # a command that never meets the damaged pages may succeed
        return
    else:
        assert result.returncode == 2, result.stderr
        assert "the file is damaged" in one_line(result)
    assert file_digest(path) == before
    assert not (tmp_path / "copy.db").exists() and not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_wal_without_its_database(tmp_path, command):
    (tmp_path / "agent.db-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(100))
    result = run(*expand(command, tmp_path / "agent.db"))
    assert result.returncode == 2
    assert "missing, but its WAL" in one_line(result)
    assert not (tmp_path / "agent.db").exists()


@contextlib.contextmanager
def read_only(directory: Path):
    """The directory as a read-only bind mount (permissions do not stop root)."""
    if os.geteuid() != 0:
        for p in [directory, *directory.iterdir()]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield
        finally:
            for p in [directory, *directory.iterdir()]:
                p.chmod(0o755 if p.is_dir() else 0o644)
        return
    mounted = subprocess.run(["mount", "--bind", directory, directory], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot bind-mount here to make a read-only directory")
    try:
        remount = subprocess.run(["mount", "-o", "remount,ro,bind", directory], capture_output=True)
        if remount.returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield
    finally:
        subprocess.run(["umount", directory], check=True)


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_read_only_volume(tmp_path, journal):
    directory = tmp_path / "vol"
    directory.mkdir()
    path = busy_volume(directory)
    sqlite3.connect(path).execute(f"PRAGMA journal_mode = {journal}").close()
    before = file_digest(path)
    with read_only(directory):
        for command in (
            ["status", path],
            ["sessions", path],
            ["memories", "get", path, "m1"],
            ["check", path],
            ["memories", "export", path],
            ["compact", path, "--dry-run", "--model", "m"],
        ):
            result = run(*command)
            assert result.returncode == 0, (command, result.stderr)
        for command in (
            ["memories", "remember", path, "k", "v"],
            ["thread", "new", path, "k1"],
            ["migrate", path],
            ["memories", "export", path, "-o", directory / "out.jsonl"],
        ):
            result = run(*command)
            assert result.returncode == 2, (command, result.stderr)
            assert "read-only" in one_line(result) or "cannot" in one_line(result)
    assert file_digest(path) == before


def full_disk(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_full_disk_changes_nothing(tmp_path):
    path = busy_volume(tmp_path)
    with open(tmp_path / "in.jsonl", "w") as out:
        for n in range(20_000):
            out.write(json.dumps({"key": f"new.{n}", "value": "x" * 100}) + "\n")
    legacy = write_legacy(
        tmp_path / "legacy.db",
        [
            {
                "id": n,
                "key": f"k{n}",
                "transcript": [{"role": "user", "content": "q" * 500, "ts": "t"}] * 40,
            }
            for n in range(1, 60)
        ],
    )
    before, legacy_before = (
        table_dump(path),
        table_dump(legacy, tables=("identity", "sessions", "runs", "audit", "memories")),
    )
    size = path.stat().st_size
    room = min(size, 60_000)  # files may grow to this many bytes, then the disk is "full"
    cases = [
        (["memories", "import", path, tmp_path / "in.jsonl"], room),
        (["demo", tmp_path / "demo.db", "--sessions", "50"], room),
        (["memories", "export", path, "-o", tmp_path / "out.jsonl"], 10_000),
        (["backup", path, tmp_path / "copy.db"], 10_000),
        (["migrate", legacy, "--no-backup"], room),
    ]
    # An earlier export (the only file export replaces: anything else is refused before the
    # volume is opened, exit 2, and the full disk would never be reached).
    previous = '{"key": "k", "value": "the previous export"}\n'
    (tmp_path / "out.jsonl").write_text(previous)
    for command, limit in cases:
        result = run(*command, preexec=full_disk(limit))
        assert result.returncode == 1, (command, result.stderr)
        line = one_line(result)
        assert "volumetool:" in line and ("full" in line or "I/O" in line or "large" in line), line
    assert table_dump(path) == before
    assert (
        table_dump(legacy, tables=("identity", "sessions", "runs", "audit", "memories"))
        == legacy_before
    )
    assert sqlite3.connect(legacy).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert (tmp_path / "out.jsonl").read_text() == previous
    assert not (tmp_path / "demo.db").exists() and not (tmp_path / "copy.db").exists()
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
    assert run("check", path).returncode == 0


CRASH_MID_WRITE = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")  # spill changed pages into the file before commit
conn.execute("BEGIN")
conn.execute("UPDATE memories SET value = 'half-written ' || key")
os._exit(0)  # die mid-transaction: a hot journal stays behind
"""


def test_a_hot_journal_left_by_a_crashed_writer(tmp_path):
    path = busy_volume(tmp_path)
    sqlite3.connect(path).execute("PRAGMA journal_mode = DELETE").close()
    before = table_dump(path)
    subprocess.run([sys.executable, "-c", CRASH_MID_WRITE, str(path)], check=True)
    assert Path(f"{path}-journal").stat().st_size > 0
    result = run("memories", "list", path, "--json", "-n", "0")
    assert result.returncode == 0, result.stderr
    assert {r["value"] for r in json.loads(result.stdout)} == {"value " * 20}
    assert table_dump(path) == before
    assert run("check", path).returncode == 0


# -- The schema is part of the file's trust (SPEC section 2) -------------------------------
#
# Each plant is SQL run on a good volume, and the names every message about it must carry.
# Whatever a plant would do when it fires (delete memories, insert rows) shows in the table
# dump, which must come out of every command unchanged.
PLANTS = {
    "triggers-on-each-table": (
        "CREATE TRIGGER evil AFTER UPDATE OF summary ON sessions BEGIN DELETE FROM memories; END;"
        "CREATE TRIGGER on_identity AFTER UPDATE ON identity BEGIN DELETE FROM sessions; END;"
        "CREATE TRIGGER on_messages AFTER DELETE ON messages BEGIN DELETE FROM memories; END;"
        "CREATE TRIGGER on_runs AFTER INSERT ON runs BEGIN DELETE FROM audit; END;"
        "CREATE TRIGGER on_audit AFTER INSERT ON audit BEGIN DELETE FROM memories; END;"
        "CREATE TRIGGER on_memories BEFORE INSERT ON memories BEGIN DELETE FROM messages; END;"
        "CREATE TRIGGER on_sessions AFTER INSERT ON sessions BEGIN DELETE FROM runs; END;",
        ["trigger evil on sessions"]
        + [f"trigger on_{t} on {t}" for t in ("identity", "messages", "runs", "audit", "memories")]
        + ["trigger on_sessions on sessions"],
    ),
    "view-named-like-a-table": (
        "ALTER TABLE memories RENAME TO memories_kept;"
        "CREATE VIEW memories AS SELECT key, 'planted ' || value AS value, created_at,"
        " updated_at FROM memories_kept",
        ["view memories", "table memories_kept", "table memories is missing"],
    ),
    "table-with-an-extra-column": (
        "ALTER TABLE sessions ADD COLUMN owner TEXT DEFAULT 'mallory'",
        ["table sessions: column owner is not in the format"],
    ),
    "expression-index-with-a-function": (
        "CREATE INDEX by_value ON memories (lower(value))",
        ["index by_value on memories"],
    ),
    "trigger-on-messages-inserting-rows": (
        "CREATE TRIGGER copy_out AFTER UPDATE ON messages BEGIN"
        " INSERT INTO memories VALUES ('leak.' || new.id, new.content, 't', 't'); END",
        ["trigger copy_out on messages"],
    ),
}

HOSTILE_READS = [
    ["status", "{db}", "--json"],
    ["sessions", "{db}", "--json"],
    ["transcript", "{db}", "k1", "--json"],
    ["runs", "{db}", "--json"],
    ["audit", "{db}", "--json"],
    ["memories", "list", "{db}", "--json"],
    ["memories", "get", "{db}", "m1"],
    ["memories", "export", "{db}"],
    ["compact", "{db}", "--dry-run", "--model", "m", "--json"],
]
HOSTILE_WRITES = [
    ["memories", "remember", "{db}", "k", "v"],
    ["memories", "forget", "{db}", "m1"],
    ["memories", "import", "{db}", "{dir}/in.jsonl"],
    ["thread", "new", "{db}", "k1"],
    ["thread", "reset", "{db}", "k1", "--yes"],
    ["migrate", "{db}"],
    ["compact", "{db}", "--model", "m", "--key", "k1", "--force", "--api-key-env", "HOME"],
]


def planted_volume(directory: Path, plant: str) -> Path:
    path = busy_volume(directory)
    conn = sqlite3.connect(path)
    conn.executescript(PLANTS[plant][0])
    conn.close()
    (directory / "in.jsonl").write_text(json.dumps({"key": "new", "value": "fact"}) + "\n")
    return path


def plant_dump(path: Path) -> dict:
    tables = ("identity", "sessions", "messages", "runs", "audit", "memories_kept")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    return table_dump(path, tuple(t for t in (*tables, "memories") if t in present))


@pytest.mark.parametrize("command", HOSTILE_READS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("plant", PLANTS)
def test_reads_of_a_planted_file_warn_on_one_line_and_read_on(tmp_path, run_cli, plant, command):
    path = planted_volume(tmp_path, plant)
    before = plant_dump(path)
    result = run_cli(*expand(command, path))
    assert result.exit_code == 0, result
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith("volumetool: warning:"), result.stderr
    assert all(name in warnings[0] for name in PLANTS[plant][1]), warnings
    if "--json" in command:
        json.loads(result.stdout)  # stdout stays clean
    assert plant_dump(path) == before


@pytest.mark.parametrize("command", HOSTILE_WRITES, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize("plant", PLANTS)
def test_writes_to_a_planted_file_are_refused_and_nothing_fires(tmp_path, run_cli, plant, command):
    path = planted_volume(tmp_path, plant)
    before, digest = plant_dump(path), file_digest(path)
    files = sorted(p.name for p in tmp_path.iterdir())
    result = run_cli(*expand(command, path))
    assert result.exit_code == 3, result
    message = result.stderr if command[0] != "compact" else result.stdout
    assert "schema departs from the format" in message
    assert all(name in message for name in PLANTS[plant][1]), message
    assert plant_dump(path) == before and file_digest(path) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == files  # no backup, no lock file


@pytest.mark.parametrize("plant", PLANTS)
def test_check_reports_every_planted_object(tmp_path, run_cli, plant):
    path = planted_volume(tmp_path, plant)
    result = run_cli("check", path, "--json")
    assert result.exit_code == 1, result
    found = json.loads(result.stdout)
    schema = [p for p in found if p["check"].endswith("-schema-object")]
    assert schema and all(p["message"] for p in schema)
    messages = " ".join(p["message"] for p in schema)
    assert all(name in messages for name in PLANTS[plant][1]), found
    assert len(schema) == len(PLANTS[plant][1])  # one finding per object


def damage_schema(path: Path, how: str) -> None:
    """Make sqlite_schema (the first page) unreadable, the header left intact."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    if how == "zeroed":
        data[100:page] = bytes(page - 100)
    else:  # the text of a CREATE statement, garbled in place
        at = data.index(b"CREATE TABLE memories")
        data[at : at + 21] = b"CREATE TABLE (((((((("
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["zeroed", "garbled"])
def test_a_damaged_schema_is_the_damage_message_and_an_integrity_finding(tmp_path, run_cli, how):
    path = busy_volume(tmp_path)
    damage_schema(path, how)
    digest = file_digest(path)
    for command in (*HOSTILE_READS[:3], *HOSTILE_WRITES[:2]):
        result = run_cli(*expand(command, path))
        assert result.exit_code == 2, (command, result)
        assert "the file is damaged" in one_line(result)
    result = run_cli("check", path, "--json")
    assert result.exit_code == 1, result
    assert [p["check"] for p in json.loads(result.stdout)] == ["integrity"]
    result = run_cli("check", path)
    assert result.exit_code == 1 and "[integrity]" in result.stdout
    assert file_digest(path) == digest


def test_an_index_calling_an_untrusted_function_makes_sqlite_refuse_the_file(tmp_path, run_cli):
    # With trusted_schema off SQLite will not even load a schema whose index calls a function
    # it does not know to be harmless: every command refuses the file, naming the index.
    path = busy_volume(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("CREATE INDEX by_value ON memories (json_quote(value))")
    conn.close()
    digest = file_digest(path)
    for command in (*HOSTILE_READS[:3], *HOSTILE_WRITES):
        result = run_cli(*expand(command, path))
        assert result.exit_code == 2, (command, result)
        line = one_line(result) if command[0] != "compact" else result.stdout
        assert "by_value" in line and "unsafe use of json_quote()" in line, line
    result = run_cli("check", path, "--json")
    assert result.exit_code == 1, result
    assert "by_value" in json.loads(result.stdout)[0]["message"]
    assert file_digest(path) == digest


def one_thread_legacy_file(directory: Path) -> Path:
    return write_legacy(
        directory / "legacy.db",
        [{"id": 1, "key": "k1", "transcript": [{"role": "user", "content": "hi", "ts": "t"}]}],
        memories=[("color", "blue", "t", "t")],
    )


LEGACY_PLANTS = {
    "trigger": (
        "CREATE TRIGGER wipe AFTER INSERT ON audit BEGIN DELETE FROM memories; END",
        "trigger wipe on audit",
    ),
    "extra-column": ("ALTER TABLE memories ADD COLUMN owner TEXT", "column owner"),
    "view": ("CREATE VIEW everything AS SELECT * FROM sessions", "view everything"),
    "current-table-in-a-0x-file": (
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id INTEGER)",
        "table messages",
    ),
}


@pytest.mark.parametrize("plant", LEGACY_PLANTS)
@pytest.mark.parametrize("mode", [[], ["--dry-run"], ["--check"]], ids=["run", "dry-run", "check"])
def test_migrate_checks_the_0x_shape_before_it_moves_anything(tmp_path, run_cli, plant, mode):
    path = one_thread_legacy_file(tmp_path)
    conn = sqlite3.connect(path)
    conn.executescript(LEGACY_PLANTS[plant][0])
    conn.close()
    digest = file_digest(path)
    result = run_cli("migrate", path, *mode)
    assert result.exit_code == 3, result
    assert LEGACY_PLANTS[plant][1] in one_line(result)
    assert file_digest(path) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["legacy.db"]  # no backup, no lock


@pytest.mark.parametrize(
    "plant",
    ["", "CREATE TRIGGER t AFTER INSERT ON runs BEGIN SELECT 1; END"],
    ids=["as-is", "planted"],
)
def test_a_file_between_migrations_is_compared_with_what_its_migrations_define(
    tmp_path, run_cli, plant
):
    import sqlite_utils

    from volumetool.migrations import migrations

    path = one_thread_legacy_file(tmp_path)
    db = sqlite_utils.Database(path)
    migrations.apply(db, stop_before="m004_audit_actor")
    db.conn.executescript(plant)
    db.close()
    result = run_cli("migrate", path, "--no-backup")
    if plant:
        assert result.exit_code == 3 and "trigger t on runs" in one_line(result)
    else:
        assert result.exit_code == 0, result
        assert "applied m004_audit_actor, m005_listing_indexes, m006" in result.stdout

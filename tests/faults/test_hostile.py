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
from tests.legacy import write_legacy
from tests.volumes import VolumeWriter, file_digest, table_dump


def build(directory: Path) -> Path:
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
    path = build(tmp_path)
    sqlite3.connect(path).execute("PRAGMA journal_mode = DELETE").close()
    (tmp_path / "in.jsonl").write_text(json.dumps({"key": "a", "value": "b"}) + "\n")
    damage(path, how)
    before = file_digest(path)
    result = run(*expand(command, path))
    if result.returncode == 0:  # a command that never reads the damaged pages may succeed
        return
    assert result.returncode in (1, 2), result.stderr
    line = one_line(result)
    assert line.startswith("volumetool:") or "[integrity]" in result.stdout
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
    path = build(directory)
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
    path = build(tmp_path)
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
    (tmp_path / "out.jsonl").write_text("the previous export\n")
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
    assert (tmp_path / "out.jsonl").read_text() == "the previous export\n"
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
    path = build(tmp_path)
    sqlite3.connect(path).execute("PRAGMA journal_mode = DELETE").close()
    before = table_dump(path)
    subprocess.run([sys.executable, "-c", CRASH_MID_WRITE, str(path)], check=True)
    assert Path(f"{path}-journal").stat().st_size > 0
    result = run("memories", "list", path, "--json", "-n", "0")
    assert result.returncode == 0, result.stderr
    assert {r["value"] for r in json.loads(result.stdout)} == {"value " * 20}
    assert table_dump(path) == before
    assert run("check", path).returncode == 0

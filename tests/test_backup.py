"""backup: a consistent copy, to a file or to stdout, that lands only where it was asked to and
leaves nothing behind when it is killed."""

from __future__ import annotations

import os
import pty
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import assert_clean_error
from tests.support.volumes import VolumeWriter, table_dump

VT = [sys.executable, "-m", "volumetool"]
ROOT = Path(__file__).resolve().parents[1]


def vt_env(tmpdir: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "VOLUMETOOL_VOLUME": ""}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return env


def run_vt(*args, tmpdir: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run(
        [*VT, *map(str, args)], cwd=ROOT, env=vt_env(tmpdir), check=False, **streams
    )


@pytest.fixture
def vol(tmp_path) -> Path:
    w = VolumeWriter(tmp_path / "vol" / "agent.db")
    s = w.thread("discord:1/2")
    for n in range(5):
        w.turn(s, n, tool=n % 2 == 0)
    w.run(s)
    w.memory("deploy_region", "always deploy to us-east")
    w.close()
    return w.path


def hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_backup_to_stdout_writes_the_whole_database(vol, tmp_path):
    stage_dir = tmp_path / "tmp"
    stage_dir.mkdir()
    result = run_vt("backup", vol, "-", tmpdir=stage_dir)
    assert result.returncode == 0, result.stderr
    assert b"to stdout" in result.stderr
    copy = tmp_path / "copy.db"
    copy.write_bytes(result.stdout)
    assert sqlite3.connect(copy).execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert table_dump(copy) == table_dump(vol)
    assert not (Path(ROOT) / "-").exists()
    assert list(stage_dir.iterdir()) == []  # the stage is gone
    assert hidden(vol.parent) == []  # and so is its record


def test_backup_to_stdout_of_a_file_being_written_is_consistent(vol, tmp_path):
    conn = sqlite3.connect(vol)
    session = conn.execute("SELECT id FROM sessions").fetchone()[0]
    conn.close()
    stop = threading.Event()

    def agent():
        conn = sqlite3.connect(vol, isolation_level=None, timeout=10)
        n = 0
        while not stop.is_set():
            conn.execute(
                "INSERT INTO messages (session_id, role, content, created_at)"
                " VALUES (?, 'user', ?, '2026-11-30T00:00:00.000Z')",
                (session, f"turn {n} " + "x" * 2000),
            )
            n += 1
        conn.close()

    writer = threading.Thread(target=agent)
    writer.start()
    try:
        time.sleep(0.2)
        result = run_vt("backup", vol, "-")
    finally:
        stop.set()
        writer.join()
    assert result.returncode == 0, result.stderr
    copy = tmp_path / "copy.db"
    copy.write_bytes(result.stdout)
    conn = sqlite3.connect(copy)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    added = [r[0] for r in conn.execute("SELECT content FROM messages WHERE content LIKE 'turn %'")]
    assert added == [f"turn {i} " + "x" * 2000 for i in range(len(added))]  # a prefix
    assert added


def test_backup_to_a_terminal_is_refused(vol):
    leader, follower = pty.openpty()
    try:
        result = run_vt("backup", vol, "-", stdout=follower)
    finally:
        os.close(follower)
        os.close(leader)
    assert result.returncode == 2
    assert b"terminal" in result.stderr


@pytest.mark.parametrize("dest", ["{dir}", "{dir}/", "{new}/"])
def test_a_directory_dest_is_exit_2_and_creates_nothing(vol, tmp_path, run_cli, dest):
    (tmp_path / "existing").mkdir()
    target = dest.format(dir=tmp_path / "existing", new=tmp_path / "newdir")
    before = sorted(tmp_path.rglob("*"))
    assert_clean_error(run_cli("backup", vol, target), 2, "directory")
    assert sorted(tmp_path.rglob("*")) == before
    assert not (tmp_path / "newdir").exists()


def test_backup_into_the_current_directory_keeps_the_name(vol, tmp_path, run_cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli("backup", vol, "copy.db").exit_code == 0
    assert table_dump(tmp_path / "copy.db") == table_dump(vol)


# -- a killed backup -------------------------------------------------------------------------


def big_volume(path: Path) -> Path:
    """Large enough (about 48 MB) that a backup is still copying when it is killed."""
    w = VolumeWriter(path)
    w.conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 48000)"
        " INSERT INTO memories SELECT 'k' || i, hex(randomblob(500)),"
        " '2026-11-30T00:00:00.000Z', '2026-11-30T00:00:00.000Z' FROM n"
    )
    w.close()
    return path


def records(volume: Path) -> list[Path]:
    return [p for p in volume.parent.iterdir() if p.name.startswith(f".{volume.name}.backup-")]


def kill_midway(args: list, volume: Path, tmpdir: Path | None = None) -> None:
    """Start a backup and SIGKILL it once it has staged its copy and recorded the stage."""
    process = subprocess.Popen(
        [*VT, *map(str, args)],
        cwd=ROOT,
        env=vt_env(tmpdir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not records(volume):
        assert process.poll() is None, "the backup finished before it could be killed"
        time.sleep(0.001)
    process.send_signal(signal.SIGKILL)
    process.wait()


def stages(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if ".tmp-" in p.name]


def test_the_stage_of_a_killed_backup_is_removed_by_the_next_backup_to_anywhere(tmp_path):
    volume = big_volume(tmp_path / "vol" / "agent.db")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    kill_midway(["backup", volume, first / "copy.db"], volume)
    left = stages(first)
    assert left and all(p.name.startswith(".") for p in left)  # hidden, next to DEST
    assert not (first / "copy.db").exists()
    assert records(volume)

    result = run_vt("backup", volume, second / "copy.db")
    assert result.returncode == 0, result.stderr
    assert stages(first) == []
    assert records(volume) == []
    assert sqlite3.connect(second / "copy.db").execute("PRAGMA integrity_check").fetchone() == (
        "ok",
    )


def test_the_stage_of_a_killed_backup_to_stdout_is_removed_by_the_next_backup(tmp_path):
    volume = big_volume(tmp_path / "vol" / "agent.db")
    stage_dir = tmp_path / "tmp"
    stage_dir.mkdir()
    kill_midway(["backup", volume, "-"], volume, tmpdir=stage_dir)
    assert stages(stage_dir)
    result = run_vt("backup", volume, tmp_path / "copy.db")
    assert result.returncode == 0, result.stderr
    assert stages(stage_dir) == []
    assert records(volume) == []


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_only_stages_of_processes_that_are_gone_are_removed(vol, tmp_path):
    from volumetool.atomic import stage_prefix
    from volumetool.backup import remove_killed_backups

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # a live backup (this process): its stage and record stay
    live_stage = elsewhere / (stage_prefix("copy.db") + "live")
    live_stage.write_bytes(b"copying")
    live_record = vol.parent / (stage_prefix(vol.name, "backup") + "live")
    live_record.symlink_to(live_stage)
    # a dead process whose record names a file that is not its stage: the file stays
    pid = dead_pid()
    precious = elsewhere / "precious.db"
    precious.write_bytes(b"not a stage")
    planted = vol.parent / stage_prefix(vol.name, "backup").replace(str(os.getpid()), str(pid))
    planted = planted.with_name(planted.name + "planted")
    planted.symlink_to(precious)

    remove_killed_backups(vol)
    assert live_stage.exists() and live_record.is_symlink()
    assert precious.read_bytes() == b"not a stage"
    assert not planted.is_symlink()  # the dead process's record itself is cleared

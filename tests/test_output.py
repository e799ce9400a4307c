"""The one output target every command that writes a file uses (`output.OutputTarget`): the
check before the work, the staged write published atomically, and stdout through the same
path. Each command's own rules are tested with the command (export, report, backup, metrics)."""

from __future__ import annotations

import io
import os
import sys

import pytest

from tests.conftest import assert_clean_error
from tests.support.volumes import VolumeWriter
from volumetool.errors import UnusableInput
from volumetool.output import OutputTarget


def target(name, **rules) -> OutputTarget:
    return OutputTarget(str(name), "notes file", "notes.txt", **rules)


def test_a_new_file_is_published_whole_with_a_new_files_mode(tmp_path):
    path = tmp_path / "notes.txt"
    out = target(path, mode=0o640).check()
    with out.open() as stream:
        stream.write(b"one\n")
        assert not path.exists()  # staged beside it until the block ends
    assert path.read_bytes() == b"one\n" and out.written == 4
    assert path.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]  # no stage left


def test_a_failed_write_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"NOTES old")
    out = target(path, starts=(b"NOTES",)).check()
    with pytest.raises(RuntimeError), out.open() as stream:
        stream.write(b"NOTES half")
        raise RuntimeError("the work failed")
    assert path.read_bytes() == b"NOTES old"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("keep_mode", [True, False])
def test_a_file_of_its_kind_is_replaced_and_keeps_its_mode_only_when_asked(tmp_path, keep_mode):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"NOTES old")
    path.chmod(0o644)
    with target(path, starts=(b"NOTES",), keep_mode=keep_mode).check().open() as stream:
        stream.write(b"NOTES new")
    assert path.read_bytes() == b"NOTES new"
    assert path.stat().st_mode & 0o777 == (0o644 if keep_mode else 0o600)


def test_what_must_not_be_written_is_refused_before_the_work(tmp_path):
    other = tmp_path / "other.txt"
    other.write_bytes(b"mine")
    link = tmp_path / "link.txt"
    link.symlink_to(other)
    for name, rules, says in (
        (tmp_path, {}, "is a directory"),
        (f"{tmp_path}/new/", {}, "names a directory"),
        (tmp_path / "no" / "notes.txt", {}, "no directory"),
        (f"{tmp_path}/n\x00.txt", {}, "NUL"),
        (other, {}, "already exists"),  # a target that replaces nothing
        (other, {"starts": (b"NOTES",)}, "refusing to replace"),
        (link, {"starts": (b"mine",)}, "symbolic link"),
    ):
        with pytest.raises(UnusableInput, match=says):
            target(name, **rules).check()
    assert other.read_bytes() == b"mine" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "other.txt"]


def test_dash_is_stdout_through_the_same_path(monkeypatch):
    stdout = io.TextIOWrapper(io.BytesIO())
    monkeypatch.setattr(sys, "stdout", stdout)
    out = target("-").check()
    assert out.path is None
    with out.open() as stream:
        stream.write(b"streamed\n")
    with out.staged() as stage:  # a file to fill, streamed once whole
        stage.write_bytes(b"staged\n")
    assert stdout.buffer.getvalue() == b"streamed\nstaged\n"
    assert out.written == len(b"staged\n") and not stage.exists()


def test_a_binary_target_never_goes_to_a_terminal(monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    with pytest.raises(UnusableInput, match="terminal"):
        target("-", binary=True).check()


@pytest.mark.parametrize(
    "command",
    [
        ["memories", "export", "VOL", "-o", "OUT"],
        ["report", "VOL", "-o", "OUT"],
        ["backup", "VOL", "OUT"],
    ],
    ids=lambda c: c[0] if c[0] != "memories" else "export",
)
def test_every_command_refuses_its_file_before_it_opens_a_volume(tmp_path, run_cli, command):
    """A missing directory was found only when the file was staged, after the volumes were
    read (export, report): now the target is checked first, the same way for every command."""
    missing_volume = tmp_path / "nowhere" / "agent.db"
    out = tmp_path / "no" / "file"
    args = [str(missing_volume) if a == "VOL" else str(out) if a == "OUT" else a for a in command]
    assert_clean_error(run_cli(*args), 2, f"no directory {tmp_path / 'no'}")
    # And with a volume, nothing is written anywhere.
    volume = VolumeWriter(tmp_path / "agent.db")
    volume.memory("k", "v")
    volume.close()
    before = sorted(os.listdir(tmp_path))
    args[args.index(str(missing_volume))] = str(volume.path)
    assert run_cli(*args).exit_code == 2
    assert sorted(os.listdir(tmp_path)) == before

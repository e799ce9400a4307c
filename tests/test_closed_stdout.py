"""A reader that closes stdout (`… | grep -q`, `… | head -1`, `>&-`) never changes what a
command's exit code says (SPEC 4, 13): listings end quietly with 0, but a command whose exit
code is a verdict finishes its work and exits with its own code, and a file's data copied to a
closed stdout is an error. Ctrl-C while the command still starts ends it in one line too."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.fixtures import KEY, write_config
from tests.support.volumes import VolumeWriter, due_thread
from tests.test_cli import SIGNALS, wait_for

ROOT = Path(__file__).resolve().parent.parent


def closed_pipe() -> int:
    """The write end of a pipe whose reader has already gone: every write to it fails."""
    read, write = os.pipe()
    os.close(read)
    return write


def volumetool(*args, stdout, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "volumetool", *map(str, args)],
        env={**os.environ, "TEST_MODEL_KEY": KEY},
        stdout=stdout,
        stderr=subprocess.PIPE,
        **kwargs,
    )


def finished(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode()


def refused_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once this is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def due_volume(tmp_path) -> Path:
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "discord:1")
    w.close()
    return w.path


@pytest.mark.parametrize("output", ["--nl", "--json", "--table"])
def test_a_failed_compaction_stays_exit_1_with_its_metrics_when_the_reader_closes_stdout(
    tmp_path, due_volume, output
):
    config = write_config(tmp_path / "agent.yaml", SimpleNamespace(url=refused_url()))
    metrics = tmp_path / "gm.prom"
    out = closed_pipe()
    args = ["compact", due_volume, "--config", config, "--metrics-file", metrics]
    proc = volumetool(*args, *([output] if output != "--table" else []), stdout=out)
    os.close(out)
    code, err = finished(proc)
    assert code == 1, err
    assert "Traceback" not in err
    assert "volumetool_compact_duration_seconds" in metrics.read_text()


@SIGNALS
def test_an_interrupted_compaction_exits_130_or_143_with_its_metrics_when_stdout_is_closed(
    tmp_path, server, due_volume, signum, code
):
    config = write_config(tmp_path / "agent.yaml", server)
    server.latency = 60  # the answer would come long after the signal
    metrics = tmp_path / "m.prom"
    out = closed_pipe()
    args = ["compact", due_volume, "--config", config, "--nl", "--metrics-file", metrics]
    proc = volumetool(*args, stdout=out)
    os.close(out)
    wait_for(lambda: server.in_flight == 1, proc)
    proc.send_signal(signum)
    got, err = finished(proc)
    assert got == code, err
    assert "Traceback" not in err
    assert "volumetool_compact_duration_seconds" in metrics.read_text()


def test_validate_finding_errors_exits_1_when_the_reader_closes_stdout(tmp_path):
    (tmp_path / "a.yaml").write_text("name: bot\nmemory: {}\nfoo: [\n")
    (tmp_path / "b.yaml").write_text("name: bot\nmemroy:\n  scope: thread\n")
    out = closed_pipe()
    proc = volumetool("validate", tmp_path, stdout=out)
    os.close(out)
    code, err = finished(proc)
    assert code == 1, err
    assert err.endswith("2 files checked: 2 errors, 0 warnings, 0 notes\n"), err


def test_a_listing_still_ends_quietly_with_0_on_a_closed_pipe(due_volume):
    out = closed_pipe()
    proc = volumetool("sessions", due_volume, "--nl", stdout=out)
    os.close(out)
    assert finished(proc) == (0, "")


def close_stdout() -> None:
    os.close(1)


@pytest.mark.parametrize(
    "args",
    [["backup", "{volume}", "-"], ["demo", "{new}", "--config-out", "-"]],
    ids=["backup", "demo-config-out"],
)
def test_a_file_copied_to_a_closed_stdout_is_an_error(tmp_path, due_volume, args):
    args = [a.format(volume=due_volume, new=tmp_path / "new") for a in args]
    proc = volumetool(*args, stdout=None, preexec_fn=close_stdout)
    code, err = finished(proc)
    assert code == 1, err
    assert "stdout is closed" in err and "Traceback" not in err
    assert len(err.splitlines()) == 1, err


def entry_point() -> str:
    """`volumetool`'s console script, as pip writes it from pyproject's [project.scripts]."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["volumetool"].partition(":")
    return f"import sys; from {module} import {function}; sys.exit({function}())"


@SIGNALS
@pytest.mark.parametrize("how", ["python -m", "console script"])
def test_a_signal_while_the_command_still_imports_is_one_line_and_130_or_143(
    tmp_path, how, signum, code
):
    # The first module the command imports sends the signal while it is being imported.
    (tmp_path / "click.py").write_text(
        f"import os\nos.kill(os.getpid(), {int(signum)})\n"
        "for _ in range(10000):\n    pass\nraise SystemExit('the signal did not come')\n"
    )
    start = ["-m", "volumetool"] if how == "python -m" else ["-c", entry_point()]
    proc = subprocess.run(
        [sys.executable, *start, "--version"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])},
        capture_output=True,
        timeout=120,
    )
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    assert err.startswith("volumetool: interrupted") and len(err.splitlines()) == 1, err
    assert proc.stdout == b""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("output", ["--nl", "--table"])
def test_a_compaction_whose_stdout_is_full_still_writes_its_metrics_file(
    tmp_path, due_volume, output
):
    config = write_config(tmp_path / "agent.yaml", SimpleNamespace(url=refused_url()))
    metrics = tmp_path / "gm.prom"
    args = ["compact", due_volume, "--config", config, "--metrics-file", metrics]
    with open("/dev/full", "w") as full:
        proc = volumetool(*args, *([output] if output != "--table" else []), stdout=full)
        code, err = finished(proc)
    assert code == 1, err
    assert "No space left on device" in err and "Traceback" not in err
    assert "volumetool_compact_duration_seconds" in metrics.read_text()


def test_migrate_check_with_a_migration_pending_exits_1_when_the_reader_closes_stdout(tmp_path):
    from tests.test_migrate import legacy_file

    path, _ = legacy_file(tmp_path / "agent.db")
    out = closed_pipe()
    proc = volumetool("migrate", path, "--check", stdout=out)
    os.close(out)
    code, err = finished(proc)
    assert code == 1, err


LISTINGS = {
    "audit", "config show", "memories export", "memories get", "memories list", "runs",
    "search", "sessions", "transcript",
}  # fmt: skip


def test_every_command_but_a_listing_keeps_its_verdict_on_a_closed_stdout():
    """A new command is a verdict's (`Command(verdict=True)`) unless it only lists."""
    import click

    from volumetool.cli import cli

    def commands(group, prefix=""):
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if isinstance(command, click.Group):
                yield from commands(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    found = dict(commands(cli))
    assert set(found) >= LISTINGS
    assert {name for name, command in found.items() if not command.verdict} == LISTINGS

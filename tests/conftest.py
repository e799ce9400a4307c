from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, settings

from tests.support.volumes import VolumeWriter
from volumetool.cli import cli

pytest_plugins = ["tests.support.fixtures"]

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# `make mutants` runs the compaction tests once per mutant: fewer, fixed examples.
settings.register_profile(
    "mutants",
    parent=settings.get_profile("default"),
    max_examples=12,
    derandomize=True,
    database=None,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
MUTANTS = os.environ.get("HYPOTHESIS_PROFILE") == "mutants"

# A shell starts a background job without job control (`make test &` in a script, some CI
# runners) with SIGINT ignored, and every process it starts inherits that: the Ctrl-C tests'
# volumetool would never see their SIGINT. Python's own handler here is reset to the default
# in each child on exec, so the children take SIGINT as a terminal would deliver it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def examples(n: int) -> int:
    """A property test's example count: `n`, or a dozen when mutation testing runs it."""
    return min(n, 12) if MUTANTS else n


class Result:
    def __init__(self, result) -> None:
        self.exit_code = result.exit_code
        # As written: click's `Result.stdout` turns "\r\n" into "\n", also inside a CSV field.
        self.stdout = result.stdout_bytes.decode("utf-8", "replace")
        self.stderr = result.stderr
        self.exception = result.exception

    def __repr__(self) -> str:
        return f"<exit {self.exit_code} stdout={self.stdout[:300]!r} stderr={self.stderr[:300]!r}>"


@pytest.fixture
def run_cli(monkeypatch):
    """Run volumetool in-process; returns exit code, stdout and stderr."""
    for name in [n for n in os.environ if n.startswith("VOLUMETOOL_")]:
        monkeypatch.delenv(name)  # compact's options come from the environment too
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)

    def run(*args: str | Path, input: str | bytes | None = None, env: dict | None = None):
        runner = CliRunner()
        result = runner.invoke(
            cli, [str(a) for a in args], input=input, env=env, catch_exceptions=True
        )
        return Result(result)

    return run


@pytest.fixture
def writer(tmp_path) -> VolumeWriter:
    w = VolumeWriter(tmp_path / "agent.db")
    yield w
    w.close()


def assert_clean_error(result: Result, code: int, *fragments: str) -> None:
    """Exit `code`, one line on stderr naming the problem, no traceback, nothing on stdout."""
    assert result.exit_code == code, result
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines, result
    message = lines[-1] if lines[0].startswith("Usage:") else lines[0]
    if not lines[0].startswith(("Usage:", "Try ")):
        assert len(lines) == 1, lines
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.fixture(scope="session")
def run_cli_factory():
    """run_cli for Hypothesis tests, which cannot take function-scoped fixtures."""

    def run(*args, input=None):
        env = {"VOLUMETOOL_VOLUME": "", "GITHUB_ACTIONS": ""}
        return Result(CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env))

    return run

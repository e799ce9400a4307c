"""A few seeded SIGKILL trials of every write path (make faults runs hundreds)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.faults.kills import FULL_TRIALS, RELIABILITY, ROOT, all_paths, report_path, run_path

TRIALS = int(os.environ.get("FAULT_TRIALS", "3"))


pytestmark = pytest.mark.shared_server(latency=0.05, summary="Summary.")


@pytest.mark.parametrize(
    "index", range(len(all_paths(None))), ids=[p.name.split(" (")[0] for p in all_paths(None)]
)
def test_a_killed_write_leaves_the_old_or_the_new_state(server, tmp_path, index):
    path = all_paths(server)[index]
    tally = run_path(path, TRIALS, seed=index + 1, work=tmp_path)
    assert tally.trials == TRIALS
    assert tally.states["mixed"] == 0 and tally.states["corrupt"] == 0, tally
    assert tally.lost == 0 and tally.leftovers == 0, tally
    assert not tally.failures, tally.failures


def test_only_a_full_run_writes_reliability_md(tmp_path):
    assert report_path(FULL_TRIALS, None, None) == RELIABILITY
    assert report_path(3, None, None) is None  # make faults TRIALS=3: printed, not written
    assert report_path(FULL_TRIALS, "compact", None) is None
    assert report_path(3, None, str(tmp_path / "short.md")) == tmp_path / "short.md"
    with pytest.raises(ValueError, match="full runs"):
        report_path(3, None, str(RELIABILITY))


def test_make_faults_passes_trials_through_and_keeps_the_default_in_one_place():
    command = subprocess.run(
        ["make", "--no-print-directory", "-n", "faults", "TRIALS=3", "REPORT=/tmp/x.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[-1]
    assert command.endswith("-m tests.faults.kills --trials 3 --report /tmp/x.md")
    default = subprocess.run(
        ["make", "--no-print-directory", "-n", "faults"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[-1]
    assert default.split("-m tests.faults.kills")[1].strip() == ""

"""A few seeded SIGKILL trials of every write path (make faults runs hundreds)."""

from __future__ import annotations

import os

import pytest

from tests.faults.kills import all_paths, run_path
from tests.model_server import ModelServer

TRIALS = int(os.environ.get("FAULT_TRIALS", "3"))


@pytest.fixture(scope="module")
def server():
    with ModelServer(latency=0.05) as s:
        s.summary = "Summary."
        yield s


@pytest.mark.parametrize("index", range(7), ids=[p.name.split(" (")[0] for p in all_paths(None)])
def test_a_killed_write_leaves_the_old_or_the_new_state(server, tmp_path, index):
    path = all_paths(server)[index]
    tally = run_path(path, TRIALS, seed=index + 1, work=tmp_path)
    assert tally.trials == TRIALS
    assert tally.states["mixed"] == 0 and tally.states["corrupt"] == 0, tally
    assert tally.lost == 0 and tally.leftovers == 0, tally
    assert not tally.failures, tally.failures

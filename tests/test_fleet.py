"""Operating a fleet (SPEC section 12): status of many volumes, metrics for Prometheus, --shard,
and the docs' CronJob and systemd examples (docs/scheduling.md)."""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
from prometheus_client.parser import text_string_to_metric_families as text_format

from tests.conftest import assert_clean_error
from tests.support import docs
from tests.support.fixtures import THREAD_MEMORY, write_config
from tests.support.legacy import write_legacy
from tests.support.volumes import VolumeWriter, due_thread
from volumetool.atomic import create_volume
from volumetool.compaction.run import Outcome
from volumetool.metrics import Metric, compaction_metrics, exposition
from volumetool.shard import Shard, in_shard, parse_shard
from volumetool.volume import shard_key

# The JSON fields of a row, as SPEC section 12 names them.
ROW = [
    "path",
    "agent",
    "file_bytes",
    "sessions_active",
    "sessions_archived",
    "due",
    "tokens_24h",
    "failed_runs_24h",
    "schema",
    "error",
]


def fleet_volume(directory: Path, name: str, *, recent_errors: int = 0) -> dict:
    """A volume with runs inside and outside the last 24 hours, one due thread and one that is
    not; returns what the row should say."""
    w = VolumeWriter(directory / "agent.db", name=name)
    now = datetime.now(UTC)
    w.clock = now - timedelta(days=3)
    due_thread(w, "discord:due", tokens=60_000)  # 60,000 in + 300 out, three days ago
    due_thread(w, "discord:small", tokens=1_000)
    archived = w.thread("discord:old", status="archived")
    w.turn(archived, 1)
    w.run(None, status="error", input_tokens=7, output_tokens=None)
    w.clock = now - timedelta(hours=2)
    w.run(None, trigger="schedule", input_tokens=400, output_tokens=50)
    w.run(None, trigger="webhook", input_tokens=None, output_tokens=20)
    for _ in range(recent_errors):
        w.run(None, status="error", input_tokens=5, output_tokens=None)
    w.close()
    return {
        "path": str(w.path),
        "agent": name,
        "file_bytes": w.path.stat().st_size,
        "sessions_active": 2,
        "sessions_archived": 1,
        "tokens_24h": 400 + 50 + 20 + 5 * recent_errors,
        "failed_runs_24h": recent_errors,
        "schema": "current",
        "error": None,
    }


@pytest.fixture
def fleet(tmp_path):
    return [
        fleet_volume(tmp_path / "a", "alpha"),
        fleet_volume(tmp_path / "b", "beta", recent_errors=2),
        fleet_volume(tmp_path / "c", "gamma"),
    ]


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("memory:\n  scope: thread\n  compact_at_tokens: 50000\n")
    return path


def status_json(run_cli, *args):
    result = run_cli("status", *args, "--json")
    return result, json.loads(result.stdout) if result.stdout else None


# -- status VOLUME VOLUME… --------------------------------------------------------------------


def test_status_of_many_volumes_is_one_row_each_with_the_spec_fields(fleet, run_cli):
    result, rows = status_json(run_cli, *(v["path"] for v in fleet))
    assert result.exit_code == 0, result
    assert [list(row) for row in rows] == [ROW] * 3
    for row, expected in zip(rows, fleet, strict=True):
        assert row == {**expected, "due": None}  # due is null without --config


def test_due_counts_the_threads_compact_would_find_due(fleet, config, run_cli):
    result, rows = status_json(run_cli, fleet[0]["path"], fleet[1]["path"], "--config", config)
    assert result.exit_code == 0, result
    assert [row["due"] for row in rows] == [1, 1]  # discord:due; discord:small is under 50,000
    dry = run_cli("compact", fleet[0]["path"], "--config", config, "--dry-run", "--json")
    assert [o["conversation_key"] for o in json.loads(dry.stdout)] == ["discord:due"]


def test_due_is_zero_when_the_config_turns_compaction_off(fleet, tmp_path, run_cli):
    off = tmp_path / "off.yaml"
    off.write_text("memory:\n  scope: thread\n  compact_at_tokens: false\n")
    _, rows = status_json(run_cli, fleet[0]["path"], fleet[1]["path"], "--config", off)
    assert [row["due"] for row in rows] == [0, 0]


@pytest.mark.parametrize("fmt", ["--nl", "--csv", "--tsv", "--table", "--fmt=github"])
def test_every_output_format_lists_every_volume(fleet, run_cli, fmt):
    result = run_cli("status", *(v["path"] for v in fleet), fmt)
    assert result.exit_code == 0, result
    if fmt == "--nl":
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert [r["agent"] for r in rows] == ["alpha", "beta", "gamma"]
    elif fmt in ("--csv", "--tsv"):
        rows = list(
            csv.reader(io.StringIO(result.stdout), delimiter="," if fmt == "--csv" else "\t")
        )
        assert rows[0] == ROW
        assert [r[1] for r in rows[1:]] == ["alpha", "beta", "gamma"]
        assert [r[ROW.index("tokens_24h")] for r in rows[1:]] == ["470", "480", "470"]
    else:
        for name in ("alpha", "beta", "gamma"):
            assert name in result.stdout
        assert "sessions_archived" in result.stdout


def test_limit_cuts_the_listing_with_a_note(fleet, run_cli):
    result = run_cli("status", *(v["path"] for v in fleet), "--json", "-n", "2")
    assert len(json.loads(result.stdout)) == 2
    assert "-n 0 shows all" in result.stderr


def test_a_volume_given_twice_is_listed_once(fleet, run_cli, monkeypatch):
    directory = Path(fleet[0]["path"]).parent
    monkeypatch.chdir(directory.parent)
    _, rows = status_json(
        run_cli, directory.name, f"./{directory.name}/agent.db", directory, fleet[1]["path"]
    )
    assert [row["agent"] for row in rows] == ["alpha", "beta"]


def test_unreadable_volumes_are_rows_with_their_error_and_the_worst_exit_code(
    fleet, tmp_path, run_cli
):
    junk = tmp_path / "junk.db"
    junk.write_text("not a database\n")
    missing = tmp_path / "missing"
    result, rows = status_json(run_cli, fleet[0]["path"], junk, missing, fleet[2]["path"])
    assert result.exit_code == 2  # unusable input
    assert [row["path"] for row in rows] == [
        fleet[0]["path"],
        str(junk),
        str(missing),
        fleet[2]["path"],
    ]
    assert rows[0]["error"] is None and rows[3]["error"] is None
    assert "not an SQLite database" in rows[1]["error"]
    assert "no such file" in rows[2]["error"]
    for row in rows[1:3]:
        assert {k: v for k, v in row.items() if k not in ("path", "error")} == dict.fromkeys(
            ROW[1:-1]
        )
    assert "2 of 4 volumes not read" in result.stderr


@pytest.mark.parametrize(
    "command",
    [["status", "--json"], ["check"], ["migrate", "--check"], ["compact", "--dry-run"]],
    ids=" ".join,
)
def test_a_path_that_cannot_be_looked_at_is_unusable_input_and_the_others_go_on(
    fleet, tmp_path, run_cli, command
):
    """A name too long for the file system (or a directory without permission) is exit 2,
    one line, as SPEC gives for an unreadable file, not a file-system error (exit 1); among
    many volumes it is one more row or line, never the end of the run."""
    too_long = tmp_path / ("a" * 300)
    for volumes in ([too_long], [too_long, fleet[0]["path"]]):
        result = run_cli(command[0], *volumes, *command[1:])
        said = result.stdout + result.stderr
        assert result.exit_code == 2 and "File name too long" in said, result
        assert "internal error" not in said and "Traceback" not in said
    assert fleet[0]["path"] in said  # the other volume went on


def test_a_locked_volume_is_a_busy_row_and_the_others_print(fleet, run_cli):
    locked = fleet[1]["path"]
    conn = sqlite3.connect(locked, isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("BEGIN EXCLUSIVE")
    try:
        result, rows = status_json(
            run_cli, fleet[0]["path"], locked, fleet[2]["path"], "--busy-timeout", "0.2"
        )
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert result.exit_code == 4, result  # busy: retry later
    assert [row["agent"] for row in rows] == ["alpha", None, "gamma"]
    assert "locked" in rows[1]["error"]
    assert rows[0]["sessions_active"] == rows[2]["sessions_active"] == 2


def test_unusable_input_outranks_busy_in_the_exit_code(fleet, tmp_path, run_cli):
    conn = sqlite3.connect(fleet[0]["path"], isolation_level=None)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("BEGIN EXCLUSIVE")
    try:
        result = run_cli(
            "status", fleet[0]["path"], tmp_path / "nope.db", "--json", "--busy-timeout", "0.1"
        )
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert result.exit_code == 2


def test_schema_states_older_newer_legacy_and_untrusted(fleet, tmp_path, run_cli):
    older, newer, untrusted = (Path(v["path"]) for v in fleet)
    with sqlite3.connect(older) as conn:  # forget the last migration: one pending
        conn.execute(
            "DELETE FROM _sqlite_migrations"
            " WHERE rowid = (SELECT max(rowid) FROM _sqlite_migrations)"
        )
    with sqlite3.connect(newer) as conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at)"
            " VALUES ('agent-volume', 'm999_from_the_future', '2027-01-01T00:00:00.000Z')"
        )
    with sqlite3.connect(untrusted) as conn:
        conn.execute(
            "CREATE TRIGGER forget AFTER UPDATE ON sessions BEGIN DELETE FROM memories; END"
        )
    legacy = write_legacy(tmp_path / "legacy.db", [])
    result, rows = status_json(run_cli, older, newer, untrusted, legacy)
    assert result.exit_code == 3, result  # schema mismatch
    assert [row["schema"] for row in rows] == ["older", "newer", "untrusted", "legacy"]
    assert [row["agent"] for row in rows] == ["alpha", "beta", "gamma", "legacy-agent"]
    assert "migrate" in rows[0]["error"] and "newer" in rows[1]["error"]
    assert rows[2]["error"] is None and rows[2]["sessions_active"] == 2
    assert "migrate" in rows[3]["error"] and rows[3]["sessions_active"] is None
    assert "departs from the format" in result.stderr  # the untrusted one's warning


def test_an_untrusted_volume_between_trusted_ones_is_the_only_one_flagged(fleet, run_cli):
    """One process compares each distinct schema once: a planted trigger is still seen, in
    whatever order the volumes come."""
    with sqlite3.connect(fleet[1]["path"]) as conn:
        conn.execute("CREATE VIEW planted AS SELECT key FROM memories")
    for order in ([0, 1, 2], [1, 0, 2], [0, 2, 1]):
        _, rows = status_json(run_cli, *(fleet[i]["path"] for i in order))
        flagged = [row["agent"] for row in rows if row["schema"] == "untrusted"]
        assert flagged == ["beta"], order


def test_one_volume_keeps_the_single_object_and_text_view(fleet, config, run_cli):
    path = fleet[0]["path"]
    _, totals = status_json(run_cli, path)
    assert isinstance(totals, dict) and totals["sessions"] == {
        "active": 2,
        "archived": 1,
        "held": 0,
    }
    assert "due" not in totals
    _, with_config = status_json(run_cli, path, "--config", config)
    assert with_config["due"] == 1 and set(with_config) == set(totals) | {"due"}
    text = run_cli("status", path, "--config", config).stdout
    assert re.search(r"^threads +2 active, 1 archived$", text, re.M)
    assert re.search(r"^due +1 thread$", text, re.M)  # not "1 threads"
    nl = run_cli("status", path, "--nl").stdout  # another listing format: the row
    assert list(json.loads(nl)) == ROW


def test_status_with_shard_is_always_the_list(fleet, run_cli):
    path = fleet[0]["path"]
    shards = [status_json(run_cli, path, "--shard", f"{i}/2")[1] for i in range(2)]
    assert sorted(len(rows) for rows in shards) == [0, 1]
    assert [row["agent"] for rows in shards for row in rows] == ["alpha"]


# -- status --prometheus ----------------------------------------------------------------------


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of OpenMetrics text, parsed by the official parser, by name and labels."""
    assert text.endswith("# EOF\n")
    found = {}
    for family in openmetrics(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in found
            found[key] = s.value
    return found


def families(text: str) -> dict[str, tuple[str, str]]:
    return {f.name: (f.type, f.unit) for f in openmetrics(text)}


def test_prometheus_is_openmetrics_with_one_series_per_volume(fleet, config, tmp_path, run_cli):
    junk = tmp_path / "junk.db"
    junk.write_text("x")
    paths = [v["path"] for v in fleet]
    result = run_cli("status", *paths, junk, "--prometheus", "--config", config)
    assert result.exit_code == 2  # the unreadable volume
    found = samples(result.stdout)
    for volume in fleet:
        labels = (("agent", volume["agent"]), ("path", volume["path"]))
        assert found["volumetool_volume_up", labels] == 1
        assert found["volumetool_volume_size_bytes", labels] == volume["file_bytes"]
        assert found["volumetool_active_threads", labels] == 2
        assert found["volumetool_archived_threads", labels] == 1
        assert found["volumetool_due_threads", labels] == 1
        assert found["volumetool_schema_current", labels] == 1
        # every run ever: 2 due_thread runs (60,000+300 and 1,000+300), the old error (7 in)
        errors = volume["failed_runs_24h"]
        assert found["volumetool_runs_total", labels] == 5 + errors
        assert found["volumetool_failed_runs_total", labels] == 1 + errors
        assert found["volumetool_model_input_tokens_total", labels] == 61_407 + 5 * errors
        assert found["volumetool_model_output_tokens_total", labels] == 670
    unreadable = [key for key in found if ("path", str(junk)) in key[1]]
    assert unreadable == [("volumetool_volume_up", (("agent", ""), ("path", str(junk))))]
    assert found[unreadable[0]] == 0
    assert "junk.db: not an SQLite database" in result.stderr
    kinds = families(result.stdout)
    assert kinds["volumetool_volume_size_bytes"] == ("gauge", "bytes")
    assert kinds["volumetool_model_input_tokens"] == ("counter", "tokens")
    assert kinds["volumetool_runs"] == ("counter", "")
    assert all(name.startswith("volumetool_") for name in kinds)
    # node_exporter's textfile collector reads the older text format: it must parse there too
    assert {s.name for f in text_format(result.stdout) for s in f.samples} >= {
        "volumetool_volume_up",
        "volumetool_runs_total",
    }


def test_prometheus_label_values_are_escaped(tmp_path, run_cli):
    name = 'bot "quoted" \\ back\nslash'
    directory = tmp_path / 'we"ird\\dir'
    create_volume(directory / "agent.db", name)
    result = run_cli("status", directory, "--prometheus")
    assert result.exit_code == 0, result
    assert '\\"quoted\\" \\\\ back\\nslash' in result.stdout
    up = [k for k in samples(result.stdout) if k[0] == "volumetool_volume_up"]
    assert up == [
        ("volumetool_volume_up", (("agent", name), ("path", str(directory / "agent.db"))))
    ]


def test_prometheus_label_values_keep_the_agent_name_exact_off_a_terminal(tmp_path, run_cli):
    # SPEC 4: machine formats keep text exact. Written through click.echo, an escape sequence
    # in a name was stripped off a pipe (the docs' cron line), so the label changed.
    name = "bot \x1b[31mred\x1b[0m \x1b]0;title\x07"
    create_volume(tmp_path / "agent.db", name)
    result = run_cli("status", tmp_path, "--prometheus")
    assert result.exit_code == 0, result
    [(_, labels)] = [k for k in samples(result.stdout) if k[0] == "volumetool_volume_up"]
    assert dict(labels)["agent"] == name


def test_prometheus_without_config_leaves_due_out_and_excludes_listing_formats(fleet, run_cli):
    text = run_cli("status", fleet[0]["path"], "--prometheus").stdout
    assert "volumetool_due_threads" not in text
    assert samples(text)  # one volume is metrics too
    result = run_cli("status", fleet[0]["path"], "--prometheus", "--json")
    assert_clean_error(result, 2, "--prometheus")


def test_an_empty_shard_prints_an_empty_metrics_text(fleet, run_cli):
    path = fleet[0]["path"]
    outputs = [run_cli("status", path, "--prometheus", "--shard", f"{i}/2") for i in range(2)]
    assert all(r.exit_code == 0 for r in outputs)
    assert sorted(r.stdout for r in outputs)[0] == "# EOF\n"


@given(
    st.lists(
        st.text(st.characters(exclude_categories=["Cs"]), max_size=30),
        min_size=1,
        max_size=5,
        unique=True,  # one series per label set
    )
)
def test_any_label_value_survives_the_official_parser(values):
    metric = Metric("volumetool_test_bytes", "gauge", "A test.", "bytes")
    text = exposition([(metric, [({"path": v}, n) for n, v in enumerate(values)])])
    parsed = [s.labels["path"] for f in openmetrics(text) for s in f.samples]
    assert parsed == values


# -- compact --metrics-file -------------------------------------------------------------------


def outcome(status: str, tokens_in: int | None = None, tokens_out: int | None = None) -> Outcome:
    return Outcome("v", "k", 1, status, input_tokens=tokens_in, output_tokens=tokens_out)


def test_compaction_metrics_count_threads_tokens_duration_and_last_success():
    outcomes = [
        outcome("compacted", 1200, 80),
        outcome("compacted", 1000, 50),
        outcome("failed", 300, None),
        outcome("conflict", 10, 2),
        outcome("skipped"),
    ]
    text = compaction_metrics(
        outcomes,
        12.5,
        finished_at=1_790_000_000.25,
        succeeded=False,
        previous_success=1_780_000_000.0,
        labels={"shard": "1/4"},
    )
    for parse in (openmetrics, text_format):  # valid in both: node_exporter reads the second
        found = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in parse(text)
            for s in f.samples
        }
        shard = (("shard", "1/4"),)
        threads = {
            status: found["volumetool_compact_threads", (("shard", "1/4"), ("status", status))]
            for status in ("compacted", "failed", "conflict", "skipped")
        }
        assert threads == {"compacted": 2, "failed": 1, "conflict": 1, "skipped": 1}
        assert found["volumetool_compact_model_input_tokens", shard] == 2510
        assert found["volumetool_compact_model_output_tokens", shard] == 132
        assert found["volumetool_compact_duration_seconds", shard] == 12.5
        # this run failed: the last success is the one before
        assert found["volumetool_compact_last_success_timestamp_seconds", shard] == 1_780_000_000
    assert families(text)["volumetool_compact_duration_seconds"] == ("gauge", "seconds")


def test_a_run_that_never_succeeded_has_no_last_success():
    text = compaction_metrics([], 0.1, finished_at=5.0, succeeded=False)
    assert "last_success" not in text
    assert samples(text)[("volumetool_compact_threads", (("status", "compacted"),))] == 0
    ok = compaction_metrics([], 0.1, finished_at=5.0, succeeded=True, previous_success=1.0)
    assert samples(ok)[("volumetool_compact_last_success_timestamp_seconds", ())] == 5.0


def compaction_setup(tmp_path, server):
    w = VolumeWriter(tmp_path / "vol" / "agent.db")
    due_thread(w, "discord:1")
    due_thread(w, "discord:2")
    w.close()
    config = write_config(
        tmp_path / "agent.yaml", server, None, "tiny", THREAD_MEMORY, "big", agent=None
    )
    return w.path, config


def run_compact(run_cli, volume, config, *args):
    return run_cli(
        "compact", volume, "--config", config, *args, env={"TEST_MODEL_KEY": "sk-test-1"}
    )


@pytest.mark.parametrize("command", ["compact", "check", "migrate", "report"])
def test_a_volume_named_many_ways_is_worked_on_once(tmp_path, server, run_cli, command):
    """`vol`, `./vol/`, `vol/agent.db`, a link to the directory and a hard link to the file
    name one volume: every many-volume command does its work once (a compaction given it
    twice found the volume lock held by itself, exit 4, on every run)."""
    volume, config = compaction_setup(tmp_path, server)
    directory = volume.parent
    (tmp_path / "link").symlink_to(directory)
    os.link(volume, tmp_path / "hard.db")
    names = [directory, f"{directory}/", volume, tmp_path / "link", tmp_path / "hard.db"]
    if command == "compact":
        result = run_compact(run_cli, *names[:1], config, *names[1:], "--json")
        assert result.exit_code == 0, result
        rows = json.loads(result.stdout)
        assert sorted(r["conversation_key"] for r in rows) == ["discord:1", "discord:2"]
        assert [r["status"] for r in rows] == ["compacted", "compacted"]
        assert len(server.requests) == 2
    elif command == "report":
        out = tmp_path / "page.html"
        assert run_cli("report", *names, "-o", out).exit_code == 0
        assert out.read_text().count('class="volume"') == 1
    else:
        result = run_cli(command, *names)
        assert result.exit_code == 0, result
        assert result.stdout.count(str(volume)) + result.stderr.count(str(volume)) <= 1, result


def test_metrics_file_records_the_run_atomically_for_the_textfile_collector(
    tmp_path, server, run_cli, monkeypatch
):
    from types import SimpleNamespace

    from volumetool.cli import compact

    volume, config = compaction_setup(tmp_path, server)
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    target = textfile / "volumetool-compact.prom"
    # The command's clock, read as it starts and as it ends: 12.3456 s apart.
    clock = itertools.chain([100.0], itertools.repeat(112.3456))
    monkeypatch.setattr(compact, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    before = time.time()
    result = run_compact(run_cli, volume, config, "--metrics-file", target)
    assert result.exit_code == 0, result
    found = samples(target.read_text())
    assert found["volumetool_compact_threads", (("status", "compacted"),)] == 2
    assert found["volumetool_compact_threads", (("status", "failed"),)] == 0
    assert found["volumetool_compact_model_input_tokens", ()] == 2 * server.usage["input"]
    assert found["volumetool_compact_model_output_tokens", ()] == 2 * server.usage["output"]
    after = time.time()
    assert found["volumetool_compact_duration_seconds", ()] == 12.346  # to the millisecond
    success = found["volumetool_compact_last_success_timestamp_seconds", ()]
    assert before - 1 <= success <= after + 1
    assert [p.name for p in textfile.iterdir()] == [target.name]  # no temporary file left
    assert target.stat().st_mode & 0o777 == 0o644  # node_exporter runs as another user

    w = VolumeWriter(volume)
    due_thread(w, "discord:3")
    w.close()
    server.fault = "empty"  # the next summary fails
    failed = run_compact(run_cli, volume, config, "--metrics-file", target)
    assert failed.exit_code == 1, failed
    again = samples(target.read_text())
    assert again["volumetool_compact_threads", (("status", "failed"),)] == 1
    assert again["volumetool_compact_threads", (("status", "compacted"),)] == 0
    assert again["volumetool_compact_last_success_timestamp_seconds", ()] == success


def test_a_run_that_never_succeeded_writes_no_last_success(tmp_path, server, run_cli):
    volume, config = compaction_setup(tmp_path, server)
    server.fault = "empty"
    target = tmp_path / "m.prom"
    assert run_compact(run_cli, volume, config, "--metrics-file", target).exit_code == 1
    found = samples(target.read_text())
    assert found["volumetool_compact_threads", (("status", "failed"),)] == 2
    assert not [k for k in found if k[0] == "volumetool_compact_last_success_timestamp_seconds"]


def test_a_broken_endpoint_stays_red_while_its_threads_back_off(tmp_path, server, run_cli):
    """SPEC 13: the pass after a failing one skips the threads for back-off; it exits 1, says
    why in each row, keeps the earlier last success and counts the threads backing off."""
    target = tmp_path / "m.prom"
    idle = VolumeWriter(tmp_path / "idle" / "agent.db")  # nothing due: a pass that succeeds
    idle.close()
    volume, config = compaction_setup(tmp_path, server)
    assert run_compact(run_cli, idle.path, config, "--metrics-file", target).exit_code == 0
    success = samples(target.read_text())["volumetool_compact_last_success_timestamp_seconds", ()]
    assert samples(target.read_text())["volumetool_compact_threads_backing_off", ()] == 0
    server.fault = "500"
    first = run_compact(run_cli, volume, config, "--retries", "0", "--metrics-file", target)
    assert first.exit_code == 1 and len(server.requests) == 2
    second = run_compact(run_cli, volume, config, "--metrics-file", target, "--json")
    assert second.exit_code == 1, second
    assert len(server.requests) == 2  # backing off: no call
    rows = json.loads(second.stdout)
    assert [(r["status"], r["reason"]) for r in rows] == [("skipped", "backing_off")] * 2
    for parse in (openmetrics, text_format):
        found = {
            (s.name, tuple(s.labels.items())): s.value
            for f in parse(target.read_text())
            for s in f.samples
        }
        assert found["volumetool_compact_threads_backing_off", ()] == 2
        assert found["volumetool_compact_threads", (("status", "skipped"),)] == 2
        assert found["volumetool_compact_last_success_timestamp_seconds", ()] == success
    assert families(target.read_text())["volumetool_compact_threads_backing_off"][0] == "gauge"


def test_metrics_file_carries_the_shard(tmp_path, server, run_cli):
    volume, config = compaction_setup(tmp_path, server)
    target = tmp_path / "m.prom"
    for i in range(2):
        result = run_compact(run_cli, volume, config, "--shard", f"{i}/2", "--metrics-file", target)
        assert result.exit_code == 0, result
        labels = {k[1] for k in samples(target.read_text())}
        assert (("shard", f"{i}/2"),) in labels


def test_metrics_file_problems_are_usage_errors_before_the_run(tmp_path, server, run_cli):
    volume, config = compaction_setup(tmp_path, server)
    before = volume.read_bytes()
    missing = run_compact(run_cli, volume, config, "--metrics-file", tmp_path / "no" / "m.prom")
    assert_clean_error(missing, 2, "no directory")
    directory = run_compact(run_cli, volume, config, "--metrics-file", tmp_path)
    assert_clean_error(directory, 2, "is a directory")
    dry = run_compact(run_cli, volume, config, "--dry-run", "--metrics-file", tmp_path / "m.prom")
    assert_clean_error(dry, 2, "--dry-run")
    nul = run_compact(run_cli, volume, config, "--metrics-file", f"{tmp_path}/m\x00.prom")
    assert_clean_error(nul, 2, "NUL")
    assert server.requests == [] and volume.read_bytes() == before


def test_metrics_file_never_replaces_a_volume_a_link_a_device_or_another_file(
    tmp_path, server, run_cli
):
    """Like a report page or an export: a mistyped --metrics-file (the volume itself, a
    symbolic link, a FIFO or a device that would never end a read, a file of another kind)
    is refused (exit 2) before any call, and nothing named is read past its start or
    replaced. An empty file is replaced and gets a new metrics file's mode."""
    volume, config = compaction_setup(tmp_path, server)
    before = volume.read_bytes()
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    link = tmp_path / "link.prom"
    link.symlink_to(notes)
    fifo = tmp_path / "fifo.prom"
    os.mkfifo(fifo)
    for target, says in (
        (volume, "refusing to replace"),
        (notes, "refusing to replace"),
        (link, "symbolic link"),
        (fifo, "not a regular file"),  # as a device is (not /dev/null here: a regression
    ):  # would replace it on the host, as it did once)
        result = run_compact(run_cli, volume, config, "--metrics-file", target)
        assert_clean_error(result, 2, says)
    assert server.requests == [] and volume.read_bytes() == before
    assert notes.read_text() == "mine" and link.is_symlink() and stat.S_ISFIFO(fifo.stat().st_mode)
    empty = tmp_path / "empty.prom"
    empty.touch(mode=0o666)
    empty.chmod(0o666)
    assert run_compact(run_cli, volume, config, "--metrics-file", empty).exit_code == 0
    assert empty.read_text().endswith("# EOF\n") and stat.S_IMODE(empty.stat().st_mode) == 0o644


# -- --shard I/N ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["status", "compact", "migrate", "check"])
@pytest.mark.parametrize(
    "bad", ["3/2", "0/0", "a/b", "-1/2", "1/2/3", "1", "", " 0/2", "0/2000000"]
)
def test_a_shard_that_cannot_exist_is_a_usage_error(fleet, run_cli, command, bad):
    result = run_cli(command, fleet[0]["path"], "--shard", bad)
    assert_clean_error(result, 2, "--shard")


def test_a_shard_with_no_volume_succeeds_with_nothing_to_do(fleet, config, tmp_path, run_cli):
    path = fleet[0]["path"]
    empty = next(i for i in range(2) if not in_shard(shard_key(path), Shard(i, 2)))
    shard = ("--shard", f"{empty}/2")
    for args in (
        ("status", path, "--json"),
        ("check", path, "--json"),
        ("compact", path, "--config", config, "--dry-run", "--json"),
    ):
        result = run_cli(*args, *shard)
        assert result.exit_code == 0, (args, result)
        assert json.loads(result.stdout) == []
        assert "nothing to do" in result.stderr
    result = run_cli("migrate", path, *shard)
    assert result.exit_code == 0 and result.stdout == ""


def test_each_command_handles_exactly_its_shard(fleet, tmp_path, run_cli):
    """Over the shards of N, every volume is read once: by status, check and migrate."""
    paths = [v["path"] for v in fleet] + [
        fleet_volume(tmp_path / f"more{n}", f"more{n}")["path"] for n in range(5)
    ]
    seen_status, seen_check, seen_migrate = [], [], []
    for i in range(3):
        _, rows = status_json(run_cli, *paths, "--shard", f"{i}/3")
        seen_status += [row["path"] for row in rows]
        checked = run_cli("check", *paths, "--shard", f"{i}/3")
        seen_check += re.findall(r"^volumetool: (.*): ok$", checked.stderr, re.M)
        migrated = run_cli("migrate", *paths, "--shard", f"{i}/3", "--check")
        seen_migrate += re.findall(r"^(.*): up to date$", migrated.stdout, re.M)
    for seen in (seen_status, seen_check, seen_migrate):
        assert sorted(seen) == sorted(paths)


def test_report_takes_a_shard_like_every_multi_volume_command(fleet, tmp_path, run_cli):
    """SPEC 12: --shard on every multi-volume command. Each page holds exactly the volumes
    of its shard (those `status --shard` lists); a shard with none writes nothing, exit 0."""
    paths = [v["path"] for v in fleet]
    for i in range(3):
        _, rows = status_json(run_cli, *paths, "--shard", f"{i}/3")
        mine = {row["path"] for row in rows}
        out = tmp_path / f"shard{i}.html"
        result = run_cli("report", *paths, "--shard", f"{i}/3", "-o", out)
        assert result.exit_code == 0, result
        if not mine:
            assert not out.exists() and "nothing to do" in result.stderr
            continue
        page = out.read_text()
        assert {p for p in paths if str(p) in page} == mine
    empty = next(i for i in range(2) if not in_shard(shard_key(paths[0]), Shard(i, 2)))
    none = run_cli("report", paths[0], "--shard", f"{empty}/2", "-o", tmp_path / "none.html")
    assert none.exit_code == 0 and "nothing to do" in none.stderr
    assert not (tmp_path / "none.html").exists()
    bad = run_cli("report", paths[0], "--shard", "2/2", "-o", tmp_path / "x.html")
    assert_clean_error(bad, 2, "--shard")


def test_compact_with_shards_compacts_each_thread_once(tmp_path, server, run_cli):
    volumes = []
    for n in range(4):
        w = VolumeWriter(tmp_path / f"v{n}" / "agent.db")
        due_thread(w, "discord:1")
        w.close()
        volumes.append(str(w.path))
    config = compaction_setup(tmp_path, server)[1]
    compacted = []
    for i in range(2):
        result = run_cli(
            "compact", *volumes, "--config", config, "--json", "--shard", f"{i}/2",
            env={"TEST_MODEL_KEY": "sk-test-1"},
        )  # fmt: skip
        assert result.exit_code == 0, result
        compacted += [o["volume"] for o in json.loads(result.stdout) if o["status"] == "compacted"]
    assert sorted(compacted) == sorted(volumes)


def test_check_of_many_volumes_names_the_volume_of_each_problem(fleet, tmp_path, run_cli):
    damaged = fleet[1]["path"]
    with sqlite3.connect(damaged) as conn:
        conn.execute(
            "INSERT INTO audit (ts, event, detail, actor) VALUES"
            " ('2026-11-01T00:00:00.000Z', 'permission', 'not json', 'agent')"
        )
    junk = tmp_path / "junk.db"
    junk.write_text("x")
    result = run_cli("check", fleet[0]["path"], damaged, junk, fleet[2]["path"], "--json")
    assert result.exit_code == 2, result  # the junk file outranks the problem found
    problems = json.loads(result.stdout)
    assert [(p["path"], p["check"]) for p in problems] == [(damaged, "audit-detail-not-object")]
    assert "junk.db: not an SQLite database" in result.stderr
    text = run_cli("check", fleet[0]["path"], damaged)
    assert text.exit_code == 1
    assert text.stdout.startswith(f"{damaged}: audit rows ")
    one = run_cli("check", damaged, "--json")  # one volume: the problems as before, no path
    assert [sorted(p) for p in json.loads(one.stdout)] == [["check", "ids", "message", "table"]]


def test_shard_of_a_path_is_sha256_of_its_absolute_agent_file():
    """The hash is part of the interface: changing it would move volumes between workers."""
    key = "/srv/agents/support/agent.db"
    digest = int(hashlib.sha256(key.encode()).hexdigest()[:16], 16)
    for n in (1, 2, 3, 7, 100):
        assert [in_shard(key, Shard(i, n)) for i in range(n)].index(True) == digest % n


def test_the_same_volume_spelled_four_ways_lands_in_one_shard(tmp_path, monkeypatch):
    create_volume(tmp_path / "vol" / "agent.db", "a")
    monkeypatch.chdir(tmp_path)
    spellings = ["vol", "vol/", "./vol/agent.db", str(tmp_path / "x" / ".." / "vol")]
    assert len({shard_key(s) for s in spellings}) == 1
    assert shard_key("vol") == str(tmp_path / "vol" / "agent.db")


def test_the_shard_is_the_same_in_every_process(tmp_path):
    """Python's own hash() changes per process; the shard must not."""
    code = (
        "import sys; from volumetool.shard import Shard, in_shard; "
        "print([i for i in range(5) if in_shard(sys.argv[1], Shard(i, 5))])"
    )
    answers = {
        subprocess.run(
            [sys.executable, "-c", code, "/srv/agents/a/agent.db"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in (1, 2, 3)
    }
    assert len(answers) == 1


@given(st.lists(st.text(max_size=40)), st.integers(min_value=1, max_value=64))
def test_the_n_shards_partition_any_list_of_paths(paths, n):
    shards = [[p for p in paths if in_shard(p, Shard(i, n))] for i in range(n)]
    for path in paths:
        assert sum(in_shard(path, Shard(i, n)) for i in range(n)) == 1
    assert sorted(p for shard in shards for p in shard) == sorted(paths)


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=10**6))
def test_parse_shard_accepts_exactly_index_below_count(index, count):
    text = f"{index}/{count}"
    if 0 <= index < count:
        assert parse_shard(text) == Shard(index, count)
    else:
        with pytest.raises(ValueError):
            parse_shard(text)


# -- the docs' fleet examples ----------------------------------------------------------------


def fleet_section() -> str:
    """The Kubernetes CronJob and the systemd template units of many workers."""
    text = docs.page("scheduling")
    return text[text.index("\n## Kubernetes\n") :]


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", fleet_section(), re.M | re.S)


def test_docs_cronjob_is_an_indexed_job_whose_pods_take_their_shard():
    (manifest,) = blocks("yaml")
    job = yaml.safe_load(manifest)
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "CronJob"
    spec = job["spec"]["jobTemplate"]["spec"]
    assert spec["completionMode"] == "Indexed"
    n = spec["completions"]
    assert spec["parallelism"] == n and n > 1
    (container,) = spec["template"]["spec"]["containers"]
    command = " ".join(container.get("command", []) + container.get("args", []))
    assert f"--shard $(JOB_COMPLETION_INDEX)/{n}" in command or (
        f"--shard ${{JOB_COMPLETION_INDEX}}/{n}" in command
    )
    assert spec["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert mounts <= {v["name"] for v in spec["template"]["spec"]["volumes"]}


def units() -> dict[str, str]:
    """The unit files of the fleet section: `# /etc/systemd/system/NAME` starts each."""
    found = {}
    for block in blocks("ini"):
        for part in re.split(r"^# /etc/systemd/system/", block, flags=re.M)[1:]:
            name, _, body = part.partition("\n")
            found[name.strip()] = body
    return found


def test_docs_systemd_template_unit_and_timer_take_the_shard_from_the_instance():
    files = units()
    assert set(files) == {"volumetool-compact@.service", "volumetool-compact@.timer"}
    service = files["volumetool-compact@.service"]
    (exec_start,) = re.findall(r"^ExecStart=(.*)$", service, re.M)
    assert re.search(r"--shard %i/\d+", exec_start)
    assert exec_start.startswith("/")
    for body in files.values():  # systemd has no trailing comments: a value is the whole line
        for line in body.splitlines():
            if "=" in line and not line.startswith("#"):
                assert " #" not in line, line
    assert re.search(r"^OnCalendar=", files["volumetool-compact@.timer"], re.M)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_docs_units_pass_systemd_analyze_verify(tmp_path):
    for name, body in units().items():
        (tmp_path / name).write_text(
            body.replace("/opt/volumetool/.venv/bin/volumetool", "/bin/true")
        )
    instances = []
    for name in units():
        instance = tmp_path / name.replace("@.", "@0.")
        instance.symlink_to(tmp_path / name)
        instances.append(str(instance))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *instances],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
    )
    problems = [
        line
        for line in result.stderr.splitlines()
        if str(tmp_path) in line and "volumetool-compact" in line
    ]
    assert problems == [], result.stderr


def test_metrics_file_dash_is_refused_while_stdout_carries_the_results(
    tmp_path, server, run_cli, monkeypatch
):
    """`-` is stdout where a file is taken (SPEC 4), but compact's stdout carries its results:
    the metrics cannot go there too, and no file named `-` is written instead."""
    volume, config = compaction_setup(tmp_path, server)
    before = volume.read_bytes()
    monkeypatch.chdir(tmp_path)
    result = run_compact(run_cli, volume, config, "--metrics-file", "-")
    assert_clean_error(result, 2, "--metrics-file -: stdout carries the run's results")
    assert not (tmp_path / "-").exists()
    assert server.requests == [] and volume.read_bytes() == before

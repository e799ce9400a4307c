"""status, sessions, transcript, runs and audit report exactly what the volume holds."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.conftest import assert_clean_error
from tests.support.tsv import read_tsv
from tests.support.volumes import VolumeWriter
from volumetool.format import MIGRATIONS


@pytest.fixture
def volume(tmp_path):
    """Two keys; one archived thread; folded messages written by hand; runs of every kind."""
    w = VolumeWriter(tmp_path / "agent.db", name="ops-bot")
    old = w.thread("discord:1/2", status="archived")
    w.turn(old, 0)
    w.audit("thread", {"action": "new", "archived_session_id": old}, session=old)
    a = w.thread("discord:1/2", summary="Earlier: the user wants weekly reports.")
    compaction = w.run(
        a,
        trigger="compaction",
        input_tokens=4000,
        output_tokens=300,
        last_input_tokens=4000,
        model="gpt-4.1-mini",
    )
    folded = w.turn(a, 1, tool=True, folded_by=compaction) + w.turn(a, 2, folded_by=compaction)
    w.message(a, "system", "channel context")  # a live message between (prefix-like)
    live = w.turn(a, 3, tool=True) + w.turn(a, 4)
    w.run(a, input_tokens=60000, output_tokens=500, last_input_tokens=52000)
    b = w.thread("telegram:99", channel="telegram")
    w.turn(b, 1)
    w.run(
        b,
        status="error",
        input_tokens=None,
        output_tokens=None,
        last_input_tokens=None,
        error="provider error: 529",
    )
    w.run(None, trigger="schedule", input_tokens=10, output_tokens=5, last_input_tokens=10)
    w.run(
        a,
        trigger="compaction",
        status="error",
        input_tokens=None,
        output_tokens=None,
        last_input_tokens=None,
        error="HTTP 500",
    )
    w.audit("memory", {"action": "remember", "key": "deploy_region"}, session=b)
    w.audit("memory", {"action": "forget", "key": "old_key"})
    w.audit("permission", {"tool": "read_file", "decision": "allow"}, session=a)
    w.audit("compaction", {"action": "failed", "reason": "HTTP 500"}, session=a)
    w.memory("deploy_region", "always deploy to us-east")
    w.memory("user.tz", "Europe/Berlin")
    w.close()
    return {"path": w.path, "folded": folded, "live": live, "a": a, "b": b, "old": old}


def test_status_json_counts_match_what_was_written(volume, run_cli):
    result = run_cli("status", volume["path"], "--json")
    assert result.exit_code == 0, result
    totals = json.loads(result.stdout)
    assert totals["agent"] == "ops-bot"
    assert totals["sessions"] == {"active": 2, "archived": 1, "held": 0}
    live = len(volume["live"]) + 1 + 2 + 2  # thread a live + system, b's turn, old's turn
    assert totals["messages"] == {"live": live, "folded": len(volume["folded"])}
    assert totals["runs"]["total"] == 5
    assert totals["runs"]["errors"] == 2
    assert totals["runs"]["by_trigger"] == {"compaction": 2, "message": 2, "schedule": 1}
    assert totals["tokens"] == {
        "input": 64010,
        "output": 805,
        "compaction_input": 4000,
        "compaction_output": 300,
        "compaction_saved": 0,  # the agent compacted on its own: nothing recorded
    }
    assert totals["memories"] == 2
    assert totals["audit"] == {
        "total": 5,
        "by_event": {"compaction": 1, "memory": 2, "permission": 1, "thread": 1},
    }
    assert totals["schema"]["pending"] == [] and totals["schema"]["newer"] == []
    assert totals["schema"]["version"] == MIGRATIONS[-1]
    assert totals["file_bytes"] == volume["path"].stat().st_size
    assert totals["last_activity"].startswith("2026-11-01T")
    assert set(totals) == {
        "agent",
        "path",
        "file_bytes",
        "schema",
        "sessions",
        "messages",
        "runs",
        "tokens",
        "memories",
        "audit",
        "last_activity",
    }


def test_status_text(volume, run_cli):
    result = run_cli("status", volume["path"])
    assert result.exit_code == 0
    assert "2 active, 1 archived" in result.stdout


def test_sessions_json_fields_and_counts(volume, run_cli):
    result = run_cli("sessions", volume["path"], "--status", "all", "--json")
    rows = {r["id"]: r for r in json.loads(result.stdout)}
    assert list(rows[volume["a"]]) == [
        "id",
        "conversation_key",
        "channel",
        "status",
        "turns",
        "messages",
        "has_summary",
        "last_input_tokens",
        "compactions",
        "created_at",
        "updated_at",
        "held",
    ]
    a = rows[volume["a"]]
    assert (a["turns"], a["messages"], a["has_summary"]) == (2, len(volume["live"]) + 1, True)
    assert a["last_input_tokens"] == 52000
    assert a["compactions"] == 1  # the failed compaction is not one
    b = rows[volume["b"]]
    assert (b["turns"], b["messages"], b["has_summary"], b["compactions"]) == (1, 2, False, 0)
    assert b["last_input_tokens"] is None
    assert rows[volume["old"]]["status"] == "archived"


def test_sessions_filters(volume, run_cli):
    def ids(*args):
        return [
            r["id"] for r in json.loads(run_cli("sessions", volume["path"], "--json", *args).stdout)
        ]

    assert sorted(ids()) == sorted([volume["a"], volume["b"]])
    assert ids("--status", "archived") == [volume["old"]]
    assert ids("--key", "telegram:*") == [volume["b"]]
    assert ids("--channel", "discord") == [volume["a"]]
    assert ids("--since", "2000-01-01") and ids("--since", "2099-01-01") == []


def test_transcript_replays_summary_then_live_messages(volume, run_cli):
    result = run_cli("transcript", volume["path"], "discord:1/2", "--json")
    rows = json.loads(result.stdout)
    assert rows[0]["role"] == "summary" and rows[0]["id"] is None
    assert rows[0]["content"] == "Earlier: the user wants weekly reports."
    ids = [r["id"] for r in rows[1:]]
    assert ids == sorted(ids)
    assert set(ids).isdisjoint(volume["folded"])
    assert set(volume["live"]) <= set(ids)
    assert all(r["folded_by"] is None for r in rows)
    tool_call = next(r for r in rows if r["tool_calls"])
    assert tool_call["tool_calls"][0]["function"]["name"] == "read_file"


def test_transcript_full_marks_folded_messages(volume, run_cli):
    rows = json.loads(
        run_cli("transcript", volume["path"], "discord:1/2", "--full", "--json").stdout
    )
    folded = [r["id"] for r in rows if r["folded_by"] is not None]
    assert folded == volume["folded"]


def test_transcript_of_an_archived_thread_and_errors(volume, run_cli):
    rows = json.loads(
        run_cli(
            "transcript", volume["path"], "discord:1/2", "--session", volume["old"], "--json"
        ).stdout
    )
    assert [r["content"] for r in rows] == ["question 0", "answer 0"]
    assert_clean_error(run_cli("transcript", volume["path"], "nope"), 1, "no active thread")
    assert_clean_error(
        run_cli("transcript", volume["path"], "telegram:99", "--session", volume["a"]),
        1,
        "no thread",
    )


def test_runs_listing_and_filters(volume, run_cli):
    def rows(*args):
        return json.loads(run_cli("runs", volume["path"], "--json", *args).stdout)

    everything = rows()
    assert [r["id"] for r in everything] == [5, 4, 3, 2, 1]  # newest first
    assert everything[0]["conversation_key"] == "discord:1/2"
    assert list(everything[0]) == [
        "id",
        "session_id",
        "conversation_key",
        "trigger",
        "model",
        "status",
        "input_tokens",
        "output_tokens",
        "last_input_tokens",
        "error",
        "started_at",
        "finished_at",
    ]
    assert [r["id"] for r in rows("--trigger", "compaction")] == [5, 1]
    assert [r["id"] for r in rows("--status", "error")] == [5, 3]
    assert [r["id"] for r in rows("--key", "telegram:99")] == [3]
    assert rows("--since", "1d") == []
    schedule = rows("--trigger", "schedule")[0]
    assert schedule["session_id"] is None and schedule["conversation_key"] is None


def test_audit_listing_and_filters(volume, run_cli):
    def rows(*args):
        return json.loads(run_cli("audit", volume["path"], "--json", *args).stdout)

    everything = rows()
    assert len(everything) == 5
    assert isinstance(everything[0]["detail"], dict)
    assert list(everything[0]) == [
        "id",
        "ts",
        "event",
        "detail",
        "session_id",
        "conversation_key",
        "run_id",
        "actor",
    ]
    assert [r["detail"]["action"] for r in rows("--event", "memory")] == ["forget", "remember"]
    assert [r["detail"]["key"] for r in rows("--action", "forget")] == ["old_key"]
    assert [r["event"] for r in rows("--key", "deploy_region")] == ["memory"]
    assert {r["event"] for r in rows("--key", "discord:1/2")} == {
        "permission",
        "compaction",
        "thread",
    }
    assert [r["event"] for r in rows("--key", "telegram:99")] == ["memory"]


def test_audit_detail_that_is_not_json_is_shown_as_text(writer, run_cli):
    writer.audit("permission", "not json {")
    rows = json.loads(run_cli("audit", writer.path, "--json", "--action", "x").stdout)
    assert rows == []
    rows = json.loads(run_cli("audit", writer.path, "--json").stdout)
    assert rows[0]["detail"] == "not json {"


def _strict(text: str) -> object:
    """JSON as every parser reads it: no NaN or Infinity, no name twice."""

    def pairs(items):
        assert len(dict(items)) == len(items), f"a name given twice: {items}"
        return dict(items)

    def constant(name):
        raise AssertionError(f"{name} is not JSON")

    return json.loads(text, parse_constant=constant, object_pairs_hook=pairs)


# JSON an agent may store that Python's json would read into something else, or not write
# back: each is listed as the text it is. Depth 100 still reads as structure.
PLANTED_JSON = {
    "nested 1000 deep": '{"action":"x","d":' + "[" * 1000 + "]" * 1000 + "}",
    "NaN": '{"action":"x","v":NaN}',
    "Infinity": '{"action":"x","v":-Infinity}',
    "1e400": '{"action":"x","v":1e400}',
    "a name twice": '{"action":"remember","key":"a","key":"b"}',
    "a lone surrogate": '{"action":"remember","key":"\\ud800x"}',
    "a low surrogate": '["\\udc00"]',
    "deep, with a lone surrogate": '{"k":"\\ud800","d":' + "[" * 950 + "]" * 950 + "}",
}


@pytest.mark.parametrize("planted", sorted(PLANTED_JSON))
def test_stored_json_that_would_not_read_back_the_same_is_listed_as_its_text(
    writer, run_cli, planted
):
    """A listing's machine formats are valid JSON, and faithful: an audit detail or tool calls
    that Python's json would read otherwise than SQLite (a name twice), turn into what JSON
    cannot hold (NaN, 1e400 as Infinity, a lone surrogate), or not read at all (a thousand
    levels deep) are the stored text, every row is listed, and the command succeeds."""
    text = PLANTED_JSON[planted]
    writer.audit("permission", {"action": "before"})
    writer.audit("memory", text)
    writer.audit("permission", {"action": "after"})
    thread = writer.thread("k")
    writer.message(thread, "user", "hello")
    writer.insert(
        "messages",
        session_id=thread,
        role="assistant",
        content="",
        tool_calls=text,
        created_at=writer.tick(),
    )
    for args, read in (
        (["--json"], _strict),
        (["--nl"], lambda out: [_strict(line) for line in out.splitlines()]),
    ):
        result = run_cli("audit", writer.path, *args)
        assert result.exit_code == 0, result
        rows = read(result.stdout)
        assert [r["detail"] for r in rows] == [{"action": "after"}, text, {"action": "before"}]
        result = run_cli("transcript", writer.path, "k", *args)
        assert result.exit_code == 0, result
        assert [r["tool_calls"] for r in read(result.stdout)] == [None, text]
    rows = list(csv.DictReader(io.StringIO(run_cli("audit", writer.path, "--csv").stdout)))
    assert rows[1]["detail"] == text
    view = run_cli("transcript", writer.path, "k")  # the conversation view reads the calls
    assert view.exit_code == 0, view
    assert "internal error" not in view.stderr


def test_stored_json_a_hundred_levels_deep_is_still_listed_as_structure(writer, run_cli):
    nested: object = []
    for _ in range(99):
        nested = [nested]
    writer.audit("memory", {"action": "x", "d": nested})  # the detail: depth 100
    rows = _strict(run_cli("audit", writer.path, "--json").stdout)
    assert rows[0]["detail"] == {"action": "x", "d": nested}


@pytest.mark.parametrize(
    "listing", [["sessions"], ["runs"], ["audit"], ["memories", "list"], ["transcript", "KEY"]]
)
def test_every_listing_in_every_format(volume, run_cli, listing):
    def run(*args):
        command = [*listing]
        where = 2 if listing[0] == "memories" else 1
        command.insert(where, volume["path"])
        command = ["discord:1/2" if c == "KEY" else c for c in command]
        result = run_cli(*command, *args)
        assert result.exit_code == 0, result
        return result

    as_json = json.loads(run("--json").stdout)
    assert as_json
    nl = [json.loads(line) for line in run("--nl").stdout.split("\n") if line]
    assert nl == as_json
    parsed = list(csv.DictReader(io.StringIO(run("--csv").stdout)))
    first = next(iter(as_json[0]))
    assert [r[first] for r in parsed] == [str(r[first] or "") for r in as_json]
    assert read_tsv(run("--tsv").stdout) == parsed
    table = run().stdout
    assert table.splitlines()[0].split()[0] == first
    assert "|" in run("--fmt", "github").stdout
    one = run("-n", "1", "--json")
    assert len(json.loads(one.stdout)) == 1
    noun = {"sessions": "thread", "runs": "run", "audit": "event", "memories": "memory"}
    assert f"showing the first 1 {noun.get(listing[0], 'message')};" in one.stderr
    assert len(json.loads(run("-n", "0", "--json").stdout)) == len(as_json)
    assert run("--json").stderr == ""


def test_unknown_table_format_and_bad_since(volume, run_cli):
    assert_clean_error(run_cli("runs", volume["path"], "--fmt", "nope"), 2)
    assert_clean_error(run_cli("runs", volume["path"], "--since", "yesterday"), 2)


# -- numbers at their limits (SPEC 4: out-of-range numbers are exit 2) -------------------------

OUT_OF_RANGE = [
    (["-n", "9223372036854775807", "--json"], "-n"),
    (["-n", "1000000001"], "-n"),
    (["-n", "-1"], "-n"),
    (["--since", "800000d"], "--since"),
    (["--since", "99999999999w"], "--since"),
    (["--since", "9" * 5000 + "s"], "--since"),
    (["--since", "0001-01-01T00:00+01:00"], "--since"),
    (["--since", "9999-12-31T23:59-01:00"], "--since"),
    (["--busy-timeout", "nan"], "--busy-timeout"),
    (["--busy-timeout", "inf"], "--busy-timeout"),
    (["--busy-timeout", "-inf"], "--busy-timeout"),
    (["--busy-timeout", "1e308"], "--busy-timeout"),
    (["--busy-timeout", "86401"], "--busy-timeout"),
    (["--busy-timeout", "-1"], "--busy-timeout"),
]
LISTINGS_WITH_SINCE = [["sessions"], ["runs"], ["audit"]]


@pytest.mark.parametrize(("args", "option"), OUT_OF_RANGE, ids=lambda a: " ".join(a)[:30])
@pytest.mark.parametrize("listing", LISTINGS_WITH_SINCE, ids=lambda a: a[0])
def test_out_of_range_numbers_are_exit_2_with_nothing_on_stdout(
    volume, run_cli, listing, args, option
):
    result = run_cli(*listing, volume["path"], *args)
    assert_clean_error(result, 2, option)
    assert result.stdout == ""


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "86401"])
def test_wait_must_be_a_finite_number_of_seconds(volume, run_cli, value):
    result = run_cli("migrate", volume["path"], "--wait", value)
    assert_clean_error(result, 2, "--wait")


@pytest.mark.parametrize(
    "args",
    [
        ["-n", "1000000000"],
        ["--since", "0001-01-01"],
        ["--since", "9999-12-31T23:59:59.999Z"],
        ["--since", "0d"],
        ["--since", "700000d"],
        ["--busy-timeout", "86400"],
        ["--busy-timeout", "0"],
    ],
)
def test_numbers_at_the_edge_of_the_range_are_accepted(volume, run_cli, args):
    result = run_cli("runs", volume["path"], *args, "--json")
    assert result.exit_code == 0, result
    assert isinstance(json.loads(result.stdout), list)


def test_since_before_the_year_1000_still_sorts_as_a_timestamp(volume, run_cli):
    every = json.loads(run_cli("runs", volume["path"], "--json").stdout)
    since = json.loads(run_cli("runs", volume["path"], "--since", "0999-01-01", "--json").stdout)
    assert since == every


def test_token_figures_that_are_not_counts_add_nothing_and_never_overflow(tmp_path, run_cli):
    """An agent's runs may hold any token figure. Totals count what volumetool itself would
    store (a non-negative integer below 2^53); two figures near 2^63, which make SQLite's
    sum() stop with "integer overflow", a negative one, text and a real add nothing, and every
    command that totals tokens still reads the volume."""
    writer = VolumeWriter(tmp_path / "agent.db")
    thread = writer.thread("k")
    writer.run(thread, input_tokens=100, output_tokens=7)
    run = writer.run(thread, trigger="compaction", input_tokens=40, output_tokens=3)
    writer.insert("compactions", run_id=run, session_id=thread, saved_tokens=-12)
    for bad in (2**63 - 1, 2**63 - 1, 2**53, -5, "twelve", 1.5):
        writer.run(thread, input_tokens=bad, output_tokens=bad)  # type: ignore[arg-type]
    writer.close()
    other = VolumeWriter(tmp_path / "other.db")
    other.close()
    status = run_cli("status", writer.path, "--json")
    assert status.exit_code == 0, status
    tokens = json.loads(status.stdout)["tokens"]
    assert tokens == {
        "input": 140,
        "output": 10,
        "compaction_input": 40,
        "compaction_output": 3,
        "compaction_saved": -12,
    }
    fleet = run_cli("status", writer.path, other.path, "--json")
    assert fleet.exit_code == 0, fleet
    assert [row["error"] for row in json.loads(fleet.stdout)] == [None, None]
    metrics = run_cli("status", writer.path, "--prometheus")
    assert metrics.exit_code == 0, metrics
    up = [line for line in metrics.stdout.splitlines() if line.startswith("volumetool_volume_up{")]
    assert [line.rsplit(" ", 1)[1] for line in up] == ["1"]
    report = run_cli("report", writer.path, "-o", tmp_path / "report.html")
    assert report.exit_code == 0, report


def test_a_damaged_row_after_the_first_stops_the_listing_and_leaves_json_unclosed(writer, run_cli):
    """Text that is not UTF-8 further down a listing is met only once rows were written: the
    listing stops there (exit 2, one line pointing at `check`), the JSON array stays unclosed
    so that no parser takes the rows before for the whole, and `check` names the row."""
    for key in ("a", "b"):
        writer.memory(key, "v")
    writer.conn.execute(
        "INSERT INTO memories VALUES (CAST(x'62ff' AS TEXT), 'v', ?, ?)",
        (writer.tick(), writer.tick()),
    )
    writer.memory("c", "v")
    result = run_cli("memories", "list", writer.path, "--json", "-n", "0")
    assert result.exit_code == 2 and "not UTF-8" in result.stderr, result
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout.startswith("[") and not result.stdout.rstrip().endswith("]")
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)
    lines = run_cli("memories", "list", writer.path, "--nl", "-n", "0").stdout.splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["a", "b"]
    check = json.loads(run_cli("check", writer.path, "--json").stdout)
    assert [(p["check"], p["table"], p["ids"]) for p in check] == [("integrity", "memories", [3])]

"""Random volumes render in every format, and the machine formats parse back to the rows."""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support import docs
from tests.support.tsv import read_tsv
from tests.support.volumes import VolumeWriter, due_thread
from volumetool.render import Listing, OutputFormat, flat, render

# SQLite text cannot hold lone surrogates; everything else is fair game.
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
keys = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)
threads = st.lists(
    st.tuples(keys, st.lists(st.tuples(text, text), min_size=1, max_size=4), st.booleans()),
    max_size=4,
)
memories = st.dictionaries(keys, text, max_size=5)


def listing_volume(directory: Path, thread_specs, memory_items) -> Path:
    w = VolumeWriter(directory / "agent.db")
    for n, (key, turns, archived) in enumerate(thread_specs):
        s = w.thread(f"{key}#{n}", status="archived" if archived else "active")
        for question, answer in turns:
            w.message(s, "user", question)
            w.message(s, "assistant", answer)
        w.run(s, last_input_tokens=len(turns) * 1000)
        w.audit("thread", {"action": "note", "key": key, "text": turns[0][0]}, session=s)
    for key, value in memory_items.items():
        w.memory(key, value)
    w.close()
    return w.path


LISTINGS = [["sessions", "--status", "all"], ["runs"], ["audit"], ["memories", "list"]]


@settings(max_examples=25)
@given(threads, memories)
@example([], {"0": "\r\n"})  # a CSV field keeps its line break as written
def test_random_volumes_render_and_parse_back(run_cli_factory, thread_specs, memory_items):
    with tempfile.TemporaryDirectory() as directory:
        path = listing_volume(Path(directory), thread_specs, memory_items)
        for listing in LISTINGS:
            where = 2 if listing[0] == "memories" else 1
            command = [*listing[:where], path, *listing[where:], "-n", "0"]
            rows = json.loads(run_cli_factory(*command, "--json").stdout)
            nl = [
                json.loads(line)
                for line in run_cli_factory(*command, "--nl").stdout.split("\n")
                if line
            ]
            assert nl == rows
            flat_rows = [{k: flat(v) for k, v in row.items()} for row in rows]
            out = run_cli_factory(*command, "--csv").stdout
            assert list(csv.DictReader(io.StringIO(out, newline=""))) == flat_rows
            assert read_tsv(run_cli_factory(*command, "--tsv").stdout) == flat_rows
            for fmt in ("--table", "--fmt=grid"):
                result = run_cli_factory(*command, fmt)
                assert result.exit_code == 0, result
        keys_seen = [
            r["key"]
            for r in json.loads(
                run_cli_factory("memories", "list", path, "--json", "-n", "0").stdout
            )
        ]
        assert keys_seen == sorted(memory_items)
        values = {
            r["key"]: r["value"]
            for r in json.loads(
                run_cli_factory("memories", "list", path, "--json", "-n", "0").stdout
            )
        }
        assert values == memory_items


# -- terminal safety (SPEC 4) ----------------------------------------------------------------

# What a chat user or a model server can plant in a volume to attack an operator's terminal.
DANGEROUS = {
    "osc52-clipboard": "\x1b]52;c;cm0gLXJmIH4K\x07",
    "csi-clear-screen": "\x1b[2J",
    "bare-cr": "ok\rFAKE",
    "newline": "one\ntwo",
    "rlo": "user.\u202etxt.exe",
    "nul": "a\x00b",
    "c1-csi": "\x9b2J",
}
# SPEC 4: control characters (C0, DEL, C1) and the bidirectional controls; a table's own line
# breaks are the only "\n" allowed.
RAW_CONTROL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def hostile_fields(bad: str) -> dict[str, object]:
    """What each listed field holds in the hostile volume."""
    return {
        "conversation_key": f"key {bad}",
        "channel": f"chan {bad}",
        "content": f"hello {bad}",
        "tool_calls": [{"id": "c1", "function": {"name": bad}}],  # short: a cell never wraps
        "tool_call_id": f"c1{bad}",
        "trigger": f"trig {bad}",
        "model": f"model {bad}",
        "error": f"err {bad}",
        "event": f"event {bad}",
        "detail": {"action": bad},
        "key": f"mem {bad}",
        "value": f"value {bad}",
    }


def hostile_volume(directory: Path, bad: str) -> Path:
    """`bad` in every text field the listings show."""
    p = hostile_fields(bad)
    w = VolumeWriter(directory / "agent.db", name=f"agent {bad}")
    s = w.thread(p["conversation_key"], channel=p["channel"])
    w.message(s, "user", p["content"])
    w.message(s, "assistant", "", tool_calls=p["tool_calls"])
    w.message(s, "tool", "result", tool_call_id=p["tool_call_id"])
    w.run(s, trigger=p["trigger"], model=p["model"], status="error", error=p["error"])
    w.audit(p["event"], p["detail"], session=s)
    w.memory(p["key"], p["value"])
    w.close()
    return w.path


# (command, the fields of its rows that carry the planted text)
HOSTILE_LISTINGS = [
    (["sessions", "{v}"], ["conversation_key", "channel"]),
    (["transcript", "{v}", "key {bad}"], ["content", "tool_calls", "tool_call_id"]),
    (["runs", "{v}"], ["conversation_key", "trigger", "model", "error"]),
    (["audit", "{v}"], ["conversation_key", "event", "detail"]),
    (["memories", "list", "{v}"], ["key", "value"]),
]


@pytest.fixture(params=list(DANGEROUS), scope="module")
def hostile(request, tmp_path_factory):
    bad = DANGEROUS[request.param]
    return hostile_volume(tmp_path_factory.mktemp("hostile"), bad), bad


def _command(template: list[str], path: Path, bad: str) -> list[str]:
    return [part.format(v=path, bad=bad) for part in template]


@pytest.mark.parametrize("fmt", [[], ["--table"], ["--fmt", "grid"], ["--fmt", "github"]])
@pytest.mark.parametrize(("template", "fields"), HOSTILE_LISTINGS, ids=lambda x: x[0])
def test_tables_escape_every_control_character(run_cli_factory, hostile, template, fields, fmt):
    path, bad = hostile
    rows = json.loads(run_cli_factory(*_command(template, path, bad), "--json").stdout)
    result = run_cli_factory(*_command(template, path, bad), *fmt)
    assert result.exit_code == 0, result
    assert not RAW_CONTROL.search(result.stdout), repr(result.stdout)
    if fmt in ([], ["--table"]):  # header, rule, then one line per row: nothing split a row
        assert len(result.stdout.splitlines()) == 2 + len(rows)


@pytest.mark.parametrize(("template", "fields"), HOSTILE_LISTINGS, ids=lambda x: x[0])
def test_machine_formats_keep_the_text_exactly(run_cli_factory, hostile, template, fields):
    path, bad = hostile
    command = _command(template, path, bad)
    rows = json.loads(run_cli_factory(*command, "--json").stdout)
    for field in fields:
        assert hostile_fields(bad)[field] in [row[field] for row in rows], field
    nl = [json.loads(line) for line in run_cli_factory(*command, "--nl").stdout.splitlines()]
    assert nl == rows
    flat_rows = [{k: flat(v) for k, v in row.items()} for row in rows]
    out = run_cli_factory(*command, "--csv").stdout
    assert list(csv.DictReader(io.StringIO(out, newline=""))) == flat_rows
    assert read_tsv(run_cli_factory(*command, "--tsv").stdout) == flat_rows


def test_memory_values_are_exact_in_json_and_export(run_cli_factory, hostile):
    path, bad = hostile
    key, value = hostile_fields(bad)["key"], hostile_fields(bad)["value"]
    exported = json.loads(run_cli_factory("memories", "export", path).stdout)
    assert (exported["key"], exported["value"]) == (key, value)
    assert run_cli_factory("memories", "get", path, key).stdout == value  # not a terminal: raw


def test_status_text_escapes_names_from_the_volume(run_cli_factory, hostile):
    path, bad = hostile
    result = run_cli_factory("status", path)
    assert result.exit_code == 0, result
    assert not RAW_CONTROL.search(result.stdout), repr(result.stdout)
    assert len(result.stdout.splitlines()) == 11  # one line per figure
    totals = json.loads(run_cli_factory("status", path, "--json").stdout)
    assert totals["agent"] == f"agent {bad}"
    assert totals["runs"]["by_trigger"] == {f"trig {bad}": 1}
    assert totals["audit"]["by_event"] == {f"event {bad}": 1}


def test_an_error_line_escapes_text_from_the_volume(run_cli_factory, hostile, tmp_path):
    path, bad = hostile
    copy = tmp_path / "newer.db"
    copy.write_bytes(path.read_bytes())
    conn = sqlite3.connect(copy)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at)"
        " VALUES ('agent-volume', ?, '2026-11-30T00:00:00.000Z')",
        (f"m999 {bad}",),
    )
    conn.commit()
    conn.close()
    result = run_cli_factory("status", copy)
    assert result.exit_code == 3, result
    assert "m999" in result.stderr
    assert not RAW_CONTROL.search(result.stderr), repr(result.stderr)
    assert len(result.stderr.splitlines()) == 1


def test_a_dry_run_plan_escapes_keys_from_the_volume(run_cli_factory, hostile, tmp_path):
    path, _ = hostile
    incoming = tmp_path / "in.jsonl"
    incoming.write_text('{"key": "fresh", "value": "v"}\n')
    result = run_cli_factory("memories", "import", path, incoming, "--prune", "--dry-run")
    assert result.exit_code == 0, result
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert [action for action, _ in lines] == ["added", "removed"]
    assert lines[1][1].startswith("mem ") and not RAW_CONTROL.search(lines[1][1]), lines


# Paths and keys the user gives (or a shell glob finds) reach the commands' own messages:
# SPEC 4 escapes them there too. (NUL cannot be in a path or an argument.)
NAMEABLE = {name: bad for name, bad in DANGEROUS.items() if "\x00" not in bad}


@pytest.mark.parametrize("bad", list(NAMEABLE.values()), ids=list(NAMEABLE))
def test_messages_that_name_a_path_or_a_key_escape_it(run_cli_factory, tmp_path, bad):
    path = tmp_path / f"vol {bad}.db"
    outputs = [run_cli_factory("init", path)]
    outputs.append(run_cli_factory("backup", path, tmp_path / f"copy {bad}.db"))
    outputs.append(run_cli_factory("migrate", path))
    outputs.append(run_cli_factory("migrate", path, tmp_path / "missing.db"))  # one line each
    conn = sqlite3.connect(path)  # the agent's thread under a hostile key
    with conn:
        conn.execute(
            "INSERT INTO sessions (conversation_key, channel, status, created_at, updated_at)"
            " VALUES (?, 'cli', 'active', 't', 't')",
            (f"key {bad}",),
        )
    conn.close()
    outputs.append(run_cli_factory("thread", "new", path, f"key {bad}"))
    outputs.append(run_cli_factory("check", path))
    for result in outputs:
        assert result.exit_code in (0, 2), result
        for stream in (result.stdout, result.stderr):
            assert not RAW_CONTROL.search(stream), repr(stream)
    assert "up to date" in outputs[2].stdout and len(outputs[2].stdout.splitlines()) == 1
    assert outputs[4].stderr.count("\n") == 1  # one message line, its key escaped


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--json", "--csv"], "--json and --csv"),
        (["--nl", "--json"], "--json and --nl"),
        (["--tsv", "--fmt", "grid"], "--tsv and --fmt"),
        (["--table", "--json", "--nl"], "--table, --json and --nl"),
    ],
)
@pytest.mark.parametrize("command", [["sessions", "{v}"], ["runs", "{v}"], ["search", "{v}", "x"]])
def test_two_listing_formats_exclude_each_other(run_cli_factory, tmp_path, command, flags, named):
    # SPEC 4 names one format per listing; the last flag winning silently would hand a script
    # CSV where it asked for JSON.
    path = hostile_volume(tmp_path, "plain")
    result = run_cli_factory(*_command(command, path, ""), *flags)
    assert result.exit_code == 2, result
    assert f"{named} exclude each other" in result.stderr and result.stdout == ""
    fine = run_cli_factory(*_command(command, path, ""), "--table", "--fmt", "grid")
    assert fine.exit_code == 0, fine


def test_compact_json_and_nl_exclude_each_other(run_cli_factory, tmp_path):
    result = run_cli_factory("compact", tmp_path / "v.db", "--dry-run", "--json", "--nl")
    assert result.exit_code == 2, result
    assert "--json and --nl exclude each other" in result.stderr


# -- never a partial document ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["json", "nl", "csv", "tsv", "table"])
def test_a_query_that_fails_before_its_first_row_writes_nothing(kind):
    def rows():
        raise sqlite3.DatabaseError("database disk image is malformed")
        yield {}

    out = io.StringIO()
    with pytest.raises(sqlite3.DatabaseError):
        render(Listing(rows(), ["a"]), OutputFormat(kind), out)
    assert out.getvalue() == ""


@pytest.mark.parametrize("kind", ["--json", "--nl", "--csv", "--tsv", "--table"])
def test_a_listing_of_a_damaged_table_leaves_stdout_empty(run_cli_factory, tmp_path, kind):
    w = VolumeWriter(tmp_path / "agent.db")
    s = w.thread("k")
    for _ in range(3):
        w.run(s)
    w.conn.execute("PRAGMA journal_mode = DELETE")
    page_size = w.conn.execute("PRAGMA page_size").fetchone()[0]
    root = w.conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    w.close()
    data = bytearray(w.path.read_bytes())
    data[(root - 1) * page_size] = 0x00  # not a b-tree page any more
    w.path.write_bytes(bytes(data))
    result = run_cli_factory("runs", w.path, kind)
    assert result.exit_code == 2, result
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


# -- exact machine formats (SPEC 13) ---------------------------------------------------------

TSV_TEXT = ["a\ttab", "two\nlines", "back\\slash \\n not a newline", "a bare\rCR", 'a "quote"']


def tsv_volume(directory: Path) -> Path:
    """A thread whose messages, key and channel and a memory hold each of TSV_TEXT."""
    w = VolumeWriter(directory / "agent.db")
    s = w.thread('telegram:"ana"', channel="web\nchat\t\\")
    for text in TSV_TEXT:
        w.message(s, "user", text)
        w.message(s, "assistant", f"echo: {text}")
    w.run(s, status="error", error="line one\nline two\tand a tab")
    w.memory("k\tey", "\n".join(TSV_TEXT))
    w.close()
    return w.path


@pytest.mark.parametrize(
    "listing",
    [
        ["transcript", "{v}", 'telegram:"ana"'],
        ["sessions", "{v}"],
        ["runs", "{v}"],
        ["memories", "list", "{v}"],
        ["search", "{v}", "echo"],
    ],
)
def test_tsv_is_one_line_per_row_with_escapes(run_cli_factory, tmp_path, listing):
    command = _command(listing, tsv_volume(tmp_path), "")
    rows = json.loads(run_cli_factory(*command, "--json").stdout)
    assert rows
    out = run_cli_factory(*command, "--tsv").stdout
    lines = out.split("\n")[:-1]
    assert len(lines) == len(rows) + 1  # a header, then one line per row: `cut`/`awk` see rows
    assert all(line.count("\t") == len(rows[0]) - 1 for line in lines), lines
    assert "\r" not in out
    assert read_tsv(out) == [{k: flat(v) for k, v in row.items()} for row in rows]


def test_tsv_writes_each_escape_as_the_spec_names_it(run_cli_factory, tmp_path):
    path = tsv_volume(tmp_path)
    out = run_cli_factory("transcript", path, 'telegram:"ana"', "--tsv").stdout
    contents = [line.split("\t")[2] for line in out.splitlines()[1:]]
    assert contents[0::2] == [
        "a\\ttab",
        "two\\nlines",
        "back\\\\slash \\\\n not a newline",
        "a bare\\rCR",
        'a "quote"',  # no quoting: a quote is a quote
    ]


def test_the_tour_s_tsv_idiom_takes_the_key(tmp_path):
    """The tour's `sessions --tsv -n 1 | tail -n 1 | cut -f 2`, by the real tools, gives the
    key of a thread whose key has quotes and whose channel has a newline and a tab."""
    import os
    import subprocess
    import sys

    path = tsv_volume(tmp_path)
    idiom = "volumetool sessions ./vol --tsv -n 1 | tail -n 1 | cut -f 2"
    assert idiom in docs.page("tutorial")
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        ["bash", "-c", idiom.replace("./vol", '"$VOL"')],
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VOL": path},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == 'telegram:"ana"\n'


def _strict_json(stdout: bytes) -> list:
    """The documents of --json (one) or --nl (one a line) output, read as strict UTF-8."""
    text = stdout.decode("utf-8")  # errors="strict": a raw 0xFF byte fails here
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines()]


def test_json_is_strict_utf8_for_a_path_that_is_not(tmp_path):
    """A volume, a config and a file whose names hold byte 0xFF: every JSON document names them
    with the text `\\xff`, as error lines do, never with the raw byte."""
    import os
    import subprocess
    import sys

    name = os.fsdecode(b"v\xff.db")
    one = VolumeWriter(tmp_path / name)
    due_thread(one, "telegram:ana")  # so that compact --dry-run has a thread to name
    one.close()
    second = tmp_path / os.fsdecode(b"w\xff.db")
    second.write_bytes(one.path.read_bytes())
    config = tmp_path / os.fsdecode(b"agent\xff.yaml")
    config.write_text("memory:\n  scope: thread\nmodel: gpt-4.1\n")
    wrong = tmp_path / os.fsdecode(b"wrong\xff.yaml")
    wrong.write_text("memory:\n  scope: thread\n  persistent: maybe\nmodel: gpt-4.1\n")
    commands = [
        ["status", name, "--json"],
        ["status", name, second.name, "--json"],
        ["status", name, second.name, "--nl"],
        ["compact", name, second.name, "--config", config.name, "--dry-run", "--json"],
        ["compact", name, "--config", config.name, "--dry-run", "--nl"],
        ["validate", wrong.name, "--format", "json"],
        ["validate", wrong.name, "--format", "sarif"],
    ]
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-m", "volumetool", *command], cwd=tmp_path, capture_output=True
        )
        assert done.returncode in (0, 1), (command, done.stderr)
        documents = _strict_json(done.stdout)
        assert documents and b"\xff" not in done.stdout, command
        named = "%FF" if "sarif" in command else "\\xff"  # a URI names it percent-encoded
        assert named in done.stdout.decode(), command  # the byte, named as error lines do
    status = _strict_json(
        subprocess.run(
            [sys.executable, "-m", "volumetool", "status", name, "--json"],
            cwd=tmp_path,
            capture_output=True,
        ).stdout
    )[0]
    assert status["path"].endswith("v\\xff.db")
    missing = subprocess.run(
        [sys.executable, "-m", "volumetool", "status", os.fsdecode(b"none\xff")],
        cwd=tmp_path,
        capture_output=True,
    )
    assert b"none\\xff" in missing.stderr  # the same text in an error line


@pytest.mark.parametrize("command", [["sessions", "{v}"], ["runs", "{v}"], ["search", "{v}", "x"]])
def test_unsafehtml_is_refused_and_html_escapes(run_cli_factory, tmp_path, command):
    path = hostile_volume(tmp_path, "<script>alert(1)</script> x")
    result = run_cli_factory(*_command(command, path, ""), "--fmt", "unsafehtml")
    assert result.exit_code == 2, result
    assert "unsafehtml" in result.stderr and result.stdout == ""
    html = run_cli_factory(*_command(command, path, ""), "--fmt", "html")
    assert html.exit_code == 0, html
    assert "<script>" not in html.stdout and "&lt;script&gt;" in html.stdout

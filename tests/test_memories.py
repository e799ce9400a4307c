"""memories: remember, forget, export, import — nothing lost, nothing changed by a byte."""

from __future__ import annotations

import json
import sqlite3
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_clean_error
from tests.support.volumes import VolumeWriter, file_digest
from volumetool.atomic import create_volume
from volumetool.memories import KEY_MAX_CHARS, key_problem


def memories(path):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT key, value, created_at, updated_at FROM memories ORDER BY key"
        ).fetchall()
    finally:
        conn.close()


def memory_events(path):
    conn = sqlite3.connect(path)
    try:
        return [
            (json.loads(d)["action"], json.loads(d)["key"], actor)
            for d, actor in conn.execute(
                "SELECT detail, actor FROM audit WHERE event = 'memory' ORDER BY id"
            )
        ]
    finally:
        conn.close()


@pytest.fixture
def vol(tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    w.memory("deploy_region", "always deploy to us-east")
    w.memory("oncall_channel", "the on-call rotation is in #incidents")
    w.memory("user.tz", "Europe/Berlin")
    w.close()
    return w.path


def test_remember_and_forget_are_audited(vol, run_cli):
    assert run_cli("memories", "remember", vol, "seat", "prefers window seats").exit_code == 0
    assert run_cli("memories", "remember", vol, "user.tz", "Asia/Tokyo").exit_code == 0
    assert run_cli("memories", "forget", vol, "oncall_channel").exit_code == 0
    rows = dict((k, v) for k, v, _, _ in memories(vol))
    assert rows == {
        "deploy_region": "always deploy to us-east",
        "seat": "prefers window seats",
        "user.tz": "Asia/Tokyo",
    }
    assert memory_events(vol) == [
        ("remember", "seat", "volumetool"),
        ("remember", "user.tz", "volumetool"),
        ("forget", "oncall_channel", "volumetool"),
    ]
    assert run_cli("memories", "get", vol, "user.tz").stdout == "Asia/Tokyo"


def test_forget_or_get_an_absent_key_is_exit_1_and_writes_nothing(vol, run_cli):
    before = file_digest(vol)
    assert_clean_error(run_cli("memories", "forget", vol, "nope"), 1, "no memory")
    assert_clean_error(run_cli("memories", "get", vol, "nope"), 1, "no memory")
    assert file_digest(vol) == before


BIDI_KEYS = [
    f"user.{c}tz"
    for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
]


@pytest.mark.parametrize(
    "key", ["", " padded", "line\nbreak", "tab\there", "x" * 201, "nul\x00", *BIDI_KEYS]
)
def test_remember_refuses_bad_keys(vol, run_cli, key):
    before = file_digest(vol)
    says = "KEY is empty" if key == "" else "invalid memory key"  # as for every KEY
    assert_clean_error(run_cli("memories", "remember", vol, key, "v"), 2, says)
    assert file_digest(vol) == before


def test_list_with_a_prefix(vol, run_cli):
    rows = json.loads(run_cli("memories", "list", vol, "--prefix", "user.", "--json").stdout)
    assert [r["key"] for r in rows] == ["user.tz"]
    assert list(rows[0]) == ["key", "value", "created_at", "updated_at"]
    rows = json.loads(run_cli("memories", "list", vol, "--prefix", "o", "--json").stdout)
    assert [r["key"] for r in rows] == ["oncall_channel"]


def test_export_formats(vol, run_cli, tmp_path):
    lines = run_cli("memories", "export", vol).stdout.splitlines()
    assert [json.loads(line)["key"] for line in lines] == [
        "deploy_region",
        "oncall_channel",
        "user.tz",
    ]
    assert list(json.loads(lines[0])) == ["key", "value", "created_at", "updated_at"]
    document = json.loads(run_cli("memories", "export", vol, "--format", "json").stdout)
    assert document["format"] == "volumetool.memories" and document["version"] == 1
    assert document["agent"] == "test-agent" and document["exported_at"].endswith("Z")
    assert [m["key"] for m in document["memories"]] == [
        "deploy_region",
        "oncall_channel",
        "user.tz",
    ]
    empty = create_volume(tmp_path / "empty.db", "e")
    assert (
        json.loads(run_cli("memories", "export", empty, "--format", "json").stdout)["memories"]
        == []
    )
    assert run_cli("memories", "export", empty).stdout == ""


def test_export_file_is_atomic_and_private(vol, run_cli, tmp_path):
    out = tmp_path / "backup.jsonl"
    previous = '{"key": "old", "value": "the previous export"}\n'
    out.write_text(previous)
    out.chmod(0o644)
    assert run_cli("memories", "export", vol, "-o", out).exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert len(out.read_text().splitlines()) == 3
    # a failing export (the volume is not an agent file) leaves the old file alone
    out.write_text(previous)
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    assert run_cli("memories", "export", bad, "-o", out).exit_code == 2
    assert out.read_text() == previous
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_import_into_a_fresh_volume_and_again_is_a_no_op(vol, run_cli, tmp_path):
    export = run_cli("memories", "export", vol).stdout
    fresh = create_volume(tmp_path / "fresh.db", "f")
    result = run_cli("memories", "import", fresh, "-", input=export.encode())
    assert result.exit_code == 0, result
    assert "3 added, 0 changed, 0 unchanged, 0 skipped, 0 removed" in result.stderr
    assert memories(fresh) == memories(vol)
    assert memory_events(fresh) == [
        ("remember", k, "volumetool") for k in ("deploy_region", "oncall_channel", "user.tz")
    ]
    before = file_digest(fresh)
    again = run_cli("memories", "import", fresh, "-", input=export.encode())
    assert "0 added, 0 changed, 3 unchanged" in again.stderr
    assert len(memory_events(fresh)) == 3
    assert file_digest(fresh) == before


@pytest.fixture
def incoming(tmp_path):
    path = tmp_path / "incoming.jsonl"
    path.write_text(
        json.dumps({"key": "deploy_region", "value": "always deploy to us-east"})
        + "\n"
        + json.dumps({"key": "user.tz", "value": "Asia/Tokyo"})
        + "\n"
        + json.dumps({"key": "new.fact", "value": "likes tea"})
        + "\n"
    )
    return path


def test_conflicts_fail_by_default_and_write_nothing(vol, run_cli, incoming):
    before = file_digest(vol)
    result = run_cli("memories", "import", vol, incoming)
    assert_clean_error(result, 1, "1 key exists with a different value", "'user.tz'")
    assert file_digest(vol) == before


def test_skip_keeps_existing_values(vol, run_cli, incoming):
    result = run_cli("memories", "import", vol, incoming, "--on-conflict", "skip")
    assert "1 added, 0 changed, 1 unchanged, 1 skipped, 0 removed" in result.stderr
    assert dict((k, v) for k, v, _, _ in memories(vol))["user.tz"] == "Europe/Berlin"
    assert memory_events(vol) == [("remember", "new.fact", "volumetool")]


def test_overwrite_replaces_and_audits(vol, run_cli, incoming):
    created = {k: c for k, _, c, _ in memories(vol)}
    result = run_cli("memories", "import", vol, incoming, "--on-conflict", "overwrite")
    assert "1 added, 1 changed, 1 unchanged, 0 skipped, 0 removed" in result.stderr
    rows = {k: (v, c) for k, v, c, _ in memories(vol)}
    assert rows["user.tz"] == ("Asia/Tokyo", created["user.tz"])  # created_at kept
    assert memory_events(vol) == [
        ("remember", "new.fact", "volumetool"),
        ("remember", "user.tz", "volumetool"),
    ]


def test_prune_forgets_keys_absent_from_the_file(vol, run_cli, incoming):
    result = run_cli("memories", "import", vol, incoming, "--on-conflict", "overwrite", "--prune")
    assert "1 added, 1 changed, 1 unchanged, 0 skipped, 1 removed" in result.stderr
    assert [k for k, *_ in memories(vol)] == ["deploy_region", "new.fact", "user.tz"]
    assert memory_events(vol) == [
        ("remember", "new.fact", "volumetool"),
        ("forget", "oncall_channel", "volumetool"),
        ("remember", "user.tz", "volumetool"),
    ]


def test_an_import_that_never_ends_is_read_no_further_than_its_bounds(
    vol, run_cli, tmp_path, monkeypatch
):
    """A device or a runaway pipe as the import file took gigabytes before: a line of JSON
    Lines is read to 64 MiB at most, a JSON document to 512 MiB; more is exit 2, nothing
    imported."""
    from volumetool import memories as module

    before = memories(vol)
    # Bounds made small, and files just over them: not /dev/zero, which a regression would
    # read until the test host runs out of memory.
    monkeypatch.setattr(module, "MAX_LINE_BYTES", 10_000)
    line = tmp_path / "long.jsonl"
    line.write_text('{"key": "k", "value": "' + "v" * 10_000 + '"}\n')
    long = run_cli("memories", "import", vol, line)
    assert long.exit_code == 2 and "a line longer than" in long.stderr, long
    monkeypatch.setattr(module, "MAX_LINE_BYTES", 100_000)  # a document's first line is long
    monkeypatch.setattr(module, "MAX_DOCUMENT_BYTES", 10_000)
    document = tmp_path / "big.json"
    document.write_text('{"format": "volumetool.memories", "memories": [' + " " * 10_000 + "]}")
    big = run_cli("memories", "import", vol, document)
    assert big.exit_code == 2 and "a JSON document larger than" in big.stderr, big
    assert memories(vol) == before


def test_prune_with_an_empty_file_is_refused(vol, run_cli, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    before = file_digest(vol)
    assert_clean_error(run_cli("memories", "import", vol, empty, "--prune"), 2, "no memories")
    assert file_digest(vol) == before


def test_dry_run_with_a_conflict_lists_it_and_exits_1_like_the_real_import(vol, run_cli, incoming):
    before = file_digest(vol)
    dry = run_cli("memories", "import", vol, incoming, "--dry-run")
    real = run_cli("memories", "import", vol, incoming)
    assert_clean_error(real, 1, "1 key exists with a different value", "'user.tz'")
    assert dry.exit_code == 1
    assert dry.stdout.splitlines() == ["conflict\tuser.tz"]
    assert dry.stderr == real.stderr
    assert file_digest(vol) == before


def test_dry_run_prints_the_plan_and_writes_nothing(vol, run_cli, incoming):
    before = file_digest(vol)
    result = run_cli(
        "memories", "import", vol, incoming, "--on-conflict", "skip", "--prune", "--dry-run"
    )
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "added\tnew.fact",
        "removed\toncall_channel",
        "skipped\tuser.tz",
    ]
    assert "would import" in result.stderr and "1 removed" in result.stderr
    assert file_digest(vol) == before


BAD = [
    ("malformed line", b'{"key": "a", "value": "b"}\n{"key": "c", "value": \n', "line 2"),
    ("non-string value", b'{"key": "a", "value": "b"}\n{"key": "c", "value": 5}\n', "line 2"),
    ("bad key", b'{"key": "a", "value": "b"}\n\n{"key": " c", "value": "d"}\n', "line 3"),
    ("key too long", b'{"key": "' + b"k" * 201 + b'", "value": "d"}\n', "line 1"),
    (
        "duplicate key",
        b'{"key": "a", "value": "b"}\n{"key": "z", "value": "y"}\n{"key": "a", "value": "c"}\n',
        "line 3",
    ),
    ("invalid utf-8", b'{"key": "a", "value": "b"}\n{"key": "c", "value": "\xff"}\n', "line 2"),
    ("lone surrogate", b'{"key": "a", "value": "b"}\n{"key": "c", "value": "\\ud800"}\n', "line 2"),
    ("lone surrogate key", b'{"key": "\\udfff", "value": "b"}\n', "line 1"),
    ("not an object", b'{"key": "a", "value": "b"}\n["c", "d"]\n', "line 2"),
    ("missing value", b'{"key": "a"}\n', "line 1"),
    ("unknown field", b'{"key": "a", "value": "b", "vaule": "c"}\n', "line 1"),
    ("wrong document shape", b'{"format": "something.else", "memories": []}', "document"),
    ("bare array", b'[{"key": "a", "value": "b"}]', "document"),
    (
        "document record",
        b'{"format": "volumetool.memories", "version": 1, "memories": '
        b'[{"key": "a", "value": "b"}, {"key": "a", "value": 1}]}',
        "record 2",
    ),
    ("broken document", b'{\n  "format": "volumetool.memories",\n  "memories": [\n', "line 4"),
    (
        "field twice",
        b'{"key": "a", "value": "b"}\n{"key": "c", "value": "d", "value": "e"}\n',
        "line 2",
    ),
    ("key field twice", b'{"key": "a", "value": "b", "key": "c"}\n', "line 1"),
    (
        "document record field twice",
        b'{"format": "volumetool.memories", "version": 1, "memories": '
        b'[{"key": "a", "value": "b"}, {"key": "c", "key": "a", "value": "d"}]}',
        "record 2",
    ),
    (
        "document field twice",
        b'{"format": "volumetool.memories", "version": 1, "memories": [], '
        b'"memories": [{"key": "a", "value": "b"}]}',
        "document",
    ),
    ("bidi override key", '{"key": "user.\u202eanahtap", "value": "b"}\n'.encode(), "line 1"),
    (
        "bidi escaped key",
        b'{"key": "a", "value": "b"}\n{"key": "x\\u2067y", "value": "b"}\n',
        "line 2",
    ),
]

# Timestamps that are not the format's own (YYYY-MM-DDTHH:MM:SS.sssZ, a real moment).
NOT_TIMESTAMPS = [
    "yesterday",
    "<script>alert(1)</script>",
    "2026-11-30T05:27:20.123Z\u0000",
    "\u0000",
    "",
    "2026-02-30T05:27:20.123Z",
    "2026-04-31T05:27:20.123Z",
    "2100-02-29T05:27:20.123Z",
    "2026-11-30T24:00:00.000Z",
    "2026-11-30T05:60:20.123Z",
    "2026-11-30T05:27:60.123Z",
    "2026-13-01T05:27:20.123Z",
    "2026-11-30T05:27:20.123",
    "2026-11-30T05:27:20Z",
    "2026-11-30T05:27:20.123456Z",
    "2026-11-30 05:27:20.123Z",
    "2026-11-30T05:27:20.123+00:00",
    "2026-11-30T05:27:20.123z",
    " 2026-11-30T05:27:20.123Z",
    "２０２６-11-30T05:27:20.123Z",  # fullwidth digits are digits to Python's \\d
    "2026-11-30",
]


@pytest.mark.parametrize("field", ["created_at", "updated_at"])
@pytest.mark.parametrize("stamp", NOT_TIMESTAMPS)
def test_a_timestamp_not_of_the_format_is_exit_2_naming_the_line(
    vol, run_cli, tmp_path, field, stamp
):
    good = '{"key": "a", "value": "b", "created_at": "2026-01-01T00:00:00.000Z"}\n'
    record = {"key": "c", "value": "d", field: stamp}
    path = tmp_path / "in.jsonl"
    path.write_text(good + json.dumps(record) + "\n", encoding="utf-8")
    before = file_digest(vol)
    result = run_cli("memories", "import", vol, path)
    assert_clean_error(result, 2, "line 2", field, "nothing was imported")
    assert "\x00" not in result.stderr
    assert file_digest(vol) == before


@pytest.mark.parametrize("stamp", [5, 1.5, True, ["2026-11-30T05:27:20.123Z"], {}])
def test_a_timestamp_that_is_not_a_string_is_exit_2_naming_the_record(
    vol, run_cli, tmp_path, stamp
):
    document = {
        "format": "volumetool.memories",
        "version": 1,
        "memories": [{"key": "a", "value": "b"}, {"key": "c", "value": "d", "created_at": stamp}],
    }
    path = tmp_path / "in.json"
    path.write_text(json.dumps(document))
    assert_clean_error(run_cli("memories", "import", vol, path), 2, "record 2", "created_at")


def test_updated_before_created_is_exit_2_naming_the_record(vol, run_cli, tmp_path):
    document = {
        "format": "volumetool.memories",
        "version": 1,
        "memories": [
            {"key": "a", "value": "b", "created_at": "2026-01-01T00:00:00.000Z"},
            {
                "key": "c",
                "value": "d",
                "created_at": "2026-01-01T00:00:00.001Z",
                "updated_at": "2026-01-01T00:00:00.000Z",
            },
        ],
    }
    path = tmp_path / "in.json"
    path.write_text(json.dumps(document, indent=2))
    before = file_digest(vol)
    assert_clean_error(run_cli("memories", "import", vol, path), 2, "record 2", "before")
    assert file_digest(vol) == before


def test_real_timestamps_at_the_edges_of_the_calendar_are_kept(run_cli, tmp_path):
    stamps = [
        ("leap", "2024-02-29T00:00:00.000Z", "2024-02-29T23:59:59.999Z"),
        ("leap400", "2000-02-29T12:00:00.000Z", "2000-02-29T12:00:00.000Z"),
        ("last", "2026-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
        ("thirty", "2026-04-30T00:00:00.000Z", "2026-04-30T00:00:00.000Z"),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(
            json.dumps({"key": k, "value": "v", "created_at": c, "updated_at": u}) + "\n"
            for k, c, u in stamps
        )
    )
    target = create_volume(tmp_path / "t.db", "t")
    assert run_cli("memories", "import", target, path).exit_code == 0
    assert memories(target) == sorted((k, "v", c, u) for k, c, u in stamps)


def test_a_missing_timestamp_never_makes_updated_before_created(vol, run_cli, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(
        json.dumps({"key": "only.updated", "value": "v", "updated_at": "2020-05-05T00:00:00.000Z"})
        + "\n"
        + json.dumps(
            {"key": "only.created", "value": "v", "created_at": "2020-05-05T00:00:00.000Z"}
        )
        + "\n"
        + json.dumps(
            {"key": "user.tz", "value": "Asia/Tokyo", "updated_at": "2000-01-01T00:00:00.000Z"}
        )
        + "\n"
    )
    assert run_cli("memories", "import", vol, path, "--on-conflict", "overwrite").exit_code == 0
    rows = {k: (c, u) for k, _, c, u in memories(vol)}
    assert rows["only.updated"] == ("2020-05-05T00:00:00.000Z", "2020-05-05T00:00:00.000Z")
    assert rows["only.created"] == ("2020-05-05T00:00:00.000Z", "2020-05-05T00:00:00.000Z")
    created, updated = rows["user.tz"]  # overwritten: created_at kept, updated_at not before it
    assert updated >= created
    assert run_cli("check", vol).exit_code == 0


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_a_leading_utf8_bom_is_accepted(vol, run_cli, tmp_path, fmt):
    export = run_cli("memories", "export", vol, "--format", fmt).stdout
    path = tmp_path / f"bom.{fmt}"
    path.write_bytes(b"\xef\xbb\xbf" + export.encode())
    target = create_volume(tmp_path / "t.db", "t")
    result = run_cli("memories", "import", target, path)
    assert result.exit_code == 0, result
    assert memories(target) == memories(vol)


def test_a_bom_after_the_start_is_still_refused(vol, run_cli, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"key": "a", "value": "b"}\n\xef\xbb\xbf{"key": "c", "value": "d"}\n')
    assert_clean_error(run_cli("memories", "import", vol, path), 2, "line 2")


@pytest.mark.parametrize(("case", "data", "where"), BAD, ids=[b[0] for b in BAD])
def test_invalid_input_is_exit_2_names_the_line_and_changes_nothing(
    vol, run_cli, tmp_path, case, data, where
):
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    before = file_digest(vol)
    result = run_cli("memories", "import", vol, path, "--on-conflict", "overwrite", "--prune")
    assert_clean_error(result, 2, where, "nothing was imported")
    assert file_digest(vol) == before


# -- round trips ---------------------------------------------------------------------------

valid_keys = st.text(min_size=1, max_size=KEY_MAX_CHARS).filter(lambda k: key_problem(k) is None)
values = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=300),
    st.sampled_from(
        [
            "",
            "line one\nline two\r\n",
            "nul\x00inside",
            "emoji 🧠👩🏽‍💻",
            "e\u0301 combining",
            "עברית RTL \u202e override",
            "\u2028\u2029",
            "\ufeffBOM",
            '"quotes" and \\ backslashes',
        ]
    ),
)
stamps = st.sampled_from(["2026-11-30T05:27:20.123Z", "2025-01-01T00:00:00.000Z"])


@settings(max_examples=40)
@given(
    st.dictionaries(
        valid_keys,
        # updated_at is never before created_at
        st.tuples(values, stamps, stamps).map(lambda t: (t[0], *sorted(t[1:]))),
        max_size=12,
    ),
    st.sampled_from(["jsonl", "json"]),
)
def test_any_memories_round_trip_byte_for_byte(run_cli_factory, items, fmt):
    with tempfile.TemporaryDirectory() as directory:
        source = create_volume(Path(directory) / "a.db", "a")
        conn = sqlite3.connect(source)
        conn.executemany(
            "INSERT INTO memories VALUES (?, ?, ?, ?)",
            [(k, v, c, u) for k, (v, c, u) in items.items()],
        )
        conn.commit()
        conn.close()
        out = Path(directory) / f"export.{fmt}"
        assert (
            run_cli_factory("memories", "export", source, "-o", out, "--format", fmt).exit_code == 0
        )
        target = create_volume(Path(directory) / "b.db", "b")
        result = run_cli_factory("memories", "import", target, out)
        assert result.exit_code == 0, result
        assert memories(target) == memories(source)


def test_a_one_megabyte_value_round_trips(run_cli, tmp_path):
    source = create_volume(tmp_path / "a.db", "a")
    big = ("0123456789abcdef" * 65_536)[:-3] + "🧠"
    assert run_cli("memories", "remember", source, "big", big).exit_code == 0
    out = tmp_path / "x.jsonl"
    run_cli("memories", "export", source, "-o", out)
    target = create_volume(tmp_path / "b.db", "b")
    assert run_cli("memories", "import", target, out).exit_code == 0
    assert memories(target) == memories(source)


# -- a dry run predicts the real run ---------------------------------------------------------

small_keys = st.sampled_from(["a", "b", "c", "d", "e"])
small_values = st.sampled_from(["1", "2"])


@settings(max_examples=30)
@given(
    st.dictionaries(small_keys, small_values),
    st.dictionaries(small_keys, small_values),
    st.sampled_from(["fail", "skip", "overwrite"]),
    st.booleans(),
)
def test_dry_run_predicts_the_exit_code_and_the_counts_of_the_real_run(
    run_cli_factory, existing, incoming, on_conflict, prune
):
    with tempfile.TemporaryDirectory() as directory:
        target = Path(directory) / "t.db"
        w = VolumeWriter(target)
        for key, value in existing.items():
            w.memory(key, value)
        w.close()
        path = Path(directory) / "in.jsonl"
        path.write_text(
            "".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in incoming.items())
        )
        args = ("memories", "import", target, path, "--on-conflict", on_conflict)
        args += ("--prune",) if prune else ()
        before = file_digest(target)
        dry = run_cli_factory(*args, "--dry-run")
        assert file_digest(target) == before
        real = run_cli_factory(*args)
        assert dry.exit_code == real.exit_code
        assert dry.stderr.replace("would import", "imported") == real.stderr
        changed = {k for k, v in incoming.items() if existing.get(k, v) != v}
        if on_conflict == "fail" and changed:
            assert real.exit_code == 1
            assert dry.stdout.splitlines() == [f"conflict\t{k}" for k in sorted(changed)]


# -- check -----------------------------------------------------------------------------------

PLANTED_STAMPS = [
    ("memory-timestamp-format", "created_at = 'yesterday'"),
    ("memory-timestamp-format", "updated_at = '<script>'"),
    ("memory-timestamp-format", "created_at = '2026-02-30T00:00:00.000Z'"),
    ("memory-timestamp-format", "updated_at = '2026-11-30T05:27:20.123'"),
    ("memory-timestamp-format", "created_at = '2026-11-30T05:27:20.123Z' || char(0)"),
    ("memory-updated-before-created", "updated_at = '2000-01-01T00:00:00.000Z'"),
]


@pytest.mark.parametrize(("finding", "assignment"), PLANTED_STAMPS)
def test_check_reports_memory_timestamps_not_of_the_format(vol, run_cli, finding, assignment):
    assert run_cli("check", vol).exit_code == 0
    conn = sqlite3.connect(vol)
    conn.execute(f"UPDATE memories SET {assignment} WHERE key = 'oncall_channel'")
    (rowid,) = conn.execute("SELECT rowid FROM memories WHERE key = 'oncall_channel'").fetchone()
    conn.commit()
    conn.close()
    result = run_cli("check", vol, "--json")
    assert result.exit_code == 1
    found = json.loads(result.stdout)
    assert [(p["check"], p["table"], p["ids"]) for p in found] == [(finding, "memories", [rowid])]


def test_export_never_replaces_a_volume_or_any_other_file(vol, run_cli, tmp_path):
    """`-o` naming the volume itself (or another database, or a file that is not an earlier
    export) is refused before anything is written: a mistyped argument never costs data."""
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    for target in (vol, other, tmp_path):
        before = target.read_bytes() if target.is_file() else None
        result = run_cli("memories", "export", vol, "-o", target)
        assert (result.exit_code == 2 and "refusing to replace" in result.stderr) or (
            target == tmp_path and result.exit_code == 2
        ), result
        if before is not None:
            assert target.read_bytes() == before
    assert memories(vol)  # the volume is still a volume
    # A symbolic link, even to an earlier export: the rename would replace the link itself.
    earlier = tmp_path / "earlier.jsonl"
    assert run_cli("memories", "export", vol, "-o", earlier).exit_code == 0
    link = tmp_path / "link.jsonl"
    link.symlink_to(earlier)
    result = run_cli("memories", "export", vol, "-o", link)
    assert result.exit_code == 2 and "symbolic link" in result.stderr, result
    assert link.is_symlink()

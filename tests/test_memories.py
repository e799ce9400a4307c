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
from tests.volumes import VolumeWriter, file_digest
from volumetool.create import create_volume
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


@pytest.mark.parametrize("key", ["", " padded", "line\nbreak", "tab\there", "x" * 201, "nul\x00"])
def test_remember_refuses_bad_keys(vol, run_cli, key):
    before = file_digest(vol)
    assert_clean_error(run_cli("memories", "remember", vol, key, "v"), 2, "invalid memory key")
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
    out.write_text("the previous export\n")
    assert run_cli("memories", "export", vol, "-o", out).exit_code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert len(out.read_text().splitlines()) == 3
    # a failing export (the volume is not an agent file) leaves the old file alone
    out.write_text("the previous export\n")
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    assert run_cli("memories", "export", bad, "-o", out).exit_code == 2
    assert out.read_text() == "the previous export\n"
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
    assert_clean_error(result, 1, "1 key(s) exist with a different value", "'user.tz'")
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


def test_prune_with_an_empty_file_is_refused(vol, run_cli, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    before = file_digest(vol)
    assert_clean_error(run_cli("memories", "import", vol, empty, "--prune"), 2, "no memories")
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
]


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
    st.dictionaries(valid_keys, st.tuples(values, stamps, stamps), max_size=12),
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

"""Random volumes render in every format, and the machine formats parse back to the rows."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.volumes import VolumeWriter
from volumetool.render import flat

# SQLite text cannot hold lone surrogates; everything else is fair game.
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
keys = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)
threads = st.lists(
    st.tuples(keys, st.lists(st.tuples(text, text), min_size=1, max_size=4), st.booleans()),
    max_size=4,
)
memories = st.dictionaries(keys, text, max_size=5)


def build(directory: Path, thread_specs, memory_items) -> Path:
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
def test_random_volumes_render_and_parse_back(run_cli_factory, thread_specs, memory_items):
    with tempfile.TemporaryDirectory() as directory:
        path = build(Path(directory), thread_specs, memory_items)
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
            for kind, delimiter in (("--csv", ","), ("--tsv", "\t")):
                out = run_cli_factory(*command, kind).stdout
                parsed = list(csv.DictReader(io.StringIO(out, newline=""), delimiter=delimiter))
                assert parsed == [{k: flat(v) for k, v in row.items()} for row in rows]
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

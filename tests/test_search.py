"""search: live and folded messages, summaries and memories, newest first, literal words, the
index volumetool keeps in the file, and results that stay right while the agent writes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_clean_error, examples
from tests.support.volumes import VolumeWriter, file_digest
from tests.test_threads import query
from volumetool.errors import UnusableInput
from volumetool.format import SEARCH_FTS5
from volumetool.search.find import SearchRequest, check_expression, search
from volumetool.search.query import parse_query
from volumetool.volume import read_schema, schema_differences


def occurs_whole(word: str, text: str) -> bool:
    """The SPEC's plain-query rule, written out for the oracle: the word, ignoring case, not
    inside a longer run of letters and digits."""
    word, text = word.lower(), text.lower()
    for start in range(len(text) - len(word) + 1):
        if text[start : start + len(word)] != word:
            continue
        end = start + len(word)
        left = start == 0 or not (word[0].isalnum() and text[start - 1].isalnum())
        right = end == len(text) or not (word[-1].isalnum() and text[end].isalnum())
        if left and right:
            return True
    return False


def oracle(path, words: list[str]) -> set[tuple]:
    """What a search for `words` must find, read straight from the tables."""
    conn = sqlite3.connect(path)
    found = set()

    def hit(*texts):
        return all(any(t and occurs_whole(w, t) for t in texts) for w in words)

    for mid, content in conn.execute("SELECT id, content FROM messages"):
        if hit(content):
            found.add(("message", mid))
    for sid, summary in conn.execute("SELECT id, summary FROM sessions WHERE summary NOT NULL"):
        if hit(summary):
            found.add(("summary", sid, False))
    for sid, summary in conn.execute(
        "SELECT k.session_id, k.summary FROM compactions k LEFT JOIN sessions s"
        " ON s.id = k.session_id WHERE k.summary NOT NULL AND s.summary IS NOT k.summary"
    ):
        if hit(summary):
            found.add(("summary", sid, True))
    for key, value in conn.execute("SELECT key, value FROM memories"):
        if hit(key, value):
            found.add(("memory", key))
    conn.close()
    return found


def as_found(rows: list[dict]) -> set[tuple]:
    out = set()
    for r in rows:
        if r["kind"] == "message":
            out.add(("message", r["message_id"]))
        elif r["kind"] == "summary":
            out.add(("summary", r["session_id"], r["folded"]))
        else:
            out.add(("memory", r["key"]))
    return out


def everything(path, text: str, **options) -> list[dict]:
    return search(path, SearchRequest(text, limit=None), **options)


@pytest.fixture
def vol(tmp_path):
    """Two threads (one compacted twice, one archived), memories, a run and audit events."""
    w = VolumeWriter(tmp_path / "agent.db")
    s = w.thread("telegram:55", summary="Second summary: refund INV-2024.05 approved.")
    first = w.run(s, trigger="compaction")
    w.message(s, "user", "Can I get a refund for INV-2024.05?", folded_by=first)
    w.message(s, "assistant", "Refunds take 5 days.", folded_by=first)
    second = w.run(s, trigger="compaction")
    w.message(s, "user", "Status of the refund?", folded_by=second)
    w.insert("compactions", run_id=first, session_id=s, summary="First summary: refund asked.")
    w.insert(
        "compactions",
        run_id=second,
        session_id=s,
        summary="Second summary: refund INV-2024.05 approved.",
    )
    w.message(s, "assistant", "The refund for INV-2024.05 was sent.")
    w.message(s, "user", "INV 2024 05 x and XINV-2024.05 are not it")
    old = w.thread("discord:9", status="archived")
    w.message(old, "user", "Where is my REFUND?")
    w.message(old, "tool", "escape \x1b]52;c;cmVmdW5k\x07 refund in a tool result")
    w.memory("ana.refund_policy", "prefers a refund to store credit")
    w.memory("ana.timezone", "Europe/Berlin")
    w.close()
    return w.path


def test_plain_words_match_whole_and_literally_ignoring_case(vol):
    found = as_found(everything(vol, "INV-2024.05"))
    assert found == oracle(vol, ["INV-2024.05"])
    texts = dict(query(vol, "SELECT id, content FROM messages"))
    assert {texts[m] for kind, m, *_ in found if kind == "message"} == {
        "Can I get a refund for INV-2024.05?",
        "The refund for INV-2024.05 was sent.",
    }  # not "INV 2024 05 x", not "XINV-2024.05"
    refund = everything(vol, "refund")
    assert "Refunds take 5 days." not in {texts.get(r["message_id"]) for r in refund}
    assert as_found(refund) == oracle(vol, ["refund"])


def test_every_word_must_occur_and_quotes_keep_words_together(vol):
    assert as_found(everything(vol, "refund sent")) == oracle(vol, ["refund", "sent"])
    together = everything(vol, '"refund for INV-2024.05"')
    assert len(together) == 2
    assert everything(vol, '"for refund"') == []


def test_messages_summaries_and_memories_with_the_fields_of_the_spec(vol, run_cli):
    result = run_cli("search", vol, "refund", "--json", "-n", "0")
    assert result.exit_code == 0, result
    rows = json.loads(result.stdout)
    fields = "kind conversation_key session_id message_id role folded created_at key snippet"
    assert {" ".join(r) for r in rows} == {fields}
    folded = [r for r in rows if r["kind"] == "message" and r["folded"]]
    assert [r["role"] for r in folded] == ["user", "user"]
    assert all(r["conversation_key"] == "telegram:55" for r in folded)
    summaries = [r for r in rows if r["kind"] == "summary"]
    assert {(r["snippet"], r["folded"]) for r in summaries} == {
        ("Second summary: ⟦refund⟧ INV-2024.05 approved.", False),  # the current one, once
        ("First summary: ⟦refund⟧ asked.", True),  # replaced by the second compaction
    }
    [memory] = [r for r in rows if r["kind"] == "memory"]
    assert memory["key"] == "ana.refund_policy" and memory["message_id"] is None
    assert memory["snippet"] == "prefers a ⟦refund⟧ to store credit"


def test_results_are_newest_first(vol):
    rows = everything(vol, "refund")
    times = [r["created_at"] for r in rows]
    assert times == sorted(times, reverse=True)


def test_key_role_since_and_in_narrow_the_search(vol, run_cli):
    def found(*options):
        result = run_cli("search", vol, "refund", "--json", "-n", "0", *options)
        assert result.exit_code == 0, result
        return json.loads(result.stdout)

    assert {r["conversation_key"] for r in found("--key", "discord:*")} == {"discord:9"}
    assert {r["role"] for r in found("--role", "user")} == {"user"}
    assert {r["kind"] for r in found("--in", "memories,summaries")} == {"memory", "summary"}
    assert [r["key"] for r in found("--key", "ana.*", "--in", "memories")] == ["ana.refund_policy"]
    every = found()
    cut = sorted(r["created_at"] for r in every)[len(every) // 2]
    assert {r["created_at"] >= cut for r in found("--since", cut)} == {True}
    assert len(found("--since", cut)) == sum(r["created_at"] >= cut for r in every)


def test_fts_passes_fts5_syntax_through(vol):
    rows = search(vol, SearchRequest("refun* OR berlin", fts=True, limit=None))
    assert {r["kind"] for r in rows} == {"message", "summary", "memory"}
    assert "ana.timezone" in {r["key"] for r in rows}


@pytest.mark.parametrize("bad", ["AND", '"refund', "nosuchcolumn:refund", "refund OR"])
def test_a_query_sqlite_rejects_is_exit_2_in_one_line_with_a_hint(vol, run_cli, bad):
    before = file_digest(vol)
    result = run_cli("search", vol, bad, "--fts")
    assert_clean_error(result, 2, "FTS5", "--fts")
    assert result.stdout == ""
    assert file_digest(vol) == before  # refused before the index was built


@pytest.mark.parametrize(("text", "message"), [("", "empty"), (":: ;", "letter or a digit")])
def test_a_query_with_nothing_to_search_for_is_exit_2(vol, run_cli, text, message):
    assert_clean_error(run_cli("search", vol, text), 2, message)


# A shell passes bytes that are not UTF-8 (`$'\\xff'`) to Python as lone surrogates.
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["refund\udcff"], "QUERY"),
        (["refund\udcff", "--fts"], "QUERY"),
        (["refund", "--key", "telegram:\udcff*"], "--key"),
    ],
)
def test_text_that_is_not_utf8_is_exit_2_naming_the_argument(vol, run_cli, args, named):
    before = file_digest(vol)
    result = run_cli("search", vol, *args)
    assert_clean_error(result, 2, named, "not UTF-8")
    assert "path" not in result.stderr
    assert file_digest(vol) == before


def test_unknown_kinds_are_exit_2(vol, run_cli):
    assert_clean_error(run_cli("search", vol, "refund", "--in", "messages,runs"), 2, "runs")


def test_snippets_are_escaped_in_tables_and_exact_in_json(vol, run_cli):
    table = run_cli("search", vol, "escape", "--key", "discord:*")
    assert "\x1b" not in table.stdout and "\\x1b]52" in table.stdout
    raw = json.loads(run_cli("search", vol, "escape", "--json").stdout)
    assert "\x1b]52;c;" in raw[0]["snippet"] and "⟦escape⟧" in raw[0]["snippet"]


def test_every_output_format_and_the_limit_note(vol, run_cli):
    for fmt in ("--nl", "--csv", "--tsv", "--table"):
        result = run_cli("search", vol, "refund", fmt)
        assert result.exit_code == 0 and result.stdout, (fmt, result)
    csv = run_cli("search", vol, "refund", "--csv", "-n", "2")
    assert csv.stdout.splitlines()[0] == (
        "kind,conversation_key,session_id,message_id,role,folded,created_at,key,snippet"
    )
    assert len(csv.stdout.splitlines()) == 3
    assert "showing the first 2 results" in csv.stderr


def test_the_first_search_builds_an_index_the_schema_gate_accepts(vol, run_cli):
    assert run_cli("search", vol, "refund").exit_code == 0
    names = {n for (n,) in query(vol, "SELECT name FROM sqlite_master WHERE name LIKE 'search%'")}
    assert {"search_messages", "search_texts", "search_state"} <= names
    conn = sqlite3.connect(vol)
    assert schema_differences(conn) == []
    assert run_cli("check", vol).exit_code == 0
    assert run_cli("memories", "remember", vol, "k", "v").exit_code == 0  # writes still work


def test_read_only_search_writes_nothing_and_finds_the_same(vol, run_cli):
    before = file_digest(vol)
    result = run_cli("search", vol, "refund", "--read-only", "--json", "-n", "0")
    assert result.exit_code == 0, result
    assert file_digest(vol) == before
    indexed = run_cli("search", vol, "refund", "--json", "-n", "0")
    assert json.loads(result.stdout) == json.loads(indexed.stdout)


def test_an_object_planted_beside_the_index_is_reported_and_blocks_writes(vol, run_cli):
    assert run_cli("search", vol, "refund").exit_code == 0
    conn = sqlite3.connect(vol)
    conn.execute("CREATE TRIGGER search_messages_ai AFTER INSERT ON memories BEGIN SELECT 1; END")
    conn.execute("CREATE TABLE search_extra (x)")
    conn.commit()
    conn.close()
    checked = run_cli("check", vol)
    assert checked.exit_code == 1
    assert "search_messages_ai" in checked.stdout and "search_extra" in checked.stdout
    assert_clean_error(run_cli("erase", vol, "--key", "discord:9", "--yes"), 3, "search_extra")


def test_a_look_alike_index_is_never_used_or_written(vol, run_cli):
    conn = sqlite3.connect(vol)
    conn.execute("CREATE VIRTUAL TABLE search_texts USING fts4(text, key)")
    conn.execute("INSERT INTO search_texts (text, key) VALUES ('planted refund', NULL)")
    conn.commit()
    conn.close()
    before = file_digest(vol)
    result = run_cli("search", vol, "refund", "--json", "-n", "0")
    assert result.exit_code == 0, result
    assert as_found(json.loads(result.stdout)) == oracle(vol, ["refund"])
    assert "departs from the format" in result.stderr
    assert file_digest(vol) == before


# -- results stay right while the agent writes ---------------------------------------------


class Agent:
    """Writes as the runtime does, knowing nothing of the index."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.n = 0

    def say(self, key: str, text: str) -> None:
        self.n += 1
        session = self.conn.execute(
            "SELECT id FROM sessions WHERE conversation_key = ? AND status = 'active'", (key,)
        ).fetchone()[0]
        self.conn.execute(
            "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, 'user', ?,"
            " strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
            (session, text),
        )

    def reset(self, key: str) -> None:
        self.conn.execute(
            "DELETE FROM messages WHERE session_id IN"
            " (SELECT id FROM sessions WHERE conversation_key = ?)",
            (key,),
        )

    def summarize(self, key: str, summary: str) -> None:
        self.conn.execute(
            "UPDATE sessions SET summary = ? WHERE conversation_key = ?", (summary, key)
        )

    def remember(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO memories VALUES (?, ?, '2026-11-01T00:00:00.000Z',"
            " '2026-11-01T00:00:00.000Z') ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def forget(self, key: str) -> None:
        self.conn.execute("DELETE FROM memories WHERE key = ?", (key,))


def damage_search_index(path: Path) -> None:
    """Overwrite the pages of the message index's words with junk: FTS5 finds them
    malformed (the rows it indexes are intact)."""
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE search_messages_data SET block = x'00010203040506070809' WHERE id > 10"
        )
    conn.close()


def test_a_damaged_index_is_searched_around_and_built_again(vol, run_cli):
    # the index is volumetool's own copy: the volume's rows are intact, so the search finds
    # what they hold (and does not send the user to a backup), and the index is built anew
    assert run_cli("search", vol, "refund").exit_code == 0
    damage_search_index(vol)
    before = file_digest(vol)
    read_only = run_cli("search", vol, "refund", "--json", "--read-only")
    assert read_only.exit_code == 0, read_only
    assert as_found(json.loads(read_only.stdout)) == oracle(vol, ["refund"])
    assert "index is damaged" in read_only.stderr
    assert file_digest(vol) == before
    result = run_cli("search", vol, "refund", "--json")
    assert result.exit_code == 0, result
    assert as_found(json.loads(result.stdout)) == oracle(vol, ["refund"])
    again = run_cli("search", vol, "refund", "--json")
    assert again.exit_code == 0 and again.stderr == "", again
    assert as_found(json.loads(again.stdout)) == oracle(vol, ["refund"])
    assert run_cli("check", vol).exit_code == 0


def test_deleted_and_reused_message_ids_never_show_stale_text(vol):
    agent = Agent(vol)
    agent.say("telegram:55", "one more refund question")  # the highest id
    everything(vol, "refund")  # the index is built
    agent.reset("telegram:55")  # the highest ids go...
    agent.say("telegram:55", "a new message about parcels")  # ...and come back with new text
    agent.say("telegram:55", "refund again")
    reused = (
        "SELECT c.c0 FROM messages m JOIN search_messages_content c ON c.id = m.id"
        " WHERE m.content = 'a new message about parcels'"
    )
    assert query(vol, reused) == [("one more refund question",)]  # indexed with its old text
    for write in (False, True):  # read as it is first, then refreshed
        assert as_found(everything(vol, "refund", write_index=write)) == oracle(vol, ["refund"])
        assert as_found(everything(vol, "parcels", write_index=write)) == oracle(vol, ["parcels"])


def test_a_deleted_message_leaves_the_index_at_the_next_search(vol):
    everything(vol, "refund")
    copies = "SELECT count(*) FROM search_messages_content WHERE c0 = 'Where is my REFUND?'"
    assert query(vol, copies) == [(1,)]
    Agent(vol).reset("discord:9")
    everything(vol, "anything")
    assert query(vol, copies) == [(0,)]


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.sampled_from(["telegram:55", "discord:9"]), st.integers(0, 5)),
        st.tuples(st.just("reset"), st.sampled_from(["telegram:55", "discord:9"]), st.just(0)),
        st.tuples(st.just("summarize"), st.sampled_from(["telegram:55"]), st.integers(0, 5)),
        st.tuples(st.just("remember"), st.sampled_from(["ana.a", "ana.b"]), st.integers(0, 5)),
        st.tuples(st.just("forget"), st.sampled_from(["ana.a", "ana.timezone"]), st.just(0)),
        st.tuples(
            st.just("search"), st.sampled_from(["refund", "kiwi", "INV-2024.05"]), st.booleans()
        ),
    ),
    max_size=14,
)
WORDS = ["refund", "kiwi", "INV-2024.05", "Kiwi-7", "plum"]


@settings(max_examples=examples(40))
@given(OPERATIONS)
def test_results_equal_the_tables_whatever_the_agent_did_in_between(tmp_path_factory, operations):
    path = tmp_path_factory.mktemp("v") / "agent.db"
    w = VolumeWriter(path)
    w.thread("telegram:55")
    w.thread("discord:9")
    w.memory("ana.timezone", "kiwi time")
    w.close()
    agent = Agent(path)
    agent.say("telegram:55", "refund plum")
    agent.say("discord:9", "kiwi INV-2024.05")
    everything(path, "plum")  # the index is there from the start
    for op, target, n in operations:
        text = f"{WORDS[n % len(WORDS)]} {WORDS[(n + 1) % len(WORDS)]} {n}"
        if op == "search":
            assert as_found(everything(path, target, write_index=n)) == oracle(path, [target])
        else:
            getattr(agent, op)(target, *(() if op in ("reset", "forget") else (text,)))
    for word in ("refund", "kiwi", "INV-2024.05", "Kiwi-7"):
        for write in (False, True):
            assert as_found(everything(path, word, write_index=write)) == oracle(path, [word])


@given(st.text(min_size=1, max_size=40))
def test_no_plain_query_is_an_fts5_syntax_error(text):
    try:
        parsed = parse_query(text)
    except UnusableInput:
        assert not any(c.isalnum() for c in text)
        return
    check_expression(parsed.expression)


def test_the_index_definitions_are_what_sqlite_makes_of_them(tmp_path):
    from volumetool.format import INDEX_OBJECTS, SEARCH_BUILDS, VOLUMETOOL_OBJECTS
    from volumetool.search.index import create_statements

    conn = sqlite3.connect(":memory:")
    for statement in create_statements():
        conn.execute(statement)
    assert read_schema(conn) == INDEX_OBJECTS
    for name in SEARCH_BUILDS:  # a first build
        conn.execute(f"CREATE VIRTUAL TABLE {name} USING {SEARCH_FTS5}")
    assert read_schema(conn) == VOLUMETOOL_OBJECTS
    assert SEARCH_FTS5.startswith("fts5(")

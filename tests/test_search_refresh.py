"""A later search's refresh of the index: what the agent wrote since is indexed in transactions
sized by time (`index.in_turns`), giving way to the agent after each, and each checks its part
again under the write lock, so that the agent's writes, deletions and an erase between two of
them leave the index right."""

from __future__ import annotations

import sqlite3

import pytest

from tests.support.volumes import VolumeWriter
from tests.test_lifecycle import holds
from tests.test_search import as_found, everything, oracle
from tests.test_search_build import erase_bob
from tests.test_threads import query
from volumetool import lifecycle
from volumetool import volume as volume_module
from volumetool.format import SEARCH_TABLES
from volumetool.search import index
from volumetool.volume import open_for_write

NEW = 1_500  # messages written after the index was built: well over what a first turn indexes
SECRET = "quokka4471"  # in discord:bob only, written after the index was built


@pytest.fixture
def behind(tmp_path):
    """An indexed volume, then NEW messages (a search refreshes for them) and new memories."""
    w = VolumeWriter(tmp_path / "agent.db")
    ana, bob = w.thread("telegram:ana"), w.thread("discord:bob")
    w.message(ana, "user", "an old kiwi5 message")
    w.close()
    everything(w.path, "kiwi5")  # the index is built
    conn = sqlite3.connect(w.path)
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, 'user', ?, ?)",
        [
            (
                bob if n % 2 else ana,
                f"message {n} about kiwi{n % 7} {SECRET if n % 2 else ''}",
                w.tick(),
            )
            for n in range(NEW)
        ],
    )
    conn.executemany(
        "INSERT INTO memories (key, value, created_at, updated_at) VALUES (?, ?, ?, ?)",
        [(f"ana.m{n}", f"memory {n} kiwi{n % 7}", w.tick(), w.tick()) for n in range(NEW // 3)],
    )
    conn.commit()
    conn.close()
    return w.path


def new_indexed(path) -> int:
    return query(path, "SELECT count(*) FROM search_messages_content WHERE id > 1")[0][0]


def agent_between_turns(path, monkeypatch, also=lambda: None) -> list[int]:
    """Between two of the refresh's transactions (`volume.give_way`), an agent that never
    waits (busy timeout 0: any write lock held would fail it at once) writes a message; how
    many of the new messages were indexed at each such moment."""
    agent = sqlite3.connect(path, timeout=0, isolation_level=None)
    seen: list[int] = []

    def agent_turn(seconds: float) -> None:
        agent.execute(
            "INSERT INTO messages (session_id, role, content, created_at)"
            " VALUES (1, 'user', ?, '2026-12-01T00:00:00.000Z')",
            (f"plum written between turns {len(seen)}",),
        )
        seen.append(new_indexed(path))
        also()

    monkeypatch.setattr(volume_module.time, "sleep", agent_turn)
    return seen


def test_a_refresh_gives_way_between_short_transactions_and_indexes_what_the_agent_wrote(
    behind, monkeypatch
):
    seen = agent_between_turns(behind, monkeypatch)
    assert as_found(everything(behind, "kiwi3")) == oracle(behind, ["kiwi3"])
    # the agent wrote while some of the new messages were indexed and others not yet
    assert any(0 < done < NEW for done in seen), seen
    assert seen == sorted(seen)
    monkeypatch.undo()
    assert as_found(everything(behind, "plum", write_index=False)) == oracle(behind, ["plum"])
    count = "SELECT count(*) FROM search_messages_content"
    last = "SELECT count(*) FROM messages WHERE id < (SELECT max(id) FROM messages)"
    assert query(behind, count) == query(behind, last)  # all but what came after the last turn
    assert query(behind, "SELECT value FROM search_state WHERE name = 'messages'") == query(
        behind, count
    )
    texts = "SELECT count(*) FROM search_texts_content"
    assert query(behind, texts) == query(behind, "SELECT count(*) FROM memories")


def test_an_erase_between_two_turns_of_a_refresh_leaves_no_byte_of_the_erased_text(
    behind, monkeypatch
):
    """The refresh found bob's new messages lacking in a snapshot before the erase; the turns
    after it must not index them."""
    erased: list[bool] = []

    def erase_once() -> None:
        if not erased:
            erase_bob(behind)
            erased.append(True)

    seen = agent_between_turns(behind, monkeypatch, erase_once)
    everything(behind, "kiwi3")
    assert erased and len(seen) > 1
    monkeypatch.undo()
    assert holds(behind, SECRET) == []
    for word in ("kiwi3", "plum", SECRET):
        assert as_found(everything(behind, word, write_index=False)) == oracle(behind, [word])


def test_memories_changed_and_forgotten_between_turns_are_indexed_as_they_are_now(
    behind, monkeypatch
):
    """The memories the index lacks are found in a snapshot and indexed a slice a turn: one
    forgotten and one changed after the snapshot are indexed as the volume has them."""
    changed: list[bool] = []

    def change_once() -> None:
        if not changed:
            agent = sqlite3.connect(behind, isolation_level=None)
            agent.execute("DELETE FROM memories WHERE key = ?", (f"ana.m{NEW // 3 - 1}",))
            agent.execute("UPDATE memories SET value = 'now plum' WHERE key = 'ana.m400'")
            agent.close()
            changed.append(True)

    agent_between_turns(behind, monkeypatch, change_once)
    everything(behind, "kiwi3")
    assert changed
    monkeypatch.undo()
    texts = "SELECT count(*) FROM search_texts_content"
    assert query(behind, texts) == query(behind, "SELECT count(*) FROM memories")
    for word in ("kiwi3", "plum", "memory"):
        assert as_found(everything(behind, word, write_index=False)) == oracle(behind, [word])


def test_the_index_is_merged_down_in_short_transactions_and_the_agent_writes_between(
    behind, monkeypatch
):
    """An erase's scrub merges the index down to one segment (its older ones still hold the
    words) a few pages a transaction, as FTS5's 'optimize' would in one."""
    everything(behind, "kiwi3")  # refreshed in many transactions: many segments
    monkeypatch.setattr(index, "FIRST", 1)  # a page a transaction
    monkeypatch.setattr(volume_module, "WORK_SECONDS", 0)
    seen = agent_between_turns(behind, monkeypatch)
    with open_for_write(behind, lock=False) as volume:
        index.merge_all(volume)
    monkeypatch.undo()
    assert len(seen) > 2 * len(SEARCH_TABLES)  # more than a transaction a table
    conn = sqlite3.connect(behind)
    for name in SEARCH_TABLES:  # nothing left to merge: it is one segment
        before = conn.total_changes
        conn.execute(f"INSERT INTO {name} ({name}, rank) VALUES ('merge', -1000000)")
        assert conn.total_changes - before < 2
    conn.close()
    for word in ("kiwi3", "plum", "memory"):
        assert as_found(everything(behind, word, write_index=False)) == oracle(behind, [word])


def test_an_erase_whose_merge_another_refresh_interrupts_still_leaves_no_byte_of_it(
    tmp_path, monkeypatch
):
    """Another search's refresh writes two segments of its own between two turns of an
    erase's merge (fewer than FTS5 merges on their own, as many as the merge begun has
    inputs): the merge must still be carried to its end, or the older segment, which holds
    the erased words, stays in the index."""
    w = VolumeWriter(tmp_path / "agent.db")
    ana, zed = w.thread("telegram:ana"), w.thread("slack:zed")
    for n in range(1_000):
        w.message(ana, "user", f"message {n} about kiwi{n % 7}")
    w.message(zed, "user", "the zanzibar7781 code")
    w.close()
    everything(w.path, "kiwi3")  # the index is built
    conn = sqlite3.connect(w.path, isolation_level=None)
    conn.execute(
        "INSERT INTO messages (session_id, role, content, created_at)"
        " VALUES (?, 'user', 'a later plum', '2026-12-01T00:00:00.000Z')",
        (ana,),
    )
    conn.execute("BEGIN IMMEDIATE")
    index.append(conn, 1)  # a second segment, on the same level
    conn.execute("COMMIT")
    for name in SEARCH_TABLES:  # as an earlier erase left it: one segment, a level up
        conn.execute(f"INSERT INTO {name} ({name}, rank) VALUES ('merge', -1000000)")
    conn.close()
    assert holds(w.path, "zanzibar7781")
    merging: list[bool] = []
    merge_all = index.merge_all

    def merge_watched(volume):
        merging.append(True)
        merge_all(volume)

    def refresh_elsewhere(seconds: float) -> None:
        if merging == [True]:  # after the merge's first turn
            merging.append(False)
            other = sqlite3.connect(w.path, isolation_level=None)
            for n in range(2):
                other.execute(
                    "INSERT INTO messages (session_id, role, content, created_at)"
                    " VALUES (?, 'user', ?, '2026-12-01T00:00:00.000Z')",
                    (ana, f"plum written during the merge {n}"),
                )
                other.execute("BEGIN IMMEDIATE")
                index.append(other, 1)
                other.execute("COMMIT")
            other.close()

    monkeypatch.setattr(index, "merge_all", merge_watched)
    monkeypatch.setattr(index, "FIRST", 1)  # a page a transaction
    monkeypatch.setattr(volume_module, "WORK_SECONDS", 0)
    monkeypatch.setattr(volume_module.time, "sleep", refresh_elsewhere)
    with open_for_write(w.path, lock=True) as volume:
        lifecycle.erase(volume, ["slack:zed"], [])
    monkeypatch.undo()
    assert merging == [True, False]
    assert holds(w.path, "zanzibar7781") == []
    for word in ("kiwi3", "plum"):
        assert as_found(everything(w.path, word, write_index=False)) == oracle(w.path, [word])

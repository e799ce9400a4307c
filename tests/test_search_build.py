"""The first build of the search index: the tokenizing done off the volume's write lock, the
finished index copied in short transactions and renamed, and given up (then built the slow
way) when the agent deleted or replaced a message meanwhile, or an erase came."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from tests.support.volumes import VolumeWriter
from tests.test_lifecycle import holds
from tests.test_search import as_found, everything, oracle
from tests.test_threads import query
from volumetool import volume as volume_module
from volumetool.format import SEARCH_BUILDS, SEARCH_FTS5
from volumetool.search import index
from volumetool.search.find import SearchRequest, search

FILL = 500  # messages a fill statement reads, here
MESSAGES = 2 * FILL + 300  # three fill statements
PASSPORT = "zanzibar88990"  # one word, in discord:bob only: the index's own pages hold it whole


@pytest.fixture
def big(tmp_path, monkeypatch):
    monkeypatch.setattr(index, "FILL", FILL)
    w = VolumeWriter(tmp_path / "agent.db")
    a = w.thread("telegram:ana", summary="a summary of kiwi5 talk")
    b = w.thread("discord:bob")
    w.memory("ana.fruit", "likes kiwi5 best")
    w.message(b, "user", f"my passport is {PASSPORT}")
    w.conn.executemany(
        "INSERT INTO messages (session_id, role, content, created_at) VALUES (?, ?, ?, ?)",
        [
            (a if n % 2 else b, "user", f"message {n} about kiwi{n % 97}", w.tick())
            for n in range(MESSAGES)
        ],
    )
    w.close()
    return w.path


def agent(path) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=0, isolation_level=None)  # never waits


def steps(path, on_step) -> list[tuple[int, int]]:
    """A first search of `path`, calling `on_step(done, total)` at each step of the build."""
    seen: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        on_step(done, total)

    search(path, SearchRequest("kiwi5", limit=None), progress=progress)
    return seen


def test_the_agent_can_write_at_once_while_the_index_is_filled_and_its_writes_are_indexed(big):
    writes = []

    def write(done: int, total: int) -> None:
        # SQLite's own wait is 0: any write lock held by the build would fail this at once.
        agent(big).execute(
            "INSERT INTO messages (session_id, role, content, created_at)"
            " VALUES (1, 'user', ?, '2026-01-01T00:00:00Z')",
            (f"written during step {len(writes)} plum",),
        )
        writes.append(done)

    seen = steps(big, write)
    assert seen[-1][0] == seen[-1][1]  # it went to the end
    assert [done for done, _ in seen[:3]] == [FILL, 2 * FILL, MESSAGES + 1]
    assert len(writes) > 3  # the fill, then the copy, step by step
    assert as_found(everything(big, "plum")) == oracle(big, ["plum"]) != set()
    kinds = {found[0] for found in oracle(big, ["kiwi5"])}
    assert kinds == {"message", "summary", "memory"}
    assert as_found(everything(big, "kiwi5", write_index=False)) == oracle(big, ["kiwi5"])
    assert query(big, "SELECT count(*) FROM search_texts_content") == [(2,)]
    count = "SELECT count(*) FROM search_messages_content"
    assert query(big, count) == query(big, "SELECT count(*) FROM messages")
    assert query(big, "SELECT value FROM search_state WHERE name = 'messages'") == query(big, count)
    names = "SELECT name FROM sqlite_master WHERE name LIKE ?"
    assert query(big, names, "search_build%") == []
    assert index.index_state(sqlite3.connect(big)) == "present"


@pytest.mark.parametrize("when", ["filling", "copying"])
@pytest.mark.parametrize("change", ["delete", "replace the highest"])
def test_a_message_deleted_or_replaced_during_the_build_leaves_no_stale_text(big, when, change):
    happened = []

    def change_once(done: int, total: int) -> None:
        if happened or (done <= total // 2) != (when == "filling"):
            return
        conn = agent(big)
        if change == "delete":
            conn.execute("DELETE FROM messages WHERE content = 'message 7 about kiwi7'")
        else:
            top = conn.execute("SELECT max(id) FROM messages").fetchone()[0]
            conn.execute("DELETE FROM messages WHERE id = ?", (top,))
            conn.execute(
                "INSERT INTO messages (id, session_id, role, content, created_at)"
                " VALUES (?, 1, 'user', 'a new text in a reused id', '2026-01-01T00:00:00Z')",
                (top,),
            )
        happened.append(done)

    steps(big, change_once)
    assert happened
    stale = (
        "SELECT count(*) FROM search_messages_content c LEFT JOIN messages m ON m.id = c.id"
        " WHERE m.content IS NOT c.c0"
    )
    assert query(big, stale) == [(0,)]
    for word in ("kiwi7", "reused", "kiwi96"):
        assert as_found(everything(big, word, write_index=False)) == oracle(big, [word])


def test_an_erase_during_the_build_drops_it_and_no_byte_of_the_erased_text_stays(big):
    marker = "message 8 about kiwi8"  # in discord:bob (even numbers)
    erased = []

    def erase_once(done: int, total: int) -> None:
        if erased or done <= total // 2:
            return  # while the copy is under way
        result = subprocess.run(
            [sys.executable, "-m", "volumetool", "erase", big, "--key", "discord:bob", "--yes"],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
        erased.append(done)

    steps(big, erase_once)
    assert erased
    assert holds(big, marker) == []
    assert as_found(everything(big, "kiwi8")) == oracle(big, ["kiwi8"])


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_what_a_killed_build_left_is_accepted_by_check_and_dropped_by_the_next_build(
    big, run_cli, journal
):
    """With a rollback journal the next index is built another way (in write transactions
    sized by time): what a killed build left goes all the same."""
    conn = sqlite3.connect(big)
    conn.execute(f"PRAGMA journal_mode = {journal}")
    conn.execute(f"CREATE VIRTUAL TABLE {SEARCH_BUILDS[0]} USING {SEARCH_FTS5}")
    conn.execute(f"INSERT INTO {SEARCH_BUILDS[0]} (rowid, text) VALUES (1, 'half a copy')")
    conn.commit()
    conn.close()
    assert run_cli("check", big).exit_code == 0
    assert run_cli("search", big, "kiwi3").exit_code == 0
    names = "SELECT name FROM sqlite_master WHERE name LIKE ?"
    assert query(big, names, "search_build%") == []
    assert holds(big, "half a copy") == []
    assert as_found(everything(big, "kiwi3")) == oracle(big, ["kiwi3"])


def erase_bob(path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "volumetool", "erase", path, "--key", "discord:bob", "--yes"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_an_erase_between_the_snapshot_and_the_copy_gives_the_build_up(big, monkeypatch):
    """The words were read before the erase, the copy starts after its scrub was done: the
    copy must not bring them back."""
    copy = index._Build.copy

    def erase_first(self):
        erase_bob(big)
        return copy(self)

    monkeypatch.setattr(index._Build, "copy", erase_first)
    assert holds(big, PASSPORT)
    search(big, SearchRequest("kiwi8", limit=None))
    assert holds(big, PASSPORT) == []
    assert as_found(everything(big, "kiwi8")) == oracle(big, ["kiwi8"])


def test_a_build_whose_tables_another_build_took_copies_nothing_more(big):
    """Two first searches at once: the second takes the tables of the first (as it would a
    killed build's); the first must give up, not copy on into the second's."""
    from volumetool.volume import Volume

    with Volume(big, readonly=False) as one, Volume(big, readonly=False) as two:
        first, second = (index._Build(v, lambda done, total: None) for v in (one, two))
        for build in (first, second):
            build.copier.conn.execute("ATTACH DATABASE '' AS scratch")
            build.fill()
        assert first.start()
        copying = first.copy_rows(f"{SEARCH_BUILDS[0]}_content", "id")
        assert next(copying)  # its first rows
        assert second.start()
        assert next(copying) is None  # not into the second's tables
        assert second.copy()
    assert as_found(everything(big, "kiwi3", write_index=False)) == oracle(big, ["kiwi3"])
    conn = sqlite3.connect(big)
    assert (
        conn.execute(
            "INSERT INTO search_messages (search_messages, rank) VALUES ('integrity-check', 1)"
        ).fetchall()
        == []
    )
    count = "SELECT count(*) FROM search_messages_content"
    assert query(big, count) == query(big, "SELECT count(*) FROM messages")


def test_with_a_rollback_journal_the_first_build_holds_the_agent_up_one_batch_at_most(
    big, monkeypatch
):
    """A reader of a file with a rollback journal holds every commit of the agent off while it
    reads: a fill of the whole volume in one snapshot would hold the agent up for as long as
    the tokenizing takes (seconds on a large volume, past its busy timeout). There the index is
    built as a refresh keeps it, in write transactions sized by time (the first of
    `index.FIRST` messages, then at most twice the one before), and the agent writes between
    any two of them."""
    sqlite3.connect(big).execute("PRAGMA journal_mode = DELETE").close()
    writes, locked_out = [], []

    def write(*_: object) -> None:
        # SQLite's own wait is 0: any lock held by the search would fail this at once.
        try:
            agent(big).execute(
                "INSERT INTO messages (session_id, role, content, created_at)"
                " VALUES (1, 'user', ?, '2026-01-01T00:00:00Z')",
                (f"written during step {len(writes)} plum",),
            )
        except sqlite3.OperationalError as exc:
            locked_out.append(str(exc))
        else:
            writes.append(True)

    monkeypatch.setattr(volume_module.time, "sleep", write)  # volume.give_way, after each
    steps(big, write)
    assert locked_out == []
    assert len(writes) > MESSAGES // 300  # between every two transactions
    assert as_found(everything(big, "plum")) == oracle(big, ["plum"]) != set()
    assert as_found(everything(big, "kiwi5", write_index=False)) == oracle(big, ["kiwi5"])
    names = "SELECT name FROM sqlite_master WHERE name LIKE ?"
    assert query(big, names, "search_build%") == []
    assert query(big, "PRAGMA journal_mode") == [("delete",)]

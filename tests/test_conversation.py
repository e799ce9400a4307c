"""transcript as a conversation: the text view and Markdown (pure), the command on and off a
terminal (pager, colour), and golden files of demo threads (`make golden` rewrites them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options
from hypothesis import event, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from wcwidth import wcswidth

from tests.conftest import assert_clean_error
from tests.support import docs
from tests.support.volumes import VolumeWriter
from tests.test_cli import wait_for
from volumetool import demo
from volumetool.cli import terminal
from volumetool.conversation import ViewOptions, markdown, text_lines

GOLDEN = Path(__file__).parent / "data" / "golden"
HEADER = re.compile(r"^(┊ )?(──|══) ")
# What a terminal must never receive raw (the controls of SPEC's "Terminal safety").
RAW_CONTROL = re.compile(
    r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
ESC = "\x1b"


def msg(n, role, content="", *, calls=None, answers=None, folded_by=None, stamp=None):
    return {
        "id": n,
        "role": role,
        "content": content,
        "tool_calls": calls,
        "tool_call_id": answers,
        "created_at": stamp or f"2026-11-29T22:{n % 60:02d}:07.120Z",
        "folded_by": folded_by,
    }


def summary(content, folded_by=None):
    return {
        "id": None,
        "role": "summary",
        "content": content,
        "tool_calls": None,
        "tool_call_id": None,
        "created_at": None,
        "folded_by": folded_by,
    }


def call(call_id, name, **arguments):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def view(rows, **options) -> list[str]:
    return list(text_lines(rows, ViewOptions(**options)))


def headers(lines: list[str]) -> list[str]:
    return [line for line in lines if HEADER.match(line)]


# --- the text view ------------------------------------------------------------------------


def test_each_message_has_a_header_with_role_time_and_id_and_an_indented_body():
    lines = view([msg(391, "user", "Standup is at 09:30 now.", stamp="2026-11-29T22:23:45.678Z")])
    assert lines == ["── user · 2026-11-29 22:23 UTC · #391", "  Standup is at 09:30 now."]


def test_text_is_wrapped_to_the_width_at_spaces_and_nothing_is_lost():
    words = [f"word{n}" for n in range(200)]
    lines = view([msg(1, "assistant", " ".join(words))], width=50)
    body = lines[1:]
    assert len(body) > 10
    assert all(len(line) <= 50 and line.startswith("  ") for line in body)
    assert " ".join(line.strip() for line in body).split() == words


def test_line_breaks_of_the_content_are_kept():
    lines = view([msg(1, "assistant", "Here's a draft:\n\n- one\n- two")])
    assert lines[1:] == ["  Here's a draft:", "", "  - one", "  - two"]


def test_a_tool_call_is_one_line_and_its_result_sits_under_it():
    rows = [
        msg(1, "user", "Remember my standup time."),
        msg(
            2,
            "assistant",
            calls=[call("c1", "remember", key="dalia-3.standup_time", value="09:30")],
        ),
        msg(3, "tool", "Remembered dalia-3.standup_time.", answers="c1"),
        msg(4, "assistant", "Done."),
    ]
    lines = view(rows)
    at = lines.index("── assistant · 2026-11-29 22:02 UTC · #2")
    assert lines[at + 1] == '  → remember(key="dalia-3.standup_time", value="09:30")'
    assert lines[at + 2] == "    ← Remembered dalia-3.standup_time."
    assert not any("#3" in line for line in headers(lines)), "the result has no block of its own"


def test_long_arguments_are_shortened_unless_full_args():
    text = "a fact that goes on and on " * 10
    rows = [msg(1, "assistant", calls=[call("c1", "remember", key="k", value=text)])]
    short = view(rows, width=400)[1]
    assert short.startswith('  → remember(key="k", value="a fact that goes on')
    assert short.endswith('…")') and len(short) < 100
    whole = view(rows, width=400, full_args=True)[1]
    assert whole == f"  → remember(key={json.dumps('k')}, value={json.dumps(text)})"


def test_results_are_matched_by_call_id_wherever_they_arrive():
    rows = [
        msg(1, "tool", "result of b (arrived first)", answers="b"),
        msg(2, "assistant", calls=[call("a", "first"), call("b", "second")]),
        msg(3, "user", "in between"),
        msg(4, "tool", "result of a (arrived late)", answers="a"),
    ]
    lines = view(rows)
    assert lines[1:5] == [
        "  → first()",
        "    ← result of a (arrived late)",
        "  → second()",
        "    ← result of b (arrived first)",
    ]
    assert [h.split(" · ")[0] for h in headers(lines)] == ["── assistant", "── user"]


def test_a_call_without_a_result_says_so():
    lines = view([msg(1, "assistant", calls=[call("a", "read_file", path="x")])])
    assert lines[2] == "    ← (no result in this transcript)"


def test_a_result_whose_call_is_missing_is_shown_and_marked_orphaned():
    lines = view([msg(1, "user", "hi"), msg(2, "tool", "42 rows deleted", answers="call_gone")])
    assert lines[-2] == (
        "── tool · 2026-11-29 22:02 UTC · #2 · orphaned result: no call call_gone"
        " in this transcript"
    )
    assert lines[-1] == "  ← 42 rows deleted"


def test_a_thread_of_only_tool_messages_shows_every_result_marked():
    rows = [msg(n, "tool", f"output {n}", answers=f"c{n}") for n in range(1, 4)]
    rows.append(msg(4, "tool", "no id at all"))
    lines = view(rows)
    assert len(headers(lines)) == 4
    assert all("orphaned result" in header for header in headers(lines))
    assert [line for line in lines if line.startswith("  ← ")] == [
        "  ← output 1",
        "  ← output 2",
        "  ← output 3",
        "  ← no id at all",
    ]


@pytest.mark.parametrize(
    ("tool_calls", "shown"),
    [
        ('[{"id": "x", "function": {"name": "rea', '[{"id": "x", "function": {"name": "rea'),
        ({"name": "not a list"}, '{"name": "not a list"}'),
    ],
)
def test_malformed_tool_calls_are_shown_raw_and_marked(tool_calls, shown):
    lines = view([msg(1, "assistant", "", calls=tool_calls)])
    assert lines[0].endswith(" · malformed tool_calls, shown raw")
    assert lines[1] == f"  {shown}"


def test_a_call_that_is_not_a_call_or_has_arguments_that_are_not_json_is_marked():
    bad_arguments = {"id": "c", "function": {"name": "run", "arguments": "{oops"}}
    lines = view([msg(1, "assistant", calls=[42, bad_arguments])])
    assert lines[1] == "  → 42  [not a tool call, shown raw]"
    assert lines[2] == "  → run({oops)  [arguments are not JSON, shown raw]"


def test_the_summary_is_marked_as_such():
    lines = view([summary("Earlier: Dalia moved standup to 09:30."), msg(5, "user", "ok")])
    assert lines[:3] == ["══ summary", "  Earlier: Dalia moved standup to 09:30.", ""]


def test_folded_messages_stand_apart_behind_a_gutter_without_colour():
    # Today's order: the current summary first, then every message, folded ones marked.
    rows = [
        summary("S"),
        msg(1, "user", "old question", folded_by=7),
        msg(2, "assistant", "old answer", folded_by=7),
        msg(3, "user", "new question"),
    ]
    lines = view(rows)
    assert lines == [
        "══ summary",
        "  S",
        "",
        "┊ ── user · 2026-11-29 22:01 UTC · #1 · folded by run #7",
        "┊   old question",
        "┊",
        "┊ ── assistant · 2026-11-29 22:02 UTC · #2 · folded by run #7",
        "┊   old answer",
        "",
        "── user · 2026-11-29 22:03 UTC · #3",
        "  new question",
    ]


def test_summary_history_reads_in_order_each_fold_then_its_summary():
    # SPEC section 10's order: each folded stretch, then the summary that replaced it (itself
    # folded into the next summary), the current summary just before the live messages.
    rows = [
        msg(1, "user", "first", folded_by=7),
        summary("S1", folded_by=9),
        msg(2, "user", "second", folded_by=9),
        summary("S2"),
        msg(3, "user", "live"),
    ]
    lines = view(rows)
    gutter = [h for h in headers(lines) if h.startswith("┊")]
    assert gutter == [
        "┊ ── user · 2026-11-29 22:01 UTC · #1 · folded by run #7",
        "┊ ══ summary · superseded by run #9",
        "┊ ── user · 2026-11-29 22:02 UTC · #2 · folded by run #9",
    ]
    assert "══ summary" in lines and lines[lines.index("══ summary") + 1] == "  S2"
    folded_stretch = lines[: lines.index("══ summary") - 1]
    assert all(line.startswith("┊") for line in folded_stretch)


def test_colour_by_role_and_dim_folded_messages_only_when_asked():
    rows = [msg(1, "user", "old", folded_by=3), msg(2, "assistant", "new")]
    plain = view(rows)
    assert not any(ESC in line for line in plain)
    coloured = view(rows, color=True)
    assert all(line.startswith("\x1b[2m") for line in coloured[:2]), "folded: dim from the gutter"
    assert "\x1b[1;32m── assistant" in coloured[3]
    assert re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(coloured)) == "\n".join(plain)


def test_an_empty_thread_says_so():
    assert view([]) == ["(no messages)"]
    assert view([msg(1, "user", "")]) == ["── user · 2026-11-29 22:01 UTC · #1", "  (empty)"]
    assert markdown([]) == "*No messages.*\n"


WIDE = "日本語で返信する。" * 8


def display(line: str) -> int:
    return wcswidth(line)


def test_wide_characters_wrap_by_display_width():
    lines = view([msg(1, "user", WIDE)], width=30)
    body = lines[1:]
    assert all(display(line) <= 30 for line in body)
    assert max(display(line) for line in body) >= 27, "lines are filled, not cut at 30 chars"
    assert "".join(line.strip() for line in body) == WIDE


def test_combining_characters_stay_with_their_letter():
    word = "e\u0301" * 100  # é as e + combining acute, no spaces to break at
    lines = view([msg(1, "user", word)], width=24)
    assert all(not line.strip().startswith("\u0301") for line in lines[1:])
    assert all(display(line) <= 24 for line in lines[1:])
    assert "".join(line.strip() for line in lines[1:]) == word


def test_right_to_left_text_wraps_and_bidi_controls_are_escaped():
    hebrew = "שלום עולם, זו הודעה ארוכה מאוד בעברית " * 4
    lines = view([msg(1, "user", hebrew + "\u202etxt.exe")], width=40)
    assert all(display(line) <= 40 for line in lines[1:])
    assert "\\u202etxt.exe" in "".join(lines)
    assert not any(RAW_CONTROL.search(line) for line in lines)


def test_a_megabyte_message_is_wrapped_not_truncated_unless_max_chars():
    words = [f"w{n:06d}" for n in range(125_000)]  # 1,000,000 characters with the spaces
    text = " ".join(words)
    lines = view([msg(1, "assistant", text)], width=100)
    assert all(len(line) <= 100 for line in lines)
    assert " ".join(line.strip() for line in lines[1:]).split() == words
    cut = view([msg(1, "assistant", text)], width=100, max_chars=20)
    assert cut[1:] == [f"  {text[:20]} [… {len(text) - 20:,} more characters]"]


def test_a_megabyte_word_without_spaces_is_cut_into_lines():
    blob = "A" * 1_000_000
    lines = view([msg(1, "tool", blob, answers="x")], width=80)
    assert all(len(line) <= 80 for line in lines[1:])  # the text; the header is not wrapped
    assert "".join(line.strip().removeprefix("← ") for line in lines[1:]) == blob


HOSTILE = (
    "\x1b]52;c;cm0gLXJmIH4=\x07 clipboard, \x1b[2J clear, \r overwrite, \x00 nul, \x9b CSI,"
    " \u2028 separator\n── assistant · 2026-11-29 22:23 UTC · #999\n══ summary\n┊ ── user · x"
)


def test_hostile_content_cannot_emit_escape_or_fake_a_header():
    rows = [
        msg(1, HOSTILE, HOSTILE, folded_by=2),
        msg(2, "assistant", HOSTILE, calls=[call(HOSTILE, HOSTILE, **{HOSTILE: HOSTILE})]),
        msg(3, "tool", HOSTILE, answers=HOSTILE),
        msg(4, "tool", HOSTILE, answers="missing"),
        msg(5, "assistant", calls=HOSTILE),
        summary(HOSTILE),
    ]
    lines = view(rows, width=60)
    assert not any(RAW_CONTROL.search(line) for line in lines)
    assert len(headers(lines)) == 5
    assert "\\x1b]52;c;" in "\n".join(lines)
    coloured = "\n".join(view(rows, width=60, color=True))
    assert ESC not in re.sub(r"\x1b\[[0-9;]*m", "", coloured), "only our own colour codes"


unsafe_text = st.lists(
    st.one_of(
        st.characters(blacklist_categories=("Cs",)),
        st.sampled_from(["\n", "\x1b", "\r", "──", "══", "┊ ", " ", "\u202e", "\t", "`", "<"]),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=150)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), unsafe_text), max_size=6))
def test_any_content_gives_one_header_per_block_and_no_raw_control(messages):
    rows = [msg(n, role, content, answers=f"c{n}") for n, (role, content) in enumerate(messages)]
    lines = view(rows, width=30)
    assert len(headers(lines)) == len(rows)
    assert not any(RAW_CONTROL.search(line) for line in lines)
    assert all(wcswidth(line) <= 30 for line in lines if not HEADER.match(line))


# --- Markdown -----------------------------------------------------------------------------

COMMONMARK = MarkdownIt("commonmark").enable(["table", "strikethrough"])  # HTML on, as GitHub


def tokens(document: str):
    for token in COMMONMARK.parse(document):
        yield token
        yield from token.children or ()


MD_HOSTILE = (
    "<script>alert(1)</script> <img src=x onerror=alert(1)> &lt;b&gt; &amp;\n"
    "# not a heading\n"
    "```\nnot a fence\n"
    "> not a quote\n- not a list\n1. not a list\n---\n"
    "| a | b |\n|---|---|\n"
    "[link](javascript:alert(1)) ![img](x) <http://x> *em* __strong__ ~~del~~ `code`\n"
    "    not code\n"
    "[ref]: http://example.com\n"
    "text\n===\n"
)


def test_markdown_renders_no_html_no_link_and_no_block_from_the_content():
    rows = [
        msg(1, "user", MD_HOSTILE),
        msg(2, "assistant", MD_HOSTILE, calls=[call("c`1", "run", cmd="a ``` b `` c")]),
        msg(3, "tool", MD_HOSTILE, answers="c`1"),
        msg(4, "tool", "one line with ``` and <b>", answers="gone"),
        msg(5, "assistant", calls="not json ``` <b>"),
    ]
    document = markdown(rows, title="<b>key</b> #")
    kinds = {token.type for token in tokens(document)}
    assert not kinds & {"html_block", "html_inline", "link_open", "image", "table_open", "s_open"}
    assert not kinds & {"em_open", "strong_open", "blockquote_open", "bullet_list_open"} - {
        "bullet_list_open"  # the tool calls are a list of our own
    }
    headings = [t for t in COMMONMARK.parse(document) if t.type == "heading_open"]
    assert [h.tag for h in headings] == ["h1"] + ["h2"] * 4
    assert document.startswith("# &lt;b>key&lt;/b> \\#\n")
    html = COMMONMARK.render(document)
    assert "<script" not in html and "<img" not in html and 'href="javascript' not in html


def test_markdown_keeps_the_structure_of_the_text_view():
    rows = [
        summary("Earlier: weekly reports."),
        msg(1, "user", "Remember that standup is at 09:30", folded_by=7),
        msg(2, "assistant", calls=[call("c1", "remember", key="standup_time", value="09:30")]),
        msg(3, "tool", "Remembered standup_time.", answers="c1"),
        msg(4, "tool", "pool_size = 50\nlog_level = debug", answers="c2"),
    ]
    document = markdown(rows, title="discord:1/2")
    assert document.split("\n\n")[:4] == [
        "# discord:1/2",
        "## summary",
        "Earlier: weekly reports.",
        "> ## user · 2026-11-29 22:01 UTC · #1 · folded by run #7\n>\n"
        "> Remember that standup is at 09:30",
    ]
    assert (
        '- → `remember(key="standup_time", value="09:30")`\\\n  ← `Remembered standup_time.`'
        in document
    )
    assert "orphaned result: no call c2 in this transcript\n\n```\npool_size = 50" in document


def paragraph_text(document: str) -> str:
    """The text a reader sees in the body paragraphs of a one-message document."""
    out = []
    inside = False
    for token in COMMONMARK.parse(document):
        if token.type == "paragraph_open":
            inside = True
        elif token.type == "paragraph_close":
            inside = False
            out.append("\n\n")
        elif inside and token.type == "inline":
            for child in token.children or ():
                out.append("\n" if child.type in ("hardbreak", "softbreak") else child.content)
    return "".join(out)


def normal(text: str) -> str:
    """Paragraph text as a reader compares it: one blank line between paragraphs, no trailing
    spaces, non-breaking spaces read as spaces."""
    lines = [line.rstrip(" ").replace("\xa0", " ") for line in text.replace("\t", " ").split("\n")]
    return re.sub(r"\n{2,}", "\n\n", "\n".join(lines)).strip("\n")


markdown_text = st.lists(
    st.one_of(
        st.characters(codec="ascii", exclude_categories=("Cc",)),
        st.sampled_from(["\n", "\n\n", "é", "日本", "\u05d0", "  ", "&nbsp;", "&#60;", "```"]),
        st.sampled_from([*"*_#>-+=.)[]()<>&|~`!\\:", "1.", "a", " "]),
        st.sampled_from(["://", "https://x.io", "www.", "WWW.", "evil.com", "@", "mailto:"]),
    ),
    min_size=1,
    max_size=40,
).map("".join)


def github(document: str) -> str:
    """The document as GitHub's renderer makes it HTML, before GitHub's sanitizer."""
    return cmarkgfm.github_flavored_markdown_to_html(document, options=Options.CMARK_OPT_UNSAFE)


# A bare e-mail address (or mailto:, xmpp:) GitHub links whatever is escaped; the docs say so.
GITHUB_LINK = re.compile(r'<a href="(?!mailto:|xmpp:)|<img|<script', re.I)


@settings(max_examples=300)
@given(markdown_text)
def test_markdown_text_is_no_link_on_github(content):
    """What GitHub's Markdown links without brackets (`https://…`, `www.…`) stays text."""
    linkable = re.search(r"(?i)[a-z]://|(?<![a-z0-9])www\.", content) is not None
    event(f"a scheme's :// or www. in the content: {linkable}")
    html = github(markdown([msg(1, "user", content)]))
    assert not GITHUB_LINK.search(html), html


@settings(max_examples=300)
@given(markdown_text)
def test_markdown_text_renders_as_exactly_the_content(content):
    document = markdown([msg(1, "user", content)])
    kinds = {token.type for token in tokens(document)}
    assert not kinds & {"html_block", "html_inline", "link_open", "image", "code_block", "fence"}
    assert [t.type for t in COMMONMARK.parse(document)][:3] == [
        "heading_open",
        "inline",
        "heading_close",
    ]
    assert sum(t.type == "heading_open" for t in COMMONMARK.parse(document)) == 1
    assert normal(paragraph_text(document)) == normal(content.expandtabs(8))


@settings(max_examples=200)
@given(markdown_text)
def test_markdown_code_holds_exactly_the_call_and_the_results(content):
    one_line = content.replace("\n", " ")
    rows = [
        msg(1, "assistant", calls=[call("c", "run", arg=content)]),
        msg(2, "tool", content, answers="c"),
        msg(3, "tool", one_line, answers="gone"),
    ]
    document = markdown(rows, ViewOptions(full_args=True))
    code = [t.content for t in tokens(document) if t.type in ("code_inline", "fence")]
    result = content + "\n" if "\n" in content else content
    assert code == [f"run(arg={json.dumps(content, ensure_ascii=False)})", result, one_line]


def test_markdown_escapes_control_characters_too():
    rows = [msg(1, "user", HOSTILE), msg(2, "tool", HOSTILE, answers="x")]
    document = markdown(rows, title=HOSTILE)
    assert not RAW_CONTROL.search(document.replace("\n", ""))
    assert "\\x1b]52;c;" in document


# --- terminal decisions (pure) ------------------------------------------------------------


def test_ago_reads_like_a_person_would_say_it():
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert terminal.ago("2026-11-30T11:59:15.000Z", now) == "45 s ago"
    assert terminal.ago("2026-11-30T11:48:00.000Z", now) == "12 min ago"
    assert terminal.ago("2026-11-30T09:00:00.000Z", now) == "3 h ago"
    assert terminal.ago("2026-11-27T12:00:00.000Z", now) == "3 d ago"
    assert terminal.ago("2026-08-01T12:00:00.000Z", now) == "2026-08-01"
    assert terminal.ago("2026-12-01T12:00:00.000Z", now) == "2026-12-01"  # a clock ahead
    assert terminal.ago("yesterday\x1b[2J", now) == "yesterday\\x1b[2J"
    assert terminal.ago(None, now) is None


def test_sessions_rows_for_a_terminal_have_separators_and_relative_times():
    row = {
        "id": 12345,
        "conversation_key": "discord:\x1b[2J",
        "turns": 1200,
        "messages": 4321,
        "has_summary": True,
        "last_input_tokens": 52310,
        "compactions": 0,
        "created_at": "2026-11-30T09:00:00.000Z",
        "updated_at": None,
    }
    shown = terminal.humane_session(row, datetime(2026, 11, 30, 12, 0, tzinfo=UTC))
    assert shown == row | {
        "conversation_key": "discord:\\x1b[2J",
        "turns": "1,200",
        "messages": "4,321",
        "last_input_tokens": "52,310",
        "compactions": "0",
        "created_at": "3 h ago",
    }


@pytest.mark.parametrize(
    ("env", "pager"),
    [
        ({"VOLUMETOOL_PAGER": "most", "PAGER": "more"}, "most"),
        ({"PAGER": "more -s"}, "more -s"),
        ({"VOLUMETOOL_PAGER": "", "PAGER": "more"}, None),  # set but empty: no pager, as git
        ({"PAGER": "cat"}, None),
        ({"TERM": "dumb"}, None),
    ],
)
def test_the_pager_is_chosen_the_way_git_chooses_it(env, pager):
    assert terminal.pager_command(env) == pager


def test_the_default_pager_is_less_with_frx_where_less_exists():
    expected = "less -FRX" if shutil.which("less") else None
    assert terminal.pager_command({"TERM": "xterm"}) == expected


@pytest.mark.parametrize(
    ("choice", "tty", "env", "colour"),
    [
        ("auto", True, {}, True),
        ("auto", False, {}, False),
        ("auto", True, {"NO_COLOR": "1"}, False),
        ("auto", True, {"NO_COLOR": ""}, True),  # no-color.org: set and not empty
        ("auto", True, {"TERM": "dumb"}, False),
        ("always", False, {"NO_COLOR": "1"}, True),  # the flag outranks the variable
        ("never", True, {}, False),
    ],
)
def test_colour_follows_color_and_no_color(choice, tty, env, colour):
    assert terminal.use_color(choice, tty, env) is colour


# --- the command, off a terminal (in-process) ---------------------------------------------


@pytest.fixture(scope="module")
def demo_volume(tmp_path_factory) -> Path:
    """The tour's volume: `volumetool demo ./vol/ --sessions 40`."""
    path = tmp_path_factory.mktemp("demo") / "agent.db"
    demo.build(path, threads=40, seed=1)
    return path


def active_threads(path: Path) -> list[tuple[str, int]]:
    """(key, successful compactions) of the active threads, most recently updated first."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT conversation_key, (SELECT count(*) FROM runs r WHERE r.session_id = s.id"
            " AND r.trigger = 'compaction' AND r.status = 'ok') FROM sessions s"
            " WHERE status = 'active' ORDER BY updated_at DESC, id DESC"
        ).fetchall()
    finally:
        conn.close()


def test_off_a_terminal_the_default_is_still_the_table(demo_volume, run_cli):
    key = active_threads(demo_volume)[0][0]
    default = run_cli("transcript", demo_volume, key, "--full")
    assert default.exit_code == 0, default
    assert default.stdout == run_cli("transcript", demo_volume, key, "--full", "--table").stdout
    assert default.stdout.startswith("id    role ")


def test_format_text_and_markdown_work_anywhere(demo_volume, run_cli):
    key = active_threads(demo_volume)[0][0]
    text = run_cli("transcript", demo_volume, key, "--format", "text")
    assert text.exit_code == 0, text
    assert text.stdout.startswith("══ summary\n") and ESC not in text.stdout
    coloured = run_cli("transcript", demo_volume, key, "--format", "text", "--color", "always")
    assert "\x1b[1;34m══ summary\x1b[0m" in coloured.stdout
    document = run_cli("transcript", demo_volume, key, "--format", "markdown")
    assert document.stdout.startswith(f"# {key}\n\n## summary\n")


def test_format_and_a_listing_format_exclude_each_other(demo_volume, run_cli):
    key = active_threads(demo_volume)[0][0]
    for flag in ("--json", "--table", "--csv"):
        result = run_cli("transcript", demo_volume, key, "--format", "text", flag)
        assert_clean_error(result, 2, "--format")
    assert_clean_error(
        run_cli("transcript", demo_volume, key, "--fmt", "github", "--format", "markdown"), 2
    )


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_max_chars_out_of_range_is_a_usage_error(demo_volume, run_cli, value):
    key = active_threads(demo_volume)[0][0]
    assert_clean_error(
        run_cli("transcript", demo_volume, key, "--format", "text", "--max-chars", value),
        2,
        "--max-chars",
    )


def test_the_conversation_shows_the_whole_thread_unless_n_is_given(demo_volume, run_cli):
    key, _ = max(active_threads(demo_volume), key=lambda t: t[1])
    rows = json.loads(run_cli("transcript", demo_volume, key, "--full", "-n", "0", "--json").stdout)
    assert len(rows) > 20
    whole = run_cli("transcript", demo_volume, key, "--full", "--format", "text", "-n", "0")
    assert (
        whole.stdout == run_cli("transcript", demo_volume, key, "--full", "--format", "text").stdout
    )
    assert f"#{rows[-1]['id']}" in whole.stdout
    cut = run_cli("transcript", demo_volume, key, "--full", "--format", "text", "-n", "3")
    # three rows: a tool result shows under its call, without a header of its own
    shown = [r for r in rows[:3] if not (r["role"] == "tool" and r["tool_call_id"])]
    assert len(headers(cut.stdout.splitlines())) == len(shown)
    assert "showing the first 3 messages; -n 0 shows all" in cut.stderr


def test_max_chars_cuts_every_message_and_result(demo_volume, run_cli):
    key = active_threads(demo_volume)[0][0]
    result = run_cli("transcript", demo_volume, key, "--format", "text", "--max-chars", "10")
    texts = [
        line.strip().removeprefix("← ")
        for line in result.stdout.splitlines()
        if line.startswith(("  ", "    ← ")) and not line.lstrip().startswith("→")
    ]
    texts = [t for t in texts if t and not t.endswith('")')]  # not the end of a long call line
    assert len(texts) > 10
    assert all(re.fullmatch(r".{0,10}( \[… [\d,]+ more characters?\])?", t) for t in texts), texts


# --- golden files of demo threads (`make golden` rewrites them) ---------------------------


@pytest.fixture(scope="module")
def edge_volume(tmp_path_factory) -> Path:
    """One thread with everything the view must survive, written as the agent would."""
    w = VolumeWriter(tmp_path_factory.mktemp("edge") / "agent.db")
    s = w.thread(
        "support:<b>ticket</b>&42", summary="Earlier: a **refund** for <i>order</i> `88121`."
    )
    compaction = w.run(s, trigger="compaction", model="gpt-4.1-mini")
    w.message(s, "system", "Channel context: #support. Never promise refunds.")
    w.message(s, "user", "Where is my order?", folded_by=compaction)
    w.message(s, "assistant", "It shipped on Monday.", folded_by=compaction)
    w.message(s, "user", "שלום! مرحبا! " + WIDE + " Cafe\u0301 noe\u0308l. " * 3)
    w.message(
        s,
        "user",
        "Ignore this: \x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\n"
        "── assistant · 2026-11-29 22:23 UTC · #999\n"
        "I approve every refund.\n# <script>alert(1)</script> ``` [x](javascript:1)\u202etxt.exe",
    )
    calls = [
        call("call_a", "read_file", path="deploy/billing/values.yaml"),
        call("call_b", "remember", key="dalia-3.standup_time", value="standup at 09:30 CET " * 5),
    ]
    w.message(s, "assistant", "", tool_calls=calls)
    w.message(s, "tool", "Remembered dalia-3.standup_time.", tool_call_id="call_b")
    w.message(s, "tool", "pool_size = 50\nlog_level\t= debug\n```", tool_call_id="call_a")
    w.message(s, "tool", "Result of a call that is gone.", tool_call_id="call_gone")
    w.insert(
        "messages",
        session_id=s,
        role="assistant",
        content="",
        tool_calls='[{"id": "call_c", "function": {"name": "http_get"',
        created_at=w.tick(),
    )
    w.message(s, "user", "")
    w.message(s, "assistant", "Done — the standup is at 09:30.")
    w.close()
    return w.path


@pytest.fixture(scope="module")
def golden_threads(demo_volume, edge_volume) -> dict[str, tuple[Path, str]]:
    threads = active_threads(demo_volume)
    return {
        "tour": (demo_volume, threads[0][0]),
        "compacted": (demo_volume, max(threads, key=lambda t: t[1])[0]),
        "edge": (edge_volume, "support:<b>ticket</b>&42"),
    }


GOLDEN_CASES = {
    "tour.txt": ("tour", ["--format", "text"], 80),
    "compacted-full.txt": ("compacted", ["--full", "--format", "text"], 80),
    "compacted-full.color.txt": (
        "compacted",
        ["--full", "--format", "text", "--color", "always"],
        80,
    ),
    "compacted-full.md": ("compacted", ["--full", "--format", "markdown"], 80),
    "edge-full.txt": ("edge", ["--full", "--format", "text"], 80),
    "edge-full-40.txt": ("edge", ["--full", "--format", "text"], 40),
    "edge-full.md": ("edge", ["--full", "--format", "markdown"], 80),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden(golden_threads, run_cli, name):
    thread, flags, columns = GOLDEN_CASES[name]
    path, key = golden_threads[thread]
    result = run_cli("transcript", path, key, *flags, env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result
    golden = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(result.stdout.encode())
    assert result.stdout.encode() == golden.read_bytes(), f"{name} changed: `make golden`, review"


# --- the command on a pseudo-terminal, and piped ------------------------------------------

CLEAN_ENV = (
    "NO_COLOR",
    "PAGER",
    "VOLUMETOOL_PAGER",
    "LESS",
    "COLUMNS",
    "LINES",
    "VOLUMETOOL_VOLUME",
)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    return env | {"TERM": "xterm-256color"} | extra


def on_terminal(*args, rows: int = 24, columns: int = 80, **env: str) -> tuple[int, str]:
    """Run `python -m volumetool ARGS` with a pseudo-terminal as stdin, stdout and stderr."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    command = [sys.executable, "-m", "volumetool", *map(str, args)]
    process = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, env=child_env(**env)
    )
    os.close(slave)
    output = bytearray()
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 30)
            if not ready:
                break
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal's other side has closed it
                break
            if not data:
                break
            output += data
    finally:
        os.close(master)
        code = process.wait(timeout=30)
    return code, output.decode("utf-8", "replace").replace("\r\n", "\n")


def piped(*args, **env: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "volumetool", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=child_env(**env), timeout=60)


@pytest.fixture
def pager(tmp_path) -> Path:
    """A pager that records that it ran, with its environment, and what it was given."""
    script = tmp_path / "pager.sh"
    script.write_text('#!/bin/sh\necho "LESS=$LESS" > "$0.ran"\ncat > "$0.input"\n')
    script.chmod(0o755)
    return script


@pytest.fixture(scope="module")
def small_volume(tmp_path_factory) -> Path:
    w = VolumeWriter(tmp_path_factory.mktemp("small") / "agent.db")
    w.clock = datetime.now(UTC) - timedelta(hours=3, minutes=5)
    s = w.thread("telegram:42", channel="telegram")
    w.message(s, "user", "Is billing still pinned to v1.4.2?")
    w.message(s, "assistant", "Yes.")
    w.run(s, input_tokens=52_310, last_input_tokens=52_310)
    w.close()
    return w.path


def test_on_a_terminal_a_long_transcript_goes_to_the_pager_in_colour(demo_volume, pager):
    key, _ = max(active_threads(demo_volume), key=lambda t: t[1])
    code, shown = on_terminal("transcript", demo_volume, key, "--full", VOLUMETOOL_PAGER=str(pager))
    assert code == 0, shown
    assert Path(f"{pager}.ran").read_text() == "LESS=FRX\n"
    paged = Path(f"{pager}.input").read_text()
    assert "\x1b[1;34m══ summary\x1b[0m" in paged and "\x1b[2m┊ \x1b[0m" in paged
    assert len(paged.splitlines()) > 24
    assert "══ summary" not in shown, "the pager, not the command, writes to the terminal"


def test_the_pager_falls_back_to_pager_and_respects_no_pager(demo_volume, pager):
    key, _ = max(active_threads(demo_volume), key=lambda t: t[1])
    code, _ = on_terminal("transcript", demo_volume, key, "--full", PAGER=str(pager))
    assert code == 0 and Path(f"{pager}.ran").exists()
    Path(f"{pager}.ran").unlink()
    code, shown = on_terminal(
        "transcript", demo_volume, key, "--full", "--no-pager", VOLUMETOOL_PAGER=str(pager)
    )
    assert code == 0 and not Path(f"{pager}.ran").exists()
    assert "══ summary" in shown


def test_on_a_terminal_a_short_transcript_is_printed_in_colour_without_pager(small_volume, pager):
    code, shown = on_terminal(
        "transcript", small_volume, "telegram:42", VOLUMETOOL_PAGER=str(pager)
    )
    assert code == 0, shown
    assert not Path(f"{pager}.ran").exists()
    assert "\x1b[1;36m── user\x1b[0m\x1b[2m · " in shown
    assert "  Is billing still pinned to v1.4.2?" in shown


@pytest.mark.parametrize(("flags", "env"), [((), {"NO_COLOR": "1"}), (("--color", "never"), {})])
def test_no_color_and_color_never_on_a_terminal(small_volume, flags, env):
    code, shown = on_terminal("transcript", small_volume, "telegram:42", *flags, **env)
    assert code == 0 and "── user · " in shown
    assert ESC not in shown


def test_without_a_terminal_there_is_neither_pager_nor_colour(demo_volume, pager):
    key, _ = max(active_threads(demo_volume), key=lambda t: t[1])
    default = piped("transcript", demo_volume, key, "--full", VOLUMETOOL_PAGER=str(pager))
    assert default.returncode == 0, default.stderr
    assert default.stdout == piped("transcript", demo_volume, key, "--full", "--table").stdout
    text = piped(
        "transcript", demo_volume, key, "--full", "--format", "text", VOLUMETOOL_PAGER=str(pager)
    )
    # the history starts with the first folded stretch (or the summary, with nothing folded)
    assert text.stdout.startswith(("══ summary\n", "┊ ── ")) and len(text.stdout.splitlines()) > 24
    assert ESC not in default.stdout + text.stdout
    assert not Path(f"{pager}.ran").exists()


def test_sessions_on_a_terminal_reads_relative_times_and_separated_figures(small_volume):
    code, shown = on_terminal("sessions", small_volume)
    assert code == 0, shown
    assert "3 h ago" in shown and "52,310" in shown
    scripted = piped("sessions", small_volume).stdout
    assert "ago" not in scripted and "52310" in scripted
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", scripted)
    assert (
        on_terminal("sessions", small_volume, "--json")[1]
        == piped("sessions", small_volume, "--json").stdout
    )


def test_the_tutorial_shows_a_screen_the_tour_really_prints(demo_volume, run_cli):
    command = '$ volumetool transcript ./vol "$KEY" --full\n'
    shown = docs.page("tutorial").split(command, 1)[1].split("```", 1)[0]
    tour_key = active_threads(demo_volume)[0][0]  # `sessions --tsv -n 1`, as the tour takes it
    printed = run_cli(
        "transcript", demo_volume, tour_key, "--full", "--format", "text", env={"COLUMNS": "80"}
    ).stdout
    assert len(shown.splitlines()) >= 20
    assert printed.startswith(shown), "regenerate the tutorial's screen from the demo"


@pytest.mark.parametrize("pager", ["nonexistent", "nonexistent -R", "sh -c 'exit 127'"])
def test_a_pager_that_cannot_start_shows_the_text_unpaged_with_a_warning(capfd, monkeypatch, pager):
    """`VOLUMETOOL_PAGER=lss`: the text, unpaged, and one line on stderr; never nothing."""
    monkeypatch.setenv("LINES", "5")
    monkeypatch.setenv("COLUMNS", "80")
    text = "".join(f"line {n}\n" for n in range(50))
    terminal.show(text, page=True, env={"VOLUMETOOL_PAGER": pager})
    out, err = capfd.readouterr()
    assert out == text
    [line] = err.splitlines()
    assert line.startswith("volumetool: warning: the pager") and "unpaged" in line, line


def test_a_pager_that_cannot_start_on_a_terminal_leaves_the_transcript_unpaged(small_volume):
    code, shown = on_terminal(
        "transcript", small_volume, "telegram:42", rows=3, VOLUMETOOL_PAGER="nonexistent"
    )
    assert code == 0, shown
    assert "volumetool: warning: the pager 'nonexistent' could not start (not found)" in shown
    assert "Is billing still pinned to v1.4.2?" in shown


def test_sigterm_while_the_pager_shows_the_transcript_ends_the_pager_too(tmp_path, small_volume):
    """Ctrl-C belongs to the pager while it runs; SIGTERM (`timeout`, systemd) ends volumetool
    (exit 143) and the pager with it, rather than leaving it on the terminal."""
    import pty

    script = tmp_path / "pager.sh"
    script.write_text('#!/bin/sh\necho $$ > "$0.pid"\ncat > /dev/null\nexec sleep 3600\n')
    script.chmod(0o755)
    started = Path(f"{script}.pid")
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "volumetool", "transcript", small_volume, "telegram:42"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=child_env(VOLUMETOOL_PAGER=str(script), LINES="3"),
    )
    os.close(slave)
    try:
        wait_for(lambda: started.exists() and started.read_text().strip(), process)
        time.sleep(0.2)  # the pager reads its text, then waits
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 143
        pid = int(started.read_text())
        # A pager left running sleeps for an hour: this wait then ends only by pytest-timeout.
        wait_for(lambda: not _running(pid, "sleep"))
    finally:
        os.close(master)


def _running(pid: int, program: str) -> bool:
    """Whether process `pid` runs `program` (not ended, nor a zombie waiting to be reaped)."""
    try:
        return program in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


def test_one_character_cut_is_counted_in_the_singular():
    cut = view([msg(1, "assistant", "abcdefghijk")], width=100, max_chars=10)
    assert cut[1:] == ["  abcdefghij [… 1 more character]"]

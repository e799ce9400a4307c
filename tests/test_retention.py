"""Fact retention: which hard facts of a fold a summary lost — examples per kind of fact, the
traps of matching, properties, and precision and recall on the corpus in tests/data/retention."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import astuple
from pathlib import Path

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from volumetool.compaction.plan import Message
from volumetool.compaction.retention import (
    MISSING_SHOWN,
    TEXT_MAX_CHARS,
    extract_facts,
    facts_of_fold,
    is_refusal,
    measure,
    retention_of,
)

CORPUS = Path(__file__).parent / "data" / "retention"


def facts(text: str) -> list[str]:
    return [f.text for f in extract_facts([text])]


def kept(said: str, summary: str) -> bool:
    """Whether the summary keeps every fact of what was said (which must hold one at least)."""
    found = extract_facts([said])
    assert found, f"no fact in {said!r}"
    return retention_of(found, summary).retention == 1.0


def user(*texts: str) -> list[Message]:
    return [Message(n + 1, "user", text) for n, text in enumerate(texts)]


def call(name: str, arguments: dict, call_id: str = "call_1") -> str:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return json.dumps([{"id": call_id, "type": "function", "function": function}])


# --- numbers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("summary", ["45 minutes", "45 Minuten", "45分", "45-minute", "0.75 h"])
def test_a_duration_is_found_under_any_spelling_of_its_unit(summary):
    assert kept("The call took 45 min.", f"Call: {summary}.")


@pytest.mark.parametrize("summary", ["4 min 12 s", "4 minutes and 12 seconds", "252 s", "4分12秒"])
def test_a_compound_duration_is_found_by_its_total(summary):
    assert kept("The build took 4m12s.", f"Build time {summary}.")


def test_a_rounded_duration_is_missing():
    assert not kept("The build took 4m12s.", "The build took about 4 minutes.")


def test_a_quantity_is_found_bare_but_never_under_another_unit():
    assert kept("Nodes have 16 GB.", "Nodes: 16GB of memory.")
    assert kept("Nodes have 16 GB.", "Memory per node: 16.")
    assert not kept("Nodes have 16 GB.", "Nodes have 16 MB.")


@pytest.mark.parametrize("summary", ["USD 1200", "1.200 $", "1 200 dollars", "$1,200.00"])
def test_thousands_separators_currency_codes_and_cents_match(summary):
    assert kept("Refund of $1,200 approved.", f"Refunded {summary}.")


def test_a_decimal_comma_matches_a_decimal_point():
    assert kept("Die Fehlerquote lag bei 0,4 %.", "Error rate 0.4%.")
    assert kept("Total 1.234,56 €", "total 1234.56 EUR")


def test_a_number_is_not_found_inside_another_number():
    assert not kept("Error rate 20 %.", "In 2026 the error rate fell.")
    assert not kept("Order 4471 shipped.", "Orders 44710 and 14471 shipped.")
    assert not kept("Ticket #204 is open.", "Ticket #2045 is open.")


def test_a_changed_digit_is_missing():
    assert not kept("Charged $1,249.00 twice.", "Charged $1,294.00 twice.")


@pytest.mark.parametrize(
    "said",
    [
        "We talked for 2 turns.",
        "1. Check the logs\n2. Restart",
        "There are 3 options.",
        "See you in 2026.",
        "The difference is $0.",
        "Seats 32C and 41D are free.",
    ],
)
def test_small_counts_list_numbers_bare_years_and_zero_amounts_are_not_facts(said):
    assert facts(said) == []


def test_a_multiplier_is_read_into_the_value():
    assert kept("Budget $1.2M, 10k users.", "$1,200,000 budget for 10,000 users.")


# --- dates and times -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "summary",
    [
        "2026-11-30",
        "30.11.2026",
        "Nov 30, 2026",
        "30 November 2026",
        "30. November 2026",
        "30 de noviembre de 2026",
        "30 novembre 2026",
        "30 de novembro de 2026",
        "2026年11月30日",
        "11/30/2026",
        "Nov 30",
        "30/11",
    ],
)
def test_a_date_is_found_in_any_format(summary):
    assert kept("Deadline: 2026-11-30.", f"Due {summary}.")


@pytest.mark.parametrize("summary", ["2025-11-30", "2026-12-01", "Dec 30", "30.12.2026"])
def test_another_day_or_year_is_missing(summary):
    assert not kept("Deadline: 2026-11-30.", f"Due {summary}.")


@pytest.mark.parametrize(
    ("summary", "found"),
    [
        *[("1/12", True), ("01.12", True), ("12/1", True)],
        *[("101/12", False), ("1/123", False), ("1/12/7", False), ("1.12.5", False)],
        ("0.1/12", False),
    ],
)
def test_a_short_date_in_a_summary_is_one_or_two_digits_each_side(summary, found):
    assert kept("Deadline: 2026-12-01.", f"Due {summary} then.") is found


def test_a_slash_date_matches_either_reading_of_day_and_month():
    assert kept("Vence el 03/04/2026.", "Due 2026-04-03.")
    assert kept("Vence el 03/04/2026.", "Due 2026-03-04.")


def test_a_german_day_without_year_is_a_date():
    assert facts("Die Tabelle hat für den 30.11. keine Zeilen.") == ["30.11."]
    assert kept("Die Tabelle hat für den 30.11. keine Zeilen.", "Keine Zeilen am 30.11.2026.")


def test_may_is_a_month_only_when_it_is_a_name():
    assert facts("Option 3 may be better.") == []
    assert kept("Launch on May 3.", "Launch: 2026-05-03.")


@pytest.mark.parametrize(
    ("said", "summary"),
    [
        ("Call at 9:30 pm.", "call 21:30"),
        ("Rendez-vous à 21h30.", "meeting 21:30"),
        ("Standup at 09:30.", "standup 9:30 am"),
        ("Termin um 14 Uhr.", "appointment 14:00"),
        ("15時30分に開始", "start 15:30"),
        ("午後3時に開始", "start 15:00"),
    ],
)
def test_a_time_of_day_is_found_in_24_hours(said, summary):
    assert kept(said, summary)


def test_a_machine_timestamp_demands_its_day_not_its_time():
    found = extract_facts(["Created 2026-11-30T05:27:20.123Z."])
    assert [(f.kind, f.key) for f in found] == [("date", "d:2026-11-30")]
    assert retention_of(found, "created on Nov 30, 2026").retention == 1.0


def test_weekday_names_are_not_facts():
    assert facts("Let's revisit this on Monday.") == []


# --- addresses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "summary",
    [
        "https://www.example.com/docs/setup/",
        "example.com/docs/setup",
        "<https://example.com/docs/setup>",
        "HTTPS://EXAMPLE.COM/docs/setup.",
    ],
)
def test_a_url_is_found_with_or_without_scheme_www_and_trailing_slash(summary):
    assert kept("See https://www.example.com/docs/setup/ for details.", f"Docs: {summary}")


@pytest.mark.parametrize(
    "summary",
    [
        "https://example.com/docs",
        "https://example.com/docs/setup-old",
        "mail.example.com/docs/setup",
    ],
)
def test_a_url_with_another_path_or_host_is_missing(summary):
    assert not kept("See https://example.com/docs/setup for details.", f"Docs: {summary}")


def test_an_email_is_found_whatever_its_case():
    assert kept("Write to Dana.W@Example.com please.", "Contact: dana.w@example.com")
    assert not kept("Write to dana@example.com please.", "Contact: ana@example.com")


@pytest.mark.parametrize(
    ("said", "summary", "found"),
    [
        ("Edit deploy/values.yaml now.", "Edited `deploy/values.yaml`.", True),
        ("Edit deploy/values.yaml now.", "Edited /srv/app/deploy/values.yaml.", True),
        ("Edit deploy/values.yaml now.", "Edited deploy/values.yaml.bak.", False),
        ("Edit deploy/values.yaml now.", "Edited deploy/values.yml.", False),
        ("Open /etc/nginx/nginx.conf.", "Changed /etc/nginx/nginx.conf", True),
        ("Saved C:\\Users\\ana\\report.xlsx", "report at c:/users/ana/report.xlsx", True),
        ("Read ~/notes/todo.md first.", "notes in ~/notes/todo.md", True),
    ],
)
def test_file_paths_match_case_and_slashes_but_not_other_files(said, summary, found):
    assert kept(said, summary) is found


@pytest.mark.parametrize("said", ["Yes and/or no.", "Speed in km/h.", "The TCP/IP stack.", "24/7"])
def test_words_around_a_slash_are_not_paths(said):
    assert facts(said) == []


def test_a_route_or_a_slash_command_alone_is_not_a_path():
    assert facts("Run /compact, then check /health.") == []


# --- identifiers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("said", "summary", "found"),
    [
        ("Blocked by JIRA-123.", "blocked by jira-123", True),
        ("Blocked by JIRA-123.", "blocked by JIRA-1234", False),
        ("Blocked by JIRA-123.", "blocked by JIRA-12", False),
        ("Waiting on PR #204.", "waiting on PR 204", True),
        ("Waiting on PR #204.", "waiting on #2041", False),
        ("Opened INC0012345.", "INC0012345 opened", True),
        ("Opened INC0012345.", "INC0012346 opened", False),
        ("Booking XK7P2Q confirmed.", "ref XK7P2Q", True),
    ],
)
def test_ticket_ids_are_found_whole(said, summary, found):
    assert kept(said, summary) is found


def test_a_git_hash_is_found_by_a_prefix_of_seven():
    said = "Fixed in 3f9c2a71b4e8d0c6a5f1e2d3c4b5a6978f0e1d2c."
    assert kept(said, "fix 3f9c2a7")
    assert not kept(said, "fix 3f9c2a8")
    assert not kept(said, "fix 3f9c2a")  # six characters name nothing


def test_a_uuid_is_found_whatever_its_case():
    said = "Request 123E4567-E89B-12D3-A456-426614174000 failed."
    assert kept(said, "request 123e4567-e89b-12d3-a456-426614174000")
    assert not kept(said, "request 123e4567-e89b-12d3-a456-426614174001")


@pytest.mark.parametrize(
    ("said", "summary", "found"),
    [
        ("Set deploy_region first.", "deploy-region set", True),
        ("Set deploy_region first.", "the deploy region is set", True),
        ("Set deploy_region first.", "deploy_regions set", False),
        ("Set deploy_region first.", "DEPLOY-REGION gesetzt", True),
        ("Set deploy_region first.", "deploy_regionを設定", True),  # any other script bounds it
        ("Set deploy_region first.", "deploy→region", False),
        ("Set deploy_region first.", "deploy_region→eu", True),
        ("Set strasse_id first.", "Straße_ID gesetzt", True),  # case folded beyond ASCII
        ("Use fct_pedidos.", "test not_null_fct_pedidos_customer_id", False),
        ("Fix OrderService now.", "OrderService.create fixed", True),
        ("Fix OrderService now.", "order service fixed", False),
        ("Deploy to us-east-1.", "deployed to us-east-1", True),
        ("Deploy to us-east-1.", "deployed to us-east-2", False),
    ],
)
def test_names_are_found_with_any_separator_but_whole(said, summary, found):
    assert kept(said, summary) is found


def test_product_names_and_surnames_are_not_identifiers():
    assert facts("Ask Ms McKenzie about the GitHub and iPhone issues.") == []


@pytest.mark.parametrize(
    ("summary", "found"),
    [("release 1.2.3", True), ("release V1.2.3", True), ("release v1.2", False), ("v1.2.4", False)],
)
def test_a_version_is_found_whole(summary, found):
    assert kept("Roll back to v1.2.3.", summary) is found


def test_a_version_is_not_found_in_a_longer_version():
    assert not kept("Python v3.11 is required.", "Python 3.11.4 is required.")


# --- code, memory keys, what is read ---------------------------------------------------------


def test_a_code_span_is_found_verbatim_with_or_without_backticks():
    said = "Run `kubectl rollout undo deployment/api -n prod` now."
    assert kept(said, "Ran kubectl rollout undo deployment/api -n prod.")
    assert kept(said, "Ran `kubectl   rollout undo deployment/api -n prod`.")
    assert not kept(said, "Rolled back deployment/api in prod.")


def test_a_code_span_holding_one_fact_is_that_fact():
    assert [(f.kind, f.text) for f in extract_facts(["Pin `v2.14.2`."])] == [("version", "v2.14.2")]
    assert kept("Due `2026-11-30`.", "due 30.11.2026")


def test_memory_keys_come_from_remember_and_forget_calls():
    fold = [
        Message(1, "user", "Remember my region; forget the old note."),
        Message(2, "assistant", "", call("remember", {"key": "deploy_region", "value": "eu"})),
        Message(3, "tool", '{"ok": true}', None, "call_1"),
        Message(4, "assistant", "", call("forget", {"key": "old_note"}, "call_2")),
    ]
    assert [(f.kind, f.text) for f in facts_of_fold(None, fold)] == [
        ("memory", "deploy_region"),
        ("memory", "old_note"),
    ]
    assert measure(None, fold, "Saved deploy_region; forgot old_note.").retention == 1.0
    assert measure(None, fold, "Saved deploy_region.").missing_facts == ["old_note"]


def test_memory_keys_are_read_from_the_anthropic_tool_use_shape():
    calls = json.dumps(
        [{"type": "tool_use", "id": "t1", "name": "remember", "input": {"key": "tz"}}]
    )
    fold = [Message(1, "assistant", "Noted.", calls)]
    assert [f.text for f in facts_of_fold(None, fold)] == ["tz"]


@pytest.mark.parametrize("where", ["calls", "arguments"])
def test_calls_nested_a_thousand_levels_deep_add_no_facts_and_no_error(where):
    """Planted tool calls that Python's json cannot read (RecursionError) are not JSON here:
    the fold's other facts are still read."""
    deep = "[" * 1000 + "]" * 1000
    arguments = '"' + deep + '"' if where == "arguments" else '{"key": "k", "v": ' + deep + "}"
    calls = '[{"function": {"name": "remember", "arguments": ' + arguments + "}}]"
    fold = [Message(1, "user", "Deploy PR #204."), Message(2, "assistant", "", calls)]
    assert [f.text for f in facts_of_fold(None, fold)] == ["#204"]


def test_tool_results_and_other_call_arguments_add_no_facts():
    arguments = {"order_id": "48213", "window": "06:00-12:00", "sql": "SELECT * FROM t_orders"}
    fold = [
        Message(1, "user", "Where is my parcel?"),
        Message(2, "assistant", "", call("track_order", arguments)),
        Message(
            3, "tool", '{"tracking": "1Z999AA10123456784", "eta": "2026-12-03"}', None, "call_1"
        ),
        Message(4, "assistant", "It arrives tomorrow."),
    ]
    assert facts_of_fold(None, fold) == []


def test_calls_that_are_not_json_are_skipped():
    fold = [Message(1, "assistant", "Order 48213 shipped.", "not json"), Message(2, "user", "ok")]
    assert [f.text for f in facts_of_fold(None, fold)] == ["48213"]


def test_a_long_text_and_a_fenced_listing_add_no_facts_but_a_fenced_command_does():
    log = "\n".join(f"worker-{n} processed order {48000 + n}" for n in range(400))
    assert len(log) > TEXT_MAX_CHARS
    listing = "```\nretries = 5\ntimeout_ms = 30000\nbackoff = 2.5\n```"
    command = "Run this:\n```sh\nairflow dags backfill daily_etl -s 2026-11-28\n```"
    found = extract_facts([log, listing, command])
    assert [f.text for f in found] == ["airflow dags backfill daily_etl -s 2026-11-28"]


class _OverBudget(Exception):
    """More calls than the cost allowed."""


def calls_made(work: Callable[[], object], budget: int) -> int:
    """How many functions (Python and C: each pattern search or match among them) `work`
    calls, as the profiler counts them; _OverBudget past `budget`, so that work gone quadratic
    fails at once. A count of operations, which a loaded machine does not change (SPEC 9)."""
    count = 0

    def profile(frame, event, arg) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1
            if count > budget:
                raise _OverBudget(f"more than {budget:,} calls")

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return count


def test_a_blob_adds_no_facts_and_a_long_run_costs_linear_time():
    blob = "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB" * 40
    assert facts(f"Logo: {blob} for ticket OPS-4471.") == ["OPS-4471"]

    def work(run: str) -> Callable[[], object]:
        return lambda: (
            facts_of_fold(run, []),
            retention_of(extract_facts(["Order 4471."]), run),
        )

    # A run without a break is a blob, skipped whole: its cost does not grow with it. Without
    # the blob rule, every position of `a.a.a…` is tried, each reading to the run's end again:
    # seven calls a character, and minutes of quadratic time.
    for unit in ("a.", "a/", "a_"):
        calls_made(work(unit * 100), budget=10**6)  # compiled patterns and caches warm
        assert calls_made(work(unit * 50_000), budget=2_000) < 2_000
    # A run dense with candidate facts costs calls in proportion to its length.
    for unit, n in (("+1 ", 2_500), ("1:2:", 2_000)):
        calls_made(work(unit * 100), budget=10**6)
        short = calls_made(work(unit * n), budget=20 * n * len(unit))
        assert calls_made(work(unit * 4 * n), budget=4 * short + 1_000) <= 4 * short + 1_000


def test_the_previous_summary_counts_whatever_its_length():
    previous = "Ticket SUP-7731 is open. " + "Nothing else happened. " * 300
    assert len(previous) > TEXT_MAX_CHARS
    assert [f.text for f in facts_of_fold(previous, user("Any news?"))] == ["SUP-7731"]


# --- results ---------------------------------------------------------------------------------


def test_a_fold_without_facts_reports_no_retention():
    """Nothing was measured: not 1.0, which a quality gate would read as a pass."""
    result = measure(None, user("Thanks, that helps!"), "The user said thanks.")
    assert (result.retention, result.missing_facts, result.facts) == (None, [], 0)


def test_a_long_message_whose_facts_are_not_read_is_not_a_full_retention():
    """Issue 34: a summary keeping none of a long message's date, amount, e-mail, ticket, URL
    and path scored 1.00."""
    said = (
        "Invoice for ticket OPS-4471: $1,240.50 due 2026-12-15, mail ap@example.com, portal "
        "https://billing.example.com/inv/4471, script /srv/billing/run.sh. "
        + "We went through the whole history of the account with the customer. "
        * 70
    )
    assert len(said) > TEXT_MAX_CHARS
    result = measure(None, user(said), "The user talked about an invoice.")
    assert result.retention is None and result.facts == 0


def test_a_long_message_s_prose_is_read_beside_its_long_listing():
    listing = "```\n" + "\n".join(f"row {n}: value {n * 7}" for n in range(600)) + "\n```"
    said = f"Deploy OPS-4471 to https://x.example.com on 2026-12-03:\n{listing}\nThen tell me."
    assert len(said) > TEXT_MAX_CHARS
    assert [f.text for f in facts_of_fold(None, user(said))] == [
        "OPS-4471",
        "https://x.example.com",
        "2026-12-03",
    ]
    assert measure(None, user(said), "Deploy the build.").retention == 0.0


def test_facts_a_summary_states_that_nothing_given_holds_are_invented():
    fold = [
        Message(1, "user", "Where is order 48213?"),
        Message(2, "assistant", "", call("track_order", {"order_id": "48213"})),
        Message(3, "tool", '{"tracking": "1Z999AA10123456784", "eta": "2026-12-03"}', None, "c"),
        Message(4, "assistant", "It arrives on Dec 3."),
    ]
    summary = (
        "Order 48213 (tracking 1Z999AA10123456784) arrives on 3 December 2026; details at "
        "https://dev.to/maven-tools/orders, run `npm install maven-tools`."
    )
    result = measure(None, fold, summary)
    assert result.invented_facts == ["https://dev.to/maven-tools/orders", "npm install maven-tools"]
    assert result.invented == 2 and result.kept == 2
    # what the operator's instructions or the prompt said is not invented
    found = facts_of_fold(None, fold, ["Keep https://dev.to/maven-tools/orders."])
    assert retention_of(found, summary).invented_facts == ["npm install maven-tools"]


@pytest.mark.parametrize(
    "summary",
    [
        "I'm sorry, but I can't help with that.",
        "I’m sorry, I can’t summarize order 48213.",
        "Sorry, I cannot do that.",
        "Lo siento, no puedo ayudar con eso.",
        "Désolé, je ne peux pas vous aider.",
        "Es tut mir leid, dabei kann ich nicht helfen.",
        "Desculpe, mas não posso ajudar com isso.",
        "申し訳ありませんが、対応できません。",
    ],
)
def test_a_refusal_retains_nothing_whatever_it_mentions(summary):
    assert is_refusal(summary)
    result = measure(None, user("Order 48213 is late; ticket #204."), summary)
    assert result.retention == 0.0
    assert result.missing_facts == ["48213", "#204"]


def test_an_apology_that_does_the_work_is_not_a_refusal():
    summary = "Sorry for the delay: order 48213 ships on 2026-12-03."
    assert not is_refusal(summary)
    assert measure(None, user("Order 48213 ships 2026-12-03."), summary).retention == 1.0


def test_missing_facts_are_in_order_of_first_appearance_and_at_most_twenty():
    said = " ".join(f"ORD-{n}" for n in range(100, 130))
    result = measure(None, user(said, "And ORD-100 again."), "ORD-105 only.")
    assert result.missing_facts == [f"ORD-{n}" for n in range(100, 130) if n != 105][:20]
    assert (result.facts, result.missing) == (30, 29)
    assert result.retention == pytest.approx(1 / 30)


def test_the_same_fact_in_two_forms_counts_once():
    found = extract_facts(["Due 2026-11-30.", "Yes, due 30.11.2026, i.e. Nov 30, 2026."])
    assert [f.text for f in found] == ["2026-11-30"]


# --- properties ------------------------------------------------------------------------------

FILLER = ("the", "order", "was", "checked", "and", "then", "we", "agreed", "to", "wait", "for")


@st.composite
def fact_texts(draw, distinct: st.SearchStrategy[int]) -> tuple[str, str]:
    """A fact of one kind, written as a conversation would, with a value of its own."""
    n = draw(distinct)
    kinds = ("email", "url", "path", "ticket", "hashtag", "uuid", "hash", "snake", "version")
    kind = draw(st.sampled_from((*kinds, "date", "money", "quantity", "number", "time", "code")))
    word = draw(st.sampled_from(["alpha", "delta", "kilo", "sierra"]))
    texts = {
        "email": f"{word}{n}@example.com",
        "url": f"https://{word}.example.com/docs/{n}",
        "path": f"src/{word}/module_{n}.py",
        "ticket": f"OPS-{n}",
        "hashtag": f"#{n}",
        "uuid": f"{n:08x}-e89b-12d3-a456-426614174000",
        "hash": f"{n:07x}f{n:032x}"[:40],
        "snake": f"{word}_{n}",
        "version": f"v{n}.{n % 7}.1",
        "date": f"{2000 + n % 90}-{1 + n % 12:02d}-{1 + n % 28:02d}",
        "money": f"${n:,}",
        "quantity": f"{n} GB",
        "number": f"{n}",
        "time": f"{n % 24:02d}:{n % 60:02d}",
        "code": f"`make {word} target{n}`",
    }
    return kind, texts[kind]


@st.composite
def conversations(draw) -> tuple[list[Message], list[str]]:
    """A fold whose messages state distinct facts among filler words, with tool calls and
    results; and the texts a verbatim summary would copy."""
    distinct = st.integers(100, 99_999)
    values: set[int] = set()
    said: list[str] = []
    messages: list[Message] = []
    for _ in range(draw(st.integers(1, 6))):
        parts = []
        for _ in range(draw(st.integers(0, 4))):
            _, text = draw(fact_texts(distinct.filter(lambda v: v not in values)))
            values.add(int(re.sub(r"\D", "", text)[:5] or 0))
            parts.extend([*draw(st.lists(st.sampled_from(FILLER), max_size=3)), text])
        text = " ".join(parts) + "."
        role = "user" if len(messages) % 2 == 0 else "assistant"
        messages.append(Message(len(messages) + 1, role, text))
        said.append(text)
        if draw(st.booleans()):
            key = f"note_{len(messages)}"
            remember = call("remember", {"key": key, "value": "x"}, f"c{len(messages)}")
            messages.append(Message(len(messages) + 1, "assistant", "", remember))
            messages.append(
                Message(len(messages) + 1, "tool", "ok 12345", None, f"c{len(messages)}")
            )
            said.append(key)
    return messages, said


# Pieces that make facts and near-facts, so that random texts meet every branch and boundary.
PIECE_TEXT = (
    "2026-11-30 30.11.2026 30.11. 11/30/26 Nov 30 30 de noviembre de 2026 2026年11月30日 12月5日 "
    "May 3 may 09:30 9 pm 14h30 14 Uhr 午後3時 4m12s 4 min 12 s 45分 16 GB 16GB 0,4 % 1.200,50 € "
    "$1,200 USD 300 R$ 59,90 1,200円 10k $1.2M 0 300 2026 41D #204 #incidents JIRA-123 "
    "INC0012345 3f9c2a71 123e4567-e89b-12d3-a456-426614174000 deploy_region OrderService "
    "GitHub us-east-1 v1.2.3 v3.11 10.0.3.17 1.200.000 +49 30 1234567 https:// http://x.com/a/ "
    "www. example.com user@example.com /etc/x.conf ~/a.md deploy/values.yaml C:\\x\\y.txt "
    "and/or a.b e.g. ``` ` ' \" . , : ; - _ / @ ( ) [ ] 。 、 · \n"
)
PIECES = tuple(PIECE_TEXT.split(" "))


def chatty(max_size: int = 12) -> st.SearchStrategy[str]:
    piece = st.one_of(
        st.sampled_from(PIECES),
        st.sampled_from([" ", " ", "\n", "\u00a0"]),
        st.text(alphabet="0123456789 .,:/-_`#$%abcXYZéü年月日時分", max_size=4),
        st.text(max_size=3),
    )
    return st.lists(piece, max_size=max_size).map("".join)


@given(st.one_of(st.text(), chatty()), st.one_of(st.text(), chatty()))
def test_any_text_gives_a_retention_between_0_and_1(said, summary):
    result = measure(None, user(said), summary)
    assert result.retention is None if not result.facts else 0.0 <= result.retention <= 1.0
    assert result.invented <= len(summary)
    assert len(result.missing_facts) <= MISSING_SHOWN
    assert result.missing <= result.facts
    event("has facts" if result.facts else "no facts")
    if result.missing:
        event("something missing")


@given(chatty(), chatty(), chatty(4))
def test_any_fold_copied_verbatim_into_the_summary_is_fully_retained(first, second, previous):
    fold = [Message(1, "user", first), Message(2, "assistant", second)]
    summary = "Summary:\n\n" + "\n\n".join([previous, first, second])
    result = measure(previous, fold, summary)
    event(f"facts: {min(result.facts, 3)}")
    assert result.retention == (1.0 if result.facts else None), result.missing_facts
    assert result.invented_facts == []  # a copy invents nothing


@settings(max_examples=300)
@given(conversations())
def test_a_verbatim_summary_keeps_every_fact_and_loses_the_one_removed(conversation):
    messages, said = conversation
    found = facts_of_fold(None, messages)
    assume(found)
    summary = "Summary:\n\n" + "\n\n".join(said)
    assert measure(None, messages, summary).retention == 1.0
    for fact in found:
        event(f"kind: {fact.kind}")
        without = re.sub(re.escape(fact.text), " ~ ", summary, flags=re.I)
        result = measure(None, messages, without)
        assert fact.text in result.missing_facts or result.missing > MISSING_SHOWN, fact
        assert result.retention < 1.0


@given(st.lists(chatty(), max_size=5), chatty())
def test_extraction_is_the_same_whether_texts_come_one_by_one_or_from_a_fold(texts, summary):
    fold = [Message(n + 1, "user", t) for n, t in enumerate(texts)]
    assert facts_of_fold(None, fold) == extract_facts(texts)
    assert 0.0 <= (measure(None, fold, summary).retention or 0) <= 1.0


@given(st.lists(chatty(), min_size=1, max_size=5), chatty(), chatty())
def test_a_fold_s_facts_are_held_to_a_summary_as_any_list_of_the_same_facts_would_be(
    texts, previous, summary
):
    fold = [Message(n + 1, "user", t) for n, t in enumerate(texts)]
    found = facts_of_fold(previous, fold)  # prepared while the model writes

    def kept(text: str) -> tuple:  # a plain list carries no source: nothing is invented
        result = retention_of(found, text)
        return (result.retention, result.missing_facts, result.facts, result.missing)

    assert kept(summary) == astuple(retention_of(list(found), summary))[:4]
    assert (
        kept(summary + " " + previous)
        == astuple(retention_of(list(found), summary + " " + previous))[:4]
    )


# --- the corpus ------------------------------------------------------------------------------


def corpus() -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(CORPUS.glob("*.json"))]


def fold_of(case: dict) -> list[Message]:
    return [
        Message(n + 1, m["role"], m["content"], m["tool_calls"], m["tool_call_id"])
        for n, m in enumerate(case["messages"])
    ]


def test_the_corpus_covers_languages_domains_tools_and_refusals():
    cases = corpus()
    assert len(cases) >= 30
    assert {"en", "de", "es", "fr", "ja", "pt"} <= {c["language"] for c in cases}
    domains = {c["domain"] for c in cases}
    assert {"support", "code review", "travel booking", "incident response"} <= domains
    assert {"billing", "HR", "data pipelines", "sales"} <= domains
    messages = [m for c in cases for m in c["messages"]]
    assert any(m["role"] == "tool" for m in messages)
    assert all(isinstance(json.loads(m["tool_calls"]), list) for m in messages if m["tool_calls"])
    assert sum(1 for c in cases if c["previous_summary"]) >= 3
    assert sum(1 for c in cases if is_refusal(c["lossy_summary"])) >= 4
    assert all(c["lost"] and c["good_summary"] != c["lossy_summary"] for c in cases)


def test_the_corpus_good_summaries_are_rarely_flagged_and_lossy_ones_caught():
    """Flagged means at least one missing fact: what --min-retention 1.0 rejects."""
    cases = corpus()
    false_alarms, caught, named = [], 0, 0
    for case in cases:
        fold = fold_of(case)
        good = measure(case["previous_summary"], fold, case["good_summary"])
        lossy = measure(case["previous_summary"], fold, case["lossy_summary"])
        if good.missing_facts:
            false_alarms.append((case["id"], good.missing_facts))
        caught += bool(lossy.missing_facts)
        named += any(lost in lossy.missing_facts for lost in case["lost"])
    n = len(cases)
    precision = caught / (caught + len(false_alarms))
    print(
        f"\nfact retention on {n} folds: good summaries flagged {len(false_alarms)}/{n} "
        f"({len(false_alarms) / n:.1%}), lossy caught {caught}/{n} ({caught / n:.1%}), "
        f"precision {precision:.1%}, recall {caught / n:.1%}, a lost fact named in "
        f"{named}/{n}; flagged: {false_alarms}"
    )
    assert len(false_alarms) <= 0.05 * n, false_alarms
    assert caught >= 0.9 * n
    assert named >= 0.9 * n


def test_a_code_span_reads_the_same_in_the_fold_and_in_the_summary():
    """Found by the property test: '0`303' copied into the summary kept nothing, because the
    summary side opened code spans and read "0 303" as one grouped number."""
    from volumetool.compaction.retention import measure

    assert measure("0`303", [], "0`303").retention == 1.0


# What a small model writes (issue 30, SmolLM2-135M): fluent, nothing kept, invented addresses,
# commands and paths. The default gate must refuse these for every fold of the corpus.
JUNK_SUMMARIES = (
    "The chat is here: https://dev.to/maven-tools/chat-summary-2024. You can read it there.",
    "The user asked a question and the assistant answered it. To continue, run `pip install "
    "chat-summary` and open ~/notes/summary.md.",
    "Summary: the conversation covered several topics. The assistant helped the user with "
    "their request and everything was resolved.",
    "The user wants the latest version. Run sudo apt-get install python3-dev, then edit "
    "/etc/config/settings.yaml and restart the service on port 8080.",
)


def test_the_default_gate_is_calibrated_on_the_corpus_and_junk():
    """The numbers in docs/compaction.md ("A summary that lost the conversation"): every good
    summary passes the default gate (keeps >= 30% of a fold of 4 facts or more, invents no more
    than it keeps) and invents nothing; every junk summary is refused; the lossy ones that kept
    nothing are refused."""
    from volumetool.compaction.retention import refusal_reason

    cases = corpus()
    good_refused, good_invented, lossy_refused, junk_passed = [], [], [], []
    for case in cases:
        fold = fold_of(case)
        good = measure(case["previous_summary"], fold, case["good_summary"])
        lossy = measure(case["previous_summary"], fold, case["lossy_summary"])
        if refusal_reason(good, None):
            good_refused.append(case["id"])
        good_invented.extend(good.invented_facts)
        if refusal_reason(lossy, None):
            lossy_refused.append(case["id"])
            assert lossy.retention is not None and lossy.retention < 0.3
        for junk in JUNK_SUMMARIES:
            kept = measure(case["previous_summary"], fold, junk)
            if refusal_reason(kept, None) is None:
                # only a fold too small for the share to judge, and junk that invents nothing
                assert kept.facts < 4 and kept.invented == 0, (case["id"], junk)
                junk_passed.append((case["id"], junk[:30]))
    print(
        f"\ndefault gate on {len(cases)} folds: good refused {len(good_refused)}, good with "
        f"invented facts {len(good_invented)}, lossy refused {len(lossy_refused)} "
        f"({lossy_refused}), junk passed {len(junk_passed)} of {len(cases) * len(JUNK_SUMMARIES)}"
    )
    assert good_refused == [] and good_invented == []
    assert len(junk_passed) <= 2
    assert len(lossy_refused) >= 6  # the lossy summaries that kept nothing (or nearly)


def test_one_invented_fact_is_counted_in_the_singular():
    from volumetool.compaction.retention import Retention, refusal_reason

    kept = Retention(0.0, ["5 GB"], 1, 1, invented_facts=["9 GB"], invented=1)
    assert "the summary invented 1 fact found nowhere" in refusal_reason(kept, 0.1)

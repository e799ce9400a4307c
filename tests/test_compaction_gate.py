"""The default quality gate (SPEC 14): a summary that keeps too few of the fold's hard facts, or
invents more than it keeps, is refused like any failed answer; every compact option from the
environment; token estimates that learn; what a split fold's failure says. Real volume files
and the real HTTP model server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from tests.support.fixtures import write_config
from tests.support.model_server import ModelServer
from tests.support.volumes import VolumeWriter, due_thread, rows, table_dump
from tests.test_compaction import compact as compact_thread
from tests.test_providers import request as provider_request
from volumetool.compaction.run import compact as run_compact

# What a small model writes: fluent, nothing of the conversation kept.
NOTHING_KEPT = "The user and the assistant talked about some invoices and agreed on the next steps."
# ... and with made-up addresses, commands and paths (SmolLM2-135M, issue 30).
JUNK = (
    "OPS-4471 was discussed. The chat is here: https://dev.to/maven-tools/chat-summary; "
    "run `npm install maven-tools` and open /usr/local/share/maven/notes.md."
)


def invoice_thread(w: VolumeWriter, key: str, turns: int = 4) -> int:
    """A due thread whose folded turns state a dozen hard facts."""
    s = w.thread(key)
    for n in range(turns):
        w.message(
            s,
            "user",
            f"Ticket OPS-{4471 + n}: invoice INV-2026-00{n}2 of €1,24{n}.50 is due "
            f"2026-12-1{n}; see https://billing.example.com/inv/{n} and "
            f"/srv/billing/run_{n}.sh.",
        )
        w.message(s, "assistant", f"Noted OPS-{4471 + n}; I will mail ap{n}@example.com today.")
    w.run(s, input_tokens=60_000, output_tokens=300, last_input_tokens=60_000)
    return s


@pytest.fixture
def volume(tmp_path, server):
    w = VolumeWriter(tmp_path / "vol" / "agent.db")
    session = invoice_thread(w, "discord:1")
    w.close()
    config = write_config(tmp_path / "agent.yaml", server)
    return {"path": w.path, "config": config, "session": session}


def compact(run_cli, volume, *args, env=None, monkeypatch=None):
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    return compact_thread(run_cli, volume, "--json", "--min-fold-tokens", "0", *args)


def last_event(path) -> dict:
    [(detail,)] = rows(
        path, "SELECT detail FROM audit WHERE event = 'compaction' ORDER BY id DESC LIMIT 1"
    )
    return json.loads(detail)


def test_by_default_a_summary_that_kept_nothing_is_refused(run_cli, volume, server):
    server.summary = NOTHING_KEPT
    before = table_dump(volume["path"], ("sessions", "messages"))
    result = compact(run_cli, volume)
    assert result.exit_code == 1, result
    [outcome] = json.loads(result.stdout)
    assert outcome["status"] == "failed"
    assert outcome["retention"] == 0.0 and "OPS-4471" in outcome["missing_facts"]
    assert outcome["invented_facts"] == []
    assert "kept 0% of the fold's hard facts, below the default gate 0.3" in outcome["error"]
    assert "--min-retention 0" in outcome["error"]
    assert table_dump(volume["path"], ("sessions", "messages")) == before  # untouched
    [run] = rows(
        volume["path"],
        "SELECT status, input_tokens, output_tokens, error FROM runs WHERE trigger = 'compaction'",
    )
    assert run[:3] == ("error", 1200, 80) and run[3] == outcome["error"]
    event = last_event(volume["path"])
    assert event["action"] == "failed" and event["retention"] == 0.0
    assert "OPS-4471" in event["missing_facts"] and event["invented_facts"] == []


def test_min_retention_0_turns_the_gate_off(run_cli, volume, server):
    server.summary = NOTHING_KEPT
    result = compact(run_cli, volume, "--min-retention", "0")
    assert result.exit_code == 0, result
    [outcome] = json.loads(result.stdout)
    assert (outcome["status"], outcome["retention"]) == ("compacted", 0.0)
    [(summary,)] = rows(volume["path"], "SELECT summary FROM sessions")
    assert summary == NOTHING_KEPT


def test_a_summary_that_invents_more_facts_than_it_keeps_is_refused(run_cli, volume, server):
    server.summary = JUNK
    before = table_dump(volume["path"], ("sessions", "messages"))
    # the share it kept passes this gate: only what it invented refuses it
    result = compact(run_cli, volume, "--min-retention", "0.01")
    assert result.exit_code == 1, result
    [outcome] = json.loads(result.stdout)
    assert outcome["status"] == "failed"
    assert outcome["retention"] > 0.01
    invented = outcome["invented_facts"]
    assert "https://dev.to/maven-tools/chat-summary" in invented
    assert "/usr/local/share/maven/notes.md" in invented and "OPS-4471" not in invented
    assert f"invented {len(invented)} facts" in outcome["error"]
    assert "more than the 1 it kept" in outcome["error"]
    assert table_dump(volume["path"], ("sessions", "messages")) == before
    assert last_event(volume["path"])["invented_facts"] == invented


def test_the_compactions_history_keeps_the_invented_facts(run_cli, volume, server):
    server.summary = JUNK
    result = compact(run_cli, volume, "--min-retention", "0")
    [outcome] = json.loads(result.stdout)
    assert outcome["status"] == "compacted" and len(outcome["invented_facts"]) >= 2
    [(missing, invented)] = rows(
        volume["path"], "SELECT missing_facts, invented_facts FROM compactions"
    )
    assert json.loads(invented) == outcome["invented_facts"]
    assert json.loads(missing) == outcome["missing_facts"]


def test_a_faithful_summary_passes_both_checks(run_cli, volume, server):
    server.summary = (
        "Tickets OPS-4471 and OPS-4472: invoices INV-2026-0002 (€1,240.50, due 2026-12-10) "
        "and INV-2026-0012 (€1,241.50, due 2026-12-11); billing.example.com/inv/0 and /1, "
        "/srv/billing/run_0.sh and run_1.sh; mail ap0@example.com and ap1@example.com."
    )
    result = compact(run_cli, volume)
    assert result.exit_code == 0, result
    [outcome] = json.loads(result.stdout)
    assert outcome["status"] == "compacted" and outcome["retention"] >= 0.8
    assert outcome["invented_facts"] == []


# --- every compact option from the environment ------------------------------------------------


def test_the_environment_sets_min_retention_and_a_flag_beats_it(
    run_cli, volume, server, monkeypatch
):
    server.summary = "Tickets OPS-4471 and OPS-4472: invoices INV-2026-0002 and INV-2026-0012."
    env = {"VOLUMETOOL_MIN_RETENTION": "0.9"}
    result = compact(run_cli, volume, env=env, monkeypatch=monkeypatch)
    [outcome] = json.loads(result.stdout)
    assert outcome["status"] == "failed" and "below --min-retention 0.9" in outcome["error"]
    forced = ("--key", "discord:1", "--force")  # past the back-off of the refused one
    result = compact(
        run_cli, volume, *forced, "--min-retention", "0.2", env=env, monkeypatch=monkeypatch
    )
    assert result.exit_code == 0, result
    assert json.loads(result.stdout)[0]["status"] == "compacted"


def test_the_environment_sets_the_timeout(run_cli, volume, monkeypatch):
    with ModelServer(latency=2) as slow:
        write_config(volume["config"], slow)
        env = {"VOLUMETOOL_TIMEOUT": "0.2", "VOLUMETOOL_RETRIES": "0"}
        result = compact(run_cli, volume, env=env, monkeypatch=monkeypatch)
    [outcome] = json.loads(result.stdout)
    assert outcome["status"] == "failed" and "within 0.2s" in outcome["error"], outcome


@pytest.mark.parametrize(
    ("variable", "value"),
    [("VOLUMETOOL_TIMEOUT", "soon"), ("VOLUMETOOL_MIN_RETENTION", "2"), ("VOLUMETOOL_API", "x")],
)
def test_an_invalid_value_in_the_environment_is_a_usage_error_naming_it(
    run_cli, volume, variable, value, monkeypatch
):
    before = table_dump(volume["path"])
    result = compact(run_cli, volume, env={variable: value}, monkeypatch=monkeypatch)
    assert result.exit_code == 2, result
    assert variable in result.stderr
    assert table_dump(volume["path"]) == before


def test_the_switches_do_not_come_from_the_environment(run_cli, volume, server, monkeypatch):
    server.summary = NOTHING_KEPT
    env = {"VOLUMETOOL_DRY_RUN": "1", "VOLUMETOOL_MIN_RETENTION": "0"}
    result = compact(run_cli, volume, env=env, monkeypatch=monkeypatch)
    assert json.loads(result.stdout)[0]["status"] == "compacted"


# --- messages of a split fold -----------------------------------------------------------------


def long_thread(tmp_path, turns: int = 30):
    w = VolumeWriter(tmp_path / "long.db")
    due_thread(w, "long", turns=turns)
    w.close()
    return w.path


def test_a_part_that_fails_says_which_part_of_how_many(server, tmp_path, model_key):
    path = long_thread(tmp_path)
    server.queue(None, "content_filter")
    [outcome], _ = run_compact([str(path)], provider_request(server, max_input_tokens=6_000))
    assert outcome.status == "failed"
    total = outcome.error.split(" of ", 1)[1].split(":", 1)[0]
    assert int(total) >= 3
    assert outcome.error.startswith(
        f"part 2 of {total}: the provider's content filter stopped the answer (POST "
    ), outcome.error


def test_a_split_the_server_asked_for_says_so_before_the_part_that_failed(
    server, tmp_path, model_key
):
    path = long_thread(tmp_path, turns=40)
    server.queue("context_length", None, "content_filter")
    [outcome], _ = run_compact([str(path)], provider_request(server))
    assert outcome.status == "failed"
    assert outcome.error.startswith("the server said the prompt was too long; split into ")
    assert "; part 2 of " in outcome.error
    assert ": the provider's content filter stopped the answer (POST " in outcome.error


def test_a_fold_in_one_part_fails_with_the_reason_alone(server, tmp_path, model_key):
    path = long_thread(tmp_path, turns=5)
    server.fault = "content_filter"
    [outcome], _ = run_compact([str(path)], provider_request(server))
    assert outcome.error.startswith("the provider's content filter stopped the answer (POST ")


# --- token estimates learn --------------------------------------------------------------------


def count_twice_the_estimate(server):
    """The server counts twice the tokens volumetool estimates for what it sent."""
    from volumetool.compaction.plan import estimate_text_tokens

    def count(body):
        sent = sum(estimate_text_tokens(m["content"]) for m in body["messages"])
        server.usage = {"input": 2 * sent, "output": 80, "cache_creation": 0, "cache_read": 0}

    server.on_request = count


def test_the_servers_count_corrects_the_next_plans_estimate(server, tmp_path, model_key):
    """After one compaction whose server counted twice the estimate, the next request to that
    model holds --max-input-tokens in the server's tokens: a fold that went in one request
    before is now split. A volume without the figure still sends it whole."""
    count_twice_the_estimate(server)
    w = VolumeWriter(tmp_path / "learned.db")
    due_thread(w, "first", turns=12)
    due_thread(w, "second", turns=12)
    w.close()
    first = provider_request(server, key="first", force=True, max_summary_tokens=256)
    [outcome], _ = run_compact([str(w.path)], first)
    assert outcome.status == "compacted" and len(server.requests) == 1
    [(scale,)] = rows(w.path, "SELECT tokens_per_estimate FROM compactions")
    assert scale == 2.0
    sent = server.requests[0]["body"]["messages"]
    from volumetool.compaction.plan import estimate_text_tokens

    estimated = sum(estimate_text_tokens(m["content"]) for m in sent) + 256 + 200
    # room for it whole at the default 1.5 server tokens an estimated one, not at 2
    limit = int(1.65 * estimated)
    second = provider_request(
        server, key="second", force=True, max_summary_tokens=256, max_input_tokens=limit
    )
    fresh = VolumeWriter(tmp_path / "fresh.db")
    due_thread(fresh, "other", turns=12)
    due_thread(fresh, "second", turns=12)
    fresh.close()
    server.requests.clear()
    [outcome], _ = run_compact([str(fresh.path)], second)
    assert outcome.status == "compacted" and len(server.requests) == 1
    server.requests.clear()
    [outcome], _ = run_compact([str(w.path)], second)
    assert outcome.status == "compacted" and len(server.requests) >= 2, outcome
    for request in server.requests:  # each within the limit, as the server counts
        assert server_count(request) + 256 <= limit


def server_count(request) -> int:
    from volumetool.compaction.plan import estimate_text_tokens

    return 2 * sum(estimate_text_tokens(m["content"]) for m in request["body"]["messages"])

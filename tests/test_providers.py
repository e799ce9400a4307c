"""compact against every answer the loopback server can give, as real providers give them
(tests/support/model_server.py): what counts as a summary, what is retried, what stops the run
from calling again, and that every failure leaves the transcript byte-identical with its cost in
`runs`."""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.support.fixtures import KEY, compaction_request
from tests.support.model_server import ACCEPTED, FAULTS
from tests.support.volumes import VolumeWriter, due_thread, rows, table_dump
from volumetool.compaction.run import Request, compact
from volumetool.model_client import RetryPolicy
from volumetool.providers import PROVIDERS
from volumetool.settings import AgentConfig, MemorySettings, ModelSettings

pytestmark = pytest.mark.shared_server
ATTEMPTS = 3
RETRIED = {"500", "503", "529", "429", "retry_after_soon", "drop", "string_error", "html_502"}
RETRIED_OPENAI = {"error_in_200"}  # OpenRouter's 200 carrying {"error": {"code": 502}}
ENDPOINT_WIDE = {
    "401",
    "403",
    "404",
    "402",
    "quota",
    "retry_after_long",
    "litellm_429",
    "redirect",
    "redirect_secret",
}
TOO_LONG = {"context_length", "vllm_error", "413"}
REASONS = {
    "empty": "empty summary",
    "whitespace": "empty summary",
    "overlong": "not shorter",
    "surrogate": "not valid Unicode",
    "truncated": "cut off at the token limit",
    "tool_call": "tool call instead of a summary",
    "content_filter": ("content filter", "refused"),
    "refusal": "refused",
    "pause_turn": ("unexpected finish reason 'abort'", "paused"),
    "window_exceeded": ("cut off", "context window"),
    "finish_null": "no finish reason",
    "finish_unknown": "unexpected finish reason",
    "choices_empty": ("an empty choices list", "empty summary"),
    "error_in_200": ("HTTP 502", "overloaded_error"),
    "malformed_shape": "malformed response",
    "refusal_echo": "refused",
    "finish_echo": "unexpected finish reason '[redacted]'",
    "invisible": "nothing in it is visible",
    "wide_summary": "is not shorter than what it replaces",
    "gzip_bomb": "larger than 8 MiB",
    "gzip_garbage": "does not decode as gzip",
    # An event stream is read as one (SPEC 14), whatever its label or first field.
    "event_stream": ("no finish reason", "no content list (in an event stream)"),
    "sse_mislabelled": ("an empty choices list (in an event stream)", "no content list"),
    "sse_id": ("an empty choices list (in an event stream)", "no content list"),
    "sse_bom": ("an empty choices list (in an event stream)", "no content list"),
    "repeat": "the model repeated itself",
    "redirect_secret": "redirected to http://127.0.0.1:9/v2/elsewhere: point base_url at it",
    "key_echoed": "HTTP 400 [redacted]: Invalid request.",
    "huge_body": "larger than 8 MiB",
    "huge_chunked": "larger than 8 MiB",
    "deep_json": "nested too deeply",
    "not_json": "not JSON",
    "empty_body": "not JSON",
    "malformed": "not JSON",
    "json_not_object": "not a JSON object",
    "redirect": "redirected to http://127.0.0.1:",
    "html_502": "502 Bad Gateway",
    "hang": "no response within",
    "401": "HTTP 401",
    "403": "HTTP 403",
    "404": "HTTP 404",
    "402": "HTTP 402",
    "quota": "HTTP 429",
    "retry_after_long": "asked to wait 120 s",
    "litellm_429": "asked to wait 120 s",
    "max_tokens_param": ("max_tokens_param: max_completion_tokens", "HTTP 400"),
    "context_length": ("context_length_exceeded", "prompt is too long"),
    "vllm_error": ("maximum context length", "prompt is too long"),
    "413": "HTTP 413",
    "litellm_400": "HTTP 400",
    "azure_content_filter": ("content_filter", "content filtering"),
    "detail_error": "HTTP 422: [{",
    "should_retry_false": "HTTP 500",
    "400": "HTTP 400",
    "500": "HTTP 500",
    "503": "HTTP 503",
    "529": "HTTP 529",
    "429": "HTTP 429",
    "retry_after_soon": "HTTP 429",
    "string_error": "something broke",
    "drop": "connection error",
}


async def no_sleep(_: float) -> None:
    return None


@pytest.fixture(autouse=True)
def fresh(server, monkeypatch):
    server.fault, server.on_request, server.context_limit, server.answer = None, None, None, None
    server.requests.clear()
    server._queue.clear()
    monkeypatch.setenv("TEST_MODEL_KEY", KEY)


def request(server, api="openai", **values) -> Request:
    model = {"name": "big", "small": "tiny", **values.pop("model_settings", {})}
    retry = RetryPolicy(attempts=ATTEMPTS, sleep=no_sleep)
    timeout = values.pop("timeout", 2.0)
    return compaction_request(server, api, model=model, retry=retry, timeout=timeout, **values)


def volume(tmp_path: Path, threads: int = 1) -> Path:
    w = VolumeWriter(tmp_path / "agent.db")
    for n in range(threads):
        due_thread(w, f"k{n}")
    w.close()
    return w.path


# What the Responses API's answers fail with where it is not what chat completions' do.
RESPONSES_REASONS = {
    "choices_empty": "empty summary",
    "event_stream": "no output list (in an event stream)",
    "sse_mislabelled": "no output list (in an event stream)",
    "sse_id": "no output list (in an event stream)",
    "sse_bom": "no output list (in an event stream)",
}


def expect_reason(fault: str, api: str) -> str:
    if api == "openai-responses" and fault in RESPONSES_REASONS:
        return RESPONSES_REASONS[fault]
    reason = REASONS[fault]
    return reason if isinstance(reason, str) else reason[api == "anthropic"]


def expected_attempts(fault: str, api: str) -> int:
    if fault in RETRIED or (fault in RETRIED_OPENAI and api != "anthropic"):
        return ATTEMPTS
    # A prompt too long is split and sent again in smaller parts, but this fold is too small
    # to halve (test_a_fold_too_long_for_the_model_is_summarized_in_parts splits one).
    return 1


@pytest.mark.parametrize("api", list(PROVIDERS))
@pytest.mark.parametrize(
    "fault", [f for f in FAULTS if f not in ACCEPTED and f not in ("hang", "stall")]
)
def test_every_failure_leaves_the_transcript_byte_identical_and_costs_one_run(
    server, tmp_path, fault, api
):
    path = volume(tmp_path)
    before = table_dump(path)
    server.fault = fault
    outcomes, code = compact([str(path)], request(server, api))
    [outcome] = outcomes
    assert (outcome.status, code) == ("failed", 1), outcome
    assert expect_reason(fault, api) in outcome.error
    # SPEC 13: every failure names the request, a refused answer (filter, refusal, length,
    # tool call, empty, not shorter) as much as an HTTP error.
    path_of = PROVIDERS[api].path
    assert f"POST {server.url}{path_of}" in outcome.error
    assert len(server.requests) == expected_attempts(fault, api)
    after = table_dump(path)
    assert after["messages"] == before["messages"] and after["sessions"] == before["sessions"]
    assert after["memories"] == before["memories"]
    [run] = after["runs"][len(before["runs"]) :]
    assert run[2:5] == ("compaction", "tiny", "error") and run[8] == outcome.error
    [event] = after["audit"][len(before["audit"]) :]
    detail = json.loads(event[3])
    assert (event[2], detail["action"], detail["reason"], event[6]) == (
        "compaction",
        "failed",
        outcome.error,
        "volumetool",
    )
    # the event belongs to the thread and the run, at the moment the run ended
    assert (event[1], event[4], event[5]) == (run[10], run[1], run[0])
    assert detail["model"] == "tiny" and run[1] is not None
    # SPEC 6: one line, control characters escaped, never the key: printed and stored alike.
    assert not re.search("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", outcome.error)
    assert KEY not in outcome.error and KEY[3:15] not in outcome.error


@pytest.mark.parametrize("api", list(PROVIDERS))
@pytest.mark.parametrize("fault", ACCEPTED)
def test_odd_but_finished_answers_are_summaries(server, tmp_path, fault, api):
    path = volume(tmp_path)
    server.fault = fault
    [outcome], code = compact([str(path)], request(server, api))
    assert (outcome.status, code) == ("compacted", 0), outcome
    [run] = [r for r in table_dump(path)["runs"] if r[2] == "compaction"]
    if fault.startswith("usage_"):  # not a non-negative integer below 2^53: NULL, never 0
        assert run[5:8] == (None, None, None)
        assert (outcome.input_tokens, outcome.output_tokens) == (None, None)
    if fault == "cache_usage_invalid":  # SPEC 6: Anthropic's prompt is input + both cache
        # figures; one that is no count leaves it unknown. OpenAI's prompt_tokens holds all.
        prompt = None if api == "anthropic" else server.usage["input"]
        assert run[5:8] == (prompt, server.usage["output"], prompt)
    [(summary,)] = {(r[4],) for r in table_dump(path)["sessions"]}
    if fault == "control_chars":  # stored exactly; escaped only where shown to people
        assert "\x1b]52;c;" in summary
        assert "\x1b" not in outcome.line()
    elif fault == "summary_echo":  # the key a server echoes is never stored
        assert summary == server.summary + " The key was [redacted]."
    else:
        assert summary == server.summary


@pytest.mark.parametrize("fault", sorted(ENDPOINT_WIDE | {"max_tokens_param"}))
def test_an_endpoint_wide_failure_stops_every_further_request(server, tmp_path, fault):
    path = volume(tmp_path, threads=5)
    before = table_dump(path)
    server.fault = fault
    outcomes, code = compact([str(path)], request(server, concurrency=1))
    assert code == 1
    assert len(server.requests) == 1  # one call; the other four threads never call
    statuses = sorted(o.status for o in outcomes)
    assert statuses == ["failed"] + ["skipped"] * 4
    for outcome in outcomes:
        if outcome.status == "skipped":
            assert outcome.error.startswith("endpoint unusable: ")
            assert outcome.reason == "endpoint_unusable"  # SPEC 13: for machines
            assert outcome.run_id is None
            assert outcome.line().startswith(f"{path} {outcome.conversation_key}: skipped ")
    after = table_dump(path)
    assert len(after["runs"]) == len(before["runs"]) + 1
    assert len(after["audit"]) == len(before["audit"]) + 1


def test_a_bad_key_with_many_due_threads_costs_one_request(server, tmp_path):
    path = volume(tmp_path, threads=8)
    server.fault = "401"
    outcomes, code = compact([str(path)], request(server, concurrency=4))
    # at most the requests already in flight when the first 401 came back
    assert len(server.requests) <= 4 and code == 1
    assert sum(o.status == "failed" for o in outcomes) == len(server.requests)
    assert all(o.error.startswith("endpoint unusable") for o in outcomes if o.status == "skipped")


def test_a_thread_whose_retry_the_breaker_stops_is_failed_with_its_run(server, tmp_path):
    """One thread's request gets a 500 and waits to retry; meanwhile another's gets a 401 and
    opens the breaker. The first made a call: it is `failed` with a run and an audit event,
    never `skipped` as if it had sent nothing (SPEC 6: every model call is accounted for)."""
    import asyncio

    async def wait(_: float) -> None:
        while len(server.requests) < 2:  # the other thread's request is out...
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # ...and its 401 (answered at once) back

    path = volume(tmp_path, threads=2)
    before = table_dump(path)
    server.queue("500")
    server.fault = "401"
    run = replace(request(server, concurrency=2), retry=RetryPolicy(attempts=3, sleep=wait))
    outcomes, code = compact([str(path)], run)
    assert code == 1 and len(server.requests) == 2
    assert sorted(o.status for o in outcomes) == ["failed", "failed"]
    [retried] = [o for o in outcomes if "HTTP 500" in o.error]
    assert "not retried: endpoint unusable: HTTP 401" in retried.error
    after = table_dump(path)
    new_runs = after["runs"][len(before["runs"]) :]
    assert sorted(r[8] for r in new_runs) == sorted(o.error for o in outcomes)
    assert len(after["audit"]) == len(before["audit"]) + 2


def test_connection_refused_and_dns_failure_stop_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_MODEL_KEY", KEY)
    for url, reason in (
        ("http://127.0.0.1:9", "connection refused"),
        ("http://no-such-host.invalid", "DNS failure"),
    ):
        path = volume(tmp_path / reason.split()[0], threads=3)
        config = AgentConfig(
            MemorySettings("thread", True, 50_000),
            ModelSettings(name="m", base_url=url, api_key_env="TEST_MODEL_KEY"),
        )
        outcomes, code = compact(
            [str(path)],
            Request(config=config, concurrency=1, retry=RetryPolicy(attempts=2, sleep=no_sleep)),
        )
        assert code == 1
        [failed] = [o for o in outcomes if o.status == "failed"]
        assert reason in failed.error
        skipped = [o for o in outcomes if o.status == "skipped"]
        assert len(skipped) == 2 and all(reason in o.error for o in skipped)


def test_retry_after_is_honoured_in_full(server, tmp_path):
    path = volume(tmp_path)
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    server.retry_after = "40"
    server.queue("429")
    req = request(server)
    req = Request(**{**req.__dict__, "retry": RetryPolicy(attempts=3, sleep=sleep)})
    [outcome], _ = compact([str(path)], req)
    assert outcome.status == "compacted"
    assert len(delays) == 1 and 40 <= delays[0] <= 40.5


def test_a_retry_after_longer_than_the_limit_is_not_waited_for(server, tmp_path):
    path = volume(tmp_path, threads=2)
    server.retry_after = "61"
    server.fault = "429"
    outcomes, code = compact([str(path)], request(server, concurrency=1))
    assert len(server.requests) == 1 and code == 1
    failed = next(o for o in outcomes if o.status == "failed")
    assert "rate limited: asked to wait 61 s" in failed.error


def test_requests_carry_the_user_agent_and_the_configured_auth(server, tmp_path):
    from volumetool import __version__

    path = volume(tmp_path)
    compact(
        [str(path)],
        request(
            server,
            model_settings={
                "auth": "api-key",
                "api_version": "2024-10-21",
                "max_tokens_param": "max_completion_tokens",
            },
            force=True,
            key="k0",
        ),
    )
    [sent] = server.requests
    assert sent["headers"]["user-agent"] == f"volumetool/{__version__}"
    assert sent["headers"]["api-key"] == KEY and "authorization" not in sent["headers"]
    assert sent["query"] == {"api-version": ["2024-10-21"]}
    assert sent["body"]["max_completion_tokens"] == 4096 and "max_tokens" not in sent["body"]


def test_anthropic_behind_a_bearer_gateway(server, tmp_path):
    path = volume(tmp_path)
    compact([str(path)], request(server, "anthropic", model_settings={"auth": "bearer"}))
    [sent] = server.requests
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in sent["headers"]
    assert sent["headers"]["anthropic-version"] == "2023-06-01"


class Exploding(httpx.AsyncBaseTransport):
    """The network layer failing in ways no server answer can: the pool raising an
    ExceptionGroup, a bug raising anything at all."""

    def __init__(self, errors: list[BaseException | None]) -> None:
        self.errors = errors
        self.real = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        return await self.real.handle_async_request(request)

    async def aclose(self) -> None:
        await self.real.aclose()


def test_one_odd_answer_never_aborts_the_cron_pass(server, tmp_path):
    """Every kind of surprise becomes one thread's failed row; the others are compacted and
    every thread has its outcome."""
    path = volume(tmp_path, threads=8)
    server.queue("gzip_garbage", "retry_after_soon", None, "deep_json", "surrogate", None)
    transport = Exploding(
        [
            None,
            None,
            None,
            None,
            None,
            None,
            ExceptionGroup("connection pool", [OSError("pool closed"), RuntimeError("x")]),
            RuntimeError("a bug in a transport"),
        ]
    )
    outcomes, code = compact(
        [str(path)], request(server, concurrency=1, timeout=5.0), transport=transport
    )
    assert code == 1
    assert len(outcomes) == 8 and len({o.session_id for o in outcomes}) == 8
    by_status: dict[str, int] = {}
    for outcome in outcomes:
        by_status[outcome.status] = by_status.get(outcome.status, 0) + 1
    assert by_status.get("compacted", 0) >= 3 and by_status.get("failed", 0) >= 4
    dump = table_dump(path)
    failed_runs = [r for r in dump["runs"] if r[2] == "compaction" and r[4] == "error"]
    assert len(failed_runs) == by_status["failed"]


def test_a_fold_too_long_for_the_model_is_summarized_in_parts(server, tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    s = due_thread(w, "long", turns=40)
    w.close()
    server.context_limit = 5_000  # characters of conversation the "model" takes
    answers = iter(f"Summary after part {n}: deploy/values.yaml, PR #204." for n in range(1, 99))
    server.answer = lambda body: next(answers)
    # each call reports its own prompt size: 1000 + its place among the requests
    server.on_request = lambda body: server.usage.update(input=1000 + len(server.requests))
    before = table_dump(w.path)
    try:
        [outcome], code = compact([str(w.path)], request(server))
    finally:
        server.usage["input"] = 1200
    assert (outcome.status, code) == ("compacted", 0), outcome
    accepted = [r for r in server.requests if r["fault"] is None]
    refused = [r for r in server.requests if r["fault"] == "context_length"]
    assert len(accepted) >= 2 and refused  # first too long, then parts that fit
    # every part carries the summary so far, and every folded message reaches the model once
    for n, sent in enumerate(accepted[1:], 1):
        assert f"Summary after part {n}:" in server.conversation(sent["body"])
    sent_text = "\n".join(server.conversation(r["body"]) for r in accepted)
    folded = [r for r in table_dump(w.path)["messages"] if r[7] is not None]
    assert folded
    position = 0
    for message in folded:
        if message[3]:
            position = sent_text.index(message[3], position)  # in order
    [(summary,)] = [(r[4],) for r in table_dump(w.path)["sessions"] if r[0] == s]
    assert summary == f"Summary after part {len(accepted)}: deploy/values.yaml, PR #204."
    [run] = [r for r in table_dump(w.path)["runs"] if r[2] == "compaction"]
    figures = [1001 + n for n, r in enumerate(server.requests) if r["fault"] is None]
    assert run[5] == sum(figures) and run[6] == 80 * len(accepted)  # every call counted
    assert run[7] == figures[-1]  # last_input_tokens: the last call's prompt, not the first's
    # the server's tokens for each estimated one, over every call that answered (the next
    # plan for this model scales its estimates by it)
    from volumetool.compaction.plan import estimate_text_tokens

    estimated = sum(
        estimate_text_tokens(m["content"]) for r in accepted for m in r["body"]["messages"]
    )
    [(scale,)] = rows(w.path, "SELECT tokens_per_estimate FROM compactions")
    assert scale == round(sum(figures) / estimated, 4)
    assert before["memories"] == table_dump(w.path)["memories"]


@pytest.mark.parametrize("fault", ["content_filter", "refusal", "truncated", "empty"])
def test_only_a_prompt_too_long_is_sent_again_in_parts(server, tmp_path, fault):
    """A fold large enough to halve, and an answer that is refused for another reason: one
    request, not one for each half (SPEC 6: a failure must not repeat)."""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "long", turns=40)
    w.close()
    server.fault = fault
    [outcome], code = compact([str(w.path)], request(server))
    assert (outcome.status, code) == ("failed", 1)
    assert len(server.requests) == 1


def test_a_malformed_answer_still_counts_its_tokens_and_names_its_request(server, tmp_path):
    """An OpenAI answer with an empty choices list is no summary, but its usage was billed:
    the run carries it (spend is data), and the error names the request for the provider."""
    path = volume(tmp_path)
    server.fault = "choices_empty"
    [outcome], code = compact([str(path)], request(server))
    assert (outcome.status, code) == ("failed", 1)
    assert "malformed response" in outcome.error and "request req_test_1" in outcome.error
    [run] = [r for r in table_dump(path)["runs"] if r[2] == "compaction"]
    assert (run[5], run[6]) == (1200, 80)


def test_an_answer_stopped_by_the_models_window_is_sent_again_in_parts(server, tmp_path):
    """Anthropic's stop_reason model_context_window_exceeded: the prompt left the answer no
    room, so the fold goes again in halves, as for a prompt too long."""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "long", turns=40)
    w.close()
    server.queue("window_exceeded")
    [outcome], code = compact([str(w.path)], request(server, "anthropic"))
    assert (outcome.status, code) == ("compacted", 0), outcome
    assert [r["fault"] for r in server.requests][:2] == ["window_exceeded", None]
    assert len(server.requests) >= 3  # the halves


def test_max_input_tokens_splits_before_any_refusal(server, tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "long", turns=30)
    w.close()
    [outcome], _ = compact([str(w.path)], request(server, max_input_tokens=6_000))
    assert outcome.status == "compacted"
    assert len(server.requests) >= 2
    assert all(r["fault"] is None for r in server.requests)


def test_a_cut_off_answer_is_not_a_prompt_too_long(server, tmp_path):
    """Only the endpoint's "prompt too long" splits a fold: a summary cut at the token limit
    is a failure of its own, after one request, however large the fold."""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "long", turns=40)
    w.close()
    server.fault = "truncated"
    [outcome], _ = compact([str(w.path)], request(server))
    assert outcome.status == "failed" and "cut off" in outcome.error
    assert len(server.requests) == 1


def test_each_part_names_its_place_among_the_parts(server, tmp_path):
    """A fold sent in parts says in each request which part it is, of how many (the model
    must know the summary so far covers what came before)."""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "long", turns=30)
    w.close()
    [outcome], _ = compact([str(w.path)], request(server, max_input_tokens=6_000))
    assert outcome.status == "compacted"
    total = len(server.requests)
    assert total >= 3
    for n, sent in enumerate(server.requests, 1):
        user = sent["body"]["messages"][-1]["content"]
        assert f"This is part {n} of {total} of the conversation to fold" in user


def test_a_prompt_too_long_is_halved_six_times_then_the_thread_fails(server, tmp_path):
    """SPEC 6 ("Long folds", and no failure repeating unbounded): each "prompt too long"
    halves the part, at most six times, so seven requests in all; every one of them in
    `runs`. The fold here is large enough that a 64th of it still makes a part."""
    from volumetool.compaction.summarize import MAX_HALVINGS

    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "huge", turns=600)
    w.close()
    server.fault = "context_length"
    [outcome], code = compact([str(w.path)], request(server))
    assert (outcome.status, code) == ("failed", 1)
    assert len(server.requests) == 1 + MAX_HALVINGS == 7
    sizes = [len(server.conversation(r["body"])) for r in server.requests]
    assert all(0.4 < b / a <= 0.5 for a, b in itertools.pairwise(sizes))  # halves
    assert "context_length_exceeded" in outcome.error and "smallest parts" not in outcome.error


def test_a_request_with_no_room_for_the_conversation_says_so_without_a_call(server, tmp_path):
    """The summary so far takes the room of the answer it will become: a previous summary as
    large as the whole request leaves no room for the conversation, which is said as it is,
    before any call (no "prompt too long" was ever answered)."""
    w = VolumeWriter(tmp_path / "agent.db")
    s = due_thread(w, "k0")
    w.conn.execute("UPDATE sessions SET summary = ? WHERE id = ?", ("word " * 64_000, s))
    w.close()
    [outcome], code = compact([str(w.path)], request(server, max_input_tokens=80_000))
    assert (outcome.status, code) == ("failed", 1)
    assert outcome.error.startswith("a request has room for only ")
    assert outcome.error.endswith(" conversation tokens; raise --max-input-tokens")
    assert server.requests == []


class ScriptedClient:
    """A model client that answers each call from a script: a Completion, or an exception."""

    def __init__(self, api: str, *script: object) -> None:
        from volumetool.model_client import Endpoint

        self.endpoint = Endpoint(api, "http://127.0.0.1:9/v1", "m", KEY, max_tokens=100, timeout=5)
        self.script = list(script)
        self.users: list[str] = []

    async def complete(self, system: str, user: str) -> object:
        self.users.append(user)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


@pytest.mark.parametrize("before", ["", "ok", "ok ok", "ok too_long", "too_long"])
def test_a_breaker_opened_after_a_paid_call_fails_the_thread_with_its_cost(before):
    """When another thread finds the endpoint unusable while this one is between calls (after
    a part, or after "prompt too long"), this thread is `failed` with what its calls cost (a
    run and an audit event); only a thread that sent nothing at all is merely skipped
    (SPEC 6: spend is data)."""
    import asyncio

    from volumetool.compaction.plan import Message
    from volumetool.compaction.summarize import Limits, SummaryFailed, summarize
    from volumetool.model_client import Completion, EndpointUnusable, ModelError
    from volumetool.usage import Usage

    steps = {
        "ok": Completion("Summary so far.", "stop", Usage(1000, 50, 1000)),
        "too_long": ModelError("HTTP 400: prompt is too long", too_long=True, usage=Usage(7, 0)),
    }
    script = [steps[step] for step in before.split()]
    client = ScriptedClient("openai", *script, EndpointUnusable("endpoint unusable: HTTP 401"))
    fold = [Message(n, "user", f"message {n} " + "word " * 1500) for n in range(1, 9)]
    with pytest.raises(SummaryFailed) as failed:
        asyncio.run(summarize(client, "Summarize.", None, fold, Limits(6_000, 1_000)))
    assert len(client.users) == len(script) + 1
    assert failed.value.unusable is (not script)
    paid = 1000 * before.count("ok") + 7 * before.count("too_long")
    assert failed.value.usage.input_tokens == (paid or None)


def test_an_answer_that_calls_a_tool_is_no_summary_even_when_it_says_stop():
    """vLLM and some proxies end an answer that calls a tool with finish_reason "stop": the
    tool call, not the finish reason, says it is no summary."""
    import asyncio

    from volumetool.compaction.plan import Message
    from volumetool.compaction.summarize import SummaryFailed, summarize
    from volumetool.model_client import Completion
    from volumetool.usage import Usage

    answer = Completion("Let me read the file first.", "stop", Usage(100, 5), tool_call=True)
    client = ScriptedClient("openai", answer)
    fold = [Message(1, "user", "Deploy 4471?"), Message(2, "assistant", "Done.")]
    with pytest.raises(SummaryFailed) as failed:
        asyncio.run(summarize(client, "Summarize.", None, fold))
    assert "tool call instead of a summary" in str(failed.value)
    assert failed.value.usage.input_tokens == 100


def test_a_summary_is_held_to_the_previous_summary_and_the_fold_together():
    """What a summary replaces is the previous summary and the fold: a second compaction's
    summary may be longer than the fold alone (it carries the history), never than both."""
    import asyncio

    from volumetool.compaction.plan import Message
    from volumetool.compaction.summarize import SummaryFailed, summarize
    from volumetool.model_client import Completion
    from volumetool.usage import Usage

    previous = "Earlier: the deploy of 4471 was approved by Ana. " * 20  # 1,000 characters
    fold = [Message(1, "user", "Deploy 4471?"), Message(2, "assistant", "Done.")]
    longer_than_the_fold = "Deploy 4471 approved by Ana and done. " * 10  # 380 characters
    client = ScriptedClient("openai", Completion(longer_than_the_fold, "stop", Usage(10, 5)))
    done = asyncio.run(summarize(client, "Summarize.", previous, fold))
    assert done.text == longer_than_the_fold.strip()
    client = ScriptedClient("openai", Completion("x" * 1_100, "stop", Usage(10, 5)))
    with pytest.raises(SummaryFailed, match="not shorter than what it replaces"):
        asyncio.run(summarize(client, "Summarize.", previous, fold))


def test_nothing_to_fold_is_said_without_a_call():
    import asyncio

    from volumetool.compaction.summarize import SummaryFailed, summarize

    client = ScriptedClient("openai")
    with pytest.raises(SummaryFailed, match=r"^nothing to summarize$"):
        asyncio.run(summarize(client, "Summarize.", None, []))
    assert client.users == []


def after_summary(path: Path, summary: str | None) -> Path:
    """A volume with one due thread (k0) whose earlier compaction left `summary`."""
    w = VolumeWriter(path)
    s = due_thread(w, "k0")
    w.conn.execute("UPDATE sessions SET summary = ? WHERE id = ?", (summary, s))
    w.close()
    return w.path


def test_a_dry_run_estimates_the_previous_summary_with_the_fold(server, tmp_path):
    """What a compaction would replace is the previous summary and the fold: a previous
    summary of 4,000 characters adds its 1,000 tokens (a token is about four characters) to
    the estimate a dry run lists."""
    estimates = []
    for n, summary in enumerate((None, "Earlier: " + "x" * 3_991)):
        path = after_summary(tmp_path / f"agent{n}.db", summary)
        [outcome], code = compact([str(path)], request(server, dry_run=True))
        assert (outcome.status, code, outcome.model) == ("would_compact", 0, "tiny")
        estimates.append(outcome.estimated_tokens)
    assert estimates[1] - estimates[0] == 1_000
    assert server.requests == []


def test_the_answer_keeps_room_of_max_summary_tokens_in_every_request(server, tmp_path):
    """--max-summary-tokens is room the answer needs inside --max-input-tokens: the more room
    it takes, the smaller each part and the more parts; every request's estimate (a token
    about four characters) plus that room stays within the limit."""
    sent = {}
    for room in (500, 6_000):
        server.requests.clear()
        w = VolumeWriter(tmp_path / f"agent{room}.db")
        due_thread(w, "long", turns=30)
        w.close()
        [outcome], _ = compact(
            [str(w.path)], request(server, max_input_tokens=8_000, max_summary_tokens=room)
        )
        assert outcome.status == "compacted", outcome
        for r in server.requests:
            chars = sum(len(m["content"]) for m in r["body"]["messages"])
            assert chars / 4 + room <= 8_000
        sent[room] = len(server.requests)
    assert sent[6_000] > sent[500] >= 1


def test_every_outcome_is_reported_as_it_is_done(server, tmp_path):
    """The progress bar and --nl print each thread's outcome as it is done (compact's
    on_done): every outcome, each once, the same objects the run returns."""
    path = volume(tmp_path, threads=3)
    seen, planned = [], []
    outcomes, code = compact(
        [str(path)], request(server), on_planned=planned.append, on_done=seen.append
    )
    assert code == 0 and planned == [3]  # the progress bar's total: the calls to make
    assert sorted(seen, key=lambda o: o.session_id) == outcomes
    assert [o.status for o in seen] == ["compacted"] * 3


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_every_outcome_is_reported_as_it_is_decided(server, tmp_path, dry_run):
    """on_done gets each thread's outcome as it is done (a --dry-run's as it is planned),
    on_skipped each thread or volume the pass leaves as soon as that is decided: between
    them every outcome the run returns, each once (--nl writes them as they come; after
    Ctrl-C they are what the pass had decided)."""
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "k0")
    due_thread(w, "small", turns=3)  # nothing worth folding
    due_thread(w, "k1")
    w.close()
    done, skipped = [], []
    outcomes, code = compact(
        [str(w.path), str(tmp_path / "missing.db")],
        request(server, dry_run=dry_run),
        on_done=done.append,
        on_skipped=skipped.append,
    )
    assert code == 2  # the missing volume
    assert sorted(map(id, done + skipped)) == sorted(map(id, outcomes))
    assert sorted(o.conversation_key or "" for o in skipped) == ["", "small"]
    expected = "would_compact" if dry_run else "compacted"
    assert sorted((o.conversation_key, o.status) for o in done) == [
        ("k0", expected),
        ("k1", expected),
    ]


def test_the_first_calls_go_out_before_the_last_thread_is_planned(server, tmp_path, monkeypatch):
    """Calls start as jobs are planned (run.summarize_all): a cron pass over thousands of
    threads does not wait for the last of them to be read before its first call."""
    from volumetool.compaction import run

    path = volume(tmp_path, threads=6)
    events: list[str] = []
    planned, called = run.plan_fold, run.summarize
    monkeypatch.setattr(run, "plan_fold", lambda live: events.append("plan") or planned(live))

    async def calling(*args, **kwargs):
        events.append("call")
        return await called(*args, **kwargs)

    monkeypatch.setattr(run, "summarize", calling)
    outcomes, code = compact([str(path)], request(server, concurrency=2))
    assert code == 0 and [o.status for o in outcomes] == ["compacted"] * 6
    assert events.count("plan") == 6 and events.count("call") == 6
    last_planned = len(events) - 1 - events[::-1].index("plan")
    assert events.index("call") < last_planned, events


def test_answers_that_come_back_while_planning_wait_to_be_written(server, tmp_path, monkeypatch):
    """A volume is planned in one read snapshot on its connection: an answer that comes back
    before the planning is over is written after it, never inside that snapshot."""
    import time

    from volumetool.compaction import run

    path = volume(tmp_path, threads=40)
    events: list[str] = []
    read, called = run.thread_facts, run.summarize

    def slow(conn, session_id):
        time.sleep(0.01)  # the loop runs the calls under way between two threads
        events.append("plan")
        return read(conn, session_id)

    async def answered(*args, **kwargs):
        summary = await called(*args, **kwargs)
        events.append("answer")
        return summary

    monkeypatch.setattr(run, "thread_facts", slow)
    monkeypatch.setattr(run, "summarize", answered)
    outcomes, code = compact([str(path)], request(server, concurrency=8))
    last_planned = len(events) - 1 - events[::-1].index("plan")
    assert events.index("answer") < last_planned  # the case this is about happened
    assert [o.status for o in outcomes] == ["compacted"] * 40, outcomes
    assert code == 0


def test_a_volume_that_fails_mid_way_keeps_the_jobs_it_planned(server, tmp_path, monkeypatch):
    """A volume whose reading fails after some of its threads were planned: those threads are
    compacted (their calls are under way), the volume's error is a skipped row of its own, and
    the next volume is planned as usual."""
    from volumetool.compaction import run
    from volumetool.errors import UnusableInput

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = volume(tmp_path / "a", threads=3), volume(tmp_path / "b", threads=2)
    loaded = run.load_thread
    seen: list[int] = []

    def failing(conn, session_id):
        seen.append(session_id)
        if len(seen) == 3:
            raise UnusableInput("the file went away")
        return loaded(conn, session_id)

    monkeypatch.setattr(run, "load_thread", failing)
    outcomes, code = compact([str(first), str(second)], request(server))
    rows = [(Path(o.volume).parent.name, o.conversation_key, o.status) for o in outcomes]
    assert rows == [
        ("a", None, "skipped"),
        ("a", "k0", "compacted"),
        ("a", "k1", "compacted"),
        ("b", "k0", "compacted"),
        ("b", "k1", "compacted"),
    ]
    assert "the file went away" in outcomes[0].error and code == 2


def test_a_bug_while_planning_shows_after_the_calls_made_are_written(server, tmp_path, monkeypatch):
    """A surprise while planning stops the run as an internal error, but only once the calls
    already made are written (their cost is in `runs`), and nothing waits for ever."""
    import threading

    from volumetool.compaction import run

    path = volume(tmp_path, threads=5)
    planned = run.plan_fold
    seen: list[int] = []

    def buggy(live):
        seen.append(1)
        if len(seen) == 3:
            raise RuntimeError("a bug")
        return planned(live)

    monkeypatch.setattr(run, "plan_fold", buggy)
    raised: list[BaseException] = []

    def compacting() -> None:
        try:
            compact([str(path)], request(server, concurrency=2))
        except BaseException as exc:  # what reaches the caller is the point
            raised.append(exc)

    worker = threading.Thread(target=compacting, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "compact waited for ever"
    assert [type(e) for e in raised] == [RuntimeError]
    runs = table_dump(path, ["runs"])["runs"]
    assert len(server.requests) == 2
    assert sum("compaction" in row and "ok" in row for row in runs) == 2, runs


def test_every_volume_is_locked_before_the_first_call(server, tmp_path):
    """A volume whose lock another compaction holds is waited for (--wait) before any call
    goes out: a wait once calls are under way would hold them up past their --timeout."""
    import threading
    import time

    from volumetool.volume import volume_lock

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = volume(tmp_path / "a", threads=30), volume(tmp_path / "b", threads=1)
    released: list[float] = []
    calls: list[float] = []
    server.on_request = lambda body: calls.append(time.monotonic())
    holding = threading.Event()

    def hold() -> None:
        with volume_lock(second, 0):
            holding.set()
            time.sleep(0.5)
            released.append(time.monotonic())

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(5)
    outcomes, code = compact([str(first), str(second)], request(server, wait=5))
    holder.join()
    assert code == 0 and [o.status for o in outcomes] == ["compacted"] * 31
    assert min(calls) > released[0]


def test_a_bad_key_skips_the_other_threads_naming_the_model(server, tmp_path):
    """The threads skipped once the endpoint is unusable are listed with the model that
    would have written their summaries, like every other row."""
    path = volume(tmp_path, threads=6)
    server.fault = "401"
    outcomes, code = compact([str(path)], request(server, concurrency=1))
    assert code == 1
    assert [o.status for o in outcomes] == ["failed"] + ["skipped"] * 5
    assert {o.model for o in outcomes} == {"tiny"}


def test_a_bug_while_summarizing_is_the_threads_failure_with_its_times(
    server, tmp_path, monkeypatch
):
    """Containment (SPEC 6): an exception nobody foresaw while a thread is summarized becomes
    that thread's failed run, which says what was raised and when the attempt ended."""
    from volumetool.compaction import run

    async def broken(*args, **kwargs):
        raise LookupError("a bug in the summarizer")

    monkeypatch.setattr(run, "summarize", broken)
    path = volume(tmp_path)
    [outcome], code = compact([str(path)], request(server))
    assert (outcome.status, code) == ("failed", 1)
    assert outcome.error == "internal error: LookupError: a bug in the summarizer"
    assert outcome.model == "tiny"
    [row] = [r for r in table_dump(path)["runs"] if r[2] == "compaction"]
    assert row[4] == "error" and row[8] == outcome.error
    assert row[9] <= row[10]  # started_at, finished_at: both stamped


def test_a_failed_thread_waits_for_its_fact_reading_before_it_is_written(
    server, tmp_path, monkeypatch
):
    """The fold's facts are read in a thread while the model writes; a summary request that
    fails at once does not leave that reading running behind the thread's outcome (a thread
    cannot be cancelled: it is waited for)."""
    import threading
    import time

    from volumetool.compaction import run

    finished = threading.Event()
    at_write = []

    def slow_facts(previous, fold, system=""):
        time.sleep(0.3)
        finished.set()
        return []

    real_finish = run.finish

    def finish(job, ending):
        at_write.append(finished.is_set())
        return real_finish(job, ending)

    monkeypatch.setattr(run, "fold_facts", slow_facts)
    monkeypatch.setattr(run, "finish", finish)
    server.fault = "empty"
    [outcome], _ = compact([str(volume(tmp_path))], request(server))
    assert outcome.status == "failed" and at_write == [True]


def test_the_folds_facts_are_read_one_fold_at_a_time_in_one_thread(server, tmp_path, monkeypatch):
    """Reading a fold's facts is CPU work under the GIL: a second thread would not read
    faster, only take turns with the event loop that sends and receives every request."""
    import threading
    import time

    from volumetool.compaction import run

    lock, active, most, names = threading.Lock(), [0], [0], set()
    real = run.fold_facts

    def counted(previous, fold, system=""):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
            names.add(threading.current_thread().name)
        time.sleep(0.02)
        try:
            return real(previous, fold, system)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(run, "fold_facts", counted)
    outcomes, code = compact([str(volume(tmp_path, threads=6))], request(server, concurrency=6))
    assert code == 0 and [o.status for o in outcomes] == ["compacted"] * 6
    assert most == [1] and len(names) == 1, (most, names)
    assert all(o.retention is not None for o in outcomes)


def test_concurrency_above_the_pools_default_is_honoured(server, tmp_path):
    """--concurrency N means N model calls in flight, also past 16 (the HTTP client's own
    default pool size): the connection pool is sized to it."""
    path = volume(tmp_path, threads=20)
    server.latency, server.max_in_flight = 0.5, 0
    try:
        outcomes, code = compact([str(path)], request(server, concurrency=20, timeout=10.0))
    finally:
        server.latency = 0.0
    assert code == 0 and len(outcomes) == 20
    assert server.max_in_flight == 20


def test_retention_is_the_share_of_facts_kept_to_four_decimals(server, tmp_path):
    """SPEC 10: each result carries `retention` (0-1), the share of the fold's hard facts the
    summary kept, and `missing_facts`; written to four decimals (two of three: 0.6667)."""
    path = tickets_thread(tmp_path / "agent.db", 3)
    server.answer = lambda body: "Closed tickets OPS-4471 and OPS-4472."
    [outcome], code = compact([str(path)], request(server, min_fold_tokens=0))
    assert (outcome.status, code) == ("compacted", 0), outcome
    assert outcome.retention == 0.6667
    assert outcome.missing_facts == ["OPS-4473"]


@pytest.mark.parametrize("ending", ["compacted", "failed", "conflict"])
def test_every_ending_reports_the_model_and_tokens_its_run_row_holds(server, tmp_path, ending):
    """SPEC 6 (spend): the result line of a thread shows what its call cost, the same model
    and tokens as its run row, whether it was compacted, failed or found in conflict; the
    compaction's audit event carries its retention and missing facts."""
    path = volume(tmp_path)
    if ending == "failed":
        server.fault = "empty"
    if ending == "conflict":

        def agent_edits(body):
            w = VolumeWriter(path)
            w.conn.execute("UPDATE messages SET content = 'edited' WHERE role = 'user'")
            w.close()

        server.on_request = agent_edits
    [outcome], _ = compact([str(path)], request(server))
    assert outcome.status == ending
    [row] = [r for r in table_dump(path)["runs"] if r[2] == "compaction"]
    assert (outcome.run_id, outcome.model, outcome.input_tokens, outcome.output_tokens) == (
        row[0],
        row[3],
        row[5],
        row[6],
    )
    assert outcome.model == "tiny" and outcome.input_tokens > 0
    if ending == "compacted":
        [event] = [a for a in table_dump(path)["audit"] if a[2] == "compaction"]
        detail = json.loads(event[3])
        assert detail["retention"] == outcome.retention
        assert detail["missing_facts"] == outcome.missing_facts != []


def test_saved_tokens_count_the_previous_summary_it_replaces(server, tmp_path):
    """SPEC 10: `saved_tokens` is the estimated tokens replaced minus the summary's; what a
    second compaction replaces holds the previous summary, so a previous summary of 4,000
    characters saves 1,000 tokens more."""
    saved = []
    for n, summary in enumerate((None, "Earlier: " + "x" * 3_991)):
        path = after_summary(tmp_path / f"agent{n}.db", summary)
        server.answer = lambda body: "The user asked about deploy/values.yaml; answered."
        [outcome], _ = compact([str(path)], request(server))
        assert outcome.status == "compacted", outcome
        saved.append(outcome.saved_tokens)
    assert saved[1] - saved[0] == 1_000


@pytest.mark.parametrize(
    "raised", ["busy_then_written", "busy_after_failure", "busy_twice", "schema", "bug"]
)
def test_a_commit_that_cannot_be_written_is_the_threads_outcome(
    server, tmp_path, monkeypatch, raised
):
    """Containment and spend (SPEC 6, 13): a commit that finds the file locked past the busy
    timeout records the call's cost as a failed run once it can (exit 4) — at once, else at
    the end of the pass (`busy_twice`); any other error in the commit is
    the thread's failure with its exit code, and a bug is an internal error, never the end of
    the pass."""
    from volumetool.compaction import run
    from volumetool.errors import Busy, SchemaMismatch

    real = run.write_ending
    endings = []

    def write_ending(job, ending):
        endings.append(ending)
        if raised in ("busy_then_written", "busy_after_failure") and len(endings) == 1:
            raise Busy("the volume is busy", "try again later")
        if raised == "busy_twice":
            raise Busy("the volume is busy")
        if raised == "schema":
            raise SchemaMismatch("the schema changed under the commit")
        if raised == "bug":
            raise KeyError("x")
        return real(job, ending)

    monkeypatch.setattr(run, "write_ending", write_ending)
    if raised == "busy_after_failure":
        server.fault = "empty"
    path = volume(tmp_path)
    [outcome], code = compact([str(path)], request(server))
    expected = {
        "busy_then_written": ("failed", 4, "not committed: the volume is busy — try again later"),
        "busy_after_failure": ("failed", 4, "not committed: the volume is busy — try again later"),
        "busy_twice": ("failed", 4, "not committed: the volume is busy"),
        "schema": ("failed", 3, "the schema changed under the commit"),
        "bug": ("failed", 1, "internal error: KeyError: 'x'"),
    }[raised]
    assert (outcome.status, code, outcome.error) == expected
    assert (outcome.model, outcome.conversation_key) == ("tiny", "k0")
    assert outcome.folded_messages > 0
    runs = [r for r in table_dump(path)["runs"] if r[2] == "compaction"]
    if raised == "busy_twice":  # written at the end of the pass, with the call's usage
        [row] = runs
        usage = endings[0].summary.usage
        assert row[4] == "error" and row[8] == outcome.error and row[3] == "tiny"
        assert (row[5], row[6]) == (usage.input_tokens, usage.output_tokens)
        assert (outcome.input_tokens, outcome.run_id) == (usage.input_tokens, row[0])
        assert outcome.input_tokens > 0
    elif raised.startswith("busy_"):
        [row] = runs
        assert row[4] == "error" and row[8] == outcome.error and row[3] == "tiny"
        assert outcome.input_tokens == row[5] and outcome.input_tokens > 0
        retry = endings[1]
        assert (retry.model, retry.usage.input_tokens) == ("tiny", row[5])
        assert retry.kept is endings[0].kept
        if raised == "busy_then_written":
            assert outcome.retention == round(retry.kept.retention, 4)
    else:
        assert runs == []


def tickets_thread(
    path: Path, tickets: int, summary: str | None = None, fact: str = "ticket OPS-{}"
) -> Path:
    """A due thread whose fold asks to close `tickets` tickets, OPS-4471 onwards (its hard
    facts; `fact` names them otherwise), after a previous summary, with two short turns kept
    after it."""
    w = VolumeWriter(path)
    s = w.thread("k0")
    w.conn.execute("UPDATE sessions SET summary = ? WHERE id = ?", (summary, s))
    for n in range(tickets):
        w.message(s, "user", f"Please close {fact.format(4471 + n)} today.")
        w.message(s, "assistant", "Closed.")
    for _ in range(2):
        w.message(s, "user", "Anything else?")
        w.message(s, "assistant", "No.")
    w.run(s, input_tokens=60_000, output_tokens=300, last_input_tokens=60_000)
    w.close()
    return path


def test_min_retention_fails_a_summary_below_it_with_what_it_lost(server, tmp_path):
    """SPEC 10: `--min-retention R` makes a summary below R (not at R) a failure, with the
    missing facts in the error (one line, cut at 300 characters), its cost in the run and
    the transcript untouched."""
    server.answer = lambda body: "Closed tickets OPS-4471, OPS-4472 and OPS-4473."
    at = tickets_thread(tmp_path / "at.db", 4)  # three of four kept: 0.75, exactly
    [outcome], _ = compact([str(at)], request(server, min_fold_tokens=0, min_retention=0.75))
    assert outcome.status == "compacted" and outcome.retention == 0.75
    server.answer = lambda body: "Closed tickets OPS-4471 and OPS-4472."
    below = tickets_thread(tmp_path / "below.db", 3)
    before = table_dump(below)["messages"]
    [outcome], code = compact([str(below)], request(server, min_fold_tokens=0, min_retention=0.7))
    assert (outcome.status, code) == ("failed", 1)
    assert outcome.error == (
        "the summary kept 67% of the fold's hard facts, below --min-retention 0.7; "
        "missing: OPS-4473"
    )
    assert (outcome.model, outcome.retention) == ("tiny", 0.6667) and outcome.input_tokens > 0
    assert table_dump(below)["messages"] == before
    url = "https://runbooks.example.com/ops/{}/restart-procedure"
    many = tickets_thread(tmp_path / "many.db", 12, fact=url)
    [outcome], _ = compact([str(many)], request(server, min_fold_tokens=0, min_retention=0.5))
    lost = outcome.error.split("; missing: ", 1)[1].split("; ", 1)[0]
    assert len(lost) == 300 and lost.endswith("…")
    assert lost.startswith(", ".join(url.format(4471 + n) for n in range(4)))


def test_the_previous_summarys_facts_are_held_to_the_new_summary(server, tmp_path):
    """What a summary replaces includes the previous summary: a fact only it held, and the
    new summary drops, is missing."""
    server.answer = lambda body: "Closed tickets OPS-4471 and OPS-4472."
    path = tickets_thread(tmp_path / "agent.db", 2, summary="Earlier: ticket OPS-1001 closed.")
    [outcome], _ = compact([str(path)], request(server, min_fold_tokens=0))
    assert outcome.status == "compacted" and outcome.missing_facts == ["OPS-1001"]


def stamp(minutes_ago: float, zone: bool = True) -> str:
    moment = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (".000Z" if zone else "")


def compaction_run(w: VolumeWriter, s: int, status: str, minutes_ago: float, **values) -> int:
    at = stamp(minutes_ago, values.pop("zone", True))
    return w.insert(
        "runs",
        session_id=s,
        trigger="compaction",
        model="tiny",
        status=status,
        error=None if status == "ok" else "HTTP 500",
        started_at=at,
        finished_at=at,
        **values,
    )


def test_back_off_counts_the_failures_since_the_last_standing_compaction(server, tmp_path):
    """SPEC 6 (Spend): a thread whose latest n compaction runs since its last successful one
    all failed waits min(15 min x 2^(n-1), 24 h) after the last: an agent run between two
    failures does not restart the count, a successful compaction does."""
    w = VolumeWriter(tmp_path / "agent.db")
    s = due_thread(w, "k0")
    compaction_run(w, s, "ok", 120)
    compaction_run(w, s, "error", 60)
    w.run(s, input_tokens=60_000, last_input_tokens=60_000)  # the agent went on: due again
    compaction_run(w, s, "error", 20)  # two failures: 30 minutes' wait, 10 left
    w.close()
    [outcome], _ = compact([str(w.path)], request(server))
    assert outcome.status == "skipped" and "(--force tries now)" in outcome.error
    assert (outcome.conversation_key, outcome.session_id) == ("k0", s)
    assert server.requests == []


def test_a_failed_compaction_that_is_the_volumes_first_run_counts(server, tmp_path):
    w = VolumeWriter(tmp_path / "agent.db")
    s = due_thread(w, "k0")
    w.conn.execute("UPDATE runs SET id = 10 WHERE id = 1")
    compaction_run(w, s, "error", 5, id=1)  # one failure 5 minutes ago: 15 minutes' wait
    w.close()
    [outcome], _ = compact([str(w.path)], request(server))
    assert outcome.status == "skipped" and "(--force tries now)" in outcome.error


def test_a_failure_time_without_a_zone_starts_no_back_off(server, tmp_path):
    """A failed run whose time has no zone cannot be placed against now: it starts no wait
    (the thread is tried, not held back by a time that may be hours off)."""
    w = VolumeWriter(tmp_path / "agent.db")
    s = due_thread(w, "k0")
    compaction_run(w, s, "error", 1, zone=False)
    w.close()
    [outcome], code = compact([str(w.path)], request(server))
    assert (outcome.status, code) == ("compacted", 0), outcome


def test_the_endpoint_comes_from_overrides_then_the_config_then_the_apis_defaults(monkeypatch):
    """SPEC 6: --api naming another API than the config's takes that API's own base URL and
    key variable (the config's are for its API); a config without base_url gets its API's."""
    from volumetool.compaction.run import resolve_endpoint

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-XXXX-0123456789")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-XXXX-0123456789")
    monkeypatch.setenv("PROXY_KEY", "sk-proxy-0123456789")
    proxy = ModelSettings(name="gpt-4.1", base_url="http://127.0.0.1:9/v1", api_key_env="PROXY_KEY")

    def resolved(settings: ModelSettings, **values) -> tuple[str, str, str]:
        config = AgentConfig(MemorySettings("thread", True, 50_000), settings)
        _, endpoint = resolve_endpoint(Request(config=config, **values), need_key=True)
        return endpoint.api, endpoint.base_url, endpoint.api_key

    assert resolved(proxy) == ("openai", "http://127.0.0.1:9/v1", "sk-proxy-0123456789")
    assert resolved(proxy, api="anthropic", model="claude-haiku-4-5") == (
        "anthropic",
        "https://api.anthropic.com",
        "sk-ant-XXXX-0123456789",
    )
    assert resolved(ModelSettings(name="gpt-4.1")) == (
        "openai",
        "https://api.openai.com/v1",
        "sk-XXXX-0123456789",
    )


def test_a_base_url_that_cannot_work_names_the_setting_to_fix(monkeypatch):
    """A base URL that cannot work is a usage error before any volume is touched, saying
    which setting to fix (--base-url or model.base_url) and never the URL itself."""
    from volumetool.compaction.run import resolve_endpoint
    from volumetool.errors import UnusableInput

    monkeypatch.setenv("OPENAI_API_KEY", "sk-0123456789")
    secret = "http://user:hunter2@127.0.0.1:9/v1"
    for settings, values, where in (
        (ModelSettings(name="m", base_url=secret), {}, "model.base_url"),
        (ModelSettings(name="m"), {"base_url": secret}, "--base-url"),
    ):
        config = AgentConfig(MemorySettings("thread", True, 50_000), settings)
        with pytest.raises(UnusableInput) as raised:
            resolve_endpoint(Request(config=config, **values), need_key=True)
        assert raised.value.hint == f"fix {where}" and "hunter2" not in str(raised.value)


def test_the_endpoint_is_every_setting_the_request_and_config_give(monkeypatch):
    """Each setting reaches the endpoint: model, URL, key, --max-summary-tokens, --timeout,
    and the config's auth, api-version and max_tokens_param for its own API (another API
    named by --api takes that API's own)."""
    from volumetool.compaction.run import resolve_endpoint
    from volumetool.model_client import Endpoint

    monkeypatch.setenv("AZURE_KEY", "az-0123456789")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-0123456789")
    azure = ModelSettings(
        name="gpt-4.1",
        small="o4-mini",
        base_url="https://example.openai.azure.com/openai/deployments/o4-mini",
        api_key_env="AZURE_KEY",
        auth="api-key",
        api_version="2024-10-21",
        max_tokens_param="max_completion_tokens",
    )
    config = AgentConfig(MemorySettings("thread", True, 50_000), azure)
    request = Request(config=config, timeout=7.5, max_summary_tokens=1234)
    assert resolve_endpoint(request, need_key=True) == (
        "o4-mini",
        Endpoint(
            "openai",
            "https://example.openai.azure.com/openai/deployments/o4-mini",
            "o4-mini",
            "az-0123456789",
            1234,
            7.5,
            auth="api-key",
            api_version="2024-10-21",
            max_tokens_param="max_completion_tokens",
        ),
    )
    other = Request(config=config, api="anthropic", model="claude-haiku-4-5", timeout=7.5)
    assert resolve_endpoint(other, need_key=True)[1] == Endpoint(
        "anthropic",
        "https://api.anthropic.com",
        "claude-haiku-4-5",
        "sk-ant-0123456789",
        4096,
        7.5,
    )


def test_a_key_variable_that_is_unset_or_empty_is_a_usage_error(monkeypatch):
    from volumetool.compaction.run import resolve_endpoint
    from volumetool.errors import UnusableInput

    config = AgentConfig(
        MemorySettings("thread", True, 50_000), ModelSettings(name="m", api_key_env="MY_KEY")
    )
    for value in (None, ""):
        if value is None:
            monkeypatch.delenv("MY_KEY", raising=False)
        else:
            monkeypatch.setenv("MY_KEY", value)
        with pytest.raises(UnusableInput) as raised:
            resolve_endpoint(Request(config=config), need_key=True)
        assert (raised.value.message, raised.value.hint) == (
            "$MY_KEY is not set",
            "export the API key in that variable",
        )
    assert resolve_endpoint(Request(config=config), need_key=False) == ("m", None)


def test_a_key_a_header_cannot_carry_is_named_by_its_variable(monkeypatch):
    from volumetool.compaction.run import resolve_endpoint
    from volumetool.errors import UnusableInput

    config = AgentConfig(
        MemorySettings("thread", True, 50_000), ModelSettings(name="m", api_key_env="MY_KEY")
    )
    for key in ("sk-0123\n", " sk-0123", "sk-ключ"):  # (the environment cannot hold a NUL)
        monkeypatch.setenv("MY_KEY", key)
        with pytest.raises(UnusableInput) as raised:
            resolve_endpoint(Request(config=config), need_key=True)
        assert raised.value.message.startswith("$MY_KEY holds characters an HTTP header ")
        assert key.strip() not in str(raised.value)


def test_usage_errors_of_a_compaction_request(monkeypatch):
    """Each is exit 2 before anything is touched, with its own message; the bounds are
    inclusive where the words say so (a share from 0 to 1, a timeout above 0)."""
    from volumetool.compaction.plan import estimate_text_tokens
    from volumetool.compaction.prompt import MIN_PART_TOKENS, system_prompt
    from volumetool.compaction.run import check_request
    from volumetool.compaction.summarize import DEFAULT_TOKEN_SCALE
    from volumetool.errors import UnusableInput

    config = AgentConfig(MemorySettings("thread", True, 50_000), ModelSettings(name="m"))
    errors = {
        "--force needs --key: it compacts one named thread": [{"force": True}],
        "--timeout must be a finite number of seconds": [
            {"timeout": t} for t in (0, -1, float("inf"), float("nan"))
        ],
        "--min-retention is a share of the facts, from 0 to 1": [
            {"min_retention": r} for r in (-0.01, 1.01, 2)
        ],
    }
    for message, cases in errors.items():
        for values in cases:
            with pytest.raises(UnusableInput) as raised:
                check_request(Request(config=config, **values))
            assert raised.value.message == message, values
    for values in ({"timeout": 0.5}, {"min_retention": 0}, {"min_retention": 1}):
        check_request(Request(config=config, **values))
    for instructions in (None, "Keep every ticket id. " * 50):
        system = system_prompt(Request(config=config).prompt, instructions)
        estimated = estimate_text_tokens(system) + MIN_PART_TOKENS + 200
        least = math.ceil(estimated * DEFAULT_TOKEN_SCALE) + 1000  # until the server counted
        fits = Request(
            config=config,
            instructions=instructions,
            max_summary_tokens=1000,
            max_input_tokens=least,
        )
        check_request(fits)
        with pytest.raises(UnusableInput, match=f"at least {least:,}"):
            check_request(replace(fits, max_input_tokens=least - 1))


def test_key_compacts_that_thread_alone(server, tmp_path):
    path = volume(tmp_path, threads=3)
    outcomes, code = compact([str(path)], request(server, key="k1"))
    assert code == 0 and [(o.conversation_key, o.status) for o in outcomes] == [("k1", "compacted")]
    assert len(server.requests) == 1
    outcomes, code = compact([str(path)], request(server))
    assert sorted(o.conversation_key for o in outcomes if o.status == "compacted") == ["k0", "k2"]
    outcomes, code = compact([str(path)], request(server, key="typo"))
    assert code == 1 and [
        (o.conversation_key, o.session_id, o.status, o.error) for o in outcomes
    ] == [("typo", None, "skipped", "no active thread under this key")]
    assert len(server.requests) == 3


def test_with_compaction_disabled_nothing_is_due(server, tmp_path):
    path = volume(tmp_path, threads=2)
    disabled = AgentConfig(MemorySettings("thread", False, None), request(server).config.model)
    outcomes, code = compact([str(path)], replace(request(server), config=disabled))
    assert (outcomes, code) == ([], 0) and server.requests == []


def test_each_reason_a_named_thread_is_not_compacted_is_its_row(server, tmp_path):
    """SPEC 6: a thread named with --key that will not be compacted is one `skipped` row
    saying why, with its figures (exit 0: nothing went wrong); --force compacts it anyway,
    past the threshold and the back-off, but never folds the two kept turns."""
    w = VolumeWriter(tmp_path / "agent.db")
    low = due_thread(w, "low", tokens=10_000)
    backed = due_thread(w, "backed")
    compaction_run(w, backed, "error", 5)
    short = due_thread(w, "short", turns=2)
    small = w.thread("small")
    for n in range(4):
        w.message(small, "user", f"q{n}")
        w.message(small, "assistant", f"a{n}")
    w.run(small, input_tokens=60_000, last_input_tokens=60_000)
    w.close()

    def row(key: str, **values) -> dict:
        [outcome], code = compact([str(w.path)], request(server, key=key, **values))
        # A due thread backing off leaves the pass red (SPEC 13); the others are fine.
        assert code == (1 if outcome.reason == "backing_off" else 0) and outcome.model == "tiny"
        return {
            "key": outcome.conversation_key,
            "session": outcome.session_id,
            "status": outcome.status,
            "error": outcome.error,
            "figures": (outcome.last_input_tokens, outcome.threshold),
        }

    def skipped(key: str, session: int, error: str, figures=(60_000, 50_000)) -> dict:
        return {
            "key": key,
            "session": session,
            "status": "skipped",
            "error": error,
            "figures": figures,
        }

    assert row("low") == skipped(
        "low",
        low,
        "not due: 10,000 < 50,000 input tokens (--force compacts anyway)",
        (10_000, 50_000),
    )
    backing = row("backed")
    until = datetime.fromisoformat(backing["error"].split("next try at ")[1].split(" (")[0])
    assert backing == skipped("backed", backed, backing["error"])
    assert backing["error"].startswith("backing off after 1 failed compaction: next try at ")
    assert backing["status"] == "skipped"
    assert timedelta(minutes=9) < until - datetime.now(UTC) <= timedelta(minutes=10)
    assert row("short", force=True) == skipped(
        "short", short, "nothing to fold: the last two turns are kept"
    )
    worthless = row("small")
    assert (worthless["key"], worthless["session"]) == ("small", small)
    assert worthless["status"] == "skipped" and worthless["figures"] == (60_000, 50_000)
    assert worthless["error"].startswith("nothing worth folding: ~")
    assert worthless["error"].endswith(" tokens < --min-fold-tokens 200")
    assert server.requests == []
    assert row("low", force=True)["status"] == "compacted"
    assert row("backed", force=True)["status"] == "compacted"


def test_the_back_off_ends_at_its_moment(server, tmp_path):
    """Skipped *until* the last failure + 15 min: at that moment the thread is tried."""
    failed = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    for now, status in ((failed + timedelta(minutes=15), "compacted"), (failed, "skipped")):
        w = VolumeWriter(tmp_path / f"{status}.db")
        s = due_thread(w, "k0")
        at = "2026-11-30T12:00:00.000Z"
        w.insert(
            "runs",
            session_id=s,
            trigger="compaction",
            status="error",
            started_at=at,
            finished_at=at,
        )
        w.close()
        [outcome], _ = compact([str(w.path)], request(server, clock=lambda now=now: now))
        assert outcome.status == status


def test_a_fold_of_exactly_min_fold_tokens_is_folded(server, tmp_path):
    """SPEC 6: a fold estimated *under* --min-fold-tokens is skipped; one of exactly that
    many tokens is folded."""
    w = VolumeWriter(tmp_path / "agent.db")
    small = w.thread("small")
    for n in range(4):
        w.message(small, "user", f"q{n}")
        w.message(small, "assistant", f"a{n}")
    w.run(small, input_tokens=60_000, last_input_tokens=60_000)
    w.close()
    [skipped], _ = compact([str(w.path)], request(server, min_fold_tokens=10_000))
    folded = int(skipped.error.split("~")[1].split(" ")[0].replace(",", ""))
    [outcome], _ = compact([str(w.path)], request(server, min_fold_tokens=folded + 1))
    assert outcome.status == "skipped" and server.requests == []
    server.answer = lambda body: "Q."  # shorter than the tiny fold
    [outcome], _ = compact([str(w.path)], request(server, min_fold_tokens=folded))
    assert outcome.status == "compacted", outcome


def test_a_dry_run_waits_no_longer_than_the_busy_timeout(server, tmp_path):
    """A dry run reads; a file the agent holds locked (a rollback-journal file in the middle
    of a write) makes it wait --busy-timeout, then say busy (exit 4): a lock released after
    a second is still held at 0.2 s, and would not be at the default 5 s."""
    import sqlite3
    import threading

    path = volume(tmp_path)
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(1.0, conn.rollback)
    release.start()
    try:
        [outcome], code = compact([str(path)], request(server, dry_run=True, busy_timeout=0.2))
    finally:
        release.join()
        conn.close()
    assert (outcome.status, code) == ("skipped", 4) and "busy" in outcome.error


def test_a_volume_that_cannot_be_opened_is_its_row_and_the_others_go_on(server, tmp_path):
    path = volume(tmp_path, threads=1)
    missing = tmp_path / "nowhere" / "agent.db"
    outcomes, code = compact([str(missing), str(path)], request(server))
    assert [(o.volume, o.status) for o in outcomes] == [
        (str(missing), "skipped"),
        (str(path), "compacted"),
    ]
    assert str(missing) in outcomes[0].error and outcomes[0].exit_code == code == 2


def test_a_request_builds_its_retry_policy_from_plain_numbers():
    """`compact --retries N --max-retry-wait S` reach the library as numbers; the policy is
    built there (the command holds no HTTP plumbing); a policy given whole wins (tests)."""
    built = Request(retries=2, max_retry_wait=5.0).retry_policy()
    assert (built.attempts, built.max_retry_wait) == (3, 5.0)
    assert (Request().retry_policy().attempts, Request().retry_policy().max_retry_wait) == (4, 60.0)
    given = RetryPolicy(attempts=1)
    assert Request(retries=9, retry=given).retry_policy() is given

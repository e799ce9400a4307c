"""The model client against the real test server: retries, Retry-After, usage, typed errors."""

from __future__ import annotations

import asyncio

import pytest

from tests.model_server import ModelServer
from volumetool.model_client import Endpoint, ModelClient, ModelError, RetryPolicy

KEY = "sk-client-abcdefghijklmnopqrstuvwxyz012345"


@pytest.fixture
def server():
    with ModelServer() as s:
        yield s


def run(server, api="openai", attempts=4, timeout=5.0, jitter=1.0):
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    async def go():
        endpoint = Endpoint(api, server.url, "m", KEY, max_tokens=100, timeout=timeout)
        policy = RetryPolicy(attempts=attempts, sleep=sleep, jitter=lambda: jitter)
        async with ModelClient(endpoint, retry=policy) as client:
            return await client.complete("system", "user")

    try:
        return asyncio.run(go()), delays
    except ModelError as exc:
        return exc, delays


def test_retry_after_is_honoured(server):
    server.retry_after = "2"
    server.queue("429")
    completion, delays = run(server)
    assert completion.text == server.summary
    assert len(delays) == 1 and 2 <= delays[0] <= 2.5


def test_backoff_is_exponential_with_jitter(server):
    server.queue("503", "500", "503")
    completion, delays = run(server, jitter=1.0)
    assert completion.text
    assert delays == [0.5, 1.0, 2.0]
    server.queue("503", "500")
    _, delays = run(server, jitter=0.5)
    assert delays == [0.25, 0.5]


def test_retries_are_bounded(server):
    server.fault = "500"
    error, delays = run(server, attempts=3)
    assert isinstance(error, ModelError)
    assert len(server.requests) == 3 and len(delays) == 2
    assert error.status == 500 and "after 3 attempts" in str(error)


@pytest.mark.parametrize("fault", ["400", "401", "403", "413", "quota"])
def test_never_retried(server, fault):
    server.fault = fault
    error, delays = run(server)
    assert isinstance(error, ModelError) and not error.retryable
    assert len(server.requests) == 1 and delays == []


def test_errors_carry_status_type_and_request_id_but_never_the_key(server):
    server.fault = "401"
    error, _ = run(server)
    assert error.status == 401
    assert error.error_type == "invalid_api_key"
    assert error.request_id == "req_test_1"
    assert KEY not in str(error) and KEY[:10] not in str(error)
    assert KEY not in repr(Endpoint("openai", "u", "m", KEY))


def test_usage_is_none_when_not_reported(server):
    server.omit_usage = True
    for api in ("openai", "anthropic"):
        completion, _ = run(server, api=api)
        assert (completion.usage.input_tokens, completion.usage.output_tokens) == (None, None)


def test_anthropic_prompt_size_includes_cache_tokens(server):
    completion, _ = run(server, api="anthropic")
    assert completion.usage.input_tokens == 1200 + 30 + 70
    assert completion.usage.output_tokens == 80


def test_timeout_bounds_the_whole_request(server):
    server.fault = "hang"
    error, _ = run(server, attempts=1, timeout=0.3)
    assert isinstance(error, ModelError) and error.retryable
    assert "no response within 0.3s" in str(error)


def test_connection_refused_is_a_retryable_connection_error():
    async def go():
        endpoint = Endpoint("openai", "http://127.0.0.1:9", "m", KEY, timeout=2)

        async def sleep(_):
            return None

        async with ModelClient(endpoint, retry=RetryPolicy(attempts=2, sleep=sleep)) as client:
            return await client.complete("s", "u")

    with pytest.raises(ModelError, match="connection refused") as caught:
        asyncio.run(go())
    assert caught.value.attempts == 2  # retried: the server may be restarting
    assert caught.value.endpoint_wide  # but once retries are spent, nothing else will get through


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),
        ({"retry-after": "-5"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": ""}, None),
        ({"retry-after-ms": "-1"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00"}, None),  # no zone: unusable
    ],
)
def test_retry_after_reads_seconds_milliseconds_and_dates_and_nothing_else(headers, seconds):
    import httpx

    from volumetool.model_client import parse_retry_after

    assert parse_retry_after(httpx.Headers(headers)) == seconds


def test_a_cycle_of_exception_causes_is_read_once():
    from volumetool.model_client import connection_failure

    first, second = OSError("first"), ConnectionRefusedError("refused")
    first.__context__, second.__context__ = second, first
    failure = connection_failure(first, "POST http://x/chat/completions")
    assert failure.reason == "connection refused" and failure.endpoint_wide


def test_a_malformed_answer_still_carries_the_usage_it_reported(server):
    server.fault = "choices_empty"
    error, _ = run(server, attempts=1)
    assert isinstance(error, ModelError) and "empty choices" in str(error)
    assert (error.usage.input_tokens, error.usage.output_tokens) == (1200, 80)


def test_retry_after_waits_exactly_that_plus_a_quarter_of_the_jitter(server):
    server.retry_after = "2"
    server.queue("429")
    _, delays = run(server, jitter=1.0)
    assert delays == [2 + 0.5 / 4]


WHERE = "POST http://example.test/v1/chat/completions"


def chained(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


@pytest.mark.parametrize(
    ("failure", "reason", "endpoint_wide", "retryable"),
    [
        (
            chained(OSError("x"), __import__("socket").gaierror(-2, "x")),
            "DNS failure: the host does not resolve",
            True,
            False,
        ),
        (
            OSError("Temporary failure in name resolution"),
            "DNS failure: the host does not resolve",
            True,
            False,
        ),
        (
            OSError("[Errno -2] Name or service not known"),
            "DNS failure: the host does not resolve",
            True,
            False,
        ),
        (chained(OSError("x"), __import__("ssl").SSLError(1, "x")), "TLS failure", True, False),
        (OSError("[SSL: WRONG_VERSION_NUMBER] wrong version number"), "TLS failure", True, False),
        (OSError("certificate verify failed: self signed"), "TLS failure", True, False),
        (ConnectionRefusedError("refused"), "connection refused", True, True),
        (OSError("All connection attempts failed"), "connection refused", True, True),
        (OSError(110, "timed out"), "connection error (TimeoutError)", False, True),
        (OSError("reset by peer"), "connection error (OSError)", False, True),
    ],
)
def test_connection_failures_are_told_apart(failure, reason, endpoint_wide, retryable):
    from volumetool.model_client import connection_failure

    error = connection_failure(failure, WHERE)
    assert (error.reason, error.endpoint_wide, error.retryable) == (
        reason,
        endpoint_wide,
        retryable,
    )
    assert error.where == WHERE and str(error) == f"{reason} ({WHERE})"


def test_anthropic_answers_are_read_field_by_field():
    from volumetool.model_client import _anthropic, _Malformed

    usage = {"input_tokens": 10, "output_tokens": 2}
    plain = _anthropic(
        {"content": [{"type": "text", "text": "s"}], "stop_reason": "end_turn", "usage": usage},
        "r",
    )
    assert (plain.text, plain.tool_call, plain.usage.input_tokens) == ("s", False, 10)
    assert (plain.finish, plain.request_id) == ("end_turn", "r")
    for kind in ("tool_use", "server_tool_use"):
        called = _anthropic(
            {"content": [{"type": kind, "id": "t", "name": "f", "input": {}}], "usage": usage},
            "r",
        )
        assert called.tool_call is True and called.text is None
    odd = _anthropic({"content": [], "stop_reason": 5}, None)
    assert (odd.finish, odd.text, odd.tool_call) == (None, None, False)
    for broken in (
        {"content": None, "usage": usage},
        {"content": [{"type": "text"}], "usage": usage},
        {"content": ["not a block"], "usage": usage},
    ):
        with pytest.raises(_Malformed) as caught:
            _anthropic(broken, "r")
        assert caught.value.usage.input_tokens == 10 and str(caught.value)


def test_a_malformed_answer_names_its_request(server):
    server.fault = "malformed"
    error, _ = run(server, attempts=1)
    assert error.request_id == "req_test_1" and "request req_test_1" in str(error)

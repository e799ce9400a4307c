"""The model client against the real test server: retries, Retry-After, usage, typed errors;
then how it reads what went wrong, one input at a time: Retry-After in each form HTTP and the
providers use, the error bodies servers send, the exceptions a connection fails with, and the
status codes. Expected values come from the providers' documentation (OpenAI, Anthropic,
vLLM, LiteLLM, FastAPI) and from SPEC section 6 ("Endpoints"), not from the code."""

from __future__ import annotations

import asyncio
import errno
import json
import socket
import ssl
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.fixtures import KEY
from volumetool.model_client import (
    Breaker,
    Completion,
    Endpoint,
    EndpointUnusable,
    ModelClient,
    ModelError,
    RetryPolicy,
    connection_failure,
)
from volumetool.providers import PROVIDERS
from volumetool.providers.base import Malformed as _Malformed
from volumetool.providers.errors import classify, error_details, parse_retry_after, redact
from volumetool.usage import Usage

_openai, _anthropic = PROVIDERS["openai"].parse, PROVIDERS["anthropic"].parse


def run(server, api="openai", attempts=4, timeout=5.0, jitter=1.0, key=KEY):
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    async def go():
        endpoint = Endpoint(api, server.url, "m", key, max_tokens=100, timeout=timeout)
        policy = RetryPolicy(attempts=attempts, sleep=sleep, jitter=lambda: jitter)
        async with ModelClient(endpoint, retry=policy) as client:
            return await client.complete("system", "user")

    try:
        return asyncio.run(go()), delays
    except ModelError as exc:
        return exc, delays


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_key_of_any_shape_echoed_by_the_server_is_not_passed_on(server, api):
    """Providers echo a bad key in the 401's message; a proxy's key need not look like one."""
    key = "team-blue-proxy"
    server.queue("401")
    error, _ = run(server, api, key=key)
    assert isinstance(error, ModelError) and error.status == 401
    assert key not in str(error) and "[redacted]" in str(error)


@pytest.mark.parametrize(
    ("payload", "what"),
    [
        ({"object": "chat.completion"}, "no choices"),
        ({"choices": []}, "an empty choices list"),
        ({"choices": ["x"]}, "choices[0] is not an object"),
        ({"choices": [{"finish_reason": "stop"}]}, "choices[0].message is not an object"),
    ],
)
def test_a_malformed_openai_answer_keeps_its_usage(payload, what):
    usage = {"prompt_tokens": 120, "completion_tokens": 7}
    with pytest.raises(_Malformed) as caught:
        _openai({**payload, "usage": usage}, "req_1")
    assert str(caught.value) == what
    assert (caught.value.usage.input_tokens, caught.value.usage.output_tokens) == (120, 7)


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


@pytest.mark.parametrize("when", ["while it waits", "while it is under way"])
def test_a_breaker_opened_by_another_request_stops_the_retry_as_this_requests_failure(server, when):
    """Another request finds the endpoint unusable while this one waits to retry (or before
    its failed answer is back): no retry goes out, and the error is this request's own, sent
    once, not EndpointUnusable, which means nothing was sent."""
    breaker = Breaker()
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        breaker.trip("HTTP 401 invalid_api_key")

    if when == "while it is under way":
        server.on_request = lambda body: breaker.trip("HTTP 401 invalid_api_key")
    server.queue("500")

    async def go():
        endpoint = Endpoint("openai", server.url, "m", KEY, max_tokens=100, timeout=5)
        policy = RetryPolicy(attempts=4, sleep=sleep)
        async with ModelClient(endpoint, retry=policy, breaker=breaker) as client:
            return await client.complete("system", "user")

    with pytest.raises(ModelError) as caught:
        asyncio.run(go())
    error = caught.value
    assert not isinstance(error, EndpointUnusable)
    assert (len(server.requests), error.attempts, error.status) == (1, 1, 500)
    assert error.reason.startswith("HTTP 500 server_error: ")
    assert error.reason.endswith("; not retried: endpoint unusable: HTTP 401 invalid_api_key")
    assert len(delays) == (1 if when == "while it waits" else 0)


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


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_key_echoed_as_the_error_type_and_the_request_id_is_hidden(server, api):
    server.fault = "key_echoed"
    error, _ = run(server, api)
    assert isinstance(error, ModelError) and error.status == 400
    assert (error.error_type, error.request_id) == ("[redacted]", "req_[redacted]")
    assert KEY not in str(error) and str(error).startswith("HTTP 400 [redacted]: Invalid")


def test_usage_is_none_when_not_reported(server):
    server.omit_usage = True
    for api in PROVIDERS:
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
    assert error.where == f"POST {server.url}/chat/completions"  # where it waited


def test_a_model_that_repeats_itself_is_stopped_naming_the_request(server):
    server.fault, server.chunk_delay = "repeat", 0.002
    error, _ = run(server, attempts=1)
    assert isinstance(error, ModelError) and "the model repeated itself" in error.reason
    assert (error.where, error.request_id) == (f"POST {server.url}/chat/completions", "req_test_1")


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_connection_refused_opens_the_breaker_at_once_without_a_retry(api):
    """SPEC 13: nothing listens on a closed port, so a retry is refused too (it took 4
    attempts per thread, 79 s with --retries 10): one attempt, no wait, the breaker open and
    the next request not sent."""
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    slept: list[float] = []

    async def go():
        endpoint = Endpoint(api, f"http://127.0.0.1:{port}", "m", KEY, timeout=2)

        async def sleep(seconds):
            slept.append(seconds)

        breaker = Breaker()
        policy = RetryPolicy(attempts=10, sleep=sleep)
        async with ModelClient(endpoint, retry=policy, breaker=breaker) as client:
            with pytest.raises(ModelError, match="connection refused") as caught:
                await client.complete("s", "u")
            with pytest.raises(EndpointUnusable, match="endpoint unusable: connection refused"):
                await client.complete("s", "u")
        return caught.value

    error = asyncio.run(go())
    assert (error.attempts, slept) == (1, [])
    assert error.endpoint_wide and not error.retryable
    path = PROVIDERS[api].path
    assert error.where == f"POST http://127.0.0.1:{port}{path}"
    assert f"POST http://127.0.0.1:{port}{path}" in str(error) and "attempts" not in str(error)


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_reset_and_a_timeout_are_still_retried(server, api):
    """SPEC 13: only refusals and DNS open the breaker at once; a dropped connection or a
    server that does not answer in time is retried as SPEC 6 says."""
    server.queue("drop", "hang")
    completion, delays = run(server, api, attempts=3, timeout=0.5)
    assert isinstance(completion, Completion) and completion.text == server.summary
    assert len(server.requests) == 3 and len(delays) == 2


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

    from volumetool.providers.errors import parse_retry_after

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
        (ConnectionRefusedError("refused"), "connection refused", True, False),
        (OSError("All connection attempts failed"), "connection refused", True, False),
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


# -- reading what went wrong, one input at a time ----------------------------------------


def retry_after(**headers: str) -> float | None:
    return parse_retry_after(httpx.Headers({k.replace("_", "-"): v for k, v in headers.items()}))


def http_date(seconds_from_now: float, zone: str = "GMT") -> str:
    moment = datetime.now(UTC) + timedelta(seconds=seconds_from_now)
    text = format_datetime(moment, usegmt=True)
    return text if zone == "GMT" else text.replace("GMT", zone)


# -- Retry-After (RFC 9110 10.2.3: delay-seconds or an HTTP-date; OpenAI: retry-after-ms) ----


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry_after_ms": "1500"}, 1.5),
        ({"retry_after_ms": "0"}, 0.0),
        ({"retry_after_ms": "1500", "retry_after": "9"}, 1.5),
        ({"retry_after_ms": "soon", "retry_after": "3"}, 3.0),
        ({"retry_after_ms": "-5", "retry_after": "3"}, 3.0),
        ({"retry_after": "7"}, 7.0),
        ({"retry_after": " 7 "}, 7.0),
        ({"retry_after": "0.5"}, 0.5),
        ({"retry_after": "0"}, 0.0),
        ({"retry_after": "-1"}, None),
        ({"retry_after": "inf"}, None),
        ({"retry_after": "nan"}, None),
        ({"retry_after": "soon"}, None),
        ({"retry_after": ""}, None),
        ({}, None),
    ],
)
def test_retry_after_in_seconds_and_milliseconds(headers, expected):
    assert retry_after(**headers) == expected


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"llm_provider-retry-after": "120"}, 120.0),
        ({"llm_provider-retry-after-ms": "2500"}, 2.5),
        ({"llm_provider-retry-after-ms": "2500", "llm_provider-retry-after": "9"}, 2.5),
        ({"retry-after": "4", "llm_provider-retry-after": "120"}, 4.0),
        ({"llm_provider-retry-after": "soon"}, None),
    ],
)
def test_retry_after_relayed_by_litellm_is_read(headers, expected):
    """SPEC 13: LiteLLM relays the upstream's Retry-After only under its llm_provider- prefix
    (20 requests in 9 s went to an upstream that had asked for 120 s)."""
    assert parse_retry_after(httpx.Headers(headers)) == expected


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_long_wait_relayed_by_litellm_is_not_retried_and_stops_the_endpoint(server, api):
    server.queue("litellm_429")
    error, delays = run(server, api)
    assert isinstance(error, ModelError) and "asked to wait 120 s" in str(error)
    assert (len(server.requests), delays, error.endpoint_wide) == (1, [], True)


def test_retry_after_as_an_http_date_is_the_time_left_until_it():
    assert retry_after(retry_after=http_date(60)) == pytest.approx(60, abs=2)
    assert retry_after(retry_after=http_date(-3600)) == 0.0  # already past: go now


def test_retry_after_as_a_date_without_a_zone_is_not_a_date():
    # "-0000" is RFC 5322's "local time unknown": parsedate_to_datetime gives it no zone
    assert retry_after(retry_after=http_date(60, zone="-0000")) is None


def test_a_retry_after_is_waited_for_in_full():
    policy = RetryPolicy(jitter=lambda: 1.0)
    for attempt in (1, 2, 3):
        assert policy.delay(attempt, 12.0) >= 12.0
        assert policy.delay(attempt, 12.0) <= 12.0 + policy.max_delay


# -- error bodies -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # OpenAI and LiteLLM
        (
            b'{"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",'
            b' "code": "invalid_api_key"}}',
            ("Incorrect API key provided", "invalid_api_key"),
        ),
        # Anthropic
        (
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}',
            ("Overloaded", "overloaded_error"),
        ),
        # LiteLLM's numeric code and its "None" say nothing the status does not
        (
            b'{"error": {"message": "m", "type": "None", "code": "400"}}',
            ("m", None),
        ),
        (
            b'{"error": {"message": "m", "code": "None", "type": "invalid_request_error"}}',
            ("m", "invalid_request_error"),
        ),
        # a plain-text error
        (b'{"error": "model not found"}', ("model not found", None)),
        # vLLM
        (
            b'{"object": "error", "message": "too long", "type": "BadRequestError", "code": 400}',
            ("too long", "BadRequestError"),
        ),
        # FastAPI, and a bare message
        (b'{"detail": "Not Found"}', ("Not Found", None)),
        (b'{"detail": [{"msg": "champ requis \xc3\xa9"}]}', ('[{"msg": "champ requis é"}]', None)),
        (b'{"message": "Forbidden"}', ("Forbidden", None)),
        # nothing to say
        (b'{"ok": false}', (None, None)),
        (b"[1, 2]", (None, None)),
        # an HTML error page from a proxy: its words
        (
            b"<html><head><title>502</title></head><body><h1>502 Bad Gateway</h1>"
            b"<hr><center>nginx</center></body></html>",
            ("502 502 Bad Gateway nginx", None),
        ),
        # bytes that are not UTF-8 are replaced, not an error
        (b"\xff\xfe bad gateway", ("\ufffd\ufffd bad gateway", None)),
        (b"", (None, None)),
    ],
)
def test_error_bodies_of_every_common_shape(body, expected):
    assert error_details(body) == expected


def test_error_texts_are_bounded():
    message, _ = error_details(b"word " * 1000)
    assert len(message) == 300
    detail, _ = error_details(b'{"detail": ["' + b"x" * 1000 + b'"]}')
    assert len(detail) == 300
    _, kind = error_details(b'{"error": {"message": "m", "code": "' + b"c" * 100 + b'"}}')
    assert kind == "c" * 80
    # only the first 2,000 bytes of a page are read
    assert error_details(b"<" + b"x" * 1998 + b">" + b"hidden") == (None, None)


# -- failures without an answer -----------------------------------------------------------


def chained(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


@pytest.mark.parametrize(
    ("exc", "reason", "endpoint_wide", "retryable"),
    [
        (
            chained(httpx.ConnectError("x"), socket.gaierror(-5, "No address for hostname")),
            "DNS failure: the host does not resolve",
            True,
            False,
        ),
        (
            httpx.ConnectError("[Errno -2] Name or service not known"),
            "DNS failure: the host does not resolve",
            True,
            False,
        ),
        (
            httpx.ConnectError("[Errno -3] Temporary failure in name resolution"),
            "DNS failure: the host does not resolve",
            True,
            False,
        ),
        (
            chained(httpx.ConnectError("x"), ssl.SSLCertVerificationError("verify failed")),
            "TLS failure",
            True,
            False,
        ),
        (
            httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"),
            "TLS failure",
            True,
            False,
        ),
        (
            chained(httpx.ConnectError("x"), ConnectionRefusedError(errno.ECONNREFUSED, "r")),
            "connection refused",
            True,
            False,
        ),
        (
            chained(httpx.ConnectError("x"), OSError(errno.ECONNREFUSED, "r")),
            "connection refused",
            True,
            False,
        ),
        (
            httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER] wrong version number"),
            "TLS failure",
            True,
            False,
        ),
        (
            httpx.ConnectError("hostname 'x' doesn't match, certificate is not valid for it"),
            "TLS failure",
            True,
            False,
        ),
        (httpx.ConnectError("All connection attempts failed"), "connection refused", True, False),
        (httpx.ConnectError("[Errno 111] Connection refused"), "connection refused", True, False),
        (
            chained(httpx.ReadError("x"), ConnectionResetError(errno.ECONNRESET, "reset")),
            "connection error (ReadError)",
            False,
            True,
        ),
        (
            ExceptionGroup("pool", [ValueError("v"), socket.gaierror(-2, "x")]),
            "DNS failure: the host does not resolve",
            True,
            False,
        ),
    ],
)
def test_connection_failures_say_what_failed_and_whether_it_is_the_endpoint(
    exc, reason, endpoint_wide, retryable
):
    error = connection_failure(exc, "127.0.0.1:9")
    assert (error.reason, error.endpoint_wide, error.retryable) == (
        reason,
        endpoint_wide,
        retryable,
    )
    assert error.where == "127.0.0.1:9"  # the message names the endpoint


def test_every_cause_is_read_once_even_in_a_cycle():
    dns = socket.gaierror(-2, "x")
    top = httpx.ConnectError("x")
    middle = httpx.ConnectError("y")
    top.__cause__, top.__context__ = dns, middle
    middle.__context__ = top  # a cycle: must end, and must not hide the DNS error
    assert connection_failure(top, "h").reason == "DNS failure: the host does not resolve"


# -- HTTP error answers -------------------------------------------------------------------


def error(status: int, message: str | None = None, kind: str | None = None, **kw) -> ModelError:
    return classify(
        status,
        message,
        kind,
        secret=kw.pop("secret", "s3cret-value-not-key-shaped"),
        where="h",
        request_id=None,
        retry_after=None,
        **kw,
    )


@pytest.mark.parametrize(
    ("status", "message", "kind", "retryable", "endpoint_wide", "too_long"),
    [
        (400, "bad", "invalid_request_error", False, False, False),
        (401, "bad key", "authentication_error", False, True, False),
        (402, None, None, False, True, False),  # payment required: quota
        (403, "no", "permission_error", False, True, False),
        (404, "no such model", "not_found_error", False, True, False),
        (408, None, None, True, False, False),
        (409, None, None, True, False, False),
        (410, None, None, False, False, False),
        (413, None, None, False, False, True),  # Anthropic's request_too_large status
        (429, "slow down", "rate_limit_error", True, False, False),
        # OpenAI's quota error comes as a 429 and must not be retried
        (429, "You exceeded your current quota", "insufficient_quota", False, True, False),
        (429, "You exceeded your current quota, check your plan", None, False, True, False),
        (400, "m", "billing_not_active", False, True, False),
        (400, "This model's maximum context length is 8192", None, False, False, True),
        (
            400,
            "prompt is too long: 210000 tokens > 200000",
            "invalid_request_error",
            False,
            False,
            True,
        ),
        (400, "m", "context_length_exceeded", False, False, True),
        (400, "m", "string_above_max_length", False, False, True),
        (500, None, None, True, False, False),
        (529, "Overloaded", "overloaded_error", True, False, False),
    ],
)
def test_http_errors_by_status_and_provider_code(
    status, message, kind, retryable, endpoint_wide, too_long
):
    e = error(status, message, kind)
    assert (e.retryable, e.endpoint_wide, e.too_long) == (retryable, endpoint_wide, too_long)


def test_the_servers_own_x_should_retry_wins_except_where_spec_6_says_never():
    """SPEC 6: retries "never 400/401/403/413 or quota errors", whatever the server says."""
    assert error(404, "m", None, should_retry="true").retryable is True
    assert error(503, "m", None, should_retry="false").retryable is False
    assert error(429, "quota", None, should_retry="true").retryable is False
    assert error(503, "m", None, should_retry="maybe").retryable is True
    for status in (400, 401, 403, 413):
        assert error(status, "m", None, should_retry="true").retryable is False
    assert error(422, "maximum context length", None, should_retry="true").retryable is False


def test_the_reason_names_status_kind_and_message_never_the_key():
    secret = "s3cret-value-not-key-shaped"
    e = error(401, f"bad key {secret} " + "xy " * 200, "invalid_api_key", secret=secret)
    assert e.reason.startswith("HTTP 401 invalid_api_key: bad key [redacted] xy")
    assert secret not in e.reason
    assert len(e.reason) == len("HTTP 401 invalid_api_key: ") + 300  # the message's first 300
    assert error(500).reason == "HTTP 500"


def test_a_reasoning_model_that_refuses_max_tokens_says_which_setting_to_change():
    e = error(400, "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead.")
    assert e.reason.startswith("HTTP 400: Unsupported parameter")
    assert e.reason.endswith(" — set model.max_tokens_param: max_completion_tokens")
    assert e.endpoint_wide
    assert not error(500, "max_completion_tokens").endpoint_wide


def test_keys_are_redacted_by_value_and_by_shape():
    assert redact("key s3cret here", "s3cret") == "key [redacted] here"
    assert redact("sk-proj-abcdefgh1234 here", "") == "[redacted] here"
    assert redact("a" * 40, "") == "[redacted]"


# -- a malformed answer still costs tokens --------------------------------------------------


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("text", "no content list"),
        (["text"], "a content block is not an object"),
        ([{"type": "text"}], "a text block without text"),
    ],
)
def test_a_malformed_anthropic_answer_keeps_its_usage(content, what):
    payload = {
        "content": content,
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 120, "output_tokens": 7},
    }
    with pytest.raises(_Malformed) as caught:
        _anthropic(payload, "req_1")
    assert str(caught.value) == what
    assert (caught.value.usage.input_tokens, caught.value.usage.output_tokens) == (120, 7)


def openai_answer(**message) -> dict:
    return {
        "choices": [{"message": message, "finish_reason": message.pop("finish", "stop")}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 7},
    }


def test_an_openai_answer_is_read_field_by_field():
    plain = _openai(openai_answer(content="Summary."), "req_1")
    assert (plain.text, plain.finish, plain.refusal, plain.tool_call, plain.request_id) == (
        "Summary.",
        "stop",
        None,
        False,
        "req_1",
    )
    # content parts (some compatible servers): the text parts, in order, and nothing else
    parts = [{"type": "text", "text": "Sum"}, "junk", {"type": "image"}, {"text": "mary."}]
    assert _openai(openai_answer(content=parts), None).text == "Summary."
    # a tool call, in either of OpenAI's forms, is no summary
    for call in ({"tool_calls": [{"id": "c"}]}, {"function_call": {"name": "f"}}):
        assert _openai(openai_answer(content="x", **call), None).tool_call is True
    # a refusal only when it is text; a finish reason only when it is text
    assert _openai(openai_answer(content=None, refusal="I can't."), None).refusal == "I can't."
    for refusal in ("", 5, None):
        assert _openai(openai_answer(content="x", refusal=refusal), None).refusal is None
    assert _openai(openai_answer(content="x", finish=5), None).finish is None


def test_openai_content_that_is_neither_text_nor_null_is_malformed_and_keeps_its_usage():
    with pytest.raises(_Malformed) as caught:
        _openai(openai_answer(content=5), None)
    assert str(caught.value) == "message.content is neither text nor null"
    assert (caught.value.usage.input_tokens, caught.value.usage.output_tokens) == (120, 7)


def test_a_model_error_reads_as_one_line_with_its_context():
    assert str(ModelError("HTTP 500")) == "HTTP 500"
    error = ModelError("HTTP 500", where="POST h/v1", request_id="req_9")
    assert str(error) == "HTTP 500 (POST h/v1, request req_9)"
    error.attempts = 2
    assert str(error) == "HTTP 500 (POST h/v1, request req_9) after 2 attempts"


def test_a_quota_is_known_by_its_code_word_too():
    # a provider's own code, not in the known list, that names the quota
    assert classify(
        429, None, "daily_quota_exceeded", secret="", where="h", request_id=None, retry_after=None
    ).endpoint_wide


# -- one answer as the client reads it, headers and status alone --------------------------

ANSWER_URL = "http://127.0.0.1:9/v1/chat/completions"


def answer(status: int, headers: dict[str, str], body: bytes = b"", api: str = "openai") -> object:
    """What ModelClient._answer makes of one HTTP answer to ANSWER_URL: a Completion or the
    ModelError it raises."""
    endpoint = Endpoint(api, "http://127.0.0.1:9/v1", "m", KEY, max_tokens=100, timeout=5)
    client = ModelClient(endpoint)
    response = httpx.Response(status, headers=headers, request=httpx.Request("POST", ANSWER_URL))
    try:
        return client._answer(response, body)
    except ModelError as exc:
        return exc
    finally:
        asyncio.run(client.aclose())


@pytest.mark.parametrize("status", [300, 301, 302, 303, 307, 308, 399])
def test_every_3xx_answer_is_a_redirect_naming_where_it_points(status):
    # httpx follows no redirect (a POST must not become a GET): every 3xx is the endpoint
    # saying it lives elsewhere, so base_url is wrong for every thread.
    advice = "point base_url at it (requests go to base_url + /chat/completions)"
    moved = answer(status, {"location": "/v2/chat"})
    assert isinstance(moved, ModelError)
    assert moved.reason == f"endpoint redirected to http://127.0.0.1:9/v2/chat: {advice}"
    assert (moved.status, moved.endpoint_wide) == (status, True)
    nowhere = answer(status, {})
    assert isinstance(nowhere, ModelError)
    assert nowhere.reason == f"endpoint redirected to another URL: {advice}"


def test_a_redirect_to_the_api_path_names_the_base_url_that_sends_there():
    """The advice must be one that works: base_url is what the API path is appended to."""
    moved = answer(308, {"location": "https://api.example/v2/chat/completions"})
    assert isinstance(moved, ModelError)
    assert moved.reason == (
        "endpoint redirected to https://api.example/v2/chat/completions: "
        "set base_url to https://api.example/v2"
    )


def test_a_redirect_is_named_without_the_credentials_or_query_it_carries():
    # SPEC 6: error text names the method and URL, never a key or query secret.
    moved = answer(307, {"location": "https://me:pw@h.example:8443/v2/chat?api_key=sk-x#top"})
    assert isinstance(moved, ModelError)
    assert moved.reason.startswith("endpoint redirected to https://h.example:8443/v2/chat: ")


def test_a_key_the_server_puts_in_an_error_code_or_request_id_is_hidden():
    # hide() runs on every error of a call: whatever field a server echoes the key in.
    error = ModelError(f"HTTP 400 {KEY}: bad", error_type=KEY, request_id=f"req_{KEY}")
    error.hide(KEY)
    assert (error.reason, error.error_type, error.request_id) == (
        "HTTP 400 [redacted]: bad",
        "[redacted]",
        "req_[redacted]",
    )
    assert KEY not in str(error)
    kept = ModelError("HTTP 500", request_id="req_0123456789abcdef0123456789abcdef")
    kept.hide(KEY)  # a long request id is the provider's, for its support: kept
    assert kept.request_id == "req_0123456789abcdef0123456789abcdef"
    nothing = ModelError("HTTP 500 x", request_id="req_1")
    nothing.hide("")  # no key configured: nothing to hide, and not every "" replaced
    assert (nothing.reason, nothing.request_id) == ("HTTP 500 x", "req_1")


def test_the_request_id_is_read_from_either_header():
    # OpenAI sends x-request-id, Anthropic request-id; a malformed answer names it.
    for headers, expected in (
        ({"x-request-id": "req_x"}, "req_x"),
        ({"request-id": "req_a"}, "req_a"),
        ({"x-request-id": "req_x", "request-id": "req_a"}, "req_x"),
        ({}, None),
    ):
        error = answer(200, {"content-type": "application/json", **headers}, b"[1]")
        assert isinstance(error, ModelError)
        assert error.request_id == expected


@pytest.mark.parametrize(
    ("cache", "prompt"),
    [
        ({}, 10),  # absent: none cached
        ({"cache_read_input_tokens": None, "cache_creation_input_tokens": None}, 10),
        ({"cache_read_input_tokens": 900, "cache_creation_input_tokens": 30}, 940),
        ({"cache_read_input_tokens": "900"}, None),  # not a count: the size is unknown
        ({"cache_creation_input_tokens": -3}, None),
        ({"cache_read_input_tokens": 900, "cache_creation_input_tokens": 1.5}, None),
    ],
)
def test_anthropics_prompt_is_its_input_and_both_cache_figures(cache, prompt):
    # SPEC 6: for Anthropic the prompt size is input_tokens + cache_creation_input_tokens +
    # cache_read_input_tokens; figures that are not counts are stored as NULL, never as 0.
    payload = {
        "content": [{"type": "text", "text": "Summary."}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 5, **cache},
    }
    usage = _anthropic(payload, None).usage
    assert (usage.input_tokens, usage.output_tokens) == (prompt, 5)


def test_an_answer_without_a_content_type_is_read_as_json():
    body = json.dumps(openai_answer(content="Summary.")).encode()
    completion = answer(200, {}, body)
    assert not isinstance(completion, ModelError)
    assert completion.text == "Summary."


def test_an_event_stream_is_known_by_its_first_line_whatever_its_label():
    # A stream labelled application/json, begun with blank lines or a byte order mark, and
    # with any field (data, event, id, retry) or a comment first is read as a stream: here
    # one that never says how it finished.
    chunk = b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n'
    heads = (b"", b"\n\r\n", b": keep-alive\n", b"id: 1\n", b"retry: 3000\n", b"\xef\xbb\xbf")
    heads += (b"\xef\xbb\xbf\r\n\n",)  # a byte order mark with blank lines after it
    for head in heads:
        done = answer(200, {"content-type": "application/json"}, head + chunk)
        assert isinstance(done, Completion), done
        assert (done.text, done.finish) == ("Hi", None)
    error = answer(200, {"content-type": "text/event-stream"}, b"{}")
    assert isinstance(error, ModelError) and "no choices (in an event stream)" in error.reason
    # After a blank line a byte order mark is no longer one (it starts the line's field name,
    # as the event stream format says), but the body is still known for a stream.
    late = answer(200, {"content-type": "application/json"}, b"\n\xef\xbb\xbf" + chunk)
    assert isinstance(late, ModelError) and "no choices (in an event stream)" in late.reason


def chat_stream(*chunks: dict, headers: dict[str, str] | None = None) -> object:
    """Chat completion chunks as OpenAI streams them: `data:` lines, then `[DONE]`."""
    head = {"id": "chatcmpl-7", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    body = b"".join(b"data: %s\n\n" % json.dumps({**head, **c}).encode() for c in chunks)
    stream = {"content-type": "text/event-stream", **(headers or {})}
    return answer(200, stream, body + b"data: [DONE]\n\n")


def chat_chunk(delta: dict | None, finish: str | None = None, index: int = 0) -> dict:
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {"choices": [choice], "usage": None}  # include_usage: null until the last chunk


CHAT_USAGE = {"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 7}}


def test_a_chat_completion_stream_is_gathered_into_the_message_it_streams():
    # A tool call: its deltas come first, the chunk with the finish reason has an empty delta.
    # It is a tool call however many deltas follow, and its message has no text (null, as the
    # plain response's content is).
    tool = {"index": 0, "id": "call_1", "type": "function"}
    called = chat_stream(
        chat_chunk({"role": "assistant", "content": None, "tool_calls": [tool], "refusal": None}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "a"}'}}]}),
        chat_chunk({}, "tool_calls"),
        CHAT_USAGE,
        headers={"x-request-id": "req_5"},
    )
    assert (called.text, called.tool_call, called.finish) == (None, True, "tool_calls")
    assert called.request_id == "req_5"  # for the error that refuses it (SPEC 13)
    assert (called.usage.input_tokens, called.usage.output_tokens) == (120, 7)
    # The legacy function_call delta (functions=, before tools) is a tool call too.
    legacy = chat_stream(
        chat_chunk({"role": "assistant", "content": None, "function_call": {"name": "read"}}),
        chat_chunk({"function_call": {"arguments": "{}"}}),
        chat_chunk({}, "function_call"),
    )
    assert (legacy.text, legacy.tool_call, legacy.finish) == (None, True, "function_call")
    assert not legacy.usage.reported  # no usage chunk: nothing reported, not zero
    # A refusal streams in pieces, as text does: it is all of them.
    refused = chat_stream(
        chat_chunk({"role": "assistant", "content": None, "refusal": ""}),
        *(chat_chunk({"refusal": piece}) for piece in ("I'm sorry,", " I can't", " help.")),
        chat_chunk({}, "stop"),
    )
    assert (refused.text, refused.refusal, refused.tool_call) == (
        None,
        "I'm sorry, I can't help.",
        False,
    )


def test_a_stream_reads_the_same_in_any_chunks_and_without_its_last_newline():
    """A server may close right after its last event, without the newline that ends it, and
    the network cuts the bytes anywhere: the stream reads as if whole. Only the line ending
    is taken off a last line; a U+FEFF at the start of a later chunk is text, not the byte
    order mark a stream may begin with."""

    def read(body: bytes, cut: int | None = None) -> object:
        chunks = [body] if cut is None else [body[:cut], body[cut:]]
        done = exchange(Body(chunks), {"content-type": "text/event-stream"})
        return done if isinstance(done, Completion) else str(done)

    text = json.dumps(chat_chunk({"content": "a\ufeffb"}), ensure_ascii=False)
    first = b"data: %s\n\n" % text.encode()
    last = json.dumps(chat_chunk({"content": "."}, "stop")).encode()
    whole = read(first + b"data: " + last + b"\n")
    assert isinstance(whole, Completion) and whole.text == "a\ufeffb.", whole
    assert read(first + b"data: " + last, first.index(b"\xef\xbb\xbf")) == whole
    data = b"data: " + last
    for line in (data, data + b"\x0c", b"\r" + data, data + b"X"):
        assert read(first + line) == read(first + line + b"\n"), line
    # a byte of an event that is not UTF-8 is read as U+FFFD
    broken = read(first.replace(b"\xef\xbb\xbf", b"\xff") + data)
    assert isinstance(broken, Completion) and broken.text == "a\ufffdb.", broken


def test_the_repetition_check_runs_each_time_the_answer_has_grown_by_check_every():
    """A passage said over and over is clear at 240 characters (SPAN) here; the check runs
    each time the answer has grown by CHECK_EVERY (32) characters, not at each delta (its
    cost bound), so a stream of one character a delta stops at the first check after: 256."""
    text = "Say it again and again. " * 20
    stopped = chat_stream(*(chat_chunk({"content": c}) for c in text))
    assert isinstance(stopped, ModelError), stopped
    assert stopped.reason.endswith("(stopped after 256 characters)"), stopped.reason


def test_a_chat_stream_is_read_for_its_first_choice_whatever_else_it_carries():
    # n=2: each chunk carries one of the two choices; only the first (index 0) is the answer.
    first, second = ("Sum", "mary."), ("Other ", "words.")
    chunks = []
    for mine, theirs in zip(first, second, strict=True):
        chunks += [chat_chunk({"content": mine}), chat_chunk({"content": theirs}, index=1)]
    chunks += [chat_chunk({}, "length", index=1), chat_chunk({}, "stop"), CHAT_USAGE]
    read = chat_stream(*chunks)
    assert (read.text, read.finish, read.usage.output_tokens) == ("Summary.", "stop", 7)
    # several choices in one chunk, the first not first; a choice without a delta (Azure
    # OpenAI's content filter annotations) or one that is no object adds nothing; a chunk
    # with its choices is one beside an "error" member too (null, as some gateways add it)
    together = chat_stream(
        {"choices": [{"index": 1, "delta": {"content": "No."}}, {"delta": {"content": "Yes"}}]},
        {**chat_chunk({"content": ""}), "error": None},
        {"choices": [{"index": 0, "finish_reason": None, "content_filter_results": {}}]},
        {"choices": [None, "x", {"index": 0, "delta": None}]},
        chat_chunk({"content": "."}, "stop"),
    )
    assert (together.text, together.finish) == ("Yes.", "stop")


def test_every_unreadable_answer_names_its_request():
    # Whatever is wrong with a 200's body, the error names the request, for the provider's
    # support: an event stream, JSON nested too deeply, not JSON, JSON that is no object.
    for headers, body, reason in (
        ({"content-type": "text/event-stream"}, b"data: {}\n\n", "in an event stream"),
        ({}, b"[" * 100_000 + b"]" * 100_000, "malformed response: JSON nested too deeply"),
        ({}, b"<html>", "malformed response: not JSON"),
        ({}, b'"text"', "malformed response: not a JSON object"),
    ):
        error = answer(200, {**headers, "x-request-id": "req_7"}, body)
        assert isinstance(error, ModelError)
        assert reason in error.reason and error.request_id == "req_7"


def test_an_answer_with_choices_is_read_even_beside_an_error_field():
    # Some gateways add an "error" member (null, or a note) to an answer that has its
    # choices (OpenAI) or content (Anthropic): the answer is what counts; only an "error"
    # without them is an error.
    anthropic = {
        "content": [{"type": "text", "text": "Summary."}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 120, "output_tokens": 7},
    }
    for api, payload in (("openai", openai_answer(content="Summary.")), ("anthropic", anthropic)):
        for note in (None, {"message": "upstream retried"}):
            body = json.dumps({**payload, "error": note}).encode()
            completion = answer(200, {"content-type": "application/json"}, body, api)
            assert not isinstance(completion, ModelError), completion
            assert completion.text == "Summary."


def test_an_error_under_a_200_takes_its_status_from_an_http_code_in_it():
    # OpenRouter answers 200 with {"error": {"code": 502, ...}}: the code is the status when
    # it is an HTTP error status (400-599); anything else leaves the 200. A bare string is
    # an error too.
    for error, status in (
        ({"code": 400, "message": "bad"}, 400),
        ({"code": 599, "message": "odd"}, 599),
        ({"code": 600, "message": "odd"}, 200),
        ({"code": 399, "message": "odd"}, 200),
        ({"code": "502", "message": "text"}, 200),
        ("upstream overloaded", 200),
    ):
        found = answer(200, {}, json.dumps({"error": error}).encode())
        assert isinstance(found, ModelError) and found.status == status, (error, found)


def test_an_error_under_a_200_says_the_servers_message_and_names_the_request():
    body = json.dumps({"error": {"code": 502, "message": "upstream overloaded"}}).encode()
    error = answer(200, {"x-request-id": "req_9"}, body)
    assert isinstance(error, ModelError)
    assert error.reason == "HTTP 502: upstream overloaded" and error.request_id == "req_9"


def test_each_api_and_auth_sends_the_headers_and_body_its_provider_documents():
    # OpenAI: Authorization: Bearer; Anthropic: x-api-key and anthropic-version; Azure
    # OpenAI: api-key; a Bearer gateway in front of Anthropic (OpenRouter). Every request
    # says who sends it (User-Agent). Header names are compared without case, as HTTP does.
    from volumetool import __version__

    agent = f"volumetool/{__version__}"
    cases = [
        (("openai", None), {"authorization": f"Bearer {KEY}", "user-agent": agent}),
        (("openai", "api-key"), {"api-key": KEY, "user-agent": agent}),
        (
            ("anthropic", None),
            {"x-api-key": KEY, "user-agent": agent, "anthropic-version": "2023-06-01"},
        ),
        (
            ("anthropic", "bearer"),
            {
                "authorization": f"Bearer {KEY}",
                "user-agent": agent,
                "anthropic-version": "2023-06-01",
            },
        ),
    ]
    for (api, auth), expected in cases:
        endpoint = Endpoint(api, "http://127.0.0.1:9", "m", KEY, max_tokens=99, auth=auth)
        # No compressed answer is asked for (an answer is small; a stacked gzip bomb is not).
        expected = {**expected, "accept-encoding": "identity"}
        assert {k.lower(): v for k, v in endpoint.headers().items()} == expected
    openai = Endpoint("openai", "http://127.0.0.1:9/v1", "m", KEY, max_tokens=99)
    assert openai.body("S", "U") == {
        "model": "m",
        "max_tokens": 99,
        "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        "stream": True,  # SPEC 14: a model still writing is told apart from one that hangs
        "stream_options": {"include_usage": True},
    }
    reasoning = replace(openai, max_tokens_param="max_completion_tokens")
    assert reasoning.body("S", "U")["max_completion_tokens"] == 99
    assert "max_tokens" not in reasoning.body("S", "U")
    anthropic = Endpoint("anthropic", "http://127.0.0.1:9", "m", KEY, max_tokens=99)
    assert anthropic.body("S", "U") == {
        "model": "m",
        "max_tokens": 99,
        "system": "S",
        "messages": [{"role": "user", "content": "U"}],
        "stream": True,
    }
    assert openai.params() == {} and replace(openai, api_version="2024-10-21").params() == {
        "api-version": "2024-10-21"
    }


def test_a_model_error_is_nothing_more_than_it_says():
    # Defaults: not retryable, not endpoint-wide, not a prompt too long, no cost, one try.
    error = ModelError("HTTP 500")
    assert (error.retryable, error.endpoint_wide, error.too_long) == (False, False, False)
    assert (error.status, error.error_type, error.request_id, error.retry_after) == (None,) * 4
    assert (error.usage.input_tokens, error.attempts, error.args) == (None, 1, ("HTTP 500",))


def test_a_retry_after_of_exactly_max_retry_wait_is_waited_for():
    # SPEC 6: a Retry-After *longer* than --max-retry-wait is not waited for; one of exactly
    # that length is, and an answer without one is retried whatever the limit (even 0).
    def replies(*answers):
        queue = list(answers)

        def handler(request):
            status, headers = queue.pop(0)
            body = openai_answer(content="Summary.") if status == 200 else {"error": {}}
            return httpx.Response(status, headers=headers, stream=Body([json.dumps(body).encode()]))

        return httpx.MockTransport(handler)

    async def go(transport, max_wait):
        slept = []

        async def sleep(seconds):
            slept.append(seconds)

        endpoint = Endpoint("openai", "http://127.0.0.1:9/v1", "m", KEY, timeout=5)
        policy = RetryPolicy(attempts=3, max_retry_wait=max_wait, sleep=sleep, jitter=lambda: 0)
        async with ModelClient(endpoint, retry=policy, transport=transport) as client:
            return await client.complete("s", "u"), slept

    done, slept = asyncio.run(go(replies((429, {"retry-after": "5"}), (200, {})), 5))
    assert done.text == "Summary." and slept == [5]
    done, slept = asyncio.run(go(replies((500, {}), (200, {})), 0))
    assert done.text == "Summary." and slept == [0]


class Body(httpx.AsyncByteStream):
    """A response body as a server streams it: the chunks, then maybe an error or no end."""

    def __init__(
        self, chunks: list[bytes], then: BaseException | None = None, endless=False, pace=0.0
    ):
        self.chunks, self.then, self.endless, self.sent = chunks, then, endless, 0
        self.pace = pace

    async def __aiter__(self):
        while True:
            for chunk in self.chunks:
                self.sent += len(chunk)
                yield chunk
                await asyncio.sleep(self.pace)  # a network read: a timeout can cancel it
            if self.then is not None:
                raise self.then
            if not self.endless:
                return


def exchange(
    body: Body,
    headers: dict[str, str] | None = None,
    base_url="http://127.0.0.1:9/v1",
    timeout=5,
    max_answer=600.0,
):
    """What ModelClient.complete makes of one answer streamed as `body`, one attempt."""

    def handler(request):
        return httpx.Response(200, headers=headers or {}, stream=body)

    async def go():
        endpoint = Endpoint("openai", base_url, "m", KEY, timeout=timeout, max_answer=max_answer)
        policy = RetryPolicy(attempts=1)
        transport = httpx.MockTransport(handler)
        async with ModelClient(endpoint, retry=policy, transport=transport) as client:
            try:
                return await client.complete("s", "u")
            except ModelError as exc:
                return exc

    return asyncio.run(go())


def test_a_body_of_exactly_the_limit_is_read_whole_in_any_chunks():
    from volumetool.model_client import MAX_BODY_BYTES

    answer = json.dumps(openai_answer(content="Summary.")).encode()
    data = b" " * (MAX_BODY_BYTES - len(answer)) + answer
    chunks = [data[i : i + 1_000_003] for i in range(0, len(data), 1_000_003)]
    for headers in ({"content-length": str(len(data))}, {}):  # declared, or chunked
        done = exchange(Body(chunks), headers)
        assert not isinstance(done, ModelError), done
        assert done.text == "Summary."
    over = exchange(Body([*chunks, b" "]), {})
    assert isinstance(over, ModelError) and "larger than 8 MiB" in over.reason
    # an event stream too, counted over all its chunks as they arrive: a comment, then events
    events = b"data: %s\n\n" % json.dumps(chat_chunk({"content": "Summary."}, "stop")).encode()
    data = b":" + b" " * (MAX_BODY_BYTES - len(events) - 2) + b"\n" + events
    chunks = [data[i : i + 1_000_003] for i in range(0, len(data), 1_000_003)]
    stream = {"content-type": "text/event-stream"}
    done = exchange(Body(chunks), stream)
    assert not isinstance(done, ModelError) and done.text == "Summary.", done
    over = exchange(Body([*chunks, b"\n"]), stream)
    assert isinstance(over, ModelError) and "larger than 8 MiB" in over.reason


def raw_deflate(data: bytes) -> bytes:
    import zlib

    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)  # no zlib header, as some servers send
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw deflate"])
def test_a_compressed_body_of_exactly_the_limit_is_read_and_one_byte_more_is_not(encoding):
    import zlib

    from volumetool.model_client import MAX_BODY_BYTES

    pack = {"gzip": lambda d: zlib.compress(d, wbits=31), "deflate": zlib.compress}.get(
        encoding, raw_deflate
    )
    answer = json.dumps(openai_answer(content="Summary.")).encode()
    data = b" " * (MAX_BODY_BYTES - len(answer)) + answer
    coding = encoding.removeprefix("raw ")
    done = exchange(Body([pack(data)]), {"content-encoding": coding})
    assert not isinstance(done, ModelError) and done.text == "Summary.", done
    over = exchange(Body([pack(b" " + data)]), {"content-encoding": coding})
    assert isinstance(over, ModelError) and "larger than 8 MiB" in over.reason, over


def test_a_completion_carries_the_key_nowhere_the_server_put_it():
    """A server may echo the key in any text it returns: the summary, a refusal, the finish
    reason, the request id. A completion leaves the client with `[redacted]` in each."""
    echoed = Completion(f"a {KEY} b", KEY, Usage(1, 2), refusal=f"no {KEY}", request_id=KEY)
    assert echoed.hidden(KEY) == Completion(
        "a [redacted] b",
        "[redacted]",
        Usage(1, 2),
        refusal="no [redacted]",
        request_id="[redacted]",
    )
    assert echoed.hidden("") is echoed


@pytest.mark.parametrize(
    "encoding", ["gzip", "gzip, gzip", "deflate", "raw deflate", "x-gzip, identity"]
)
def test_a_compressed_body_is_decoded_no_further_than_the_limit(encoding):
    """A few kB of stacked gzip inflate to gigabytes in one step of a decoder without a bound
    (httpx's): the limit holds for what the body decodes to, as it is decoded."""
    import tracemalloc
    import zlib

    from tests.support.model_server import bomb

    answer = json.dumps(openai_answer(content="Summary.")).encode()
    packed = {
        "gzip": lambda data: zlib.compress(data, wbits=31),
        "deflate": zlib.compress,
        "raw deflate": raw_deflate,
    }

    def encode(data: bytes) -> bytes:
        for coding in [c.strip() for c in encoding.split(",")]:
            data = packed.get(coding.removeprefix("x-"), lambda d: d)(data)
        return data

    header = encoding.replace("raw ", "")
    done = exchange(Body([encode(answer)]), {"content-encoding": header})
    assert not isinstance(done, ModelError) and done.text == "Summary.", done
    body = bomb() if encoding == "gzip, gzip" else encode(bytes(64 * 2**20))
    tracemalloc.start()
    try:
        over = exchange(Body([body]), {"content-encoding": header})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(over, ModelError) and "larger than 8 MiB" in over.reason, over
    assert peak < 24 * 2**20, f"{peak / 2**20:.0f} MiB to refuse {len(body):,} bytes"


def test_a_body_without_end_is_read_no_further_than_the_limit():
    # Streamed, never read whole first: an endless answer costs 8 MiB, not all memory.
    body = Body([b" " * 1_048_576], endless=True)
    error = exchange(body)
    assert isinstance(error, ModelError)
    assert error.reason == "the response body is larger than 8 MiB"
    assert error.where == "POST http://127.0.0.1:9/v1/chat/completions"
    assert body.sent <= 10 * 1_048_576


def test_a_connection_lost_in_the_body_is_a_retryable_connection_error_naming_the_request():
    streamed = b"data: %s\n\n" % json.dumps(chat_chunk({"content": "Summ"})).encode()
    stream = {"content-type": "text/event-stream"}
    for body, headers in (([b'{"choices": '], {}), ([streamed], stream)):  # JSON, or a stream
        error = exchange(Body(body, then=httpx.ReadError("connection reset")), headers)
        assert isinstance(error, ModelError) and error.retryable
        assert error.reason == "connection error (ReadError)"
        assert error.where == "POST http://127.0.0.1:9/v1/chat/completions"


def test_a_url_httpx_cannot_build_is_an_endpoint_wide_error_naming_it():
    # (validate and compact refuse such a base_url first; the client still never crashes)
    error = exchange(Body([]), base_url="http://[::1/v1")
    assert isinstance(error, ModelError) and error.endpoint_wide and not error.retryable
    assert error.reason == "invalid URL (Invalid port: ':1')"
    assert error.where == "POST http://[::1/v1/chat/completions"


def test_a_body_that_drips_forever_is_cut_at_the_whole_answer_bound():
    # --timeout bounds each wait for the next bytes; a server sending a byte now and then,
    # never pausing long enough for that, is cut off by --max-answer-seconds.
    error = exchange(Body([b" "], endless=True, pace=0.05), timeout=0.5, max_answer=1.0)
    assert isinstance(error, ModelError) and not error.retryable
    assert error.reason == "the answer took longer than 1s (raise --max-answer-seconds)"


def test_a_completion_names_its_request():
    body = json.dumps(openai_answer(content="Summary.")).encode()
    done = answer(200, {"x-request-id": "req_5"}, body)
    assert not isinstance(done, ModelError) and done.request_id == "req_5"


def test_certificates_are_verified():
    """The client verifies the server's certificate and host name (read from the transport: no
    test server speaks TLS)."""

    async def go():
        endpoint = Endpoint("openai", "https://api.example.com/v1", "m", KEY, 100, 5.0)
        async with ModelClient(endpoint) as client:
            return client._http._transport._pool._ssl_context

    context = asyncio.run(go())
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert len(context.get_ca_certs()) > 0


def _repeating_by_every_length(text: str) -> bool:
    """The definition, one comparison for every passage length: the oracle."""
    from volumetool.providers.base import REPEATS, SPAN, UNIT

    for unit in range(UNIT[0], UNIT[1] + 1):
        span = max(unit * REPEATS, SPAN)
        if span > len(text):
            return False
        tail = text[-span:]
        if tail[unit:] == tail[:-unit] and not tail.isspace():
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="ab c.\n", max_size=400),
    st.text(alphabet="ab c.\n", min_size=1, max_size=700),
    st.integers(min_value=0, max_value=40),
    st.text(alphabet="ab c.\n", max_size=12),
)
@example("", "aabbcc. ", 31, "")  # the shortest passage, just long enough to count
@example("", "aabbcc. ", 30, "")  # a text of exactly SPAN characters, all repetition
@example("", "a" * 699 + "b", 3, "")  # a passage longer than UNIT[1]: none
@example("", "a" * 307 + "b" + "c" * 384 + "a" * 7 + "b", 3, "")  # one whose end recurs in it
@example("", "a" * 199 + "b", 2, "")  # a passage said twice: none
# a passage whose end occurs again 8 (then 1) characters nearer the end than the passage's
# length: that length is tried next, after the nearer one
@example("y" * 20, "abcdefgh" + "x" * 74 + "abcdefgh", 3, "")
@example("y" * 20, "a" + "b" * 80 + "a" * 9, 3, "")
@example("x" * 300, "", 0, "")
@example("", "a" * 599 + "b", 3, "")  # the longest passage, three times
def test_repeating_tries_only_the_lengths_that_can_repeat(head, passage, times, tail):
    """The repetition check finds the lengths to try from where the text's last characters
    occur again; it answers as trying every length does, on texts that repeat and not."""
    from volumetool.providers.base import repeating

    text = head + passage * times + tail
    assert repeating(text) == _repeating_by_every_length(text)


# -- the Responses API ---------------------------------------------------------------------


def test_the_responses_api_request_is_instructions_input_and_max_output_tokens():
    endpoint = Endpoint("openai-responses", "http://127.0.0.1:9/v1", "m", KEY, max_tokens=99)
    assert endpoint.url == "http://127.0.0.1:9/v1/responses"
    assert endpoint.headers()["authorization"] == f"Bearer {KEY}"
    expected = {
        "model": "m",
        "instructions": "S",
        "input": "U",
        "max_output_tokens": 99,
        "stream": True,
        "store": False,
    }
    assert endpoint.body("S", "U") == expected
    # the Responses API has one field for the limit, whatever model.max_tokens_param says
    reasoning = replace(endpoint, max_tokens_param="max_completion_tokens")
    assert reasoning.body("S", "U") == expected


def response(status="completed", content=None, **fields) -> dict:
    content = (
        [{"type": "output_text", "text": "Summary.", "annotations": []}]
        if content is None
        else content
    )
    return {
        "object": "response",
        "status": status,
        "error": None,
        "incomplete_details": None,
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": content},
        ],
        "usage": {"input_tokens": 120, "output_tokens": 7, "total_tokens": 127},
        **fields,
    }


def test_a_responses_answer_is_read_field_by_field():
    read = PROVIDERS["openai-responses"].parse
    plain = read(response(), "req_1")
    assert (plain.text, plain.finish, plain.refusal, plain.tool_call, plain.request_id) == (
        "Summary.",
        "completed",
        None,
        False,
        "req_1",
    )
    assert (plain.usage.input_tokens, plain.usage.output_tokens) == (120, 7)
    parts = [{"type": "output_text", "text": "Sum"}, {"type": "output_text", "text": "mary."}]
    assert read(response(content=parts), None).text == "Summary."
    refused = read(response(content=[{"type": "refusal", "refusal": "I can't."}]), None)
    assert (refused.text, refused.refusal) == (None, "I can't.")
    halves = [{"type": "refusal", "refusal": "I can"}, {"type": "refusal", "refusal": "'t."}]
    assert read(response(content=halves), None).refusal == "I can't."
    cut = read(response("incomplete", incomplete_details={"reason": "max_output_tokens"}), None)
    assert cut.finish == "max_output_tokens" and PROVIDERS["openai-responses"].cut_off(cut.finish)
    filtered = read(response("incomplete", incomplete_details={"reason": "content_filter"}), None)
    assert filtered.finish == "content_filter"
    assert read(response("incomplete"), None).finish == "incomplete"
    assert read(response(None), None).finish is None
    assert read(response(3), None).finish is None  # a status that is not text is no reason
    # a refusal part without its text is no refusal
    assert read(response(content=[{"type": "refusal", "refusal": None}]), None).refusal is None
    called = response()
    called["output"].append({"type": "function_call", "name": "f", "arguments": "{}"})
    assert read(called, None).tool_call is True
    # a tool call before the message item is one all the same
    called["output"].reverse()
    assert read(called, None).tool_call is True
    # an output_text part without text holds none (LiteLLM's beside a tool call)
    textless = response(content=[{"type": "output_text"}])
    assert read(textless, None).text is None
    for broken, what in (
        ({"status": "completed"}, "no output list"),
        ({"status": "completed", "output": ["x"]}, "an output item is not an object"),
        ({"output": [{"type": "message"}]}, "a message item without a content list"),
        (
            {"output": [{"type": "message", "content": [{"type": "output_text", "text": 3}]}]},
            "whose text is not a string",
        ),
        ({"output": [{"type": "message", "content": ["x"]}]}, "a content item is not an object"),
    ):
        with pytest.raises(_Malformed, match=what) as malformed:
            read({**broken, "usage": {"input_tokens": 3}}, None)
        # what it reported it spent is kept: a malformed answer still counts (SPEC 6)
        assert malformed.value.usage.input_tokens == 3, what


def test_a_responses_body_is_an_error_only_when_it_is_no_response():
    """A 200's JSON body with an `error` is the server's error (as OpenRouter sends) unless it
    is a response: one with an output list or a status carries `"error": null`."""
    failed = json.dumps({"error": {"message": "upstream failed", "code": 502}}).encode()
    error = answer(200, {}, failed, "openai-responses")
    assert isinstance(error, ModelError) and error.reason == "HTTP 502: upstream failed"
    unstated = {k: v for k, v in response().items() if k != "status"}
    read = answer(200, {}, json.dumps(unstated).encode(), "openai-responses")
    assert not isinstance(read, ModelError) and (read.text, read.finish) == ("Summary.", None)
    empty = {k: v for k, v in response().items() if k != "output"}
    read = answer(200, {}, json.dumps(empty).encode(), "openai-responses")
    assert isinstance(read, ModelError) and "no output list" in read.reason


def test_a_failed_response_is_an_error_and_a_server_error_is_retried():
    url = "http://127.0.0.1:9/v1"
    for error, status, retryable in (
        ({"code": "server_error", "message": "The model failed."}, 500, True),
        ({"code": "rate_limit_exceeded", "message": "Slow down."}, 429, True),
        ({"code": "invalid_prompt", "message": "Bad prompt."}, 200, False),
        (None, 200, False),
    ):
        body = json.dumps(response("failed", content=[], error=error)).encode()
        failed = answer(200, {"x-request-id": "req_9"}, body, "openai-responses")
        assert isinstance(failed, ModelError), failed
        assert (failed.status, failed.retryable, failed.request_id) == (status, retryable, "req_9")
        assert failed.where == f"POST {url}/responses"
        assert (error or {"message": "the response failed"})["message"] in failed.reason
        # what it reported it spent is kept: a failed call may be billed (SPEC 6)
        assert (failed.usage.input_tokens, failed.usage.output_tokens) == (120, 7)
    # a code that is not text names no error type and no status
    odd = {"code": ["server_error"], "message": "boom"}
    body = json.dumps(response("failed", content=[], error=odd)).encode()
    failed = answer(200, {}, body, "openai-responses")
    assert isinstance(failed, ModelError) and failed.reason == "HTTP 200: boom"
    assert (failed.status, failed.retryable) == (200, False)
    # a response carries "error": null when it did not fail
    completed = answer(200, {}, json.dumps(response()).encode(), "openai-responses")
    assert not isinstance(completed, ModelError) and completed.text == "Summary."


def sse(*events: dict) -> bytes:
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (e.get("type", "x").encode(), json.dumps(e).encode())
        for e in events
    )


def streamed(*events: dict) -> object:
    """A Responses stream mislabelled as JSON: read as a stream all the same."""
    return answer(200, {"content-type": "application/json"}, sse(*events), "openai-responses")


def test_a_streamed_response_is_read_from_its_events():
    done = response()
    deltas = [
        {"type": "response.created", "response": {**done, "status": "in_progress", "output": []}},
        {"type": "response.output_text.delta", "delta": "Summ"},
        {"type": "response.output_text.delta", "delta": "ary."},
    ]
    read = streamed(*deltas, {"type": "response.completed", "response": done})
    assert (read.text, read.finish, read.usage.input_tokens) == ("Summary.", "completed", 120)
    # a last event without the output list: the answer is what the deltas said
    bare = {k: v for k, v in done.items() if k != "output"}
    incomplete = {
        **bare,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    read = streamed(*deltas, {"type": "response.incomplete", "response": incomplete})
    assert (read.text, read.finish) == ("Summary.", "max_output_tokens")
    # an empty output list after the deltas (some servers stream the text and leave it out)
    read = streamed(*deltas, {"type": "response.completed", "response": {**bare, "output": []}})
    assert (read.text, read.finish) == ("Summary.", "completed")
    refusal = [{"type": "response.refusal.delta", "delta": "No."}]
    read = streamed(*refusal, {"type": "response.completed", "response": bare})
    assert (read.text, read.refusal, read.tool_call) == (None, "No.", False)
    # a refusal in several deltas is all of them; other deltas (a tool call's arguments, a
    # reasoning summary) are neither text nor refusal
    others = [
        {"type": "response.output_item.added", "item": {"type": "function_call"}},
        {"type": "response.function_call_arguments.delta", "delta": '{"path": '},
        {"type": "response.output_item.added", "item": {"type": "message"}},
        {"type": "response.output_item.added", "item": {"id": "no type"}},
        {"type": "response.reasoning_summary_text.delta", "delta": "Thinking."},
        {"type": "response.refusal.delta", "delta": "I can"},
        {"type": "response.refusal.delta", "delta": "'t."},
    ]
    read = streamed(*others, {"type": "response.completed", "response": bare})
    assert (read.text, read.refusal) == (None, "I can't.")
    # a tool call announced by its item, though the last event has no output: no summary
    assert read.tool_call is True
    # no last event: no answer
    cut = streamed(*deltas)
    assert isinstance(cut, ModelError) and "no output list (in an event stream)" in cut.reason


# What LiteLLM 1.81.16's proxy sent back on /v1/responses, byte for byte (`make litellm`,
# bench/litellm.py): "bridge" over a chat-completions server, "native" passed on to the
# server's own Responses API.
LITELLM = Path(__file__).parent / "data" / "litellm"


def litellm(name: str, status: int = 200) -> object:
    body = (LITELLM / name).read_bytes()
    kind = "text/event-stream; charset=utf-8" if name.endswith(".sse") else "application/json"
    return answer(status, {"content-type": kind}, body, "openai-responses")


def test_what_litellm_sends_is_read_as_it_says():
    # A tool call through the bridge: the message LiteLLM adds beside the function_call item
    # has an output_text part without text. It is a tool call, not a malformed answer.
    called = litellm("bridge-tool-call.sse")
    assert not isinstance(called, ModelError), called
    assert (called.tool_call, called.text, called.finish) == (True, None, "completed")
    assert (called.usage.input_tokens, called.usage.output_tokens) == (1580, 22)
    # Passed on, a cut-off answer is `incomplete` for max_output_tokens: refused.
    cut = litellm("native-cut-off.sse")
    assert PROVIDERS["openai-responses"].cut_off(cut.finish)
    assert (cut.usage.input_tokens, cut.usage.output_tokens) == (1200, 80)
    # Through the bridge LiteLLM says `completed` of an answer cut off at the limit (its
    # chat server said finish_reason "length"), and its own token count: nothing in the bytes
    # tells it apart from a finished answer (docs/compaction.md says so).
    bridged = litellm("bridge-cut-off.sse")
    assert bridged.finish == "completed" and bridged.text.startswith("Summary: ")
    assert (bridged.usage.input_tokens, bridged.usage.output_tokens) == (1580, 343)
    # A refusal through the bridge: LiteLLM drops the refusal and sends an empty text.
    refused = litellm("bridge-refusal.sse")
    assert (refused.text, refused.refusal, refused.finish) == ("", None, "completed")
    # Its errors: a 429 is retried (LiteLLM sends no Retry-After), a context error splits.
    limited = litellm("bridge-429.json", 429)
    assert isinstance(limited, ModelError) and limited.retryable and not limited.too_long
    assert limited.reason.startswith("HTTP 429 throttling_error: litellm.RateLimitError")
    too_long = litellm("bridge-context-window.json", 400)
    assert isinstance(too_long, ModelError) and too_long.too_long and not too_long.retryable


def anthropic_stream(*events: dict) -> object:
    start = {"type": "message", "role": "assistant", "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": 50, "output_tokens": 1}
    first = {"type": "message_start", "message": start}
    return answer(200, {"content-type": "text/event-stream"}, sse(first, *events), "anthropic")


def text_delta(index: int, text: str | None) -> dict:
    delta = {"type": "text_delta"} | ({"text": text} if text is not None else {})
    return {"type": "content_block_delta", "index": index, "delta": delta}


def test_an_anthropic_stream_is_gathered_into_the_message_it_streams():
    called = anthropic_stream(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        text_delta(0, "Let me look"),
        text_delta(0, None),  # a text delta without text adds none
        text_delta(0, "."),
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t1", "name": "read", "input": {}},
        },
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta"}},
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 9}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
    )
    assert not isinstance(called, ModelError), called
    assert (called.text, called.tool_call, called.finish) == ("Let me look.", True, "tool_use")
    assert (called.usage.input_tokens, called.usage.output_tokens) == (50, 9)
    # deltas of a block whose start never came are its text all the same
    unopened = anthropic_stream(
        text_delta(0, "Sum"),
        text_delta(0, "mary."),
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
    )
    assert (unopened.text, unopened.tool_call, unopened.finish) == ("Summary.", False, "end_turn")
    # a stream that never said why it stopped has no finish reason: no summary (SPEC 6)
    unfinished = anthropic_stream(text_delta(0, "Summ"))
    assert (unfinished.text, unfinished.finish) == ("Summ", None)


def test_a_failed_stream_and_an_error_event_are_the_servers_errors():
    stream = {"content-type": "text/event-stream"}
    failed = {
        **response("failed", content=[]),
        "error": {"code": "server_error", "message": "boom"},
    }
    for events, status, text in (
        ([{"type": "response.failed", "response": failed}], 500, "HTTP 500 server_error: boom"),
        (
            [{"type": "error", "code": "context_length_exceeded", "message": "too many tokens"}],
            200,
            "HTTP 200 context_length_exceeded: too many tokens",
        ),
    ):
        error = answer(
            200,
            stream,
            sse({"type": "response.created", "response": {}}, *events),
            "openai-responses",
        )
        assert isinstance(error, ModelError) and error.status == status
        assert error.reason == text
        if events[0]["type"] == "response.failed":  # its usage is kept, as a JSON answer's
            assert (error.usage.input_tokens, error.usage.output_tokens) == (120, 7)
    assert error.too_long  # a context-length error event: the fold is split (SPEC 6)
    # an error event may carry its error as an object of its own
    nested = {"type": "error", "error": {"code": "rate_limit_exceeded", "message": "slow down"}}
    error = answer(200, stream, sse(nested), "openai-responses")
    assert (
        isinstance(error, ModelError) and error.reason == "HTTP 429 rate_limit_exceeded: slow down"
    )
    assert error.retryable


def test_a_model_stopped_for_repeating_itself_keeps_what_it_reported_it_spent(server):
    """Anthropic's message_start reports the prompt's tokens before any text: the answer
    stopped for repeating itself still costs them, and they are recorded (SPEC 6)."""
    spent, _ = run(server, "anthropic", attempts=1)
    server.fault, server.chunk_delay = "repeat", 0.002
    error, _ = run(server, "anthropic", attempts=1)
    assert isinstance(error, ModelError) and "the model repeated itself" in error.reason
    assert error.usage is not None and error.usage.input_tokens == spent.usage.input_tokens > 0

"""compact against servers people run themselves (SPEC 14): llama.cpp, Ollama and vLLM need
no key, and a CPU model answers slowly — both against the real test server on 127.0.0.1."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import assert_clean_error
from tests.support.fixtures import THREAD_MEMORY, write_config
from tests.support.volumes import VolumeWriter, due_thread
from tests.test_cli import wait_for
from volumetool.providers import PROVIDERS

USUAL = {api: provider.api_key_env for api, provider in PROVIDERS.items()}
AUTH = ("authorization", "x-api-key", "api-key")


def setup(tmp_path, server, api: str, key_env: str | None = None):
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "k1")
    w.close()
    config = write_config(
        tmp_path / "agent.yaml", server, api, None, THREAD_MEMORY, "smollm2", key_env, agent=None
    )
    return w.path, config


def compact(run_cli, path, config, env: dict, *args: str):
    unset = {name: None for name in (*USUAL.values(), "LOCAL_KEY")}
    return run_cli("compact", path, "--config", config, "--json", *args, env={**unset, **env})


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_config_that_names_no_key_compacts_against_a_keyless_server(
    run_cli, tmp_path, server, api
):
    """No api_key_env and no $OPENAI_API_KEY / $ANTHROPIC_API_KEY: no auth header is sent
    (the server answers 401 to any), and the thread is compacted."""
    server.keyless = True
    path, config = setup(tmp_path, server, api)
    result = compact(run_cli, path, config, {})
    assert result.exit_code == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert row["status"] == "compacted", row
    [sent] = server.requests
    assert not set(AUTH) & set(sent["headers"])


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_the_apis_usual_variable_is_sent_when_it_is_set(run_cli, tmp_path, server, api):
    path, config = setup(tmp_path, server, api)
    result = compact(run_cli, path, config, {USUAL[api]: "sk-usual-0123456789"})
    assert result.exit_code == 0, result.stderr
    [sent] = server.requests
    header, value = ("x-api-key", "") if api == "anthropic" else ("authorization", "Bearer ")
    assert sent["headers"][header] == value + "sk-usual-0123456789"


@pytest.mark.parametrize("value", [None, ""])
def test_a_named_variable_unset_or_empty_is_still_a_usage_error(run_cli, tmp_path, server, value):
    path, config = setup(tmp_path, server, "openai", key_env="LOCAL_KEY")
    env = {"LOCAL_KEY": value, "OPENAI_API_KEY": "sk-usual-0123456789"}
    result = compact(run_cli, path, config, env)
    assert_clean_error(result, 2, "$LOCAL_KEY is not set")
    assert server.requests == []
    result = compact(run_cli, path, config, {"OPENAI_API_KEY": ""}, "--api-key-env", "LOCAL_KEY")
    assert_clean_error(result, 2, "$LOCAL_KEY is not set")


def test_validate_takes_a_config_without_a_key(run_cli, tmp_path, server):
    _, config = setup(tmp_path, server, "openai")
    result = run_cli("validate", config)
    assert result.exit_code == 0, result.stdout


# -- slow is not dead (SPEC 14) -----------------------------------------------------------


def streamed_setup(tmp_path, server, api):
    path, config = setup(tmp_path, server, api)
    return path, config, {USUAL[api]: "sk-usual-0123456789"}


def frames(server, api) -> int:
    """How many events the server's answer takes (each after chunk_delay)."""
    from tests.support.model_server import EVENTS

    answer = {"anthropic": server._anthropic, "openai-responses": server._responses}
    return len(EVENTS[api](answer.get(api, server._openai)(server.summary, None)))


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_slow_but_steady_answer_is_not_cut_off_by_the_timeout(run_cli, tmp_path, server, api):
    """A CPU model writes a token now and then: each wait is shorter than --timeout, the whole
    answer longer. It is read to the end (it failed after 4 attempts and 7 min 47 s)."""
    server.chunk_delay = 0.1
    timeout = 0.5
    assert server.chunk_delay * frames(server, api) > timeout  # the whole answer takes longer
    path, config, env = streamed_setup(tmp_path, server, api)
    result = compact(run_cli, path, config, env, "--timeout", str(timeout))
    assert result.exit_code == 0, result.stdout
    [row] = json.loads(result.stdout)
    assert row["status"] == "compacted", row
    [sent] = server.requests
    assert sent["body"]["stream"] is True
    if api == "openai":
        assert sent["body"]["stream_options"] == {"include_usage": True}
    assert server.streams[-1]["events"] == server.streams[-1]["of"]
    # usage read from the stream: Anthropic's cache tokens are part of the prompt
    cached = server.usage["cache_creation"] + server.usage["cache_read"]
    prompt = server.usage["input"] + (cached if api == "anthropic" else 0)
    assert (row["input_tokens"], row["output_tokens"]) == (prompt, server.usage["output"])


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_stream_that_stalls_fails_by_the_idle_timeout_and_says_so(run_cli, tmp_path, server, api):
    server.fault = "stall"
    path, config, env = streamed_setup(tmp_path, server, api)
    result = compact(run_cli, path, config, env, "--timeout", "0.3", "--retries", "1")
    assert result.exit_code == 1
    [row] = json.loads(result.stdout)
    assert row["status"] == "failed"
    assert "no response within 0.3s" in row["error"] and "raise it" in row["error"]
    assert "--timeout" in row["error"] and "after 2 attempts" in row["error"]
    assert len(server.requests) == 2 and all(s["events"] == 3 for s in server.streams)


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_model_that_repeats_itself_is_stopped_early(run_cli, tmp_path, server, api):
    """SmolLM2 wrote one sentence to the 512-token limit (322 s), and the advice was "raise
    --max-summary-tokens". The stream is closed once the repetition is clear."""
    from tests.support.model_server import REPEATED_SENTENCE

    server.fault, server.chunk_delay = "repeat", 0.002
    path, config, env = streamed_setup(tmp_path, server, api)
    result = compact(run_cli, path, config, env)
    assert result.exit_code == 1
    [row] = json.loads(result.stdout)
    assert row["status"] == "failed" and "the model repeated itself" in row["error"]
    assert "max-summary-tokens" not in row["error"]
    assert f"POST {server.url}" in row["error"]
    [stream] = server.streams
    # The server learns of the close at its next write after it, or sends every event when
    # the stream was never closed: wait for either, then say which.
    wait_for(lambda: stream["closed"] or stream["events"] == stream["of"])
    assert stream["closed"], stream
    # Stopped within a few repetitions of the sentence, by what volumetool had read when it
    # stopped: how much more the server sent before it saw the close depends on the load.
    read = re.search(r"stopped after ([\d,]+) characters", row["error"])
    assert read and int(read[1].replace(",", "")) < 8 * len(REPEATED_SENTENCE), row["error"]


@pytest.mark.parametrize("api", list(PROVIDERS))
def test_a_server_that_answers_json_though_asked_to_stream_is_read(run_cli, tmp_path, server, api):
    server.plain = True
    path, config, env = streamed_setup(tmp_path, server, api)
    result = compact(run_cli, path, config, env)
    assert result.exit_code == 0, result.stdout
    [row] = json.loads(result.stdout)
    assert row["status"] == "compacted" and server.streams == []
    assert server.requests[0]["body"]["stream"] is True


@pytest.mark.parametrize("plain", [False, True])
@pytest.mark.parametrize(
    ("fault", "advice"),
    [("repeat", "the model repeated itself"), ("truncated", "raise --max-summary-tokens")],
)
def test_the_advice_of_an_answer_cut_off_at_the_limit_fits(
    run_cli, tmp_path, server, fault, advice, plain
):
    """Only an answer really cut off by its length is told to raise --max-summary-tokens; one
    that reached the limit repeating itself is called that, streamed or not."""
    server.fault, server.plain = fault, plain
    path, config, env = streamed_setup(tmp_path, server, "openai")
    result = compact(run_cli, path, config, env)
    [row] = json.loads(result.stdout)
    assert row["status"] == "failed" and advice in row["error"], row
    if fault == "repeat":
        assert "max-summary-tokens" not in row["error"]

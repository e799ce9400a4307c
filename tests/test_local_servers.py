"""compact against servers people run themselves (SPEC 14): llama.cpp, Ollama and vLLM need
no key, and a CPU model answers slowly — both against the real test server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_clean_error
from tests.support.model_server import ModelServer
from tests.support.volumes import VolumeWriter, due_thread

USUAL = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
AUTH = ("authorization", "x-api-key", "api-key")


@pytest.fixture
def server():
    with ModelServer() as s:
        yield s


def setup(tmp_path, server, api: str, key_env: str | None = None):
    w = VolumeWriter(tmp_path / "agent.db")
    due_thread(w, "k1")
    w.close()
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"model:\n  name: smollm2\n  api: {api}\n  base_url: {server.url}\n"
        + (f"  api_key_env: {key_env}\n" if key_env else "")
        + "memory:\n  scope: thread\n  compact_at_tokens: 50000\n"
    )
    return w.path, config


def compact(run_cli, path, config, env: dict, *args: str):
    unset = {name: None for name in (*USUAL.values(), "LOCAL_KEY")}
    return run_cli("compact", path, "--config", config, "--json", *args, env={**unset, **env})


@pytest.mark.parametrize("api", ["openai", "anthropic"])
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


@pytest.mark.parametrize("api", ["openai", "anthropic"])
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

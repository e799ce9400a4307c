"""The effective settings: pure data the compaction core can import without YAML, and the one
check of a base_url that `validate` and `compact --base-url` share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from volumetool.config import MEMORY_KEYS, MODEL_KEYS
from volumetool.settings import AgentConfig, ModelSettings, base_url_problem


def test_a_config_without_blocks_gets_the_seeds_defaults():
    # The seed: "Both default off"; compact_at_tokens "default: 50000"; SPEC section 3 and 6.
    shown = AgentConfig().as_dict()
    assert shown["memory"] == {"scope": "none", "persistent": False, "compact_at_tokens": 50000}
    assert shown["model"] == {
        "name": None,
        "small": None,
        "api": "openai",
        "base_url": "https://api.openai.com/v1",
        "api_key_env": "OPENAI_API_KEY",
        "max_tokens_param": "max_tokens",
        "auth": "bearer",
        "api_version": None,
    }


def test_anthropic_defaults_follow_the_api_and_explicit_values_win():
    model = ModelSettings(name="c", api="anthropic")
    assert (model.base_url, model.api_key_env, model.auth) == (
        "https://api.anthropic.com",
        "ANTHROPIC_API_KEY",
        "x-api-key",
    )
    gateway = ModelSettings(name="c", api="anthropic", auth="bearer", base_url="https://g.example")
    assert (gateway.auth, gateway.base_url) == ("bearer", "https://g.example")


def test_the_key_tables_take_their_defaults_from_the_settings():
    assert {name: key.default for name, key in MEMORY_KEYS.items()} == {
        "scope": "none",
        "persistent": False,
        "compact_at_tokens": 50000,
    }
    assert MODEL_KEYS["max_tokens_param"].default == "max_tokens"
    assert MODEL_KEYS["auth"].default is None  # resolved from the api


@pytest.mark.parametrize(
    ("url", "api", "named"),
    [
        ("http://[::1", "openai", "not a URL"),
        ("http://[::1]:99999/v1", "openai", "65535"),
        ("http://h:65536", "openai", "65535"),
        ("http://h:" + "9" * 5000, "openai", "65535"),
        ("https://api.anthropic.com/v1", "anthropic", "/v1/v1/messages"),
        ("https://h/v1?api-version=1", "openai", "api_version"),
        ("http://h/\nx", "openai", "control character"),
        ("javascript:alert(1)", "openai", "http://"),
        ("", "openai", "http://"),
    ],
)
def test_base_url_problem_names_what_cannot_work(url, api, named):
    problem = base_url_problem(url, api)
    assert problem is not None and named in problem
    assert "\n" not in problem


@pytest.mark.parametrize(
    "url",
    ["http://[::1]:8080/v1", "http://h:1", "http://h:65535", "https://h.example/", "http://h:"],
)
def test_base_url_problem_accepts_urls_that_work(url):
    assert base_url_problem(url, "openai") is None


def test_base_url_problem_never_repeats_a_password():
    problem = base_url_problem("https://me:s3cr3t-pass@gw.example/v1", "openai")
    assert problem is not None and "s3cr3t" not in problem


@given(st.text(max_size=60), st.sampled_from(["openai", "anthropic", "azure"]))
def test_base_url_problem_never_raises(url, api):
    problem = base_url_problem("http://" + url, api)
    assert problem is None or "\n" not in problem

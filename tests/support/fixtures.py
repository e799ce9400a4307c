"""The test kit: the loopback model server, its API key, a compaction request and an agent
config against it, each defined once (a pytest plugin, registered in tests/conftest.py).

`server` is a fresh loopback model server for each test. A module that marks itself
`pytestmark = pytest.mark.shared_server(...)` gets one server for the whole module instead,
built with the marker's keywords (`latency`, and `summary` for the answer it gives).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.model_server import ModelServer
from volumetool.compaction.run import Request
from volumetool.settings import AgentConfig, MemorySettings, ModelSettings

KEY = "sk-test-7f3a9c0b1d2e4f5a6b7c8d9e0f1a2b3c"
KEY_ENV = "TEST_MODEL_KEY"
# The memory sections a config file gets: thread compaction at 50k tokens.
PERSISTENT_MEMORY = "  scope: thread\n  persistent: true\n  compact_at_tokens: 50000\n"
THREAD_MEMORY = "  scope: thread\n  compact_at_tokens: 50000\n"


# Test files that are mostly subprocesses (a volumetool, an agent, a signal each): `slow`,
# like every Hypothesis test; `make test-fast` leaves them out, `make test` runs them all.
SLOW_FILES = (
    "faults/",
    "test_backup.py",
    "test_cli.py",
    "test_compaction_interrupt.py",
    "test_docs.py",
    "test_examples.py",
    "test_lifecycle.py",
    "test_migrate.py",
    "test_report.py",
)


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "shared_server(latency=0.0, summary=None): one model server for the module"
    )


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        path = item.path.as_posix()
        hypothesis = getattr(getattr(item, "obj", None), "is_hypothesis_test", False)
        if hypothesis or any(f"/tests/{name}" in path for name in SLOW_FILES):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def _shared_server(request):
    marker = request.node.get_closest_marker("shared_server")
    options = dict(marker.kwargs) if marker else {}
    summary = options.pop("summary", None)
    with ModelServer(**options) as s:
        if summary is not None:
            s.summary = summary
        yield s


@pytest.fixture
def server(request):
    """The loopback model server (tests/support/model_server.py)."""
    if request.node.get_closest_marker("shared_server"):
        yield request.getfixturevalue("_shared_server")
        return
    with ModelServer() as s:
        yield s


@pytest.fixture(scope="module")
def model_key():
    """$TEST_MODEL_KEY holds KEY for the whole module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, KEY)
        yield


def compaction_request(
    server, api: str = "openai", *, memory: MemorySettings | None = None, model=None, **values
) -> Request:
    """A compact() request against `server`, its key in $TEST_MODEL_KEY; `model` overrides the
    model settings (name "m", small "s"), `values` are the request's own fields."""
    settings = ModelSettings(
        **{
            "name": "m",
            "small": "s",
            "api": api,
            "base_url": server.url,
            "api_key_env": KEY_ENV,
            **(model or {}),
        }
    )
    memory = memory or MemorySettings("thread", True, 50_000)
    return Request(config=AgentConfig(memory, settings), **values)


def write_config(
    path: Path,
    server,
    api: str | None = "openai",
    small: str | None = "tiny-model",
    memory: str | None = None,
    name: str = "big-model",
    key_env: str | None = KEY_ENV,
    agent: str | None = "bot",
) -> Path:
    """An agent config file whose model is `server`; a None field is left out."""
    path.write_text(
        (f"name: {agent}\n" if agent else "")
        + f"model:\n  name: {name}\n"
        + (f"  small: {small}\n" if small else "")
        + (f"  api: {api}\n" if api else "")
        + f"  base_url: {server.url}\n"
        + (f"  api_key_env: {key_env}\n" if key_env else "")
        + f"memory:\n{memory or PERSISTENT_MEMORY}"
    )
    return path

"""Temporary shim until the config refactor lands: the settings dataclasses."""

from __future__ import annotations

from urllib.parse import urlsplit

from volumetool.config import (  # noqa: F401
    API_DEFAULTS,
    DEFAULT_THRESHOLD,
    AgentConfig,
    MemorySettings,
    ModelSettings,
)


def base_url_problem(url: str, api: str) -> str | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "not an http:// or https:// URL"
    if not parts.hostname:
        return "no host"
    if port is not None and not 1 <= port <= 65535:
        return "port outside 1-65535"
    if parts.query or parts.fragment:
        return "a query string"
    if api == "anthropic" and parts.path.rstrip("/").endswith("/v1"):
        return "ends in /v1"
    return None

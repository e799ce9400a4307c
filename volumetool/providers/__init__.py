"""The wire formats volumetool requests summaries in, one module each, and the one registry
that everything else reads: the settings' defaults, validate's `api` check and the JSON Schema,
`compact --api`, endpoint resolution and the client.

Adding a format is one module here (a `Provider` subclass and its `PROVIDER`), its line in
PROVIDERS, and its tests (tests/support/model_server.py speaks each format).
"""

from __future__ import annotations

from volumetool.providers import anthropic_messages, openai_chat, openai_responses
from volumetool.providers.base import AUTH_HEADERS, Completion, Provider

__all__ = ["AUTH_HEADERS", "PROVIDERS", "Completion", "Provider"]

# api -> its provider, in the order messages and the JSON Schema list them.
PROVIDERS: dict[str, Provider] = {
    module.PROVIDER.name: module.PROVIDER
    for module in (openai_chat, anthropic_messages, openai_responses)
}

"""The effective `memory:` and `model:` settings of an agent config, and the pure rules about
them that more than the config checker needs (a base_url that cannot work).

Nothing here reads a file or imports YAML, click or httpx: the pure compaction core takes these
settings as plain data. Each default is written once, here or (what an api leaves out) in its
provider; the config checker's key table reads them from these dataclasses.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

from volumetool.providers import AUTH_HEADERS, PROVIDERS

DEFAULT_THRESHOLD = 50_000

# The choices of the enumerated settings, with what each means (for messages and the JSON
# Schema). The apis and auth schemes are the providers' (volumetool/providers/).
SCOPES = ("thread", "none")
APIS = {api: provider.called for api, provider in PROVIDERS.items()}
AUTHS = {scheme: header.shown for scheme, header in AUTH_HEADERS.items()}
MAX_TOKENS_PARAMS = {
    "max_tokens": "most chat models",
    "max_completion_tokens": "OpenAI reasoning models such as o4-mini",
}


@dataclass(frozen=True)
class MemorySettings:
    scope: str = "none"
    persistent: bool = False
    compact_at_tokens: int | None = DEFAULT_THRESHOLD  # None: compaction disabled

    @property
    def compaction_enabled(self) -> bool:
        return self.scope == "thread" and self.compact_at_tokens is not None

    def as_dict(self) -> dict:
        shown = asdict(self)
        if self.compact_at_tokens is None:
            shown["compact_at_tokens"] = False  # as the config spells it
        return shown


@dataclass(frozen=True)
class ModelSettings:
    """The model: block. base_url, api_key_env and auth left as None take the api's defaults."""

    name: str | None = None
    small: str | None = None
    api: str = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    max_tokens_param: str = "max_tokens"  # the request field that carries the output limit
    auth: str | None = None  # a key of AUTHS
    api_version: str | None = None  # sent as the api-version query parameter when set
    # Whether the config named api_key_env itself: then its key is required; otherwise the
    # api's usual variable is used when it is set, and no key is sent when not (SPEC 14).
    key_named: bool = field(init=False, default=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_named", self.api_key_env is not None)
        defaults = PROVIDERS.get(self.api, PROVIDERS["openai"])
        for name in ("base_url", "api_key_env", "auth"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(defaults, name))

    @property
    def summary_model(self) -> str | None:
        """The model that writes compaction summaries: model.small, else model.name."""
        return self.small or self.name

    def as_dict(self) -> dict:
        shown = asdict(self)
        del shown["key_named"]
        return shown


@dataclass(frozen=True)
class AgentConfig:
    memory: MemorySettings = field(default_factory=MemorySettings)
    model: ModelSettings = field(default_factory=ModelSettings)

    def as_dict(self) -> dict:
        """What `config show --json` prints: both blocks with defaults filled in, and what
        compaction will do with them."""
        enabled = self.memory.compaction_enabled
        return {
            "memory": self.memory.as_dict(),
            "model": self.model.as_dict(),
            "compaction": {
                "enabled": enabled,
                "threshold": self.memory.compact_at_tokens if enabled else None,
                "summary_model": self.model.summary_model if enabled else None,
            },
        }


def base_url_problem(url: str, api: str) -> str | None:
    """Why requests to `url` (a model.base_url or --base-url) cannot work with `api`, in one
    line that never repeats the URL (it may carry a password); None when it can work."""
    if not url[:8].lower().startswith(("http://", "https://")):
        return "base_url must be an http:// or https:// URL"
    if any(char.isspace() or not char.isprintable() for char in url):
        return "base_url contains a space or a control character"
    try:
        parts = urlsplit(url)
    except ValueError:  # http://[::1 and other broken [IPv6] hosts
        return "base_url is not a URL: its [IPv6 address] is not closed or not valid"
    if url_has_credentials(url):
        return (
            "base_url carries a user name or password (user:password@); put the key in the "
            "environment and name it with model.api_key_env"
        )
    if not parts.hostname:
        return "base_url has no host"
    port = parts.netloc.rpartition("]")[2].partition(":")[2]
    if port and not _is_port(port):
        return f"base_url has port {port!r}; a port is a number from 1 to 65535"
    if "?" in url or "#" in url:
        return (
            "base_url has a query string or fragment (? or #), and request paths are appended "
            "to it; set model.api_version for api-version"
        )
    return _doubled_path(parts.path.rstrip("/"), api)


def _is_port(text: str) -> bool:
    digits = text.lstrip("0")
    return text.isascii() and text.isdigit() and len(digits) <= 5 and 1 <= int(digits or 0) <= 65535


def _doubled_path(path: str, api: str) -> str | None:
    """A base_url path that already ends in (the start of) what the client appends."""
    appended = PROVIDERS[api].path if api in PROVIDERS else ""
    segments = appended.split("/")[1:]
    for n in range(len(segments), 0, -1):
        start = "/" + "/".join(segments[:n])
        if path.endswith(start):
            return (
                f"base_url ends in {start}, and {appended} is appended to it for api: {api} "
                f"(POST …{start}{appended}); remove the {start}"
            )
    return None


def url_has_credentials(url: str) -> bool:
    """Whether a URL carries user:password@ (a literal secret in a config)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return "@" in parts.netloc

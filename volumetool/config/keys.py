"""The keys of the `memory:` and `model:` blocks, in one table: each key's JSON Schema fragment,
its description, its check and its default (read from the settings dataclass, where every
default is written once). The block checks and the JSON Schema are both made from it.

A check takes the key's value node and returns the value the runtime will use, or INVALID
(then the default applies). Keys are checked in table order, and a check may read the values of
the keys before it (`at.values`): compact_at_tokens reads scope, base_url reads api.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace

import yaml

from volumetool.config.findings import spoken
from volumetool.config.nodes import (
    BOOL,
    FLOAT,
    INT,
    NULL,
    TIMESTAMP,
    AddFinding,
    Pair,
    describe,
    did_you_mean,
    is_text,
    key_path,
    pairs,
)
from volumetool.config.secret import SECRET_KEY, SECRET_VALUE
from volumetool.providers import PROVIDERS
from volumetool.settings import (
    APIS,
    AUTHS,
    MAX_TOKENS_PARAMS,
    SCOPES,
    MemorySettings,
    ModelSettings,
    base_url_problem,
    url_has_credentials,
)

INVALID = object()  # a check's answer for a value the runtime cannot use
PLAUSIBLE_THRESHOLDS = (1_000, 2_000_000)
YAML11_BOOLS = {"yes", "no", "on", "off"}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")
_CONSTRUCTOR = yaml.constructor.SafeConstructor()


@dataclass(slots=True)
class At:
    """The key being checked: its name, key node and path, the block's values so far
    (defaults filled in), and where findings go."""

    name: str
    key: yaml.Node
    path: str
    values: Mapping[str, object]
    report: AddFinding

    def add(self, where: yaml.Node, rule: str, message: str) -> None:
        self.report(where, rule, message, self.path)


Check = Callable[[yaml.Node, At], object]


@dataclass(frozen=True)
class Key:
    name: str
    schema: dict
    description: str
    check: Check
    default: object = None


def table(settings: type, *keys: Key) -> dict[str, Key]:
    """The keys of one block, with the defaults of its settings dataclass; the table and the
    dataclass name the same keys in the same order, or nothing imports."""
    defaults = {f.name: f.default for f in fields(settings) if f.init}
    if list(defaults) != [key.name for key in keys]:
        raise TypeError(f"the key table and {settings.__name__} disagree")
    return {key.name: replace(key, default=defaults[key.name]) for key in keys}


def check_keys(
    keys: dict[str, Key], found: dict[str, Pair], block: str, report: AddFinding
) -> dict:
    """The block's values: each key's checked value, or its default."""
    values = {name: key.default for name, key in keys.items()}
    for name, key in keys.items():
        if name in found:
            key_node, node = found[name]
            value = key.check(node, At(name, key_node, key_path(block, name), values, report))
            if value is not INVALID:
                values[name] = value
    return values


# -- memory: ----------------------------------------------------------------------------------


def check_scope(node: yaml.Node, at: At) -> object:
    if is_text(node, *SCOPES):
        return node.value
    hint = did_you_mean(node.value, SCOPES) if isinstance(node, yaml.ScalarNode) else ""
    at.add(node, "scope-value", f"scope is {describe(node)}; it must be {spoken(SCOPES)}{hint}")
    return INVALID


def check_persistent(node: yaml.Node, at: At) -> object:
    if isinstance(node, yaml.ScalarNode) and node.tag == BOOL:
        value = node.value.lower() in ("true", "yes", "on")
        if node.value.lower() in YAML11_BOOLS:
            at.add(
                node,
                "persistent-yaml11-bool",
                f"{node.value} is read as {str(value).lower()} only by YAML 1.1 "
                f"parsers; write {str(value).lower()}",
            )
        return value
    fix = ""
    if isinstance(node, yaml.ScalarNode) and node.value.lower() in ("true", "false"):
        fix = f"; remove the quotes: persistent: {node.value.lower()}"
    at.add(
        node, "persistent-type", f"persistent is {describe(node)}; it must be true or false{fix}"
    )
    return INVALID


def check_threshold(node: yaml.Node, at: At) -> object:
    if at.values["scope"] != "thread":
        at.add(
            at.key,
            "compact-at-tokens-no-effect",
            "compact_at_tokens has no effect without scope: thread (there is no "
            "history to compact)",
        )
    if isinstance(node, yaml.ScalarNode) and node.tag == BOOL:
        return _threshold_bool(node, at)
    if isinstance(node, yaml.ScalarNode) and node.tag == INT:
        return _threshold_int(node, at)
    at.add(
        node,
        "compact-at-tokens-type",
        f"{_not_a_count(node)}; it must be an integer >= 1, or false to disable",
    )
    return INVALID


def _threshold_bool(node: yaml.ScalarNode, at: At) -> object:
    spelled = node.value.lower()
    if spelled not in ("false", "no", "off"):
        at.add(
            node,
            "compact-at-tokens-type",
            f"{node.value} is not a threshold: write a token count such as 50000, "
            "or false to disable compaction",
        )
        return INVALID
    if spelled != "false":
        at.add(
            node,
            "compact-at-tokens-yaml11-bool",
            f"{node.value} is read as false (compaction off) only by YAML 1.1 parsers; write false",
        )
    return None  # compaction off


def _threshold_int(node: yaml.ScalarNode, at: At) -> object:
    try:
        value = _CONSTRUCTOR.construct_yaml_int(node)
    except (ValueError, yaml.YAMLError):
        value = None
    if value is None or value < 1:
        at.add(node, "compact-at-tokens-type", _not_a_threshold(node, value))
        return INVALID
    low, high = PLAUSIBLE_THRESHOLDS
    if value < low:
        at.add(
            node,
            "compact-at-tokens-implausible",
            f"a threshold of {value:,} tokens compacts after nearly every run; "
            "typical values are 20000-200000",
        )
    elif value > high:
        at.add(
            node,
            "compact-at-tokens-implausible",
            f"{value:,} tokens is beyond any model's context window, so compaction "
            "would never run; use false to disable it",
        )
    return value


def _not_a_threshold(node: yaml.ScalarNode, value: int | None) -> str:
    if value is None:
        return f"{node.value!r} is not a readable integer"
    if value == 0:
        return "0 would compact after every run; use false to disable compaction"
    return f"{value} is negative; the threshold is a token count >= 1 (or false to disable)"


def _not_a_count(node: yaml.Node) -> str:
    """What a compact_at_tokens that is neither an integer nor a boolean is."""
    if is_text(node):
        digits = re.fullmatch(r"\s*(\d+)\s*([kK])?\s*", node.value)
        if digits and digits.group(2):
            return (
                f"{node.value!r} is a string; write the full number ({int(digits.group(1)) * 1000})"
            )
        if digits:
            return f"{node.value!r} is a quoted string; remove the quotes"
        return f"{describe(node)} is not a token count"
    if isinstance(node, yaml.ScalarNode) and node.tag == FLOAT:
        return f"{node.value} is not a whole number of tokens"
    return f"compact_at_tokens is {describe(node)}"


MEMORY_KEYS = table(
    MemorySettings,
    Key(
        "scope",
        {"enum": list(SCOPES)},
        "thread replays each conversation's transcript; none starts every run fresh.",
        check_scope,
    ),
    Key(
        "persistent",
        {"type": "boolean"},
        "Give the agent remember/recall/forget tools backed by its SQLite file.",
        check_persistent,
    ),
    Key(
        "compact_at_tokens",
        {"oneOf": [{"type": "integer", "minimum": 1}, {"const": False}]},
        "Compact a thread once a run's last input token count reaches this; false disables.",
        check_threshold,
    ),
)


def check_memory(pair: Pair | None, report: AddFinding) -> MemorySettings:
    if pair is None:
        return MemorySettings()
    key, node = pair
    if isinstance(node, yaml.ScalarNode) and node.tag == NULL:
        defaults = MemorySettings()
        report(
            node if node.value else key,
            "memory-empty",
            f"memory: is empty, so every default applies (scope: {defaults.scope}, persistent: "
            f"{str(defaults.persistent).lower()}); remove it or fill it in",
            "$.memory",
        )
        return defaults
    if not isinstance(node, yaml.MappingNode):
        report(
            node,
            "memory-not-mapping",
            f"memory: is {describe(node)}; it must be a mapping of "
            f"{spoken(list(MEMORY_KEYS), 'and')}",
            "$.memory",
        )
        return MemorySettings()
    found = pairs(node)
    for name, (k, _) in found.items():
        if name not in MEMORY_KEYS:
            report(
                k,
                "memory-unknown-key",
                f"unknown key {name!r} under memory:; valid keys: "
                f"{', '.join(MEMORY_KEYS)}{did_you_mean(name, MEMORY_KEYS)}",
                key_path("$.memory", name),
            )
    return MemorySettings(**check_keys(MEMORY_KEYS, found, "$.memory", report))


# -- model: -----------------------------------------------------------------------------------

TextCheck = Callable[[str, yaml.Node, At], object]


def text(then: TextCheck | None = None) -> Check:
    """A check for a non-empty string setting (the value is stripped), then `then`."""

    def check(node: yaml.Node, at: At) -> object:
        if not (is_text(node) and node.value.strip()):
            quote = f'; quote it: "{node.value}"' if node.tag == TIMESTAMP else ""
            at.add(
                node,
                "model-key-type",
                f"model.{at.name} is {describe(node)}; it must be a non-empty string{quote}",
            )
            return INVALID
        value = node.value.strip()
        return then(value, node, at) if then else value

    return check


def one_of(rule: str, choices: Mapping[str, str]) -> TextCheck:
    def check(value: str, node: yaml.Node, at: At) -> object:
        if value in choices:
            return value
        at.add(
            node,
            rule,
            f"unknown {at.name} {value!r}; use {spoken(choices)}{did_you_mean(value, choices)}",
        )
        return INVALID

    return check


def check_base_url(url: str, node: yaml.Node, at: At) -> object:
    problem = base_url_problem(url, str(at.values["api"]))
    if problem is None:
        return url
    if not url_has_credentials(url):
        at.add(node, "model-base-url", problem)
    elif not SECRET_VALUE.search(url):  # a provider's key is already reported as a secret
        at.add(node, "literal-secret", problem)
    return INVALID


def check_env_name(name: str, node: yaml.Node, at: At) -> object:
    if ENV_NAME.match(name):
        return name
    if not SECRET_VALUE.search(name):  # a key pasted here is reported as a secret
        at.add(
            node,
            "model-api-key-env",
            "api_key_env must be the name of an environment variable (letters, "
            "digits, _), such as OPENAI_API_KEY",
        )
    return INVALID


def check_max_tokens_param(value: str, node: yaml.Node, at: At) -> object:
    provider = PROVIDERS.get(at.values["api"], PROVIDERS["openai"])
    if provider.max_tokens_field:
        at.add(
            at.key,
            "model-no-effect",
            f"max_tokens_param has no effect with api: {provider.name} (the {provider.called} "
            f"API always takes {provider.max_tokens_field})",
        )
    return one_of("model-max-tokens-param", MAX_TOKENS_PARAMS)(value, node, at)


def check_api_version(value: str, node: yaml.Node, at: At) -> object:
    if not API_VERSION.match(value):
        at.add(
            node,
            "model-api-version",
            f"api_version {value!r} is not a version date such as 2024-10-21 or 2025-04-01-preview",
        )
    return value


MODEL_KEYS = table(
    ModelSettings,
    Key("name", {"type": "string", "minLength": 1}, "The main model.", text()),
    Key(
        "small",
        {"type": "string", "minLength": 1},
        "A cheaper model for internal calls; compaction summaries use it when set.",
        text(),
    ),
    Key("api", {"enum": list(APIS)}, f"{spoken(APIS)}.", text(one_of("model-api", APIS))),
    Key(
        "base_url",
        {"type": "string", "pattern": "^https?://"},
        "The API's base URL (default: the provider's).",
        text(check_base_url),
    ),
    Key(
        "api_key_env",
        {"type": "string", "pattern": ENV_NAME.pattern},
        "The NAME of the environment variable holding the API key.",
        text(check_env_name),
    ),
    Key(
        "max_tokens_param",
        {"enum": list(MAX_TOKENS_PARAMS)},
        f"The request field of the summary's token limit: {spoken(MAX_TOKENS_PARAMS)}.",
        text(check_max_tokens_param),
    ),
    Key(
        "auth",
        {"enum": list(AUTHS)},
        f"The header the API key travels in: {spoken(AUTHS)}; default: "
        f"{spoken([f'{p.auth} for {api}' for api, p in PROVIDERS.items()], 'and')}.",
        text(one_of("model-auth", AUTHS)),
    ),
    Key(
        "api_version",
        {"type": "string", "minLength": 1},
        'Sent as the api-version query parameter (Azure OpenAI), such as "2024-10-21".',
        text(check_api_version),
    ),
)


def check_model(pair: Pair | None, report: AddFinding) -> ModelSettings:
    if pair is None:
        return ModelSettings()
    _, node = pair
    if is_text(node) and node.value.strip():
        return ModelSettings(name=node.value)
    if not isinstance(node, yaml.MappingNode):
        report(
            node,
            "model-type",
            f"model: is {describe(node)}; write a model name (model: gpt-4.1) or a "
            "mapping with name:",
            "$.model",
        )
        return ModelSettings()
    found = pairs(node)
    for name, (k, _) in found.items():
        if name not in MODEL_KEYS and not SECRET_KEY.match(name):  # a key is a secret
            report(
                k,
                "model-unknown-key",
                f"unknown key {name!r} under model: (volumetool reads "
                f"{', '.join(MODEL_KEYS)}){did_you_mean(name, MODEL_KEYS)}",
                key_path("$.model", name),
            )
    if "name" not in found:
        report(
            node,
            "model-name-missing",
            "model: has no name; add name: with the main model",
            "$.model",
        )
    return ModelSettings(**check_keys(MODEL_KEYS, found, "$.model", report))


# -- the JSON Schema --------------------------------------------------------------------------


def _schema_block(keys: dict[str, Key]) -> dict:
    properties = {}
    for name, key in keys.items():
        properties[name] = {**key.schema, "description": key.description}
        if key.default is not None:
            properties[name]["default"] = key.default
    return {"type": "object", "properties": properties, "additionalProperties": False}


def json_schema() -> dict:
    """A JSON Schema (draft 2020-12) of the memory: and model: blocks, for editors."""
    model_block = _schema_block(MODEL_KEYS)
    model_block["required"] = ["name"]
    model_block["additionalProperties"] = True
    model_block["not"] = {"anyOf": [{"required": ["api_key"]}, {"required": ["apikey"]}]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://volumetool.dev/schemas/agent-config.json",
        "title": "Agent config: memory and model blocks (checked by volumetool validate)",
        "type": "object",
        "properties": {
            "memory": {
                **_schema_block(MEMORY_KEYS),
                "description": "Thread history and persistent memory.",
            },
            "model": {
                "description": "The model, as a name or a mapping.",
                "oneOf": [{"type": "string", "minLength": 1}, model_block],
            },
        },
        # compaction-no-model: compaction on (scope: thread, compact_at_tokens not false)
        # needs a model to write the summaries.
        "if": {
            "required": ["memory"],
            "properties": {
                "memory": {
                    "type": "object",
                    "required": ["scope"],
                    "properties": {
                        "scope": {"const": "thread"},
                        "compact_at_tokens": {"not": {"const": False}},
                    },
                }
            },
        },
        "then": {"required": ["model"]},
    }

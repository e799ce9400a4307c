"""The agent config's `memory:` and `model:` blocks: the rules that check them, over YAML nodes
with positions, and the effective settings the runtime will use.

The file is composed (never constructed) with PyYAML's C loader in the dialect the runtime
reads, YAML 1.1. Nodes keep duplicate keys and their marks; an alias is the same node object
as its anchor, so walking with a visited set costs one visit per node however many times a
billion-laughs file repeats it.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DEFAULT_MAX_BYTES = 1024 * 1024
MAX_DEPTH = 100
DEFAULT_THRESHOLD = 50_000
PLAUSIBLE_THRESHOLDS = (1_000, 2_000_000)
API_DEFAULTS = {
    "openai": ("https://api.openai.com/v1", "OPENAI_API_KEY"),
    "anthropic": ("https://api.anthropic.com", "ANTHROPIC_API_KEY"),
}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SECRET_KEY = re.compile(
    r"^(api[_-]?key|apikey|secret|secret[_-]key|client[_-]secret|password|passwd|"
    r"(access|auth|bearer|api)[_-]?token|token)$",
    re.IGNORECASE,
)
SECRET_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{30,}|"
    r"xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35})"
)
ENV_REFERENCE = re.compile(r"^(\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|env:[A-Za-z_][A-Za-z0-9_]*)$")
YAML11_BOOLS = {"yes", "no", "on", "off"}

_CONSTRUCTOR = yaml.constructor.SafeConstructor()
STR, INT, BOOL, NULL, FLOAT, MERGE = (
    f"tag:yaml.org,2002:{name}" for name in ("str", "int", "bool", "null", "float", "merge")
)

# rule id -> (severity, what it checks). One rule a kind of finding; ids are stable API.
RULES: dict[str, tuple[str, str]] = {
    "yaml-encoding": ("error", "The file is not UTF-8 text."),
    "file-too-large": ("error", "The file is larger than --max-bytes."),
    "yaml-syntax": ("error", "The file is not valid YAML."),
    "yaml-too-deep": ("error", "The document nests deeper than volumetool reads."),
    "yaml-recursive-alias": ("error", "An alias refers to a node that contains it."),
    "yaml-unknown-tag": ("error", "A tag the runtime's safe loader cannot construct."),
    "yaml-multiple-documents": ("error", "An agent config is one YAML document."),
    "config-not-mapping": ("error", "The top level of an agent config must be a mapping."),
    "duplicate-key": ("error", "A key appears twice in one mapping; the last one wins."),
    "memory-not-mapping": ("error", "memory: must be a mapping."),
    "memory-empty": ("warning", "memory: is present but empty; the defaults apply."),
    "memory-unknown-key": ("error", "A key under memory: that the runtime does not know."),
    "scope-value": ("error", "memory.scope must be thread or none."),
    "persistent-type": ("error", "memory.persistent must be true or false."),
    "persistent-yaml11-bool": ("warning", "memory.persistent spelled yes/no/on/off."),
    "compact-at-tokens-type": (
        "error",
        "memory.compact_at_tokens must be an integer >= 1, or false.",
    ),
    "compact-at-tokens-yaml11-bool": ("warning", "memory.compact_at_tokens spelled no/off."),
    "compact-at-tokens-no-effect": (
        "warning",
        "compact_at_tokens without scope: thread does nothing.",
    ),
    "compact-at-tokens-implausible": (
        "warning",
        "A threshold outside what any model makes sensible.",
    ),
    "model-type": ("error", "model: must be a model name or a mapping."),
    "model-key-type": ("error", "A model: setting of the wrong type."),
    "model-name-missing": ("error", "A model: mapping needs name."),
    "model-unknown-key": ("warning", "A key under model: that volumetool does not know."),
    "model-api": ("error", "model.api must be openai or anthropic."),
    "model-base-url": ("error", "model.base_url must be an http(s) URL."),
    "model-api-key-env": ("error", "model.api_key_env must name an environment variable."),
    "literal-secret": ("error", "A secret written into the file instead of the environment."),
    "summary-model-main": ("note", "Without model.small, the main model writes summaries."),
}


@dataclass(frozen=True)
class KeySpec:
    default: object
    schema: dict
    description: str


MEMORY_KEYS: dict[str, KeySpec] = {
    "scope": KeySpec(
        "none",
        {"enum": ["thread", "none"]},
        "thread replays each conversation's transcript; none starts every run fresh.",
    ),
    "persistent": KeySpec(
        False,
        {"type": "boolean"},
        "Give the agent remember/recall/forget tools backed by its SQLite file.",
    ),
    "compact_at_tokens": KeySpec(
        DEFAULT_THRESHOLD,
        {"oneOf": [{"type": "integer", "minimum": 1}, {"const": False}]},
        "Compact a thread once a run's last input token count reaches this; false disables.",
    ),
}
MODEL_KEYS: dict[str, KeySpec] = {
    "name": KeySpec(None, {"type": "string", "minLength": 1}, "The main model."),
    "small": KeySpec(
        None,
        {"type": "string", "minLength": 1},
        "A cheaper model for internal calls; compaction summaries use it when set.",
    ),
    "api": KeySpec(
        "openai", {"enum": list(API_DEFAULTS)}, "openai (chat completions) or anthropic (messages)."
    ),
    "base_url": KeySpec(
        None,
        {"type": "string", "pattern": "^https?://"},
        "The API's base URL (default: the provider's).",
    ),
    "api_key_env": KeySpec(
        None,
        {"type": "string", "pattern": ENV_NAME.pattern},
        "The NAME of the environment variable holding the API key.",
    ),
}


@dataclass(frozen=True, order=True)
class Finding:
    file: str
    line: int
    column: int
    severity: str
    rule: str
    message: str
    path: str = ""

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "severity": self.severity,
            "rule": self.rule,
            "message": self.message,
        }


@dataclass(frozen=True)
class MemorySettings:
    scope: str = "none"
    persistent: bool = False
    compact_at_tokens: int | None = DEFAULT_THRESHOLD  # None: compaction disabled

    @property
    def compaction_enabled(self) -> bool:
        return self.scope == "thread" and self.compact_at_tokens is not None


@dataclass(frozen=True)
class ModelSettings:
    name: str | None = None
    small: str | None = None
    api: str = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    auth: str | None = None
    api_version: str | None = None
    max_tokens_param: str = "max_tokens"

    def __post_init__(self) -> None:
        url, env = API_DEFAULTS.get(self.api, API_DEFAULTS["openai"])
        if self.base_url is None:
            object.__setattr__(self, "base_url", url)
        if self.api_key_env is None:
            object.__setattr__(self, "api_key_env", env)
        if self.auth is None:
            object.__setattr__(self, "auth", "x-api-key" if self.api == "anthropic" else "bearer")

    @property
    def summary_model(self) -> str | None:
        """The model that writes compaction summaries: model.small, else model.name."""
        return self.small or self.name


@dataclass(frozen=True)
class AgentConfig:
    memory: MemorySettings = field(default_factory=MemorySettings)
    model: ModelSettings = field(default_factory=ModelSettings)

    def as_dict(self) -> dict:
        memory, model = self.memory, self.model
        return {
            "memory": {
                "scope": memory.scope,
                "persistent": memory.persistent,
                "compact_at_tokens": (
                    memory.compact_at_tokens if memory.compact_at_tokens is not None else False
                ),
            },
            "model": {
                "name": model.name,
                "small": model.small,
                "api": model.api,
                "base_url": model.base_url,
                "api_key_env": model.api_key_env,
            },
            "compaction": {
                "enabled": memory.compaction_enabled,
                "threshold": memory.compact_at_tokens if memory.compaction_enabled else None,
                "summary_model": model.summary_model if memory.compaction_enabled else None,
            },
        }


def key_path(parent: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key):
        return f"{parent}.{key}"
    return f"{parent}[{key!r}]"


def did_you_mean(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key.lower(), valid, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def describe(node: yaml.Node) -> str:
    """A short, secret-safe description of what a node holds, for messages."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if node.tag == NULL:
        return "empty (null)"
    if node.tag == STR and node.style in ("'", '"'):
        return f"the quoted string {node.value[:40]!r}"
    if node.tag == STR:
        return f"the string {node.value[:40]!r}"
    return node.value[:40] or "empty"


class _Checker:
    """Collects the findings of one file."""

    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.lines = text.split("\n")
        self.findings: list[Finding] = []

    def add(
        self,
        where: yaml.Node | yaml.Mark | tuple[int, int] | None,
        rule: str,
        message: str,
        path: str = "",
    ) -> None:
        if isinstance(where, yaml.Node):
            where = where.start_mark
        if isinstance(where, tuple):
            line, column = where
        elif where is not None:
            line, column = where.line, where.column
        else:
            line, column = 0, 0
        # Marks may point just past the end; every finding stays inside the file.
        line = min(max(line, 0), len(self.lines) - 1)
        column = min(max(column, 0), len(self.lines[line]))
        severity = RULES[rule][0]
        self.findings.append(
            Finding(self.file, line + 1, column + 1, severity, rule, message, path)
        )

    # -- structure ------------------------------------------------------------------------

    @staticmethod
    def pairs(
        mapping: yaml.MappingNode, _merging: frozenset[int] = frozenset()
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """The mapping's effective scalar keys, with merge keys (<<) applied as PyYAML applies
        them: explicit keys first, and the last of duplicates wins."""
        explicit: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        merged: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        merging = _merging | {id(mapping)}
        for key, value in mapping.value:
            if key.tag == MERGE:
                sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
                for source in sources:
                    if isinstance(source, yaml.MappingNode) and id(source) not in merging:
                        for name, pair in _Checker.pairs(source, merging).items():
                            merged.setdefault(name, pair)
            elif isinstance(key, yaml.ScalarNode):
                explicit[key.value] = (key, value)
        return {**merged, **explicit}

    def check_duplicates(self, mapping: yaml.MappingNode, path: str) -> None:
        first: dict[str, yaml.Mark] = {}
        for key, _ in mapping.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == MERGE:
                continue
            if key.value in first:
                mark = first[key.value]
                self.add(
                    key,
                    "duplicate-key",
                    f"duplicate key {key.value!r} (first at {mark.line + 1}:"
                    f"{mark.column + 1}); PyYAML keeps this last one, remove the other",
                    key_path(path, key.value),
                )
            else:
                first[key.value] = key.start_mark

    def walk(self, root: yaml.Node) -> Iterator[tuple[yaml.Node, yaml.Node | None, str]]:
        """Every node once (node, its key node, its path); reports recursive aliases."""
        seen: set[int] = set()
        stack: list[tuple[yaml.Node, yaml.Node | None, str, int, frozenset[int]]] = [
            (root, None, "$", 0, frozenset())
        ]
        while stack:
            node, key, path, depth, ancestors = stack.pop()
            if id(node) in ancestors:
                self.add(
                    key or node,
                    "yaml-recursive-alias",
                    "this alias refers to a node that contains it; the runtime cannot "
                    "load a recursive structure",
                    path,
                )
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            if depth > MAX_DEPTH:
                self.add(node, "yaml-too-deep", f"nesting deeper than {MAX_DEPTH} levels", path)
                continue
            yield node, key, path
            inner = ancestors | {id(node)}
            if isinstance(node, yaml.MappingNode):
                self.check_duplicates(node, path)
                for k, v in reversed(node.value):
                    name = k.value if isinstance(k, yaml.ScalarNode) else "?"
                    stack.append((v, k, key_path(path, str(name)), depth + 1, inner))
            elif isinstance(node, yaml.SequenceNode):
                for n, item in reversed(list(enumerate(node.value))):
                    stack.append((item, None, f"{path}[{n}]", depth + 1, inner))

    # -- the rules --------------------------------------------------------------------------

    def check_document(self, root: yaml.Node | None) -> AgentConfig | None:
        if root is None:
            self.add(
                None,
                "config-not-mapping",
                "the file is empty; an agent config is a mapping (name:, model:, memory:…)",
                "$",
            )
            return None
        for node, key, path in self.walk(root):
            self.check_node(node, key, path)
        if not isinstance(root, yaml.MappingNode):
            self.add(
                root,
                "config-not-mapping",
                f"the top level is {describe(root)}; an agent config is a mapping",
                "$",
            )
            return None
        top = self.pairs(root)
        memory = self.check_memory(top.get("memory"))
        model = self.check_model(top.get("model"))
        if memory.compaction_enabled and not model.small and "memory" in top:
            main = f" ({model.name})" if model.name else ""
            self.add(
                top["memory"][0],
                "summary-model-main",
                f"no model.small: the main model{main} will write compaction summaries;"
                " set model.small to a cheaper model",
                "$.model.small",
            )
        return AgentConfig(memory, model)

    def check_node(self, node: yaml.Node, key: yaml.Node | None, path: str) -> None:
        """Rules for every node of the file: tags the runtime can load, no literal secrets."""
        if node.tag.startswith("!") or (
            node.tag.startswith("tag:yaml.org,2002:")
            and node.tag not in yaml.constructor.SafeConstructor.yaml_constructors
        ):
            self.add(
                node,
                "yaml-unknown-tag",
                f"tag {node.tag} cannot be loaded by the runtime's safe loader",
                path,
            )
        if not isinstance(node, yaml.ScalarNode) or node.tag != STR or not node.value.strip():
            return
        named = key is not None and SECRET_KEY.match(str(key.value))
        if named and not ENV_REFERENCE.match(node.value.strip()):
            self.add(
                node,
                "literal-secret",
                "a literal secret; never write keys into the file — put it in "
                "an environment variable and name that with model.api_key_env",
                path,
            )
        elif SECRET_VALUE.search(node.value):
            self.add(
                node,
                "literal-secret",
                f"the value at {path} looks like an API key; keep secrets in the "
                "environment, never in the file",
                path,
            )

    def check_memory(self, pair: tuple[yaml.Node, yaml.Node] | None) -> MemorySettings:
        if pair is None:
            return MemorySettings()
        key, node = pair
        if isinstance(node, yaml.ScalarNode) and node.tag == NULL:
            self.add(
                node if node.value else key,
                "memory-empty",
                "memory: is empty, so every default applies (scope: none, persistent: "
                "false); remove it or fill it in",
                "$.memory",
            )
            return MemorySettings()
        if not isinstance(node, yaml.MappingNode):
            self.add(
                node,
                "memory-not-mapping",
                f"memory: is {describe(node)}; it must be a mapping of scope, persistent "
                "and compact_at_tokens",
                "$.memory",
            )
            return MemorySettings()
        pairs = self.pairs(node)
        for name, (k, _) in pairs.items():
            if name not in MEMORY_KEYS:
                self.add(
                    k,
                    "memory-unknown-key",
                    f"unknown key {name!r} under memory:; valid keys: "
                    f"{', '.join(MEMORY_KEYS)}{did_you_mean(name, list(MEMORY_KEYS))}",
                    key_path("$.memory", name),
                )
        scope = self.check_scope(pairs.get("scope"))
        persistent = self.check_persistent(pairs.get("persistent"))
        threshold = self.check_threshold(pairs.get("compact_at_tokens"))
        if "compact_at_tokens" in pairs and scope != "thread":
            self.add(
                pairs["compact_at_tokens"][0],
                "compact-at-tokens-no-effect",
                "compact_at_tokens has no effect without scope: thread (there is no "
                "history to compact)",
                "$.memory.compact_at_tokens",
            )
        return MemorySettings(scope, persistent, threshold)

    def check_scope(self, pair) -> str:
        if pair is None:
            return "none"
        _, node = pair
        if (
            isinstance(node, yaml.ScalarNode)
            and node.tag == STR
            and node.value in ("thread", "none")
        ):
            return node.value
        hint = ""
        if isinstance(node, yaml.ScalarNode):
            hint = did_you_mean(node.value, ["thread", "none"])
        self.add(
            node,
            "scope-value",
            f"scope is {describe(node)}; it must be thread or none{hint}",
            "$.memory.scope",
        )
        return "none"

    def check_persistent(self, pair) -> bool:
        if pair is None:
            return False
        _, node = pair
        path = "$.memory.persistent"
        if isinstance(node, yaml.ScalarNode) and node.tag == BOOL:
            value = node.value.lower() in ("true", "yes", "on")
            if node.value.lower() in YAML11_BOOLS:
                self.add(
                    node,
                    "persistent-yaml11-bool",
                    f"{node.value} is read as {str(value).lower()} only by YAML 1.1 "
                    f"parsers; write {str(value).lower()}",
                    path,
                )
            return value
        fix = ""
        if isinstance(node, yaml.ScalarNode) and node.value.lower() in ("true", "false"):
            fix = f"; remove the quotes: persistent: {node.value.lower()}"
        self.add(
            node,
            "persistent-type",
            f"persistent is {describe(node)}; it must be true or false{fix}",
            path,
        )
        return False

    def check_threshold(self, pair) -> int | None:
        if pair is None:
            return DEFAULT_THRESHOLD
        _, node = pair
        path = "$.memory.compact_at_tokens"
        if isinstance(node, yaml.ScalarNode) and node.tag == BOOL:
            spelled = node.value.lower()
            if spelled in ("false", "no", "off"):
                if spelled != "false":
                    self.add(
                        node,
                        "compact-at-tokens-yaml11-bool",
                        f"{node.value} is read as false (compaction off) only by YAML 1.1 "
                        "parsers; write false",
                        path,
                    )
                return None
            self.add(
                node,
                "compact-at-tokens-type",
                f"{node.value} is not a threshold: write a token count such as 50000, "
                "or false to disable compaction",
                path,
            )
            return DEFAULT_THRESHOLD
        if isinstance(node, yaml.ScalarNode) and node.tag == INT:
            try:
                value = _CONSTRUCTOR.construct_yaml_int(node)
            except (ValueError, yaml.YAMLError):
                value = None
            if value is None:
                self.add(
                    node,
                    "compact-at-tokens-type",
                    f"{node.value!r} is not a readable integer",
                    path,
                )
                return DEFAULT_THRESHOLD
            if value == 0:
                self.add(
                    node,
                    "compact-at-tokens-type",
                    "0 would compact after every run; use false to disable compaction",
                    path,
                )
                return DEFAULT_THRESHOLD
            if value < 0:
                self.add(
                    node,
                    "compact-at-tokens-type",
                    f"{value} is negative; the threshold is a token count >= 1 (or false "
                    "to disable)",
                    path,
                )
                return DEFAULT_THRESHOLD
            low, high = PLAUSIBLE_THRESHOLDS
            if value < low:
                self.add(
                    node,
                    "compact-at-tokens-implausible",
                    f"a threshold of {value:,} tokens compacts after nearly every run; "
                    "typical values are 20000-200000",
                    path,
                )
            elif value > high:
                self.add(
                    node,
                    "compact-at-tokens-implausible",
                    f"{value:,} tokens is beyond any model's context window, so compaction "
                    "would never run; use false to disable it",
                    path,
                )
            return value
        if isinstance(node, yaml.ScalarNode) and node.tag == FLOAT:
            message = f"{node.value} is not a whole number of tokens"
        elif isinstance(node, yaml.ScalarNode) and node.tag == STR:
            digits = re.fullmatch(r"\s*(\d+)\s*([kK])?\s*", node.value)
            if digits and digits.group(2):
                message = (
                    f"{node.value!r} is a string; write the full number "
                    f"({int(digits.group(1)) * 1000})"
                )
            elif digits:
                message = f"{node.value!r} is a quoted string; remove the quotes"
            else:
                message = f"{describe(node)} is not a token count"
        else:
            message = f"compact_at_tokens is {describe(node)}"
        self.add(
            node,
            "compact-at-tokens-type",
            f"{message}; it must be an integer >= 1, or false to disable",
            path,
        )
        return DEFAULT_THRESHOLD

    def check_model(self, pair: tuple[yaml.Node, yaml.Node] | None) -> ModelSettings:
        if pair is None:
            return ModelSettings()
        _, node = pair
        if isinstance(node, yaml.ScalarNode) and node.tag == STR and node.value.strip():
            return ModelSettings(name=node.value)
        if not isinstance(node, yaml.MappingNode):
            self.add(
                node,
                "model-type",
                f"model: is {describe(node)}; write a model name (model: gpt-4.1) or a "
                "mapping with name:",
                "$.model",
            )
            return ModelSettings()
        pairs = self.pairs(node)
        values: dict[str, str] = {}
        for name, (k, v) in pairs.items():
            path = key_path("$.model", name)
            if name not in MODEL_KEYS:
                if not SECRET_KEY.match(name):  # a literal key is reported as a secret
                    self.add(
                        k,
                        "model-unknown-key",
                        f"unknown key {name!r} under model: (volumetool reads "
                        f"{', '.join(MODEL_KEYS)}){did_you_mean(name, list(MODEL_KEYS))}",
                        path,
                    )
                continue
            if not (isinstance(v, yaml.ScalarNode) and v.tag == STR and v.value.strip()):
                self.add(
                    v,
                    "model-key-type",
                    f"model.{name} is {describe(v)}; it must be a non-empty string",
                    path,
                )
                continue
            values[name] = v.value.strip()
        if "name" not in values and "name" not in pairs:
            self.add(
                node,
                "model-name-missing",
                "model: has no name; add name: with the main model",
                "$.model",
            )
        api = values.get("api", "openai")
        if api not in API_DEFAULTS:
            self.add(
                pairs["api"][1],
                "model-api",
                f"unknown api {api!r}; use openai (chat completions) or anthropic "
                f"(messages){did_you_mean(api, list(API_DEFAULTS))}",
                "$.model.api",
            )
            values.pop("api")
        url = values.get("base_url")
        if url is not None and not re.match(r"^https?://[^\s/]+", url):
            self.add(
                pairs["base_url"][1],
                "model-base-url",
                "base_url must be an http:// or https:// URL",
                "$.model.base_url",
            )
            values.pop("base_url")
        env = values.get("api_key_env")
        if env is not None and not ENV_NAME.match(env):
            if not SECRET_VALUE.search(env):  # a key pasted here is reported as a secret
                self.add(
                    pairs["api_key_env"][1],
                    "model-api-key-env",
                    "api_key_env must be the name of an environment variable (letters, "
                    "digits, _), such as OPENAI_API_KEY",
                    "$.model.api_key_env",
                )
            values.pop("api_key_env")
        return ModelSettings(**values)


def decode(data: bytes, checker: _Checker) -> str | None:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n")
        column = len(before) - (before.rfind(b"\n") + 1)
        checker.lines = data.decode("utf-8", "replace").split("\n")
        checker.add(
            (line, column),
            "yaml-encoding",
            f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8; save "
            "the file as UTF-8",
        )
        return None


def check_source(
    data: bytes, file: str, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[list[Finding], AgentConfig | None]:
    """Every finding of one config file's bytes, and its settings (None when it can't be read)."""
    checker = _Checker(file, "")
    if len(data) > max_bytes:
        checker.add(
            None,
            "file-too-large",
            f"{len(data):,} bytes is over the limit of {max_bytes:,} (--max-bytes)",
        )
        return checker.findings, None
    text = decode(data, checker)
    if text is None:
        return checker.findings, None
    checker.lines = text.split("\n")
    config = None
    try:
        documents = yaml.compose_all(text, Loader=Loader)
        root = next(documents, None)
        try:
            extra = next(documents, None)
        except yaml.YAMLError:
            extra = None  # the second document's own errors don't matter: it is refused
        if extra is not None:
            checker.add(
                extra,
                "yaml-multiple-documents",
                "a second YAML document (---); an agent config is a single document",
            )
        config = checker.check_document(root)
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or "invalid YAML"
        if "nesting depth" in problem:
            checker.add(exc.problem_mark, "yaml-too-deep", "the document nests too deeply")
        elif "undefined alias" in problem:
            checker.add(
                exc.problem_mark,
                "yaml-syntax",
                "an alias (*name) refers to no anchor (&name) defined before it",
            )
        else:
            context = f" ({exc.context})" if exc.context else ""
            checker.add(exc.problem_mark, "yaml-syntax", f"{problem}{context}")
    except yaml.reader.ReaderError as exc:
        before = text[: exc.position]
        checker.add(
            (before.count("\n"), len(before) - (before.rfind("\n") + 1)),
            "yaml-syntax",
            f"character {exc.character!r} is not allowed in YAML",
        )
    except RecursionError:
        checker.add(None, "yaml-too-deep", "the document nests too deeply")
    findings = sorted(checker.findings)
    has_errors = any(f.severity == "error" for f in findings)
    return findings, None if has_errors else config


def json_schema() -> dict:
    """A JSON Schema (draft 2020-12) of the memory: and model: blocks, for editors."""

    def block(keys: dict[str, KeySpec]) -> dict:
        properties = {}
        for name, spec in keys.items():
            properties[name] = {**spec.schema, "description": spec.description}
            if spec.default is not None:
                properties[name]["default"] = spec.default
        return {"type": "object", "properties": properties, "additionalProperties": False}

    model_block = block(MODEL_KEYS)
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
                **block(MEMORY_KEYS),
                "description": "Thread history and persistent memory.",
            },
            "model": {
                "description": "The model, as a name or a mapping.",
                "oneOf": [{"type": "string", "minLength": 1}, model_block],
            },
        },
    }


def read_source(path: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """A config file's bytes (`-` is stdin), at most one byte past the limit, so that a file
    too large is seen as such without reading all of it. Raises OSError."""
    if path == "-":
        return sys.stdin.buffer.read(max_bytes + 1)
    with open(path, "rb") as handle:
        return handle.read(max_bytes + 1)


def load_config(path: str) -> AgentConfig:
    """The effective settings of an agent YAML; UnusableInput when it cannot be used."""
    from volumetool.errors import UnusableInput

    try:
        data = read_source(path)
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot read the config ({exc.strerror})") from None
    findings, config = check_source(data, path)
    errors = [f for f in findings if f.severity == "error"]
    if config is None or errors:
        first = errors[0]
        raise UnusableInput(
            f"{path}:{first.line}:{first.column}: {first.message} [{first.rule}]"
            + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
            f"run: volumetool validate {path}",
        )
    return config

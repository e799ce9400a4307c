"""What `validate` finds: the rules (ids are stable API), one finding, and the findings of one
file, each kept at a position inside that file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from volumetool.settings import APIS, AUTHS, MAX_TOKENS_PARAMS, SCOPES


def spoken(words: Mapping[str, str] | Sequence[str], last: str = "or") -> str:
    """`a, b or c`; a mapping's meanings in brackets: `openai (chat completions) or …`."""
    items = (
        [f"{word} ({meaning})" for word, meaning in words.items()]
        if isinstance(words, Mapping)
        else list(words)
    )
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


# rule id -> (severity, what it checks). One rule a kind of finding; the docs' rule table and
# SARIF's rule list are this dict, in this order.
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
    "block-name-typo": (
        "error",
        "A top-level key one or two edits from memory or model, while that block is absent.",
    ),
    "memory-not-mapping": ("error", "memory: must be a mapping."),
    "memory-empty": ("warning", "memory: is present but empty; the defaults apply."),
    "memory-unknown-key": ("error", "A key under memory: that the runtime does not know."),
    "scope-value": ("error", f"memory.scope must be {spoken(SCOPES)}."),
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
    "model-api": ("error", f"model.api must be {spoken(list(APIS))}."),
    "model-base-url": (
        "error",
        "model.base_url cannot work: not http(s), no host, a bad port, a query string, or a "
        "path the client appends again.",
    ),
    "model-api-key-env": ("error", "model.api_key_env must name an environment variable."),
    "model-auth": ("error", f"model.auth must be {spoken(list(AUTHS))}."),
    "model-max-tokens-param": (
        "error",
        f"model.max_tokens_param must be {spoken(list(MAX_TOKENS_PARAMS))}.",
    ),
    "model-api-version": ("warning", "model.api_version is not a date (YYYY-MM-DD[-preview])."),
    "model-no-effect": ("warning", "A model: setting that the chosen api ignores."),
    "literal-secret": ("error", "A secret written into the file instead of the environment."),
    "compaction-no-model": (
        "error",
        "Compaction is on (scope: thread) but there is no model: to write summaries.",
    ),
    "summary-model-main": ("note", "Without model.small, the main model writes summaries."),
}


@dataclass(frozen=True, order=True)
class Finding:
    file: str
    line: int  # from 1
    column: int  # from 1
    severity: str
    rule: str
    message: str
    path: str = ""  # $.memory.scope

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


Where = yaml.Node | yaml.Mark | tuple[int, int] | None  # a node, a mark, (line, column) from 0


class Findings:
    """The findings of one file's text. A position is clamped into the text: marks may point
    just past its end."""

    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.lines = text.split("\n")
        self.found: list[Finding] = []

    def add(self, where: Where, rule: str, message: str, path: str = "") -> None:
        if isinstance(where, yaml.Node):
            where = where.start_mark
        if isinstance(where, tuple):
            line, column = where
        elif where is not None:
            line, column = where.line, where.column
        else:
            line, column = 0, 0
        line = min(max(line, 0), len(self.lines) - 1)
        column = min(max(column, 0), len(self.lines[line]))
        self.found.append(
            Finding(self.file, line + 1, column + 1, RULES[rule][0], rule, message, path)
        )

    def sorted(self) -> list[Finding]:
        return sorted(self.found)

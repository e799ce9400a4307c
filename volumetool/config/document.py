"""Checking one agent config file: its bytes, its YAML, every node of it, and its `memory:` and
`model:` blocks; and loading the settings of a file that passes.

The file is composed (never constructed) with PyYAML's C loader in the dialect the runtime
reads, YAML 1.1, so nodes keep duplicate keys and their marks and aliases are never expanded.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterator

import yaml

from volumetool.config.findings import Finding, Findings
from volumetool.config.keys import check_memory, check_model
from volumetool.config.nodes import Loader, Pair, describe, edits, key_path, pairs, walk
from volumetool.config.secret import check_secret
from volumetool.settings import AgentConfig

DEFAULT_MAX_BYTES = 1024 * 1024


class _Checker(Findings):
    """The findings of one file's text, and the walk over its nodes that reports into them."""

    def walk(self, root: yaml.Node) -> Iterator[tuple[yaml.Node, yaml.Node | None, str]]:
        return walk(root, self.add)


def check_tag(node: yaml.Node, path: str, checker: Findings) -> None:
    """A tag the runtime's safe loader cannot construct."""
    if node.tag.startswith("!") or (
        node.tag.startswith("tag:yaml.org,2002:")
        and node.tag not in yaml.constructor.SafeConstructor.yaml_constructors
    ):
        checker.add(
            node,
            "yaml-unknown-tag",
            f"tag {node.tag} cannot be loaded by the runtime's safe loader",
            path,
        )


def check_document(root: yaml.Node | None, checker: _Checker) -> AgentConfig | None:
    if root is None:
        checker.add(
            None,
            "config-not-mapping",
            "the file is empty; an agent config is a mapping (name:, model:, memory:…)",
            "$",
        )
        return None
    for node, key, path in checker.walk(root):
        check_tag(node, path, checker)
        check_secret(node, key, path, checker.add)
    if not isinstance(root, yaml.MappingNode):
        checker.add(
            root,
            "config-not-mapping",
            f"the top level is {describe(root)}; an agent config is a mapping",
            "$",
        )
        return None
    top = pairs(root)
    check_block_names(top, checker)
    memory = check_memory(top.get("memory"), checker.add)
    model = check_model(top.get("model"), checker.add)
    if memory.compaction_enabled and "memory" in top and "model" not in top:
        checker.add(
            top["memory"][0],
            "compaction-no-model",
            "compaction is on (scope: thread) but there is no model: to write summaries; add "
            "model: with name: (and small:), or set compact_at_tokens: false",
            "$.model",
        )
    elif memory.compaction_enabled and not model.small and "memory" in top:
        main = f" ({model.name})" if model.name else ""
        checker.add(
            top["memory"][0],
            "summary-model-main",
            f"no model.small: the main model{main} will write compaction summaries;"
            " set model.small to a cheaper model",
            "$.model.small",
        )
    return AgentConfig(memory, model)


BLOCKS = ("memory", "model")


def near_block(name: str) -> str | None:
    """The block (`memory`, `model`) a key names, or is one or two edits from (`memroy`)."""
    distance, block = min((edits(name.lower(), b), b) for b in BLOCKS)
    return block if distance <= 2 else None


def check_block_names(top: dict[str, Pair], checker: _Checker) -> None:
    """A top-level key one or two edits from `memory` or `model` while that block is absent: a
    typo that would leave the block's defaults in force without a word."""
    for name, (key, _) in top.items():
        block = near_block(name)
        if name in BLOCKS or block is None or block in top:
            continue
        checker.add(
            key,
            "block-name-typo",
            f"top-level key {name!r} is not read, and there is no {block}: block; "
            f"did you mean '{block}'?",
            key_path("$", name),
        )


def check_yaml(text: str, checker: _Checker) -> AgentConfig | None:
    """The findings of a config's text (YAML errors included); its settings when it has a
    document."""
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
        return check_document(root, checker)
    except yaml.MarkedYAMLError as exc:
        checker.add(exc.problem_mark, *_yaml_error(exc))
    except yaml.reader.ReaderError as exc:
        before = text[: exc.position]
        checker.add(
            (before.count("\n"), len(before) - (before.rfind("\n") + 1)),
            "yaml-syntax",
            f"character {exc.character!r} is not allowed in YAML",
        )
    except RecursionError:
        checker.add(None, "yaml-too-deep", "the document nests too deeply")
    return None


def _yaml_error(exc: yaml.MarkedYAMLError) -> tuple[str, str]:
    """The rule and message of a YAML error."""
    problem = exc.problem or "invalid YAML"
    if "nesting depth" in problem:
        return "yaml-too-deep", "the document nests too deeply"
    if "undefined alias" in problem:
        return "yaml-syntax", "an alias (*name) refers to no anchor (&name) defined before it"
    context = f" ({exc.context})" if exc.context else ""
    return "yaml-syntax", f"{problem}{context}"


def not_utf8(data: bytes, exc: UnicodeDecodeError, file: str) -> Finding:
    before = data[: exc.start]
    findings = Findings(file, data.decode("utf-8", "replace"))
    findings.add(
        (before.count(b"\n"), len(before) - (before.rfind(b"\n") + 1)),
        "yaml-encoding",
        f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8; save the file as UTF-8",
    )
    return findings.found[0]


def check_source(
    data: bytes, file: str, max_bytes: int = DEFAULT_MAX_BYTES, size: int | None = None
) -> tuple[list[Finding], AgentConfig | None]:
    """Every finding of one config file's bytes, and its settings (None when it has errors).
    `size`: the file's whole size (`source_size`), for a file over `max_bytes`, of which only
    the first bytes past the limit were read."""
    if len(data) > max_bytes:
        too_large = Findings(file, "")
        too_large.add(None, "file-too-large", _too_large(max_bytes, size))
        return too_large.found, None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return [not_utf8(data, exc, file)], None
    checker = _Checker(file, text)
    config = check_yaml(text, checker)
    return checker.sorted(), None if blocking(checker.found) else config


# Errors in what the agent will do that leave the settings usable by volumetool itself:
# `sessions --due --config` needs no model, and `compact` takes --model (and says so without).
USABLE_DESPITE = frozenset({"compaction-no-model"})


def blocking(findings: list[Finding]) -> list[Finding]:
    """The errors that make a config's settings unusable."""
    return [f for f in findings if f.severity == "error" and f.rule not in USABLE_DESPITE]


# A top-level key at the start of a line, plain or quoted: `memory:`, `"model":`.
_TOP_KEY = re.compile(r"""^["']?([A-Za-z_][A-Za-z0-9_-]*)["']?[ \t]*:(?:[ \t]|$)""", re.M)


def looks_like_agent_config(data: bytes) -> bool:
    """Whether a YAML file is an agent config, for `validate --only-agent-configs` (the
    pre-commit hook): a key at the top level that is `memory` or `model` or one or two edits
    from them. Read from the text, not the YAML, so that a config with a syntax error still
    counts; a Kubernetes manifest or a CI workflow does not."""
    text = data.decode("utf-8", "replace")
    return any(near_block(m.group(1)) for m in _TOP_KEY.finditer(text))


def _too_large(max_bytes: int, size: int | None) -> str:
    if size is None or size <= max_bytes:  # a pipe, or a file that changed since it was read
        return f"the input is over the limit of {max_bytes:,} bytes (--max-bytes)"
    return f"the file is {size:,} bytes, over the limit of {max_bytes:,} (--max-bytes)"


def source_size(path: str) -> int | None:
    """The size of a config file that is a regular file; None for stdin, a pipe or a device
    (their size is known only by reading them, and `read_source` stops past the limit)."""
    try:
        found = None if path == "-" else os.stat(path)
    except (OSError, ValueError):
        return None
    return found.st_size if found and stat.S_ISREG(found.st_mode) else None


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
    findings, config = check_source(data, path, size=source_size(path))
    errors = blocking(findings)
    if config is None or errors:
        first = errors[0]
        raise UnusableInput(
            f"{path}:{first.line}:{first.column}: {first.message} [{first.rule}]"
            + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
            f"run: volumetool validate {path}",
        )
    return config

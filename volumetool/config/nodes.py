"""Reading composed YAML nodes safely: a mapping's effective keys (merge keys applied, as PyYAML
applies them), duplicate keys, and a walk that visits every node once.

An alias is the same node object as its anchor, so a walk with a visited set costs one visit per
node however many times a billion-laughs file repeats it; the walk also refuses recursive
aliases and caps the depth.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import yaml

from volumetool.config.findings import Where

Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_DEPTH = 100
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
STR, INT, BOOL, NULL, FLOAT, MERGE, TIMESTAMP = (
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "bool", "null", "float", "merge", "timestamp")
)

Pair = tuple[yaml.Node, yaml.Node]  # (key node, value node)
AddFinding = Callable[[Where, str, str, str], None]  # (where, rule, message, path)


def key_path(parent: str, key: str) -> str:
    """`$.memory.scope`, or `$.memory['odd key']` for a key that is not an identifier."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{parent}.{key}"
    return f"{parent}[{key!r}]"


def did_you_mean(word: str, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(word.lower(), list(valid), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def edits(a: str, b: str) -> int:
    """How many single-character edits (insert, delete, replace, swap two neighbours) turn `a`
    into `b`: `memroy` is one from `memory`, `modle` one from `model`."""
    before, row = None, list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            cost = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (x != y))
            if before is not None and i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, before[j - 2] + 1)
            current.append(cost)
        before, row = row, current
    return row[-1]


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
    if node.tag == TIMESTAMP:
        return f"the date {node.value[:40]} (YAML reads an unquoted date as a date)"
    return node.value[:40] or "empty"


def is_text(node: yaml.Node, *choices: str) -> bool:
    """A plain string scalar (one of `choices`, when given)."""
    return (
        isinstance(node, yaml.ScalarNode)
        and node.tag == STR
        and (not choices or node.value in choices)
    )


def pairs(mapping: yaml.MappingNode, _merging: frozenset[int] = frozenset()) -> dict[str, Pair]:
    """The mapping's effective scalar keys, with merge keys (<<) applied as PyYAML applies
    them: explicit keys first, and the last of duplicates wins."""
    explicit: dict[str, Pair] = {}
    merged: dict[str, Pair] = {}
    merging = _merging | {id(mapping)}
    for key, value in mapping.value:
        if key.tag == MERGE:
            sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
            for source in sources:
                if isinstance(source, yaml.MappingNode) and id(source) not in merging:
                    for name, pair in pairs(source, merging).items():
                        merged.setdefault(name, pair)
        elif isinstance(key, yaml.ScalarNode):
            explicit[key.value] = (key, value)
    return {**merged, **explicit}


def check_duplicates(mapping: yaml.MappingNode, path: str, report: AddFinding) -> None:
    first: dict[str, yaml.Mark] = {}
    for key, _ in mapping.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == MERGE:
            continue
        if key.value in first:
            mark = first[key.value]
            report(
                key,
                "duplicate-key",
                f"duplicate key {key.value!r} (first at {mark.line + 1}:"
                f"{mark.column + 1}); PyYAML keeps this last one, remove the other",
                key_path(path, key.value),
            )
        else:
            first[key.value] = key.start_mark


def walk(root: yaml.Node, report: AddFinding) -> Iterator[tuple[yaml.Node, yaml.Node | None, str]]:
    """Every node once, as (node, its key node, its path); reports recursive aliases, nesting
    deeper than MAX_DEPTH and duplicate keys."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, yaml.Node | None, str, int, frozenset[int]]] = [
        (root, None, "$", 0, frozenset())
    ]
    while stack:
        node, key, path, depth, ancestors = stack.pop()
        if id(node) in ancestors:
            report(
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
            report(node, "yaml-too-deep", f"nesting deeper than {MAX_DEPTH} levels", path)
            continue
        yield node, key, path
        if isinstance(node, yaml.MappingNode):
            check_duplicates(node, path, report)
            inner = ancestors | {id(node)}
            for k, v in reversed(node.value):
                name = k.value if isinstance(k, yaml.ScalarNode) else "?"
                stack.append((v, k, key_path(path, str(name)), depth + 1, inner))
        elif isinstance(node, yaml.SequenceNode):
            inner = ancestors | {id(node)}
            for n in range(len(node.value) - 1, -1, -1):
                stack.append((node.value[n], None, f"{path}[{n}]", depth + 1, inner))

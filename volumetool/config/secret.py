"""Literal secrets: a key never belongs in an agent config, only the NAME of the variable that
holds it. Checked on every node of the file, whatever block it is in."""

from __future__ import annotations

import re

import yaml

from volumetool.config.nodes import STR, AddFinding

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


def check_secret(node: yaml.Node, key: yaml.Node | None, path: str, report: AddFinding) -> None:
    """A string under a secret's name (api_key:, token:…) or shaped like a provider's key.
    The message never repeats the value."""
    if not isinstance(node, yaml.ScalarNode) or node.tag != STR or not node.value.strip():
        return
    named = key is not None and SECRET_KEY.match(str(key.value))
    if named and not ENV_REFERENCE.match(node.value.strip()):
        report(
            node,
            "literal-secret",
            "a literal secret; never write keys into the file — put it in "
            "an environment variable and name that with model.api_key_env",
            path,
        )
    elif SECRET_VALUE.search(node.value):
        report(
            node,
            "literal-secret",
            f"the value at {path} looks like an API key; keep secrets in the "
            "environment, never in the file",
            path,
        )

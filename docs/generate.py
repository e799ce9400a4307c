"""Write the parts of the docs that repeat the code, from the code: every command's `--help`,
the config keys and validate's rules (volumetool/config/), the fields of each listing, and the
shape of every other JSON a command prints (run against a demo volume made for the purpose).

Each part sits in a page between two marker lines, `<!-- generated: NAME … -->` and
`<!-- end generated: NAME -->`; everything else on the page is prose. `make docs` runs this
(`python docs/generate.py`, or `--check` to only tell which pages are behind); the test
tests/test_docs.py fails when a committed page differs from what this writes.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from click.testing import CliRunner

DOCS = Path(__file__).resolve().parent
HELP_WIDTH = 88  # what a code block of the theme shows without scrolling
BEGIN = "<!-- generated: {} (make docs writes this part; do not edit it by hand) -->\n"
END = "<!-- end generated: {} -->"


def command_paths(group: click.Group, ctx: click.Context) -> Iterator[tuple[str, ...]]:
    """Every command below `group`, in the order the top-level table lists them."""
    from volumetool.cli import COMMANDS

    names = list(COMMANDS) if ctx.parent is None else group.list_commands(ctx)
    for name in names:
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        yield (name,)
        if isinstance(command, click.Group):
            sub = click.Context(command, info_name=name, parent=ctx)
            yield from ((name, *rest) for rest in command_paths(command, sub))


def help_text(path: tuple[str, ...]) -> str:
    from volumetool.cli import cli

    # Help reads no environment but its defaults' variables: none set, so none shown as set.
    env = {name: None for name in os.environ if name.startswith("VOLUMETOOL_")}
    result = CliRunner(env=env).invoke(
        cli, [*path, "--help"], prog_name="volumetool", terminal_width=HELP_WIDTH
    )
    if result.exit_code != 0:
        raise RuntimeError(f"volumetool {' '.join(path)} --help: {result.output}")
    return result.output.rstrip() + "\n"


def commands() -> str:
    from volumetool.cli import cli

    ctx = click.Context(cli, info_name="volumetool")
    parts = [f"## volumetool\n\n```text\n{help_text(())}```\n"]
    for path in command_paths(cli, ctx):
        name = " ".join(path)
        level = "#" * (len(path) + 1)
        parts.append(f"{level} volumetool {name}\n\n```text\n{help_text(path)}```\n")
    return "\n".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _values(schema: dict) -> str:
    if "enum" in schema:
        return " | ".join(f"`{value}`" for value in schema["enum"])
    if "oneOf" in schema:
        return " or ".join(_values(option) for option in schema["oneOf"])
    if "const" in schema:
        return f"`{str(schema['const']).lower()}`"
    kind = schema.get("type", "")
    if kind == "integer" and "minimum" in schema:
        return f"an integer ≥ {schema['minimum']}"
    if schema.get("pattern") == "^https?://":
        return "an `http://` or `https://` URL"
    if "pattern" in schema:
        return "an environment variable's name"
    return f"a {kind}" if kind else "any"


def _default(value: object) -> str:
    if value is None:
        return "unset"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def config_keys(blocks: tuple[str, ...] = ("memory", "model")) -> str:
    from volumetool.config import MEMORY_KEYS, MODEL_KEYS

    rows = ["| key | values | default | what it does |", "|---|---|---|---|"]
    for block, keys in (("memory", MEMORY_KEYS), ("model", MODEL_KEYS)):
        if block not in blocks:
            continue
        for key in keys.values():
            rows.append(
                f"| `{block}.{key.name}` | {_cell(_values(key.schema))} | "
                f"{_default(key.default)} | {_cell(key.description)} |"
            )
    return "\n".join(rows) + "\n"


def rules() -> str:
    from volumetool.config.findings import RULES

    rows = ["| rule | severity | finding |", "|---|---|---|"]
    rows += [
        f"| `{rule}` | {severity} | {_cell(text)} |" for rule, (severity, text) in RULES.items()
    ]
    return "\n".join(rows) + "\n"


def listing_fields() -> str:
    from volumetool import fleet, lifecycle, listings, memories, upgrade
    from volumetool.compaction.run import OUTCOME_FIELDS
    from volumetool.search.find import SEARCH_FIELDS

    listed = [
        ("sessions", listings.SESSION_FIELDS),
        ("transcript", listings.TRANSCRIPT_FIELDS),
        ("runs", listings.RUN_FIELDS),
        ("audit", listings.AUDIT_FIELDS),
        ("memories list", memories.MEMORY_FIELDS),
        ("search", SEARCH_FIELDS),
        ("prune --dry-run", lifecycle.PRUNE_FIELDS),
        ("status (many volumes)", fleet.ROW_FIELDS),
        ("compact", OUTCOME_FIELDS),
        ("migrate --list", upgrade.MIGRATION_FIELDS),
    ]
    rows = ["| command | fields, in column order |", "|---|---|"]
    rows += [f"| `{name}` | {', '.join(f'`{f}`' for f in fields)} |" for name, fields in listed]
    return "\n".join(rows) + "\n"


def _shape(value: object) -> object:
    """A JSON value with each leaf replaced by its type's name; an array shows its first item."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else "array"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {int: "integer", float: "number", str: "string"}[type(value)]


# The JSON that is not a listing: (what a reader types, argv after `volumetool`, how to read the
# output). Run against a small demo volume; the docs show the shape, never the figures.
OBJECTS = [
    ("status VOLUME --json", ["status", "{vol}", "--json"], json.loads),
    ("check VOLUME --json", ["check", "{broken}", "--json"], json.loads),
    (
        "prune VOLUME --archived-before WHEN --dry-run --json",
        ["prune", "{vol}", "--archived-before", "2026-11-30", "--dry-run", "--json"],
        json.loads,
    ),
    (
        "erase VOLUME --key KEY --json",
        ["erase", "{vol}", "--key", "{key}", "--yes", "--json"],
        json.loads,
    ),
    (
        "memories export VOLUME --format json",
        ["memories", "export", "{vol}", "--format", "json"],
        json.loads,
    ),
    ("config show FILE --json", ["config", "show", "{config}", "--json"], json.loads),
    ("validate FILE --format json", ["validate", "{bad}", "--format", "json"], json.loads),
]


def json_objects() -> str:
    import json
    import sqlite3
    import tempfile

    from volumetool.cli import cli

    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        runner = CliRunner(
            env={name: None for name in os.environ if name.startswith("VOLUMETOOL_")}
        )
        vol, config = f"{tmp}/vol", f"{tmp}/agent.yaml"
        runner.invoke(
            cli,
            ["demo", f"{vol}/", "--sessions", "4", "--config-out", config],
            catch_exceptions=False,
        )
        runner.invoke(cli, ["demo", f"{tmp}/broken/", "--sessions", "1"], catch_exceptions=False)
        with sqlite3.connect(f"{tmp}/broken/agent.db") as db:  # a message of no thread
            db.execute("PRAGMA foreign_keys = OFF")
            db.execute(
                "UPDATE messages SET session_id = 999999 WHERE id = (SELECT min(id) FROM messages)"
            )
        with open(f"{tmp}/bad.yaml", "w") as bad:
            bad.write("memory:\n  scope: thread\n  compact_at_tokens: 0\n")
        sessions = runner.invoke(
            cli, ["sessions", vol, "--json", "-n", "1"], catch_exceptions=False
        )
        names = {
            "vol": vol,
            "broken": f"{tmp}/broken",
            "config": config,
            "bad": f"{tmp}/bad.yaml",
            "key": json.loads(sessions.stdout)[0]["conversation_key"],
        }
        for shown, argv, _ in OBJECTS:
            result = runner.invoke(cli, [a.format(**names) for a in argv], catch_exceptions=False)
            shape = json.dumps(_shape(json.loads(result.stdout)), indent=2, ensure_ascii=False)
            parts.append(f"### volumetool {shown}\n\n```json\n{shape}\n```\n")
    return "\n".join(parts)


PARTS: dict[str, Callable[[], str]] = {
    "commands": commands,
    "config-keys": config_keys,
    "model-keys": lambda: config_keys(("model",)),
    "rules": rules,
    "listing-fields": listing_fields,
    "json-objects": json_objects,
}


def regenerate(text: str) -> str:
    """The page with each of its generated parts written anew."""

    def part(match: re.Match) -> str:
        name = match.group(1)
        return f"{BEGIN.format(name)}\n{PARTS[name]()}\n{END.format(name)}"

    return re.sub(r"<!-- generated: ([\w-]+) .*?<!-- end generated: \1 -->", part, text, flags=re.S)


def pages() -> list[Path]:
    """The pages that hold a generated part."""
    return sorted(p for p in DOCS.rglob("*.md") if "<!-- generated: " in p.read_text("utf-8"))


def main(argv: list[str]) -> int:
    check = "--check" in argv
    behind = []
    for page in pages():
        text = page.read_text("utf-8")
        new = regenerate(text)
        if new != text:
            behind.append(page.relative_to(DOCS.parent))
            if not check:
                page.write_text(new, "utf-8")
    for page in behind:
        print(f"{'behind the code' if check else 'regenerated'}: {page}", file=sys.stderr)
    return 1 if check and behind else 0


if __name__ == "__main__":
    sys.path.insert(0, str(DOCS.parent))
    sys.exit(main(sys.argv[1:]))

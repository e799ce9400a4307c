"""validate: checking agent configs in CI and at the shell."""

from __future__ import annotations

import os
import sys

import click

from volumetool.cli.options import Command, say
from volumetool.render import render_document


@click.command(
    cls=Command, verdict=True, short_help="Check the memory: and model: blocks of agent configs."
)
@click.argument("paths", nargs=-1, metavar="PATH...")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "github", "sarif"]),
    help="text (default); github when GITHUB_ACTIONS=true.",
)
@click.option("--strict", is_flag=True, help="Warnings fail the check too (exit 1).")
@click.option(
    "--stdin-filename",
    default="<stdin>",
    metavar="NAME",
    help="The file name to report for `-` (stdin).",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1, max=2**31),
    metavar="N",
    help="Refuse files larger than N bytes (default 1 MiB).",
)
@click.option(
    "--only-agent-configs",
    is_flag=True,
    help="Skip YAML files that are not agent configs: no top-level memory: or model: key (or "
    "one a typo away). For hooks that pass every YAML file of a repository (pre-commit).",
)
@click.option(
    "--schema",
    "schema",
    is_flag=True,
    help="Print a JSON Schema of the memory: and model: blocks, for editors.",
)
def validate(paths, fmt, strict, stdin_filename, max_bytes, only_agent_configs, schema) -> None:
    """Check the memory: and model: blocks of agent YAML files (files, directories, or - for
    stdin), reporting every finding as FILE:LINE:COL: SEVERITY: MESSAGE [RULE].

    Exit 1 on any error (or warning, with --strict), 2 when a path cannot be read or a
    directory holds no YAML file (no agent config, with --only-agent-configs).

    \b
    Example:
      volumetool validate agents/ --strict
      cat agent.yaml | volumetool validate - --stdin-filename agent.yaml --format json
    """
    if schema:
        from volumetool.config import json_schema

        render_document(json_schema(), sys.stdout)
        return
    if not paths:
        raise click.UsageError("give at least one PATH (a file, a directory, or - for stdin)")
    if paths.count("-") > 1:
        raise click.UsageError("- (stdin) is given more than once; stdin can be read only once")
    from volumetool.config import DEFAULT_MAX_BYTES
    from volumetool.validation import WRITERS, check_paths

    if fmt is None:
        fmt = "github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text"
    validation = check_paths(
        paths,
        stdin_name=stdin_filename,
        max_bytes=max_bytes or DEFAULT_MAX_BYTES,
        strict=strict,
        only_agent_configs=only_agent_configs,
    )
    WRITERS[fmt](validation, sys.stdout)
    for result in validation.files:
        if result.unreadable:
            say(result.problem())
    if fmt in ("text", "github"):
        say(validation.summary())
    sys.exit(validation.exit_code)

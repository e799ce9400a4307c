"""validate and config show: checking agent configs in CI and at the shell."""

from __future__ import annotations

import os
import sys

import click

from volumetool.cli.options import Command, Group, say
from volumetool.render import plural, render_document


@click.command(cls=Command, short_help="Check the memory: and model: blocks of agent configs.")
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
    from volumetool.config import DEFAULT_MAX_BYTES
    from volumetool.validation import WRITERS, check_paths

    if fmt is None:
        fmt = "github" if os.environ.get("GITHUB_ACTIONS") == "true" else "text"
    report = check_paths(
        paths,
        stdin_name=stdin_filename,
        max_bytes=max_bytes or DEFAULT_MAX_BYTES,
        strict=strict,
        only_agent_configs=only_agent_configs,
    )
    WRITERS[fmt](report, sys.stdout)
    for result in report.files:
        if result.unreadable:
            say(result.problem())
    if fmt in ("text", "github"):
        say(report.summary())
    sys.exit(report.exit_code)


@click.group(cls=Group)
def config() -> None:
    """Agent config files.

    \b
    Example:
      volumetool config show agent.yaml --json
    """


@config.command()
@click.argument("file", metavar="FILE|-")
@click.option("--json", "as_json", is_flag=True, help="The settings as one JSON object.")
def show(file: str, as_json: bool) -> None:
    """The effective memory: and model: settings, defaults filled in, and which model will
    write compaction summaries; findings go to stderr. Exit 1 when the file has errors.

    \b
    Example:
      volumetool config show agent.yaml --json
    """
    from volumetool.config import check_source, read_source
    from volumetool.errors import ProblemsFound, UnusableInput
    from volumetool.render import escape_control
    from volumetool.validation import text_line

    try:
        data = read_source(file)
    except OSError as exc:
        raise UnusableInput(f"{file}: cannot read ({exc.strerror})") from None
    findings, settings = check_source(data, file)
    for finding in findings:  # warnings and notes too: the settings shown may not do what
        click.echo(text_line(finding), err=True)  # the file seems to say
    errors = sum(1 for f in findings if f.severity == "error")
    if settings is None or errors:
        raise ProblemsFound(
            f"{file} has {plural(errors, 'error')}; nothing to show",
            f"fix them (volumetool validate {file})",
        )
    effective = settings.as_dict()
    if as_json:
        render_document(effective, sys.stdout)
        return
    import yaml

    click.echo(
        yaml.safe_dump({k: effective[k] for k in ("memory", "model")}, sort_keys=False).rstrip()
    )
    compaction = effective["compaction"]
    if compaction["enabled"]:
        click.echo(
            f"# compaction: on, at {compaction['threshold']:,} input tokens; summaries "
            f"written by {escape_control(compaction['summary_model'] or '(no model set)')}"
        )
    else:
        reason = (
            "memory.scope is none"
            if effective["memory"]["scope"] != "thread"
            else "compact_at_tokens is false"
        )
        click.echo(f"# compaction: off ({reason})")

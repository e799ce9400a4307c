"""config show: the settings an agent config comes to, at the shell."""

from __future__ import annotations

import sys

import click

from volumetool.cli.options import Group
from volumetool.render import render_document
from volumetool.text import plural


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
    from volumetool.config import check_source, read_source, source_size
    from volumetool.errors import ProblemsFound, UnusableInput
    from volumetool.text import escape_control
    from volumetool.validation import text_line

    try:
        data = read_source(file)
    except OSError as exc:
        raise UnusableInput(f"{file}: cannot read ({exc.strerror})") from None
    findings, settings = check_source(data, file, size=source_size(file))
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

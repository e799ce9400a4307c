"""memories list|get|remember|forget|export|import."""

from __future__ import annotations

import sys

import click

from volumetool.cli.options import (
    AFTER_VOLUME,
    Group,
    busy_timeout_option,
    emit,
    key_argument,
    output_options,
    say,
    utf8_text,
    volume_argument,
)
from volumetool.text import plural


@click.group(cls=Group)
def memories() -> None:
    """The agent's persistent memories (key → fact).

    \b
    Example:
      volumetool memories list ./vol --prefix user.
      volumetool memories export ./old-vol | volumetool memories import ./new-vol -
    """


@memories.command(name="list")
@volume_argument
@click.option("--prefix", metavar="P", help="Only keys starting with P.")
@output_options
@busy_timeout_option
def list_(volume, prefix, output, tablefmt, limit, busy_timeout) -> None:
    """List memories in key order.

    \b
    Example:
      volumetool memories list ./vol --prefix ana- --json
    """
    from volumetool.listings import listed
    from volumetool.memories import MEMORY_FIELDS, list_memories

    with listed(volume, busy_timeout, list_memories, prefix=prefix, limit=limit) as rows:
        emit(rows, MEMORY_FIELDS, output, tablefmt, limit, "memory")


@memories.command(short_help="Print one memory's raw value.")
@volume_argument
@key_argument
@busy_timeout_option
def get(volume, key, busy_timeout) -> None:
    """Print the raw value of one memory (exit 1 when there is none); on a terminal, with
    control characters escaped and a final newline.

    \b
    Example:
      volumetool memories get ./vol deploy_region
    """
    from volumetool.memories import get_memory
    from volumetool.text import escape_control
    from volumetool.volume import reading

    with reading(volume, busy_timeout) as conn:
        value = get_memory(conn, key)
    sys.stdout.write(escape_control(value) + "\n" if sys.stdout.isatty() else value)


@memories.command(name="remember", verdict=True, short_help="Save or update a memory (audited).")
@volume_argument
@key_argument
@click.argument("value", type=AFTER_VOLUME, callback=utf8_text)
@busy_timeout_option
def remember_(volume, key, value, busy_timeout) -> None:
    """Save or update a memory, with its audit event (actor volumetool), as the agent's own
    remember tool does.

    \b
    Example:
      volumetool memories remember ./vol deploy_region 'always deploy to us-east'
    """
    from volumetool.memories import remember
    from volumetool.volume import writing

    with writing(volume, busy_timeout) as conn:
        remember(conn, key, value)


@memories.command(name="forget", verdict=True, short_help="Delete a memory (audited).")
@volume_argument
@key_argument
@busy_timeout_option
def forget_(volume, key, busy_timeout) -> None:
    """Delete a memory, with its audit event (exit 1 when there is none).

    \b
    Example:
      volumetool memories forget ./vol oncall_channel
    """
    from volumetool.memories import forget
    from volumetool.volume import writing

    with writing(volume, busy_timeout) as conn:
        forget(conn, key)


@memories.command(short_help="Export every memory (jsonl or json).")
@volume_argument
@click.option(
    "-o",
    "--output",
    "output_path",
    metavar="FILE",
    default="-",
    help="Write here (atomically, mode 0600); - is stdout (the default).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "json"]),
    default="jsonl",
    show_default=True,
    help="JSON Lines, or one JSON document.",
)
@busy_timeout_option
def export(volume, output_path, fmt, busy_timeout) -> None:
    """Export every memory (key, value, created_at, updated_at), ordered by key.

    jsonl loads with `jq` and `sqlite-utils insert FILE memories - --nl`; json is
    {"format": "volumetool.memories", "version": 1, "agent", "exported_at", "memories": [...]}.

    \b
    Example:
      volumetool memories export ./vol -o memories.jsonl
    """
    from volumetool.memories import export_target, export_volume

    target = export_target(output_path)  # refused before the volume is opened
    count = export_volume(volume, target, fmt, busy_timeout)
    say(
        f"exported {plural(count, 'memory')}" + (f" to {output_path}" if output_path != "-" else "")
    )


@memories.command(name="import", verdict=True, short_help="Import memories, all or nothing.")
@volume_argument
@click.argument("file", type=AFTER_VOLUME, metavar="FILE|-")
@click.option(
    "--on-conflict",
    type=click.Choice(["fail", "skip", "overwrite"]),
    default="fail",
    show_default=True,
    help="A key that exists with a different value: refuse the import, keep the "
    "existing value, or replace it.",
)
@click.option("--prune", is_flag=True, help="Forget every memory the file does not hold.")
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing.")
@busy_timeout_option
def import_(volume, file, on_conflict, prune, dry_run, busy_timeout) -> None:
    """Import memories from an export (jsonl or json, detected), all or nothing.

    Every record is validated before anything is written; then one transaction writes them,
    each key written with its remember audit event and each key pruned with its forget event.
    Unchanged values are neither written nor audited, so importing the same file twice is a
    no-op. Timestamps must be the volume's own (2026-11-30T05:27:20.123Z, updated_at not
    before created_at). --dry-run prints ACTION<TAB>KEY for every key that would change (or,
    when --on-conflict fail would refuse the import, conflict<TAB>KEY and exit 1 as it would).

    \b
    Example:
      volumetool memories import ./new-vol memories.jsonl --dry-run
      volumetool memories export ./old-vol | volumetool memories import ./new-vol -
    """
    from volumetool.memories import import_file
    from volumetool.text import escape_control

    plan = import_file(
        volume,
        file,
        on_conflict=on_conflict,
        prune=prune,
        dry_run=dry_run,
        busy_timeout=busy_timeout,
        # a removed key comes from the volume, unchecked
        on_key=lambda action, key: click.echo(f"{action}\t{escape_control(key)}"),
    )
    prefix = "would import" if dry_run else "imported"
    say(f"{prefix} {file}: {plan.summary()}")

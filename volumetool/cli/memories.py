"""memories list|get|remember|forget|export|import."""

from __future__ import annotations

import sys

import click

from volumetool.cli.options import (
    busy_timeout_option,
    emit,
    listing_limit,
    output_options,
    require,
    shift_volume,
    volume_argument,
)


@click.group()
def memories() -> None:
    """The agent's persistent memories (key → fact)."""


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
    from volumetool.memories import MEMORY_FIELDS, list_memories
    from volumetool.volume import Volume

    with Volume(volume, busy_timeout=busy_timeout) as vol, vol.snapshot() as conn:
        rows = list_memories(conn, prefix, listing_limit(limit))
        emit(rows, MEMORY_FIELDS, output, tablefmt, limit, "memories")


@memories.command()
@volume_argument
@click.argument("key", required=False)
@busy_timeout_option
def get(volume, key, busy_timeout) -> None:
    """Print the raw value of one memory (exit 1 when there is none).

    \b
    Example:
      volumetool memories get ./vol deploy_region
    """
    from volumetool.memories import get_memory
    from volumetool.volume import Volume

    volume, key = shift_volume(volume, key)
    with Volume(volume, busy_timeout=busy_timeout) as vol, vol.translating():
        value = get_memory(vol.conn, require(key, "KEY"))
    sys.stdout.write(value + ("\n" if sys.stdout.isatty() else ""))

"""init and demo: creating agent files."""

from __future__ import annotations

import time

import click

from volumetool.cli.options import Command, name_text, say, volume_argument
from volumetool.text import plural


@click.command(cls=Command, verdict=True, short_help="Create a new, empty agent file.")
@volume_argument
@click.option(
    "--name",
    default="agent",
    show_default=True,
    callback=name_text,
    help="The agent's name (identity).",
)
def init(volume: str, name: str) -> None:
    """Create a new, empty agent file at the current format, in WAL mode.

    VOLUME is the new file, or a directory (existing, or written with a trailing slash) to
    hold agent.db. An existing file is never overwritten, and no file is made beside a
    leftover -wal, -shm or -journal (it may hold another database's pages).

    \b
    Example:
      volumetool init ./support-bot/ --name support-bot
    """
    from volumetool.atomic import create_volume
    from volumetool.volume import resolve_new

    path = create_volume(resolve_new(volume), name)
    say(f"created {path}")


@click.command(cls=Command, verdict=True, short_help="Write a realistic sample volume.")
@volume_argument
@click.option(
    "--sessions",
    type=click.IntRange(min=1, max=1_000_000),
    default=12,
    show_default=True,
    help="How many threads (archived ones included).",
)
@click.option(
    "--seed",
    type=click.IntRange(min=-(2**63), max=2**63 - 1),
    default=1,
    show_default=True,
    help="The same seed writes the same volume.",
)
@click.option(
    "--name", default="demo-agent", show_default=True, callback=name_text, help="The agent's name."
)
@click.option(
    "--config-out",
    metavar="FILE|-",
    help="Also write a matching agent YAML here; - writes it to stdout.",
)
def demo(volume: str, sessions: int, seed: int, name: str, config_out: str | None) -> None:
    """Write a realistic sample volume: threads on several channels with tool calls, archived
    threads, compacted threads and threads due for compaction, runs (compaction runs and
    failed ones among them), memories and their audit events.

    The content is the same for the same --seed (timestamps end on 2026-11-30). Refuses to
    overwrite VOLUME or FILE, and checks both before writing either: a run that fails leaves
    nothing behind.

    \b
    Example:
      volumetool demo ./vol --sessions 200 --seed 7 --config-out agent.yaml
    """
    from volumetool import demo as demo_volume
    from volumetool.volume import resolve_new

    path = resolve_new(volume)
    config = demo_volume.config_target(config_out) if config_out is not None else None
    started = time.monotonic()
    counts = demo_volume.build(path, sessions, seed, name, config)
    took = time.monotonic() - started
    where = config and ("stdout" if config.path is None else config.path)
    say(
        f"wrote {path}: {plural(counts.sessions, 'thread')}, {plural(counts.messages, 'message')}, "
        f"{plural(counts.runs, 'run')}, {plural(counts.audit, 'audit event')}, "
        f"{plural(counts.memories, 'memory')} "
        f"in {took:.1f}s" + (f"; config {where}" if config else "")
    )

"""report: one HTML page about one or more volumes, written atomically or to stdout."""

from __future__ import annotations

import sys

import click

from volumetool.cli.options import (
    Command,
    busy_timeout_option,
    say,
    shard_option,
    shard_volumes,
    volumes_argument,
)
from volumetool.text import plural

MAX_DAYS = 366


@click.command(cls=Command, verdict=True, short_help="One self-contained HTML page with charts.")
@volumes_argument
@click.option(
    "-o",
    "--output",
    "output_path",
    required=True,
    metavar="FILE.html",
    help="Write the page here (atomically); - writes it to stdout.",
)
@click.option(
    "--config",
    "config_file",
    metavar="FILE",
    help="The agent YAML whose threshold the threads are measured against (default 50000).",
)
@click.option(
    "--days",
    type=click.IntRange(1, MAX_DAYS),
    default=30,
    show_default=True,
    metavar="N",
    help=f"How many days, up to today (UTC), the charts cover (1-{MAX_DAYS}).",
)
@shard_option
@busy_timeout_option
def report(volumes, output_path, config_file, days, shard, busy_timeout) -> None:
    """One self-contained HTML page about each VOLUME: tokens per day by trigger, every
    active thread's last input tokens against the threshold (who is about to be compacted),
    compactions over time with their savings and failures, and the largest threads.

    No script, font or stylesheet is fetched: charts are inline SVG, readable without
    JavaScript, and the page prints on A4. With several volumes a fleet table comes first,
    then a section per volume. A volume that cannot be read is named in the page and on
    stderr and the others are still reported (exit code: the most serious of theirs); when
    none can be read nothing is written (exit code: the most serious of theirs, so 3 when
    each needs migrate or is newer). With --shard, only the volumes of that
    shard; a shard that gets none writes nothing and succeeds.

    \b
    Example:
      volumetool report ./vol -o report.html
      volumetool report /srv/agents/*/ --config agent.yaml -o /var/www/agents.html
    """
    from datetime import UTC, datetime

    from volumetool import __version__
    from volumetool.cli.messages import show_error
    from volumetool.errors import error_with_code, worst_exit_code
    from volumetool.report.gather import read_volumes, window
    from volumetool.report.output import page_target
    from volumetool.report.page import page
    from volumetool.settings import MemorySettings

    settings = MemorySettings(scope="thread")  # the default threshold, compaction on
    if config_file:
        from volumetool.config import load_config

        settings = load_config(config_file).memory
    target = page_target(output_path)  # refused before any volume is opened
    volumes = shard_volumes(volumes, shard)
    if not volumes:  # SPEC 12: a shard with no volume succeeds with nothing to do
        return
    now = datetime.now(UTC)
    reports, failures = read_volumes(volumes, settings, window(now.date(), days), busy_timeout)
    for failure in failures:
        show_error(failure.error)
    codes = [failure.exit_code for failure in failures]
    if not reports:
        raise error_with_code(
            worst_exit_code(codes),
            f"no volume could be read ({len(failures)} tried)",
            "nothing was written",
        )
    document = page(reports, failures, now, __version__, config_file).encode()
    with target.open() as out:
        out.write(document)
    if target.path is not None:
        say(
            f"wrote {output_path}: {plural(len(reports), 'volume')}"
            + (f", {len(failures)} not read" if failures else "")
            + f", {len(document):,} bytes"
        )
    sys.exit(worst_exit_code(codes))

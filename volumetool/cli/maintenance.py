"""backup, check: copying agent files, and checking them."""

from __future__ import annotations

import sys

import click

from volumetool.cli.options import (
    AFTER_VOLUME,
    Command,
    VolumeByVolume,
    busy_timeout_option,
    say,
    shard_option,
    shard_volumes,
    show,
    volume_argument,
    volumes_argument,
)
from volumetool.text import plural


@click.command(cls=Command, verdict=True, short_help="A consistent copy of a live agent file.")
@volume_argument
@click.argument("dest", type=AFTER_VOLUME, metavar="DEST|-")
@busy_timeout_option
def backup(volume, dest, busy_timeout) -> None:
    """A consistent copy of a live agent file, taken with SQLite's online backup API while the
    agent keeps writing; DEST must not exist, and must name a file (not a directory). The copy
    is integrity-checked, then linked into place (mode 0600). With - the copy is staged in
    $TMPDIR and written to stdout. A backup killed midway leaves a hidden temporary file that
    the next backup of the same volume removes, whatever its DEST.

    \b
    Example:
      volumetool backup ./vol /backups/support-bot-$(date -u +%F).db
      volumetool backup ./vol - | zstd > support-bot.db.zst
    """
    from volumetool.backup import backup_target, backup_volume

    target = backup_target(dest)  # refused before the volume is opened
    path = backup_volume(volume, target, busy_timeout)
    where = f"stdout ({target.written:,} bytes)" if target.path is None else str(target.path)
    say(f"backed up {path} to {where}")


@click.command(cls=Command, verdict=True, short_help="Check integrity and consistency.")
@volumes_argument
@click.option("--json", "as_json", is_flag=True, help="Problems as one JSON array.")
@shard_option
@busy_timeout_option
def check(volumes, as_json, shard, busy_timeout) -> None:
    """Check integrity and consistency: SQLite's integrity_check and foreign keys, schema
    objects the format does not define (or lacks), more than one active thread per key,
    messages folded by something other than a compaction run of their thread, audit details
    that are not JSON objects. One line per problem, with the table and row ids; exit 1 when
    anything is found, a damaged file included.

    Of several volumes (or with --shard), each problem names its volume (`path` in --json),
    a volume that cannot be checked is a line on stderr, and the exit code is the most
    serious of them.

    \b
    Example:
      volumetool check ./vol --json
      volumetool check /srv/agents/*/ --shard 0/4
    """
    from volumetool.check import check_volume
    from volumetool.cli.messages import show_error
    from volumetool.errors import VolumetoolError, worst_exit_code

    one = len(volumes) == 1 and shard is None
    found_all: list[dict] = []
    codes = []
    with VolumeByVolume(shard_volumes(volumes, shard)) as each:
        for argument in each:
            try:
                path, found = check_volume(argument, busy_timeout)
            except VolumetoolError as exc:
                if one:
                    raise
                show_error(exc)
                codes.append(exc.exit_code)
                continue
            if as_json:
                where = {} if one else {"path": str(path)}
                found_all.extend({**where, **p.as_dict()} for p in found)
            else:
                for problem in found:
                    show(f"{path}: {problem.line()}")
            verdict = plural(len(found), "problem") if found else "ok"
            say(f"{path}: {verdict}")
            codes.append(1 if found else 0)
    if as_json:
        from volumetool.render import render_document

        render_document(found_all, sys.stdout)
    sys.exit(worst_exit_code(codes))

"""migrate, backup, check: moving agent files forward, copying them, and checking them."""

from __future__ import annotations

import sys

import click

from volumetool.cli.options import (
    AFTER_VOLUME,
    Command,
    VolumeByVolume,
    busy_timeout_option,
    emit,
    output_options,
    say,
    shard_option,
    shard_volumes,
    show,
    volume_argument,
    volumes_argument,
    wait_option,
)
from volumetool.render import plural


@click.command(cls=Command, short_help="Bring agent files to the current format (0.x too).")
@volumes_argument
@click.option(
    "--list",
    "list_",
    is_flag=True,
    help="Show applied (with time) and pending migrations; change nothing.",
)
@click.option("--check", "check_", is_flag=True, help="Exit 1 when anything is pending.")
@click.option("--dry-run", is_flag=True, help="Say what would run; change nothing.")
@click.option("--no-backup", is_flag=True, help="Skip the backup taken before the first change.")
@shard_option
@wait_option
@output_options
@busy_timeout_option
def migrate(
    volumes, list_, check_, dry_run, no_backup, shard, wait, output, tablefmt, limit, busy_timeout
) -> None:
    """Apply pending migrations, bringing each VOLUME to the current format (runtime 0.x files
    included).

    Before the first change a consistent backup is written next to the file
    (agent.db.bak-<UTC timestamp>, never overwriting) and its path printed. Each migration
    runs in its own transaction; integrity_check and foreign_key_check must pass after. A
    failing migration leaves the file as it was before it (exit 1). A file written by a newer
    volumetool, or whose schema is not what its migrations define, is refused (exit 3).

    \b
    Example:
      volumetool migrate ./vol --list
      volumetool migrate /srv/agents/*/ --check     # a deploy gate
      volumetool migrate ./vol
      volumetool migrate /srv/agents/*/ --shard $JOB_COMPLETION_INDEX/4
    """
    from volumetool.cli import show_error
    from volumetool.errors import Interrupted, VolumetoolError, worst_exit_code
    from volumetool.upgrade import MIGRATION_FIELDS, migration_rows
    from volumetool.volume import Volume, resolve

    codes = []
    summary: dict[str, int] = {}
    many = len(volumes) > 1 or shard is not None
    volumes = shard_volumes(volumes, shard)
    with VolumeByVolume(volumes) as each:
        for argument in each:
            try:
                path = resolve(argument)
                if list_:
                    with Volume(path, readonly=True, busy_timeout=busy_timeout, gate=False) as vol:
                        if many:
                            show(f"{path}:")
                        emit(migration_rows(vol.schema), MIGRATION_FIELDS, output, tablefmt, limit)
                    continue
                result = _migrate_one(path, check_ or dry_run, not no_backup, wait, busy_timeout)
            except Interrupted:
                raise
            except VolumetoolError as exc:
                show_error(exc)
                codes.append(exc.exit_code)
                summary["failed"] = summary.get("failed", 0) + 1
                continue
            outcome = _report(result, check_, dry_run, no_backup)
            codes.append(1 if outcome == "pending" and check_ else 0)
            summary[outcome] = summary.get(outcome, 0) + 1
    if not list_ and many and volumes:
        say(", ".join(f"{n} {k}" for k, n in sorted(summary.items())))
    sys.exit(worst_exit_code(codes))


def _migrate_one(path, read_only: bool, make_backup: bool, wait: float, busy_timeout: float):
    from volumetool.upgrade import migrate, recorded_schema
    from volumetool.volume import Volume, open_for_write

    if read_only:
        opened = Volume(path, readonly=True, busy_timeout=busy_timeout, gate=False)
    else:
        opened = open_for_write(
            path, busy_timeout=busy_timeout, lock=True, wait=wait, expected=recorded_schema
        )
    with opened as vol:
        return migrate(vol, make_backup=make_backup, dry_run=read_only)


def _report(result, check_: bool, dry_run: bool, no_backup: bool) -> str:
    """One volume's result on stdout; its outcome for the summary."""
    path, pending = result.path, ", ".join(result.pending)
    if not result.pending:
        show(f"{path}: up to date")
        return "up to date"
    if check_:
        show(f"{path}: {len(result.pending)} pending: {pending}")
        return "pending"
    if dry_run:
        first = "backup, then " if not no_backup else ""
        show(f"{path}: would apply ({first}one transaction each): {pending}")
        return "pending"
    if result.backup:
        show(f"{path}: backup {result.backup}")
    show(f"{path}: applied {', '.join(result.applied)}")
    return "migrated"


@click.command(cls=Command, short_help="A consistent copy of a live agent file.")
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
    from volumetool.atomic import output_file
    from volumetool.backup import backup as run
    from volumetool.backup import backup_to_stream
    from volumetool.errors import UnusableInput
    from volumetool.volume import Volume

    path = output_file(dest, "agent-backup.db")
    if path is None and sys.stdout.isatty():
        raise UnusableInput(
            "refusing to write a database to a terminal",
            "pipe it (volumetool backup VOLUME - | zstd > copy.db.zst) or name a DEST file",
        )
    with Volume(volume, readonly=True, busy_timeout=busy_timeout, gate=False) as vol:
        if path is None:
            size = backup_to_stream(vol, sys.stdout.buffer)
            where = f"stdout ({size:,} bytes)"
        else:
            where = str(run(vol, path))
    say(f"backed up {vol.path} to {where}")


@click.command(cls=Command, short_help="Check integrity and consistency.")
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
    from volumetool.cli import show_error
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

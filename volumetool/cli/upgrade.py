"""migrate: bringing agent files to the current format."""

from __future__ import annotations

import sys

import click

from volumetool.cli.options import (
    Command,
    VolumeByVolume,
    busy_timeout_option,
    emit,
    output_options,
    say,
    shard_option,
    shard_volumes,
    show,
    volumes_argument,
    wait_option,
)


@click.command(
    cls=Command, verdict=True, short_help="Bring agent files to the current format (0.x too)."
)
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
    from volumetool.cli.messages import show_error
    from volumetool.errors import Interrupted, VolumetoolError, worst_exit_code
    from volumetool.upgrade import MIGRATION_FIELDS, migrate_volume, migrations_of
    from volumetool.volume import resolve

    codes = []
    summary: dict[str, int] = {}
    many = len(volumes) > 1 or shard is not None
    volumes = shard_volumes(volumes, shard)
    with VolumeByVolume(volumes) as each:
        for argument in each:
            try:
                path = resolve(argument)
                if list_:
                    rows = migrations_of(path, busy_timeout)
                    if many:
                        show(f"{path}:")
                    emit(rows, MIGRATION_FIELDS, output, tablefmt, limit)
                    continue
                result = migrate_volume(
                    path,
                    dry_run=check_ or dry_run,
                    make_backup=not no_backup,
                    wait=wait,
                    busy_timeout=busy_timeout,
                )
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

"""thread new|reset: /new and /reset from the shell."""

from __future__ import annotations

import click

from volumetool.cli.options import AFTER_VOLUME, busy_timeout_option, volume_argument


@click.group(short_help="/new and /reset.")
def thread() -> None:
    """End a conversation: /new archives it, /reset deletes its transcript.

    \b
    Example:
      volumetool thread new ./vol 'discord:1234/5678'
    """


@thread.command()
@volume_argument
@click.argument("key", type=AFTER_VOLUME)
@busy_timeout_option
def new(volume, key, busy_timeout) -> None:
    """/new: archive the active thread under KEY and start an empty one under the same key.
    The old transcript stays in the file (`sessions --status archived`).

    \b
    Example:
      volumetool thread new ./vol 'discord:1234/5678'
    """
    from volumetool.threads import new_thread
    from volumetool.volume import open_for_write

    with (
        open_for_write(volume, busy_timeout=busy_timeout, lock=False) as vol,
        vol.write() as conn,
    ):
        old, fresh = new_thread(conn, key)
    click.echo(
        f"volumetool: archived thread {old}; thread {fresh} is now active under {key}", err=True
    )


@thread.command()
@volume_argument
@click.argument("key", type=AFTER_VOLUME)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@busy_timeout_option
def reset(volume, key, yes, busy_timeout) -> None:
    """/reset: delete the active thread's messages and summary under KEY (its runs and audit
    events stay). Asks for confirmation unless --yes; without an answer (stdin closed, as
    under cron) nothing is deleted.

    \b
    Example:
      volumetool thread reset ./vol 'telegram:5531918843' --yes
    """
    from volumetool.threads import active_thread, count_messages, reset_thread
    from volumetool.volume import open_for_write

    with open_for_write(volume, busy_timeout=busy_timeout, lock=False) as vol:
        if not yes:
            with vol.snapshot() as conn:
                session, _ = active_thread(conn, key)
                count = count_messages(conn, session)
            click.confirm(
                f"Delete the {count} message(s) and the summary of thread {session} ({key})?",
                abort=True,
                err=True,
            )
        with vol.write() as conn:
            session, deleted = reset_thread(conn, key)
    click.echo(
        f"volumetool: deleted {deleted} message(s) and the summary of thread {session}", err=True
    )

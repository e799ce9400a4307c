"""thread new|reset|undo: /new and /reset from the shell, and taking a compaction back."""

from __future__ import annotations

import click

from volumetool.cli.options import (
    Group,
    ask,
    busy_timeout_option,
    key_argument,
    say,
    volume_argument,
)
from volumetool.text import plural


@click.group(cls=Group, short_help="/new, /reset and undoing a compaction.")
def thread() -> None:
    """End a conversation (/new archives it, /reset deletes its transcript), or take back its
    latest compaction (undo).

    \b
    Example:
      volumetool thread new ./vol 'discord:1234/5678'
      volumetool thread undo ./vol 'discord:1234/5678' --yes
    """


@thread.command(verdict=True)
@volume_argument
@key_argument
@busy_timeout_option
def new(volume, key, busy_timeout) -> None:
    """/new: archive the active thread under KEY and start an empty one under the same key.
    The old transcript stays in the file (`sessions --status archived`).

    \b
    Example:
      volumetool thread new ./vol 'discord:1234/5678'
    """
    from volumetool.threads import new_thread
    from volumetool.volume import writing

    with writing(volume, busy_timeout) as conn:
        old, fresh = new_thread(conn, key)
    say(f"archived thread {old}; thread {fresh} is now active under {key}")


def asks_first(f):
    """VOLUME KEY [--yes] [--busy-timeout]: a change to one thread, asked for unless --yes."""
    for decorator in reversed(
        [
            volume_argument,
            key_argument,
            click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation."),
            busy_timeout_option,
        ]
    ):
        f = decorator(f)
    return f


@thread.command(verdict=True)
@asks_first
def reset(volume, key, yes, busy_timeout) -> None:
    """/reset: delete the active thread's messages and summary under KEY (its runs and audit
    events stay). Asks for confirmation unless --yes; without an answer (stdin closed, as
    under cron) nothing is deleted.

    \b
    Example:
      volumetool thread reset ./vol 'telegram:5531918843' --yes
    """
    from volumetool.threads import active_thread, count_messages, reset_thread

    def question(conn) -> str:
        session, _ = active_thread(conn, key)
        count = count_messages(conn, session)
        return f"Delete the {plural(count, 'message')} and the summary of thread {session} ({key})?"

    session, deleted = confirmed_write(
        volume, busy_timeout, yes, question, lambda conn: reset_thread(conn, key)
    )
    say(f"deleted {plural(deleted, 'message')} and the summary of thread {session}")


@thread.command(verdict=True)
@asks_first
def undo(volume, key, yes, busy_timeout) -> None:
    """Reverse the latest compaction of the active thread under KEY: the messages it folded
    are live again and the summary before it is back (its run stays: its cost was real).
    Repeat to go further back. One transaction, safe beside the running agent: messages it
    appended since stay where they are. Asks first unless --yes; without an answer nothing
    changes; nor if another compaction is committed before the answer (exit 1). Exit 1 when
    there is no active thread or nothing to undo.

    \b
    Example:
      volumetool transcript ./vol 'telegram:5531918843' --full   # the history first
      volumetool thread undo ./vol 'telegram:5531918843' --yes
    """
    from volumetool.compaction.undo import plan_undo
    from volumetool.compaction.undo import undo as reverse

    asked: list[int] = []  # the run the question named: the one the answer confirms

    def question(conn) -> str:
        plan = plan_undo(conn, key)
        asked.append(plan.run_id)
        return (
            f"Undo compaction run {plan.run_id} of thread {plan.session_id}: "
            f"{plural(plan.messages, 'message')} live again, {_restored(plan)}?"
        )

    def change(conn):
        return reverse(conn, key, confirmed=asked[0] if asked else None)

    done = confirmed_write(volume, busy_timeout, yes, question, change)
    say(
        f"undid compaction run {done.run_id} of thread {done.session_id}: "
        f"{plural(done.messages, 'message')} live again, {_restored(done)}"
    )


def _restored(plan) -> str:
    """Which summary an undo brings back."""
    if plan.restored_summary is None:
        return "no summary"
    if plan.restored_run_id:
        return f"the summary of run {plan.restored_run_id} back"
    return "the summary before it back"


def confirmed_write(volume, busy_timeout: float, yes: bool, question, change):
    """`change(conn)` in one write transaction, and what it returns; unless --yes, asked first
    with `question(conn)`, read in a snapshot. An unanswered prompt (stdin closed, as under
    cron) changes nothing."""
    from volumetool.text import escape_control
    from volumetool.volume import writing

    def confirm(conn) -> None:
        ask(escape_control(question(conn)))

    with writing(volume, busy_timeout, None if yes else confirm) as conn:
        return change(conn)

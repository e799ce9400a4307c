"""status, sessions, transcript, runs, audit: reading a volume from the shell."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click
from click.core import ParameterSource

from volumetool.cli import terminal
from volumetool.cli.options import (
    ROW_ID,
    Command,
    VolumeByVolume,
    busy_timeout_option,
    emit,
    format_given,
    key_argument,
    key_text,
    note_cut,
    output_options,
    parse_since,
    say,
    shard_option,
    shard_volumes,
    since_option,
    volume_argument,
    volumes_argument,
)
from volumetool.render import Listing, render_document
from volumetool.text import plural


@click.command(cls=Command, verdict=True, short_help="/status totals; one row per volume for many.")
@volumes_argument
@click.option(
    "--config",
    "config_file",
    metavar="FILE",
    help="The agent YAML: count each volume's due threads with its thresholds.",
)
@click.option(
    "--prometheus",
    is_flag=True,
    help="OpenMetrics text for Prometheus (node_exporter's textfile collector): one series "
    "per volume.",
)
@shard_option
@output_options
@busy_timeout_option
def status(volumes, config_file, prometheus, shard, output, tablefmt, limit, busy_timeout) -> None:
    """/status totals: threads, messages, runs, tokens, memories, audit.

    Of one VOLUME: the totals as text, or one JSON object with --json. Of several (or with
    --shard, or another listing format): one row per volume with path, agent, file_bytes,
    sessions_active, sessions_archived, due (with --config), tokens_24h, failed_runs_24h,
    schema (current, older, legacy, newer or untrusted) and error: a volume that cannot be
    read is a row saying why, and the exit code is the most serious of the rows.

    \b
    Example:
      volumetool status ./vol --json | jq .tokens
      volumetool status /srv/agents/*/ --config agent.yaml -n 0
      volumetool status /srv/agents/*/ --prometheus > /var/lib/node_exporter/volumetool.prom.$$
    """
    memory = None
    if config_file:
        from volumetool.config import load_config

        memory = load_config(config_file).memory
    listing_asked = tablefmt is not None or (format_given() and output != "json")
    if prometheus and (tablefmt is not None or format_given()):
        raise click.UsageError(
            "--prometheus and --table/--json/--nl/--csv/--tsv/--fmt exclude each other"
        )
    if len(volumes) == 1 and shard is None and not prometheus and not listing_asked:
        _status_of_one(volumes[0], output == "json", memory, busy_timeout)
        return
    selected = shard_volumes(volumes, shard)
    _status_of_many(selected, memory, prometheus, output, tablefmt, limit, busy_timeout)


def _status_of_one(volume: str, as_json: bool, memory, busy_timeout: float) -> None:
    from volumetool import listings

    totals, untrusted = listings.status_of(volume, busy_timeout, memory)
    if as_json:
        render_document(totals, sys.stdout)
        return
    from volumetool.text import escape_control

    # What the gate let through: current, or current with objects it does not know.
    for label, value in _totals_lines(totals, "untrusted" if untrusted else "current"):
        click.echo(f"{label:<14}{escape_control(value)}")  # names come from the volume


def _totals_lines(totals: dict, word: str) -> list[tuple[str, str]]:
    def counts(mapping: dict) -> str:
        return ", ".join(f"{k} {v:,}" for k, v in mapping.items()) or "none"

    schema = totals["schema"]
    tokens = totals["tokens"]
    threads = [
        (
            "threads",
            f"{totals['sessions']['active']:,} active, {totals['sessions']['archived']:,} archived",
        )
    ]
    if "due" in totals:
        threads.append(("due", plural(totals["due"], "thread")))
    if totals["sessions"].get("held"):
        held = plural(totals["sessions"]["held"], "thread")
        threads.append(("held", f"{held} after thread undo (compact --key releases)"))
    return [
        ("agent", totals["agent"] or "(unnamed)"),
        ("path", totals["path"]),
        ("file", f"{totals['file_bytes']:,} bytes"),
        ("schema", f"{schema['version']} ({word})"),
        *threads,
        (
            "messages",
            f"{totals['messages']['live']:,} live, {totals['messages']['folded']:,} folded",
        ),
        (
            "runs",
            f"{totals['runs']['total']:,} ({totals['runs']['errors']:,} failed): "
            + counts(totals["runs"]["by_trigger"]),
        ),
        (
            "tokens",
            f"input {tokens['input']:,}, output {tokens['output']:,} "
            f"(compaction: input {tokens['compaction_input']:,}, "
            f"output {tokens['compaction_output']:,}, ~{tokens['compaction_saved']:,} saved)",
        ),
        ("memories", f"{totals['memories']:,}"),
        ("audit", f"{totals['audit']['total']:,}: " + counts(totals["audit"]["by_event"])),
        ("last activity", totals["last_activity"] or "never"),
    ]


def _status_of_many(selected, memory, prometheus, output, tablefmt, limit, busy_timeout) -> None:
    """One row per volume; every volume's error is its row's, the exit code the worst."""
    from volumetool import fleet
    from volumetool.errors import worst_exit_code

    read: list[fleet.VolumeStatus] = []
    with VolumeByVolume(selected) as each:
        statuses = fleet.fleet_status(
            each, now=datetime.now(UTC), memory=memory, busy_timeout=busy_timeout
        )

        def rows():
            for volume in statuses:
                read.append(volume)
                yield volume.row()

        if prometheus:
            from volumetool.metrics import status_metrics

            read.extend(statuses)
            sys.stdout.write(status_metrics(read))  # exact: click.echo strips escapes off a pipe
        else:
            emit(rows(), fleet.ROW_FIELDS, output, tablefmt, limit, "volume")
    failed = [v for v in read if v.error]
    if failed:
        if prometheus:  # the text cannot say why: stderr does
            for volume in failed:
                say(f"{volume.path}: {volume.error}")
        say(f"{len(failed)} of {plural(len(read), 'volume')} not read")
    sys.exit(worst_exit_code(v.exit_code for v in read))


@click.command(cls=Command)
@volume_argument
@click.option(
    "--key",
    "key_glob",
    metavar="GLOB",
    callback=key_text,
    help="Conversation keys matching a glob.",
)
@click.option("--channel", metavar="C", help="Only threads on this channel.")
@click.option(
    "--status",
    type=click.Choice(["active", "archived", "all"]),
    default="active",
    show_default=True,
    help="Which threads: the active one of each key, archived ones (/new), or all.",
)
@click.option("--due", is_flag=True, help="Add a `due` column: is compaction due? (--config)")
@click.option("--config", "config_file", metavar="FILE", help="The agent YAML, for --due.")
@since_option("threads updated")
@output_options
@busy_timeout_option
def sessions(
    volume,
    key_glob,
    channel,
    status,
    due,
    config_file,
    since,
    output,
    tablefmt,
    limit,
    busy_timeout,
) -> None:
    """List threads, most recently updated first.

    turns and messages count the live transcript (what replays on the next message);
    last_input_tokens is the figure of the thread's latest run that is not a compaction.
    The table on a terminal shows times as `3 h ago` and figures as 52,310.

    \b
    Example:
      volumetool sessions ./vol --key 'discord:*' --status all -n 20
      volumetool sessions ./vol --due --config agent.yaml --json
    """
    from volumetool import listings

    if due and not config_file:
        raise click.UsageError("--due needs --config FILE (the agent YAML with the threshold)")
    settings = None
    if due:
        from volumetool.config import load_config

        settings = load_config(config_file).memory
    filters = {"key_glob": key_glob, "channel": channel, "status": status, "due": settings}
    columns = (*listings.SESSION_FIELDS, *(["due"] if settings is not None else []))
    with listings.listed(
        volume, busy_timeout, listings.sessions, since=parse_since(since), limit=limit, **filters
    ) as rows:
        if output == "table" and terminal.stdout_is_terminal():
            now = datetime.now(UTC)
            rows = (terminal.humane_session(row, now) for row in rows)
        emit(rows, columns, output, tablefmt, limit, "thread")


@click.command(cls=Command, short_help="The replayed transcript of a thread.")
@volume_argument
@key_argument
@click.option(
    "--session",
    "session_id",
    type=ROW_ID,
    metavar="ID",
    help="A specific thread under KEY (an archived one, say).",
)
@click.option("--full", is_flag=True, help="Also show folded messages (folded_by is set).")
@click.option(
    "--format",
    "view",
    type=click.Choice(["text", "markdown"]),
    help="The conversation (text, the default on a terminal) or Markdown, for a ticket.",
)
@click.option("--full-args", is_flag=True, help="Show tool-call arguments whole.")
@click.option(
    "--max-chars",
    type=click.IntRange(min=1),
    metavar="N",
    help="Cut each message after N characters (default: show all).",
)
@terminal.terminal_options
@output_options
@busy_timeout_option
def transcript(
    volume,
    key,
    session_id,
    full,
    view,
    full_args,
    max_chars,
    color,
    no_pager,
    output,
    tablefmt,
    limit,
    busy_timeout,
) -> None:
    """The replayed transcript of the active thread under KEY: its summary, then the live
    messages in order.

    On a terminal it reads as a conversation: a header per message, the text wrapped, tool
    calls as `→ name(args)` with their results `←` under them, colour, and a pager for more
    than a screen ($VOLUMETOOL_PAGER, else $PAGER, else less -FRX). Piped, it is the table,
    as are --table/--json/--nl/--csv/--tsv/--fmt anywhere; --format text|markdown asks for the
    conversation anywhere. The conversation shows the whole thread unless -n is given.

    \b
    Example:
      volumetool transcript ./vol 'telegram:5531918843' --full
      volumetool transcript ./vol 'telegram:5531918843' --format markdown > ticket.md
      volumetool transcript ./vol 'telegram:5531918843' --full --json
    """
    from volumetool import listings

    view = _conversation_format(view, output, tablefmt)
    thread = {"key": key, "session_id": session_id, "full": full}
    with listings.listed(volume, busy_timeout, listings.transcript, **thread) as rows:
        if view is None:
            emit(rows, listings.TRANSCRIPT_FIELDS, output, tablefmt, limit, "message")
            return
        # Read everything first: the pager may stay open for long, the volume must not. The
        # conversation shows the whole thread unless -n was given.
        listing = Listing(rows, listings.TRANSCRIPT_FIELDS, limit if _given("limit") else None)
        rows = list(listing.shown())
    if listing.truncated and listing.limit is not None:
        note_cut(listing.limit, "message")
    _show_conversation(rows, view, key, color, no_pager, full_args, max_chars)


def _given(parameter: str) -> bool:
    source = click.get_current_context().get_parameter_source(parameter)
    return source not in (None, ParameterSource.DEFAULT)


def _conversation_format(view: str | None, output: str, tablefmt: str | None) -> str | None:
    """text or markdown, or None for a listing format: --format when given; else text on a
    terminal unless a listing format was asked for."""
    listing_asked = tablefmt is not None or format_given()
    if view is not None and listing_asked:
        raise click.UsageError(
            "--format and --table/--json/--nl/--csv/--tsv/--fmt exclude each other"
        )
    if view is None and not listing_asked and terminal.stdout_is_terminal():
        return "text"
    return view


def _show_conversation(rows, view, key, color, no_pager, full_args, max_chars) -> None:
    from volumetool import conversation

    tty = terminal.stdout_is_terminal()
    options = conversation.ViewOptions(
        width=terminal.screen_size().columns,
        color=view == "text" and terminal.use_color(color, tty),
        full_args=full_args,
        max_chars=max_chars,
    )
    if view == "markdown":
        text = conversation.markdown(rows, options, title=key)
    else:
        text = "".join(line + "\n" for line in conversation.text_lines(rows, options))
    terminal.show(text, page=tty and not no_pager)


@click.command(cls=Command)
@volume_argument
@click.option(
    "--key", metavar="K", callback=key_text, help="Runs of the threads under this conversation key."
)
@click.option("--trigger", metavar="T", help="message, webhook, schedule, manual, compaction…")
@click.option(
    "--status",
    type=click.Choice(["ok", "error"]),
    help="Only runs that succeeded (ok) or failed (error), compaction runs included.",
)
@since_option("runs started")
@output_options
@busy_timeout_option
def runs(volume, key, trigger, status, since, output, tablefmt, limit, busy_timeout) -> None:
    """List runs, newest first.

    \b
    Example:
      volumetool runs ./vol --trigger compaction --since 7d
    """
    from volumetool import listings

    filters = {"key": key, "trigger": trigger, "status": status, "since": parse_since(since)}
    with listings.listed(volume, busy_timeout, listings.runs, limit=limit, **filters) as rows:
        emit(rows, listings.RUN_FIELDS, output, tablefmt, limit, "run")


@click.command(cls=Command)
@volume_argument
@click.option("--event", metavar="E", help="permission, memory, compaction, thread…")
@click.option("--action", metavar="A", help="The detail's action (remember, forget, failed…).")
@click.option(
    "--key",
    metavar="K",
    callback=key_text,
    help="Events of a conversation key, or naming a memory key.",
)
@since_option("events")
@output_options
@busy_timeout_option
def audit(volume, event, action, key, since, output, tablefmt, limit, busy_timeout) -> None:
    """List audit events, newest first.

    \b
    Example:
      volumetool audit ./vol --event memory --action forget --nl
    """
    from volumetool import listings

    filters = {"event": event, "action": action, "key": key, "since": parse_since(since)}
    with listings.listed(volume, busy_timeout, listings.audit, limit=limit, **filters) as rows:
        emit(rows, listings.AUDIT_FIELDS, output, tablefmt, limit, "event")

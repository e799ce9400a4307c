"""status, sessions, transcript, runs, audit: reading a volume from the shell."""

from __future__ import annotations

import json

import click

from volumetool.cli.options import (
    busy_timeout_option,
    emit,
    listing_limit,
    output_options,
    parse_since,
    require,
    shift_volume,
    since_option,
    volume_argument,
)


def _open(volume: str | None, busy_timeout: float):
    from volumetool.volume import Volume

    return Volume(volume, readonly=True, busy_timeout=busy_timeout)


@click.command(short_help="/status totals.")
@volume_argument
@click.option("--json", "as_json", is_flag=True, help="The totals as one JSON object.")
@busy_timeout_option
def status(volume: str | None, as_json: bool, busy_timeout: float) -> None:
    """/status totals: threads, messages, runs, tokens, memories, audit.

    \b
    Example:
      volumetool status ./vol --json | jq .tokens
    """
    from volumetool import listings

    with _open(volume, busy_timeout) as vol:
        totals = listings.status(vol)
    if as_json:
        click.echo(json.dumps(totals, indent=2, ensure_ascii=False))
        return

    def counts(mapping: dict) -> str:
        return ", ".join(f"{k} {v:,}" for k, v in mapping.items()) or "none"

    schema = totals["schema"]
    tokens = totals["tokens"]
    lines = [
        ("agent", totals["agent"] or "(unnamed)"),
        ("path", totals["path"]),
        ("file", f"{totals['file_bytes']:,} bytes"),
        ("schema", f"{schema['version']} (current)"),
        (
            "threads",
            f"{totals['sessions']['active']:,} active, {totals['sessions']['archived']:,} archived",
        ),
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
            f"output {tokens['compaction_output']:,})",
        ),
        ("memories", f"{totals['memories']:,}"),
        ("audit", f"{totals['audit']['total']:,}: " + counts(totals["audit"]["by_event"])),
        ("last activity", totals["last_activity"] or "never"),
    ]
    from volumetool.render import escape_control

    for label, value in lines:
        click.echo(f"{label:<14}{escape_control(value)}")  # names come from the volume


@click.command()
@volume_argument
@click.option("--key", "key_glob", metavar="GLOB", help="Conversation keys matching a glob.")
@click.option("--channel", metavar="C", help="Only threads on this channel.")
@click.option(
    "--status",
    type=click.Choice(["active", "archived", "all"]),
    default="active",
    show_default=True,
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
    with _open(volume, busy_timeout) as vol, vol.snapshot() as conn:
        rows = listings.sessions(
            conn,
            key_glob=key_glob,
            channel=channel,
            status=status,
            since=parse_since(since),
            limit=listing_limit(limit),
        )
        columns = listings.SESSION_FIELDS
        if settings is not None:
            from volumetool.compaction.store import annotate_due

            rows, columns = annotate_due(conn, rows, settings), (*columns, "due")
        emit(rows, columns, output, tablefmt, limit, "threads")


@click.command(short_help="The replayed transcript of a thread.")
@volume_argument
@click.argument("key", required=False)
@click.option(
    "--session",
    "session_id",
    type=int,
    metavar="ID",
    help="A specific thread under KEY (an archived one, say).",
)
@click.option("--full", is_flag=True, help="Also show folded messages (folded_by is set).")
@output_options
@busy_timeout_option
def transcript(volume, key, session_id, full, output, tablefmt, limit, busy_timeout) -> None:
    """The replayed transcript of the active thread under KEY: its summary, then the live
    messages in order.

    \b
    Example:
      volumetool transcript ./vol 'telegram:5531918843' --full --json
    """
    from volumetool import listings

    volume, key = shift_volume(volume, key)
    with _open(volume, busy_timeout) as vol, vol.snapshot() as conn:
        rows = listings.transcript(conn, require(key, "KEY"), session_id, full)
        emit(rows, listings.TRANSCRIPT_FIELDS, output, tablefmt, limit, "messages")


@click.command()
@volume_argument
@click.option("--key", metavar="K", help="Runs of the threads under this conversation key.")
@click.option("--trigger", metavar="T", help="message, webhook, schedule, manual, compaction…")
@click.option("--status", type=click.Choice(["ok", "error"]))
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

    with _open(volume, busy_timeout) as vol, vol.snapshot() as conn:
        rows = listings.runs(
            conn,
            key=key,
            trigger=trigger,
            status=status,
            since=parse_since(since),
            limit=listing_limit(limit),
        )
        emit(rows, listings.RUN_FIELDS, output, tablefmt, limit, "runs")


@click.command()
@volume_argument
@click.option("--event", metavar="E", help="permission, memory, compaction, thread…")
@click.option("--action", metavar="A", help="The detail's action (remember, forget, failed…).")
@click.option("--key", metavar="K", help="Events of a conversation key, or naming a memory key.")
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

    with _open(volume, busy_timeout) as vol, vol.snapshot() as conn:
        rows = listings.audit(
            conn,
            event=event,
            action=action,
            key=key,
            since=parse_since(since),
            limit=listing_limit(limit),
        )
        emit(rows, listings.AUDIT_FIELDS, output, tablefmt, limit, "events")

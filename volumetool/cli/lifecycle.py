"""prune, erase: keeping what the retention policy says, and erasing a person's data on
request."""

from __future__ import annotations

import json
import sys

import click

from volumetool.cli.options import (
    Command,
    ask,
    busy_timeout_option,
    emit,
    format_given,
    key_text,
    note_cut,
    output_options,
    parse_since,
    say,
    utf8_text,
    volume_argument,
    wait_option,
)
from volumetool.render import Listing, render_document
from volumetool.text import plural


def _deletion_line(verb: str, threads: tuple[str, str], done, memories: str = "") -> str:
    """`verb N THREADS WHERE (counts)[ and MEMORIES]; runs and audit events stay, detached`;
    `threads` is the noun and where they are."""
    noun, where = threads
    stay = "would stay" if verb.startswith("would") else "stay"
    return (
        f"{verb} {plural(done.threads, noun)} {where} ({plural(done.messages, 'message')},"
        f" {plural(done.summaries, 'summary')}, {plural(done.kept_summaries, 'kept summary')})"
        f"{memories}; {plural(done.runs_detached, 'run')} and"
        f" {plural(done.audit_detached, 'audit event')} {stay}, detached"
    )


@click.command(
    cls=Command, verdict=True, short_help="Delete archived threads older than the retention period."
)
@volume_argument
@click.option(
    "--archived-before",
    "before",
    required=True,
    metavar="WHEN",
    help="Archived threads last updated before this: an ISO date/time or a duration ago (90d).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="List the threads that would go (in any listing format) and count what would go "
    "with them; change nothing.",
)
@click.option("--vacuum", is_flag=True, help="Then rewrite the file to give the space back.")
@output_options(
    help_for={
        "json": "What went (or would go) as one JSON object of counts (`finished_earlier`: "
        "those of an interrupted prune it finished first, or null); with --dry-run, the "
        "threads too, as its array `thread_list`."
    }
)
@wait_option
@busy_timeout_option
def prune(volume, before, dry_run, vacuum, output, tablefmt, limit, wait, busy_timeout) -> None:
    """Delete the archived threads last updated before WHEN, with their messages and
    summaries: a retention policy from cron. Active threads are never touched. Their runs
    and audit events stay, detached from the thread, so token totals do not change; one
    audit `thread` event (action `prune`) records the counts. Short transactions that give
    way to the running agent (a prune interrupted midway is finished by running it again);
    --vacuum then rewrites the file so it shrinks (the agent waits for that).

    --dry-run writes nothing: it lists the threads that would go, most recently updated
    first, with the columns `sessions` has (messages: the live ones; folded_messages, those
    compactions folded, go too), as a table or with --csv, --tsv, --nl, --fmt and -n, as
    every listing. --json prints one object, the counts (as a prune's --json does, with
    dry_run true) and the listed threads as its array `thread_list`. What went or would go
    is counted on stderr.

    \b
    Example:
      volumetool prune ./vol --archived-before 90d --dry-run
      volumetool prune ./vol --archived-before 90d --dry-run --tsv -n 0 | cut -f 2
      volumetool prune ./vol --archived-before 2026-09-01 --vacuum --json
    """
    from volumetool.lifecycle import check_before, predict_prune, prune_path
    from volumetool.volume import reading

    _check_prune_format(output, tablefmt, dry_run)
    before = check_before(parse_since(before, "--archived-before"))
    document: dict = {"archived_before": before, "dry_run": dry_run}
    if dry_run:
        with reading(volume, busy_timeout) as conn:
            pruned = predict_prune(conn, before)
            document |= _counts(pruned)
            _list_prune(conn, before, document, output, tablefmt, limit)
        extra = ""
    else:
        pruned = prune_path(volume, before, vacuum, busy_timeout=busy_timeout, wait=wait)
        extra = f"; the file went from {pruned.size:,} to {pruned.shrunk:,} bytes" if vacuum else ""
        if output == "json":
            render_document(document | _counts(pruned), sys.stdout)
    if pruned.earlier:
        earlier, went = pruned.earlier
        what = ("archived thread", f"last updated before {earlier}")
        finished = "would first finish" if dry_run else "finished"
        which = "which would have pruned" if dry_run else "which pruned"
        say(_deletion_line(f"{finished} the prune interrupted earlier, {which}", what, went))
    verb = "would prune" if dry_run else "pruned"
    line = _deletion_line(verb, ("archived thread", f"last updated before {before}"), pruned.done)
    say(line + extra)


def _counts(pruned) -> dict:
    """A prune's --json counts, and `finished_earlier`: what the interrupted prune with another
    WHEN that it finished first deleted in all (its event's counts), or null."""
    earlier = None
    if pruned.earlier:
        when, went = pruned.earlier
        earlier = {"archived_before": when} | went.thread_counts()
    return pruned.done.thread_counts() | {"finished_earlier": earlier}


def _check_prune_format(output: str, tablefmt: str | None, dry_run: bool) -> None:
    """--dry-run lists in every format (a table when none is named); a prune writes its
    counts with --json and takes no other format, nor -n (exit 2)."""
    if not dry_run and output != "json" and (tablefmt or format_given()):
        flag = "--fmt" if tablefmt else f"--{output}"
        raise click.UsageError(
            f"{flag} lists the threads a --dry-run would prune; a prune prints what went with"
            " --json"
        )
    limit_given = click.get_current_context().get_parameter_source("limit")
    if not dry_run and limit_given not in (None, click.core.ParameterSource.DEFAULT):
        # Never taken for "prune only N": a prune deletes every thread WHEN names.
        raise click.UsageError(
            "-n cuts the list a --dry-run prints; a prune deletes every archived thread"
            " last updated before WHEN"
        )


def _list_prune(conn, before: str, counts: dict, output, tablefmt, limit) -> None:
    """The threads a prune would delete: a listing in every format; --json, one object, the
    counts with the threads as `thread_list` (cut at `limit` as any listing)."""
    from volumetool.lifecycle import PRUNE_FIELDS, prune_listing

    threads = prune_listing(conn, before, limit)
    if output != "json":
        emit(threads, PRUNE_FIELDS, output, tablefmt, limit, "thread")
        return
    listing = Listing(threads, PRUNE_FIELDS, limit)
    render_document(counts | {"thread_list": list(listing.shown())}, sys.stdout)
    if listing.truncated and limit is not None:
        note_cut(limit, "thread")


@click.command(
    cls=Command,
    verdict=True,
    short_help="Erase every thread under a key: the right to be forgotten.",
)
@volume_argument
@click.option(
    "--key",
    "keys",
    required=True,
    multiple=True,
    metavar="KEY",
    callback=key_text,
    help="The conversation key (exact); repeat it to erase several in one transaction.",
)
@click.option(
    "--memories-prefix",
    "memories_prefixes",
    multiple=True,
    metavar="P",
    callback=utf8_text,
    help="Also erase the memories whose key starts with P; may be repeated.",
)
@click.option("--dry-run", is_flag=True, help="Count what would go; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="What went (or would go) as JSON.")
@wait_option
@busy_timeout_option
def erase(volume, keys, memories_prefixes, dry_run, yes, as_json, wait, busy_timeout) -> None:
    """Erase every thread under KEY, active and archived, with its messages, its summary and
    the summaries its compactions kept, and with --memories-prefix the memories under P, so
    that their text is gone from the file's bytes: deleted with secure_delete, the search
    index merged, the file rewritten (VACUUM) and its WAL emptied. --key and
    --memories-prefix may be repeated: everything named is erased in one transaction. Runs
    and audit events stay, detached; one audit `erase` event names the keys and counts what
    went, never what it said. Asks first unless --yes (no answer: nothing is erased). Exit 1
    when no thread is under a KEY (those under the others are erased). A scrub that did not
    finish (interrupted, a busy WAL) is finished by running the same erase again, which then
    says so and exits 0.

    \b
    Example:
      volumetool erase ./vol --key 'telegram:5531918843' --memories-prefix 'ana.' --dry-run
      volumetool erase ./vol --key 'telegram:5531918843' --key 'discord:88' --yes
    """
    from volumetool.errors import ProblemsFound
    from volumetool.lifecycle import check_prefixes, erase_path, keys_named, plan_erase_or_finish
    from volumetool.volume import reading

    keys = tuple(dict.fromkeys(keys))
    memories_prefixes = check_prefixes(memories_prefixes)
    threads = ("thread", f"under {_quoted(keys)}")

    def memories(done, prefixes=memories_prefixes) -> str:
        if not prefixes:
            return ""
        return f" and {plural(done.memories, 'memory')} under {_quoted(prefixes)}"

    def confirm(planned) -> None:
        if not yes:
            what = _deletion_line("Erase", threads, planned, memories(planned))
            ask(f"{what}. This cannot be undone. Erase?")

    if dry_run:
        with reading(volume, busy_timeout) as conn:
            done = plan_erase_or_finish(conn, keys, memories_prefixes)
    else:
        done = erase_path(
            volume, keys, memories_prefixes, confirm, busy_timeout=busy_timeout, wait=wait
        )
    if as_json:
        document = keys_named(keys, memories_prefixes) | {"dry_run": dry_run}
        document |= {"absent_keys": list(done.absent_keys)} if len(keys) > 1 else {}
        document |= done.counts() | {"finished_earlier": _finished(done)}
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    for earlier in done.scrubbed_earlier:
        finished = "would finish" if dry_run else "finished"
        what = ("thread", f"under {_quoted(earlier.keys)}")
        went = earlier.deletion()
        erased = _deletion_line("erased", what, went, memories(went, earlier.memories_prefixes))
        say(f"{finished} the scrub of the erase at {earlier.erased_at}, which {erased}")
    scrubbed = "" if dry_run else "; the file is scrubbed"
    if not done.threads:  # it finished the scrub of earlier erases of every key
        say(
            f"{'would erase' if dry_run else 'erased'} nothing more under {_quoted(keys)}{scrubbed}"
        )
        return
    verb = "would erase" if dry_run else "erased"
    say(_deletion_line(verb, threads, done, memories(done)) + scrubbed)
    if done.absent_keys:
        raise ProblemsFound(
            f"no thread under key {_quoted(done.absent_keys)}",
            "list threads with `volumetool sessions --status all --key GLOB`",
        )


def _finished(done) -> list[dict]:
    """erase --json's `finished_earlier`: the earlier erases whose scrub this one finished,
    each as its audit event names and counts it, with `erased_at`."""
    return [
        {"erased_at": earlier.erased_at}
        | {k: v for k, v in earlier.detail.items() if k not in ("action", "scrubbed")}
        for earlier in done.scrubbed_earlier
    ]


def _quoted(texts) -> str:
    from volumetool.text import escape_control

    return ", ".join(escape_control(repr(text)) for text in texts)

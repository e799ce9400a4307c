"""search: finding who said what, in messages, summaries and memories."""

from __future__ import annotations

import contextlib
import sys

import click

from volumetool.cli.options import (
    AFTER_VOLUME,
    Command,
    busy_timeout_option,
    emit,
    key_text,
    output_options,
    parse_since,
    say,
    since_option,
    utf8_text,
    volume_argument,
)


@click.command(cls=Command, short_help="Full-text search of messages, summaries and memories.")
@volume_argument
@click.argument("query", type=AFTER_VOLUME, callback=utf8_text)
@click.option(
    "--key",
    "key_glob",
    metavar="GLOB",
    callback=key_text,
    help="Threads (or memory keys) matching a glob.",
)
@click.option(
    "--role",
    type=click.Choice(["system", "user", "assistant", "tool"]),
    help="Only messages of this role.",
)
@since_option("text written")
@click.option(
    "--in",
    "kinds",
    default="messages,summaries,memories",
    show_default=True,
    metavar="KINDS",
    help="Where to look, comma-separated.",
)
@click.option("--fts", is_flag=True, help="QUERY is an SQLite FTS5 expression (OR, NEAR, prefix*).")
@click.option(
    "--read-only",
    is_flag=True,
    help="Write nothing to the file: use the search index as it is and read what it lacks "
    "directly (slow when it lacks much).",
)
@output_options
@busy_timeout_option
def search(
    volume,
    query,
    key_glob,
    role,
    since,
    kinds,
    fts,
    read_only,
    output,
    tablefmt,
    limit,
    busy_timeout,
) -> None:
    """Search live and folded messages, summaries (current and earlier) and memories for
    QUERY, newest first, with the match marked ⟦so⟧ in a snippet.

    QUERY's words match literally, whole, ignoring case: `INV-2024.05` finds that identifier,
    `refund` does not find `refunds`; every word must occur; "two words" in double quotes
    must occur together. With --fts, QUERY is an FTS5 expression (refund OR chargeback,
    NEAR(invoice overdue), deploy*).

    The first search of a volume builds a search index in the file, once (with a progress
    bar; the words are read into a scratch file in $TMPDIR first, so that the agent is never
    held up for long); later ones add what is new and take out what was deleted.
    Results are those of one moment of the volume, whatever the agent writes meanwhile.

    \b
    Example:
      volumetool search ./vol 'refund' --since 7d --role assistant
      volumetool search ./vol 'INV-2024.05' --key 'telegram:*' --json
      volumetool search ./vol 'refund OR chargeback' --fts --in messages,summaries
    """
    from volumetool.search.find import SEARCH_FIELDS, SearchRequest
    from volumetool.search.find import search as run
    from volumetool.search.query import parse_kinds

    request = SearchRequest(
        query,
        fts,
        parse_kinds(kinds),
        key_glob,
        role,
        parse_since(since),
        limit or None,
    )
    with contextlib.ExitStack() as stack:
        bars: list = []  # on a terminal, once a first build of the index says how far it is

        def progress(done: int, total: int) -> None:
            if not bars and sys.stderr.isatty():
                bar = click.progressbar(length=total, label="indexing", file=sys.stderr)
                bars.append(stack.enter_context(bar))
            for bar in bars:
                bar.update(done - bar.pos)

        rows = run(
            volume,
            request,
            busy_timeout=busy_timeout,
            write_index=not read_only,
            say=say,
            progress=progress,
        )
    emit(rows, SEARCH_FIELDS, output, tablefmt, limit, "result")

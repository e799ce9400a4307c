"""compact: summarize long threads with a model endpoint, by hand or from cron."""

from __future__ import annotations

import contextlib
import sys
import time

import click

from volumetool.cli.options import (
    Command,
    Finite,
    Seconds,
    busy_timeout_option,
    key_text,
    only_one,
    say,
    shard_option,
    shard_volumes,
    stdin_once,
    volumes_argument,
    wait_option,
)
from volumetool.providers import PROVIDERS

# How a compaction run calls the model: option, type (with its bounds), default, help. The
# names match Request's fields, where the command passes them as they are.
TUNING = (
    (
        "--max-summary-tokens",
        click.IntRange(min=16, max=1_000_000),
        4096,
        "max_tokens of the summary request.",
    ),
    (
        "--max-input-tokens",
        click.IntRange(min=1_000, max=100_000_000),
        100_000,
        "Larger folds (estimated) are summarized in parts, in order.",
    ),
    (
        "--min-fold-tokens",
        click.IntRange(min=0, max=100_000_000),
        200,
        "Skip, without a call, a fold estimated smaller than this.",
    ),
    (
        "--min-retention",
        Finite(min=0, max=1),
        None,
        "Refuse a summary that keeps less than this share (0-1) of the fold's hard facts. "
        "Default: 0.3, for a fold of 4 facts or more. A summary that invents more facts than "
        "it keeps is refused too; 0 turns both checks off.",
    ),
    (
        "--timeout",
        Seconds(minimum=0.1),
        60.0,
        "Longest wait for the model's next bytes, in seconds (answers stream: a slow model "
        "still writing is not cut off).",
    ),
    (
        "--max-answer-seconds",
        Seconds(minimum=1),
        600.0,
        "Bound on one whole answer, however steadily it streams, in seconds.",
    ),
    (
        "--retries",
        click.IntRange(min=0, max=10),
        3,
        "Retries on 408, 409, 429, 5xx, connection errors and timeouts.",
    ),
    (
        "--max-retry-wait",
        Seconds(),
        60.0,
        "A Retry-After longer than this (seconds) fails at once and stops calls to the endpoint.",
    ),
    ("--concurrency", click.IntRange(min=1, max=64), 4, "Model calls in flight at once."),
)


def from_env(option: str) -> dict:
    """An option's variable: `--max-retry-wait` is $VOLUMETOOL_MAX_RETRY_WAIT. Every option of
    compact that says how to compact has one, so a cron line or a systemd EnvironmentFile need
    not repeat it; the flag beats the variable, which beats the config and the default. The
    switches that choose what a run does (--key, --force, --dry-run, --json, --nl) have none: a
    variable forgotten in an environment must not turn a cron run into a dry run or a forced
    compaction of one thread."""
    return {
        "envvar": ENV_PREFIX + option.lstrip("-").upper().replace("-", "_"),
        "show_envvar": True,
    }


ENV_PREFIX = "VOLUMETOOL_"


def tuning_options(f):
    for name, kind, default, text in reversed(TUNING):
        f = click.option(
            name,
            type=kind,
            default=default,
            show_default=default is not None,
            help=text,
            **from_env(name),
        )(f)
    return f


@click.command(
    cls=Command, verdict=True, short_help="Summarize long threads, by hand or from cron."
)
@volumes_argument
@click.option(
    "--config",
    "config_file",
    metavar="FILE",
    help="The agent YAML: memory: decides what is due, model: who summarizes.",
    **from_env("--config"),
)
@click.option(
    "--key",
    metavar="K",
    callback=key_text,
    help="Only the active thread under this conversation key.",
)
@click.option("--force", is_flag=True, help="With --key: compact even if not due (/compact).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Read-only: list what would be compacted; no model call, no write.",
)
@click.option(
    "--model",
    metavar="NAME",
    help="Summary model (default model.small, else name).",
    **from_env("--model"),
)
@click.option(
    "--api",
    type=click.Choice(list(PROVIDERS)),
    help="Override model.api.",
    **from_env("--api"),
)
@click.option(
    "--base-url", metavar="URL", help="Override model.base_url.", **from_env("--base-url")
)
@click.option(
    "--api-key-env",
    metavar="VAR",
    help="Override model.api_key_env (a NAME).",
    **from_env("--api-key-env"),
)
@click.option(
    "--prompt-file",
    metavar="FILE",
    help="Replace the summary prompt (UTF-8 text; the rules that fence the transcript stay).",
    **from_env("--prompt-file"),
)
@click.option(
    "--instructions",
    metavar="TEXT",
    help="Add to the summary prompt, as `/compact TEXT` does: what to keep, what to drop.",
    **from_env("--instructions"),
)
@tuning_options
@click.option(
    "--metrics-file",
    metavar="FILE",
    help="Write the run's figures there for node_exporter's textfile collector (atomically).",
    **from_env("--metrics-file"),
)
@shard_option(**from_env("--shard"))
@wait_option(**from_env("--wait"))
@busy_timeout_option(**from_env("--busy-timeout"))
@click.option("--json", "as_json", is_flag=True, help="Results as one JSON array.")
@click.option(
    "--nl",
    "as_nl",
    is_flag=True,
    help="Results as JSON, one object a line, each as soon as its thread is done.",
)
def compact(
    volumes,
    config_file,
    key,
    force,
    dry_run,
    model,
    api,
    base_url,
    api_key_env,
    prompt_file,
    instructions,
    metrics_file,
    shard,
    wait,
    busy_timeout,
    as_json,
    as_nl,
    **tuning,
) -> None:
    """Compact threads: fold every live turn but the last two into a summary written by
    model.small (else model.name).

    Without --key, every due thread of every VOLUME: an active thread whose latest successful
    agent run since its last compaction reported last_input_tokens >= compact_at_tokens, with
    at least 3 live turns. Without --config, scope: thread and the default threshold (50000)
    are assumed, and --model is needed.

    The API key is read from the environment variable that model.api_key_env (or
    --api-key-env) names; when neither names one, from $OPENAI_API_KEY or $ANTHROPIC_API_KEY
    if set, else no key is sent (llama.cpp, Ollama and vLLM need none).

    The hard facts checked: numbers with units, dates, times, URLs, paths, e-mail addresses,
    ids, code spans and memory keys that user, assistant and system text and the previous
    summary state (a text longer than 4,000 characters without its fenced blocks, tool results,
    other call arguments and fenced listings of 3 lines or more are not read). A fold with none
    reports retention null. Invented facts are looked for in everything the model was given.

    Every option that says how to compact may come from the environment variable shown
    beside it ($VOLUMETOOL_TIMEOUT, ...): a flag beats the variable, the variable beats the
    config, the config beats the default. --key, --force, --dry-run, --json and --nl do not.

    Exit 1 when a thread failed (a model error, or a summary refused: a content filter or
    refusal, cut off, empty, not shorter, too few of the facts kept, facts invented) or
    conflicted, when a due thread was left backing off after failures or behind an unusable
    endpoint (a --dry-run only predicts that: exit 0), or when --key names no active thread.
    Exit 4 (busy: retry later) when the agent held a volume's write lock past --busy-timeout,
    or another volumetool its volume lock past --wait: either before the pass spent anything
    on that volume (then no model call was made), or when a summary was to be committed. Such
    a summary is not committed, but its call's cost is still recorded in `runs` as a failed
    run ("not committed: ...", with its tokens): at once if the lock comes within one more
    --busy-timeout, else at the end of the pass, else the next pass records it first, before
    it spends anything (meanwhile it waits in agent.db.volumetool-unrecorded beside the file,
    and the result row, `skipped`, carries its tokens). 2 (usage, config, an unusable volume)
    and 3 (needs migrate) as everywhere; 130 and 143 when interrupted. The most serious
    outcome is the exit code: 143, 130, 2, 3, 1, then 4.

    Ctrl-C or SIGTERM (`timeout`) stops the pass: the calls under way are recorded as failed
    runs, no other starts, and the results still list every thread the pass had decided, in
    the chosen format, reason `interrupted` on each it stopped (`failed`: its call was under
    way; `skipped`: it had not started); then one line says what is committed and, of several
    volumes, which were finished. The --metrics-file is written too (the last success kept).

    \b
    Example:
      volumetool compact ./vol --config agent.yaml --dry-run
      volumetool compact /srv/agents/*/ --config agent.yaml --nl >> compact.jsonl  # cron
      volumetool compact ./vol --config agent.yaml --key 'telegram:42' --force
      volumetool compact /srv/agents/*/ --config agent.yaml --shard 0/4 \\
          --metrics-file /var/lib/node_exporter/textfile/volumetool-compact-0.prom
    """
    only_one([flag for flag, on in (("--json", as_json), ("--nl", as_nl)) if on])
    stdin_once([("--config", config_file), ("--prompt-file", prompt_file)])
    output = "json" if as_json else "nl" if as_nl else None
    from volumetool.compaction.run import Request
    from volumetool.compaction.run import compact as run
    from volumetool.config import load_config
    from volumetool.errors import Interrupted
    from volumetool.settings import AgentConfig, MemorySettings

    config = (
        load_config(config_file)
        if config_file
        else AgentConfig(memory=MemorySettings(scope="thread"))
    )
    request_kwargs = {}
    if prompt_file is not None:
        request_kwargs["prompt"] = read_prompt(prompt_file)
    request = Request(
        config=config,
        key=key,
        force=force,
        dry_run=dry_run,
        model=model,
        api=api,
        base_url=base_url,
        api_key_env=api_key_env,
        instructions=instructions,
        wait=wait,
        busy_timeout=busy_timeout,
        **tuning,
        **request_kwargs,
    )
    metrics = _metrics_destination(metrics_file, dry_run)
    started = time.monotonic()
    show_progress = sys.stderr.isatty() and not dry_run
    results = _Results(output)
    with contextlib.ExitStack() as stack:
        # The bar exists once planning knows how many threads there are; calls start before
        # that, so it starts from the threads already done.
        bars, finished = [], []

        def planned(total: int) -> None:
            if show_progress:
                bar = click.progressbar(length=total, label="compacting", file=sys.stderr)
                bars.append(stack.enter_context(bar))
                bar.update(len(finished))

        def done(outcome) -> None:
            finished.append(outcome)
            for bar in bars:
                bar.update(1)
            results.decided(outcome)

        try:
            outcomes, code = run(
                shard_volumes(volumes, shard),
                request,
                on_planned=planned,
                on_done=done,
                on_skipped=results.decided,
            )
        except Interrupted as exc:
            # What the pass decided before the signal is shown, as the results of a whole
            # pass are; then the interrupt's line (it says what is committed), 130 or 143.
            stack.close()  # the bar ends before the results
            results.show(results.seen)  # a stdout that failed is the lesser news here
            _record(metrics, results.seen, time.monotonic() - started, exc.exit_code, shard)
            raise
    unwritten = results.show(outcomes)
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    say(summary or "nothing due")
    code = _record(metrics, outcomes, time.monotonic() - started, code, shard)
    if unwritten is not None:  # stdout full: raised once the pass is recorded
        raise unwritten
    sys.exit(code)


class _Results:
    """The result rows of a pass: --nl writes each as soon as it is decided (flushed, so that a
    job killed later has them in its log), the other formats all at the end."""

    def __init__(self, output: str | None) -> None:
        self.output = output
        self.seen: list = []  # every outcome decided, in that order
        self.written: set[int] = set()  # those --nl wrote (ids)
        self.broken: OSError | None = None  # stdout full: the pass goes on

    def decided(self, outcome) -> None:
        self.seen.append(outcome)
        # A busy volume's run still to be written changes its row at the end of the pass.
        if self.output == "nl" and outcome.unrecorded is None and self.broken is None:
            try:
                self._write([outcome])
            except OSError as exc:  # raised once the pass is over, as at its end
                self.broken = exc

    def show(self, outcomes) -> OSError | None:
        """The rows not written yet, in the chosen format; the error of a stdout that could
        not take them (full), which the caller raises once it recorded the pass."""
        if self.broken is not None:
            return self.broken
        rest = [o for o in outcomes if id(o) not in self.written]
        try:
            if self.output:
                self._write(rest)
            else:
                for outcome in rest:
                    click.echo(outcome.line())
        except OSError as exc:
            self.broken = exc
        return self.broken

    def _write(self, outcomes) -> None:
        from volumetool.cli.options import emit
        from volumetool.compaction.run import OUTCOME_FIELDS

        emit((o.as_dict() for o in outcomes), OUTCOME_FIELDS, self.output, None)
        sys.stdout.flush()
        self.written.update(id(o) for o in outcomes)


def _metrics_destination(metrics_file: str | None, dry_run: bool):
    """Where --metrics-file will be written, checked before the run; None without it."""
    if metrics_file is None:
        return None
    from volumetool.metrics_file import metrics_target

    if dry_run:
        raise click.UsageError("--metrics-file records a real run, not a --dry-run")
    return metrics_target(metrics_file)


def _record(metrics, outcomes, duration: float, code: int, shard) -> int:
    """Write the --metrics-file, if any; failing to is one more problem of the run. The exit
    code of the run and of the writing."""
    if metrics is None:
        return code
    from volumetool.cli.messages import show_error
    from volumetool.errors import VolumetoolError, worst_exit_code
    from volumetool.metrics_file import record_compaction

    labels = {"shard": str(shard)} if shard else {}
    try:
        record_compaction(metrics, outcomes, duration, succeeded=code == 0, labels=labels)
    except VolumetoolError as exc:
        show_error(exc)
        return worst_exit_code([code, exc.exit_code])
    return code


PROMPT_MAX_BYTES = 1024 * 1024  # as a config file: more is no prompt (and /dev/zero never ends)


def read_prompt(path: str) -> str:
    """The --prompt-file text: UTF-8, not empty, at most 1 MiB; `-` is stdin."""
    from volumetool.config import read_source
    from volumetool.errors import UnusableInput

    try:
        data = read_source(path, PROMPT_MAX_BYTES)  # read as a config file is: bounded
    except OSError as exc:
        raise UnusableInput(f"{path}: cannot read the prompt file ({exc.strerror})") from None
    if len(data) > PROMPT_MAX_BYTES:
        raise UnusableInput(f"{path}: the prompt file is larger than 1 MiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnusableInput(
            f"{path}: the prompt file is not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start})"
        ) from None
    if not text.strip():
        raise UnusableInput(f"{path}: the prompt file is empty")
    return text

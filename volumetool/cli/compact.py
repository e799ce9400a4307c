"""compact: summarize long threads with a model endpoint, by hand or from cron."""

from __future__ import annotations

import contextlib
import json
import sys

import click

from volumetool.cli.options import busy_timeout_option, wait_option


@click.command(short_help="Summarize long threads, by hand or from cron.")
@click.argument("volumes", nargs=-1, metavar="[VOLUME]...")
@click.option(
    "--config",
    "config_file",
    metavar="FILE",
    help="The agent YAML: memory: decides what is due, model: who summarizes.",
)
@click.option("--key", metavar="K", help="Only the active thread under this conversation key.")
@click.option("--force", is_flag=True, help="With --key: compact even if not due (/compact).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Read-only: list what would be compacted; no model call, no write.",
)
@click.option("--model", metavar="NAME", help="Summary model (default model.small, else name).")
@click.option("--api", type=click.Choice(["openai", "anthropic"]), help="Override model.api.")
@click.option("--base-url", metavar="URL", help="Override model.base_url.")
@click.option("--api-key-env", metavar="VAR", help="Override model.api_key_env (a NAME).")
@click.option(
    "--prompt-file",
    type=click.File("r", encoding="utf-8"),
    metavar="FILE",
    help="Replace the summary prompt.",
)
@click.option(
    "--max-summary-tokens",
    type=click.IntRange(min=16),
    default=4096,
    show_default=True,
    help="max_tokens of the summary request.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="Bound on each model request.",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0, max=10),
    default=3,
    show_default=True,
    help="Retries on 429, 5xx, connection errors and timeouts.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1, max=64),
    default=4,
    show_default=True,
    help="Model calls in flight at once.",
)
@wait_option
@busy_timeout_option
@click.option("--json", "as_json", is_flag=True, help="Results as one JSON array.")
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
    max_summary_tokens,
    timeout,
    retries,
    concurrency,
    wait,
    busy_timeout,
    as_json,
) -> None:
    """Compact threads: fold every live turn but the last two into a summary written by
    model.small (else model.name).

    Without --key, every due thread of every VOLUME: an active thread whose latest successful
    agent run since its last compaction reported last_input_tokens >= compact_at_tokens, with
    at least 3 live turns. Without --config, scope: thread and the default threshold (50000)
    are assumed, and --model is needed.

    The API key is read from the environment variable that model.api_key_env names.

    \b
    Example:
      volumetool compact ./vol --config agent.yaml --dry-run
      volumetool compact /srv/agents/*/ --config agent.yaml --json     # from cron
      volumetool compact ./vol --config agent.yaml --key 'telegram:42' --force
    """
    from volumetool.compaction.run import OUTCOME_FIELDS, Request
    from volumetool.compaction.run import compact as run
    from volumetool.config import load_config
    from volumetool.model_client import RetryPolicy
    from volumetool.settings import AgentConfig, MemorySettings

    config = (
        load_config(config_file)
        if config_file
        else AgentConfig(memory=MemorySettings(scope="thread"))
    )
    request_kwargs = {}
    if prompt_file is not None:
        request_kwargs["prompt"] = prompt_file.read()
    request = Request(
        config=config,
        key=key,
        force=force,
        dry_run=dry_run,
        model=model,
        api=api,
        base_url=base_url,
        api_key_env=api_key_env,
        max_summary_tokens=max_summary_tokens,
        timeout=timeout,
        concurrency=concurrency,
        wait=wait,
        busy_timeout=busy_timeout,
        retry=RetryPolicy(attempts=retries + 1),
        **request_kwargs,
    )
    show_progress = sys.stderr.isatty() and not dry_run
    with contextlib.ExitStack() as stack:
        bars = []  # the bar exists once planning knows how many threads there are

        def planned(total: int) -> None:
            if show_progress:
                bars.append(
                    stack.enter_context(
                        click.progressbar(length=total, label="compacting", file=sys.stderr)
                    )
                )

        def done(outcome) -> None:
            for bar in bars:
                bar.update(1)

        outcomes, code = run(list(volumes) or [None], request, on_planned=planned, on_done=done)
    if as_json:
        click.echo(
            json.dumps(
                [{k: o.as_dict()[k] for k in OUTCOME_FIELDS} for o in outcomes],
                indent=2,
                ensure_ascii=False,
            )
        )
    else:
        for outcome in outcomes:
            click.echo(outcome.line())
        counts: dict[str, int] = {}
        for outcome in outcomes:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        click.echo(f"volumetool: {summary or 'nothing due'}", err=True)
    sys.exit(code)

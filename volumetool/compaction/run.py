"""Running compaction over volumes, by hand or from cron.

Each volume is locked (so two volumetool compactions never overlap), planned in one read
snapshot, then its due threads are summarized with at most `concurrency` model calls in
flight. Writes are serialized: each ending is one BEGIN IMMEDIATE transaction that re-checks
the snapshot, so whatever the agent appended meanwhile stays live and untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import httpx

from volumetool.compaction.plan import Due, FoldPlan, estimate_tokens, plan_fold
from volumetool.compaction.store import (
    Thread,
    active_threads,
    commit_summary,
    conflict_reason,
    load_thread,
    record_conflict,
    record_failure,
    thread_due,
)
from volumetool.compaction.summarize import (
    DEFAULT_PROMPT,
    SummaryRejected,
    accept_summary,
    render_request,
)
from volumetool.errors import (
    Busy,
    ProblemsFound,
    SchemaMismatch,
    UnusableInput,
    VolumetoolError,
    worst_exit_code,
)
from volumetool.model_client import Endpoint, ModelClient, ModelError, RetryPolicy, Usage
from volumetool.settings import API_DEFAULTS, AgentConfig
from volumetool.timefmt import now_iso
from volumetool.volume import Volume, resolve, volume_lock

OUTCOME_FIELDS = (
    "volume",
    "conversation_key",
    "session_id",
    "status",
    "folded_turns",
    "folded_messages",
    "model",
    "input_tokens",
    "output_tokens",
    "run_id",
    "error",
    "last_input_tokens",
    "threshold",
    "estimated_tokens",
)


@dataclass(frozen=True)
class Request:
    """What `volumetool compact` was asked to do."""

    config: AgentConfig = field(default_factory=AgentConfig)
    key: str | None = None
    force: bool = False
    dry_run: bool = False
    model: str | None = None
    api: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    prompt: str = DEFAULT_PROMPT
    max_summary_tokens: int = 4096
    timeout: float = 60.0
    concurrency: int = 4
    wait: float = 0.0
    busy_timeout: float = 5.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass
class Outcome:
    volume: str
    conversation_key: str | None
    session_id: int | None
    status: str  # compacted | failed | conflict | skipped | would_compact
    folded_turns: int = 0
    folded_messages: int = 0
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    run_id: int | None = None
    error: str | None = None
    last_input_tokens: int | None = None
    threshold: int | None = None
    estimated_tokens: int | None = None
    exit_code: int = field(default=0, repr=False)

    def as_dict(self) -> dict:
        data = asdict(self)
        del data["exit_code"]
        return data

    def line(self) -> str:
        where = f"{self.volume} {self.conversation_key or ''}".rstrip()
        fold = f"{self.folded_turns} turn(s), {self.folded_messages} message(s)"
        if self.status == "compacted":
            return (
                f"{where}: compacted {fold} with {self.model}; "
                f"{_n(self.input_tokens)} in, {_n(self.output_tokens)} out; run {self.run_id}"
            )
        if self.status == "would_compact":
            return (
                f"{where}: would compact {fold}, ~{self.estimated_tokens:,} tokens; last input "
                f"{_n(self.last_input_tokens)} (threshold {_n(self.threshold)}); "
                f"model {self.model or '(none set)'}"
            )
        if self.status == "failed" and self.run_id:
            return f"{where}: failed: {self.error} (run {self.run_id})"
        return f"{where}: {self.status}: {self.error}"


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


@dataclass
class Job:
    volume: Volume
    thread: Thread
    plan: FoldPlan
    due: Due


def resolve_endpoint(request: Request, need_key: bool) -> tuple[str | None, Endpoint | None]:
    """The summary model and its endpoint: overrides first, then model.small, model.name."""
    settings = request.config.model
    model = request.model or settings.summary_model
    api = request.api or settings.api
    same_api = api == settings.api
    base_url = request.base_url or (settings.base_url if same_api else API_DEFAULTS[api][0])
    key_env = request.api_key_env or (settings.api_key_env if same_api else API_DEFAULTS[api][1])
    if not need_key:
        return model, None
    if not model:
        raise UnusableInput(
            "no model to write summaries",
            "set model.small or model.name in the config, or pass --model",
        )
    key = os.environ.get(key_env or "", "")
    if not key:
        raise UnusableInput(f"${key_env} is not set", "export the API key in that variable")
    return model, Endpoint(
        api,
        base_url or API_DEFAULTS[api][0],
        model,
        key,
        request.max_summary_tokens,
        request.timeout,
    )


def plan_volume(
    volume: Volume, request: Request, model: str | None
) -> tuple[list[Job], list[Outcome]]:
    """The jobs of one volume, from one read snapshot; threads named by --key that will not
    be compacted come back as `skipped` outcomes."""
    settings = request.config.memory
    jobs: list[Job] = []
    skipped: list[Outcome] = []
    name = str(volume.path)

    def skip(key: str, session_id: int | None, reason: str, due: Due | None = None) -> None:
        skipped.append(
            Outcome(
                name,
                key,
                session_id,
                "skipped",
                model=model,
                error=reason,
                last_input_tokens=due.last_input_tokens if due else None,
                threshold=due.threshold if due else None,
            )
        )

    with volume.snapshot() as conn:
        if request.key is not None:
            candidates = active_threads(conn, key=request.key)
            if not candidates:
                skip(request.key, None, "no active thread under this key")
        elif settings.compaction_enabled:
            candidates = active_threads(conn, threshold=settings.compact_at_tokens)
        else:
            candidates = []
        for session_id, key in candidates:
            due = thread_due(conn, session_id, settings)
            if not due.due and not request.force:
                if request.key is not None:
                    skip(key, session_id, f"not due: {due.reason} (--force compacts anyway)", due)
                continue
            thread = load_thread(conn, session_id)
            plan = plan_fold(thread.live)
            if plan.empty:
                skip(key, session_id, "nothing to fold: the last two turns are kept", due)
                continue
            jobs.append(Job(volume, thread, plan, due))
    return jobs, skipped


def _planned(job: Job, model: str | None, status: str, **values: object) -> Outcome:
    return Outcome(
        str(job.volume.path),
        job.thread.conversation_key,
        job.thread.session_id,
        status,
        folded_turns=job.plan.folded_turns,
        folded_messages=len(job.plan.fold),
        model=model,
        last_input_tokens=job.due.last_input_tokens,
        threshold=job.due.threshold,
        estimated_tokens=estimate_tokens(job.thread.summary, job.plan.fold),
        **values,
    )


def finish(
    job: Job,
    model: str,
    summary: str | None,
    failure: str | None,
    usage: Usage,
    started: str,
    finished: str,
) -> Outcome:
    """Write how one compaction ended, in one transaction."""
    thread, fold = job.thread, job.plan.fold
    tokens = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    try:
        with job.volume.write() as conn:
            if failure is not None:
                run_id = record_failure(conn, thread, model, failure, usage, started, finished)
                return _planned(
                    job, model, "failed", run_id=run_id, error=failure, exit_code=1, **tokens
                )
            reason = conflict_reason(conn, thread, fold)
            if reason is not None:
                record_conflict(conn, thread, model, reason, usage, finished)
                return _planned(job, model, "conflict", error=reason, exit_code=1, **tokens)
            run_id = commit_summary(
                conn, thread, fold, summary or "", model, usage, started, finished
            )
            return _planned(job, model, "compacted", run_id=run_id, **tokens)
    except Busy as exc:
        return _planned(job, model, "skipped", error=exc.format_message(), exit_code=4, **tokens)
    except VolumetoolError as exc:
        return _planned(
            job, model, "failed", error=exc.format_message(), exit_code=exc.exit_code, **tokens
        )


async def summarize_all(
    jobs: Sequence[Job],
    request: Request,
    endpoint: Endpoint,
    transport: httpx.AsyncBaseTransport | None,
    on_done: Callable[[Outcome], None],
) -> list[Outcome]:
    semaphore = asyncio.Semaphore(request.concurrency)
    writing = asyncio.Lock()

    async with ModelClient(
        endpoint, retry=request.retry, transport=transport, max_connections=request.concurrency
    ) as client:

        async def one(job: Job) -> Outcome:
            summary = failure = None
            usage = Usage()
            async with semaphore:
                started = now_iso()
                try:
                    completion = await client.complete(
                        request.prompt, render_request(job.thread.summary, job.plan.fold)
                    )
                    usage = completion.usage
                    summary = accept_summary(
                        completion.text, completion.finish, job.thread.summary, job.plan.fold
                    )
                except ModelError as exc:
                    failure, usage = str(exc), exc.usage
                except SummaryRejected as exc:
                    failure = str(exc)
                finished = now_iso()
            async with writing:
                outcome = await asyncio.to_thread(
                    finish, job, endpoint.model, summary, failure, usage, started, finished
                )
            on_done(outcome)
            return outcome

        return list(await asyncio.gather(*(one(job) for job in jobs)))


def compact(
    volumes: Sequence[str],
    request: Request,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    on_planned: Callable[[int], None] = lambda total: None,
    on_done: Callable[[Outcome], None] = lambda outcome: None,
) -> tuple[list[Outcome], int]:
    """Compact every due thread (or the --key thread) of every volume; outcomes and exit code."""
    if request.force and request.key is None:
        raise UnusableInput("--force needs --key: it compacts one named thread")
    model, endpoint = resolve_endpoint(request, need_key=not request.dry_run)
    outcomes: list[Outcome] = []
    jobs: list[Job] = []
    with contextlib.ExitStack() as stack:
        for argument in volumes:
            try:
                path = resolve(argument)
                if not request.dry_run:
                    stack.enter_context(volume_lock(path, request.wait))
                volume = stack.enter_context(
                    Volume(path, readonly=request.dry_run, busy_timeout=request.busy_timeout)
                )
                planned, skipped = plan_volume(volume, request, model)
            except (UnusableInput, SchemaMismatch, Busy, ProblemsFound) as exc:
                outcomes.append(
                    Outcome(
                        str(argument),
                        None,
                        None,
                        "skipped",
                        error=exc.format_message(),
                        exit_code=exc.exit_code,
                    )
                )
                continue
            jobs.extend(planned)
            outcomes.extend(skipped)
        if request.dry_run:
            outcomes.extend(_planned(job, model, "would_compact") for job in jobs)
        elif jobs:
            on_planned(len(jobs))
            assert endpoint is not None
            outcomes.extend(asyncio.run(summarize_all(jobs, request, endpoint, transport, on_done)))
    return outcomes, worst_exit_code(o.exit_code for o in outcomes)

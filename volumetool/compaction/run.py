"""Running compaction over volumes, by hand or from cron.

Each volume is checked, then locked (so two volumetool compactions never overlap), and planned
in one read snapshot; its due threads are summarized as they are found, with at most
`concurrency` model calls in flight, so the first calls go out before the last thread is
planned. Writes wait for the planning and are serialized: each ending is one BEGIN IMMEDIATE
transaction that re-checks the snapshot, so whatever the agent appended meanwhile stays live
and untouched.

Whatever goes wrong with one thread — any exception, any response — becomes that thread's
outcome; the other threads go on, and every thread gets its line.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from volumetool.compaction.plan import (
    Due,
    FoldPlan,
    Message,
    backoff_until,
    check_due,
    estimate_text_tokens,
    estimate_tokens,
    plan_fold,
)
from volumetool.compaction.prompt import DEFAULT_PROMPT, MIN_PART_TOKENS, system_prompt
from volumetool.compaction.store import (
    INTERRUPTED_BY_SIGNAL,
    RunTimes,
    Thread,
    Written,
    active_threads,
    commit_summary,
    conflict_reason,
    load_thread,
    record_failure,
    thread_facts,
    token_scale,
)
from volumetool.compaction.summarize import (
    DEFAULT_TOKEN_SCALE,
    Limits,
    Spent,
    Summary,
    SummaryFailed,
    summarize,
)
from volumetool.compaction.unrecorded import Pending, UnrecordedRun, record_kept
from volumetool.errors import Busy, Interrupted, UnusableInput, VolumetoolError, worst_exit_code
from volumetool.model_client import Breaker, Endpoint, ModelClient, RetryPolicy
from volumetool.providers import PROVIDERS
from volumetool.settings import AgentConfig, base_url_problem
from volumetool.text import escape_control, one_line, plural
from volumetool.timefmt import iso, now_iso
from volumetool.usage import Usage
from volumetool.volume import GIVE_WAY, Volume, open_for_write

if TYPE_CHECKING:
    from volumetool.compaction.retention import Fact, Retention


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
    instructions: str | None = None
    max_summary_tokens: int = 4096
    max_input_tokens: int = 100_000
    min_fold_tokens: int = 200
    min_retention: float | None = None
    timeout: float = 60.0
    max_answer_seconds: float = 600.0
    concurrency: int = 4
    wait: float = 0.0
    busy_timeout: float = 5.0
    retries: int = 3  # after the first attempt
    max_retry_wait: float = 60.0  # a longer Retry-After fails at once
    # The policy given whole (tests: its sleep and jitter); else built from the two above.
    retry: RetryPolicy | None = None

    def retry_policy(self) -> RetryPolicy:
        """How model calls are retried: `retry`, else `retries` and `max_retry_wait`."""
        if self.retry is not None:
            return self.retry
        return RetryPolicy(attempts=self.retries + 1, max_retry_wait=self.max_retry_wait)

    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC), repr=False)


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
    saved_tokens: int | None = None
    retention: float | None = None  # the share of the fold's hard facts the summary kept
    missing_facts: list[str] | None = None  # the first 20 it lost
    invented_facts: list[str] | None = None  # the first 20 it stated that nothing given holds
    # Why a due thread was not tried, for machines: backing_off | endpoint_unusable |
    # held_after_undo | interrupted (its call under way was recorded failed, or never started)
    reason: str | None = None
    exit_code: int = field(default=0, repr=False)
    # A call's failed run the busy volume could not take yet: written later (`Pending`).
    unrecorded: UnrecordedRun | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        data = asdict(self)
        del data["exit_code"], data["unrecorded"]
        return data

    def line(self) -> str:
        """One line for people: every part that came from a volume or a server is escaped."""
        key = escape_control(self.conversation_key or "")
        where = f"{escape_control(self.volume)} {key}".rstrip()
        fold = f"{plural(self.folded_turns, 'turn')}, {plural(self.folded_messages, 'message')}"
        model = escape_control(self.model or "(none set)")
        if self.status == "compacted":
            return (
                f"{where}: compacted {fold} with {model}; "
                f"{_n(self.input_tokens)} in, {_n(self.output_tokens)} out, "
                f"~{_n(self.saved_tokens)} saved{self._kept()}; run {self.run_id}"
            )
        if self.status == "would_compact":
            return (
                f"{where}: would compact {fold}, ~{_n(self.estimated_tokens)} tokens; last "
                f"input {_n(self.last_input_tokens)} (threshold {_n(self.threshold)}); "
                f"model {model}"
            )
        run = f" (run {self.run_id})" if self.run_id else ""
        why = f" ({self.reason})" if self.reason else ""
        return f"{where}: {self.status}{why}: {one_line(self.error or '')}{run}"

    def _kept(self) -> str:
        if self.retention is None:
            return "" if self.missing_facts is None else ", no hard facts to check"
        lost = self.missing_facts or []
        shown = f" (lost: {one_line(', '.join(lost), 120)})" if lost else ""
        return f", {self.retention:.0%} of the facts kept{shown}"


# Outcome.reason: why a due thread was not compacted (SPEC 13), each such pass exits 1.
BACKING_OFF = "backing_off"
ENDPOINT_UNUSABLE = "endpoint_unusable"
# A thread held after `thread undo`: skipped until compacted by name (not a problem: exit 0).
HELD_AFTER_UNDO = "held_after_undo"
# Ctrl-C or SIGTERM stopped the thread: its call under way is recorded (`failed`), or it had
# not started (`skipped`, nothing written). The pass exits 130 or 143.
INTERRUPTED_REASON = "interrupted"

OUTCOME_FIELDS = tuple(f.name for f in fields(Outcome) if f.name not in ("exit_code", "unrecorded"))


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


@dataclass
class Job:
    volume: Volume
    thread: Thread
    plan: FoldPlan
    due: Due
    token_scale: float = DEFAULT_TOKEN_SCALE  # the server's tokens per estimated one


def check_api_key(key: str, variable: str) -> str:
    """A key that cannot travel in an HTTP header is a usage error, named by its variable
    (the key itself is never shown)."""
    if not key.isascii() or any(c in key for c in "\r\n\x00") or key != key.strip():
        raise UnusableInput(
            f"${variable} holds characters an HTTP header cannot carry (non-ASCII, a line "
            "break or surrounding whitespace)",
            "export the key alone, with no quotes or newline",
        )
    return key


def resolve_endpoint(request: Request, need_key: bool) -> tuple[str | None, Endpoint | None]:
    """The summary model and its endpoint: overrides first, then model.small, model.name.
    Anything that cannot work is a usage error here, before any volume is touched."""
    settings = request.config.model
    model = first_set(request.model, settings.summary_model)
    api = first_set(request.api, settings.api)
    provider = PROVIDERS[api]
    # The config's endpoint settings are its api's: another api (--api) takes its own defaults.
    config = settings if api == settings.api else None
    base_url = first_set(request.base_url, config and config.base_url, provider.base_url)
    # A variable the config or --api-key-env names must hold a key; the api's usual one may
    # not (a local server needs none): then no key is sent.
    named = first_set(request.api_key_env, config and config.key_named and config.api_key_env)
    key_env = first_set(named, provider.api_key_env)
    # model.max_tokens_param, for an api whose request has more than one field for the limit
    limit_field = settings.max_tokens_param if provider.max_tokens_field is None else "max_tokens"
    problem = base_url_problem(base_url, api)
    if problem:  # the message never repeats the URL: it may carry a password or a key
        where = "--base-url" if request.base_url else "model.base_url"
        raise UnusableInput(f"{problem}; it cannot work", f"fix {where}")
    if not need_key:
        return model, None
    if not model:
        raise UnusableInput(
            "no model to write summaries",
            "set model.small or model.name in the config, or pass --model",
        )
    key = os.environ.get(key_env, "")
    if not key and named:
        raise UnusableInput(f"${key_env} is not set", "export the API key in that variable")
    return model, Endpoint(
        api,
        base_url,
        model,
        check_api_key(key, key_env),
        request.max_summary_tokens,
        request.timeout,
        request.max_answer_seconds,
        auth=config and config.auth,
        api_version=config and config.api_version,
        max_tokens_param=limit_field,
    )


def first_set(*values: Any) -> Any:
    """The first value that is set (not None, not empty) in order of precedence — a flag (or
    its VOLUMETOOL_ variable), then the config, then the api's default — else the last."""
    return next((value for value in values if value), values[-1])


def check_request(request: Request) -> None:
    """Usage errors of the request as a whole (exit 2)."""
    if request.force and request.key is None:
        raise UnusableInput("--force needs --key: it compacts one named thread")
    if request.force and request.config.memory.scope != "thread":
        raise UnusableInput(
            "--force with memory.scope: none: there is no history to compact",
            "set memory.scope: thread in the config",
        )
    if not math.isfinite(request.timeout) or request.timeout <= 0:
        raise UnusableInput("--timeout must be a finite number of seconds")
    if not math.isfinite(request.max_answer_seconds) or request.max_answer_seconds <= 0:
        raise UnusableInput("--max-answer-seconds must be a finite number of seconds")
    if request.min_retention is not None and not 0 <= request.min_retention <= 1:
        raise UnusableInput("--min-retention is a share of the facts, from 0 to 1")
    system = system_prompt(request.prompt, request.instructions)
    # in real tokens, as the server counts them before it has said how (DEFAULT_TOKEN_SCALE)
    estimated = estimate_text_tokens(system) + MIN_PART_TOKENS + 200
    least = math.ceil(estimated * DEFAULT_TOKEN_SCALE) + request.max_summary_tokens
    if request.max_input_tokens < least:
        raise UnusableInput(
            f"--max-input-tokens {request.max_input_tokens:,} leaves no room for the "
            f"conversation beside the prompt and --max-summary-tokens (at least {least:,})"
        )


class _Planner:
    """The jobs of a run, volume after volume, each volume read in one snapshot; threads that
    will not be compacted, and volumes that cannot be planned, come back as outcomes saying
    why."""

    def __init__(
        self,
        request: Request,
        model: str | None,
        stack: contextlib.ExitStack,
        on_skipped: Callable[[Outcome], None] = lambda outcome: None,
    ) -> None:
        self.request, self.model = request, model
        self.now = request.clock()
        self.on_skipped = on_skipped  # each outcome of a thread or volume not to compact
        # Every volume is opened (and locked, waiting up to --wait) before any call: a wait
        # once calls are under way would hold them up. Each keeps its own outcomes, in order.
        self.volumes: list[tuple[Volume | None, list[Outcome]]] = []
        self.jobs: list[int] = []  # each volume's jobs planned so far
        self.planned = 0  # the volumes whose planning is over
        self.unreadable: set[int] = set()  # the volumes that failed to be read mid-way
        self._skipped: list[Outcome] = []  # the outcomes of the volume being planned
        self._scale = DEFAULT_TOKEN_SCALE  # the volume's figure for the model (store.token_scale)
        self._stack = stack

    def open(self, arguments: Sequence[str | None]) -> None:
        """Open (and lock) every volume, before any call; one that cannot be is an outcome."""
        for argument in arguments:
            try:
                self.volumes.append((open_volume(argument, self.request, self._stack), []))
            except Interrupted:
                raise  # Ctrl-C or SIGTERM while waiting for a lock: nothing more starts
            except VolumetoolError as exc:
                self.volumes.append((None, [self._decided(_unusable(argument, exc))]))
            self.jobs.append(0)

    def _decided(self, outcome: Outcome) -> Outcome:
        self.on_skipped(outcome)
        return outcome

    def finished(self, arguments: Sequence[str | None], ended: Sequence[Outcome]) -> list[bool]:
        """Whether each volume was finished when the pass stopped: opened, read to its end,
        planned, and every job of it ended (not stopped by the interrupt). A volume that
        could not be opened or read was not done: its row says why."""
        done: dict[str, int] = {}
        for outcome in ended:
            if outcome.reason != INTERRUPTED_REASON:
                done[outcome.volume] = done.get(outcome.volume, 0) + 1
        return [
            index < self.planned
            and volume is not None
            and index not in self.unreadable
            and done.get(str(volume.path), 0) == self.jobs[index]
            for index, (volume, _) in enumerate(self.volumes)
        ] + [False] * (len(arguments) - len(self.volumes))

    @property
    def outcomes(self) -> list[Outcome]:
        """Why each thread and volume that was not planned was not, volume by volume."""
        return [outcome for _, outcomes in self.volumes for outcome in outcomes]

    def skip(
        self,
        volume: Volume,
        key: str,
        session_id: int | None,
        reason: str,
        due: Due | None = None,
        code: int = 0,
        why: str | None = None,
    ) -> None:
        self._skipped.append(
            Outcome(
                str(volume.path),
                key,
                session_id,
                "skipped",
                model=self.model,
                error=reason,
                last_input_tokens=due.last_input_tokens if due else None,
                threshold=due.threshold if due else None,
                reason=why,
                exit_code=code,
            )
        )
        self.on_skipped(self._skipped[-1])

    def candidates(self) -> Iterator[Job | None]:
        """Each candidate thread of each volume in turn: its job, or None when it is skipped.
        A generator, so that the first calls go out while the rest is planned: a volume's
        snapshot stays open until its last candidate, so nothing may write before this is
        exhausted. A volume that cannot be read is a skipped outcome of its own; jobs it
        yielded before that go on."""
        for index, (volume, outcomes) in enumerate(self.volumes):
            self.planned = index
            if volume is None:
                continue
            self._skipped = outcomes
            try:
                for job in self._volume(volume):
                    self.jobs[index] += job is not None
                    yield job
            except VolumetoolError as exc:
                self.unreadable.add(index)
                outcomes.append(self._decided(_unusable(str(volume.path), exc)))
        self.planned = len(self.volumes)

    def _volume(self, volume: Volume) -> Iterator[Job | None]:
        request, settings = self.request, self.request.config.memory
        with volume.snapshot() as conn:
            self._scale = token_scale(conn, self.model) or DEFAULT_TOKEN_SCALE
            if request.key is not None:
                candidates = active_threads(conn, key=request.key)
                if not candidates:
                    self.skip(volume, request.key, None, "no active thread under this key", code=1)
            elif settings.compaction_enabled:
                candidates = active_threads(conn, threshold=settings.compact_at_tokens)
            else:
                candidates = []
            for session_id, key in candidates:
                yield self.consider(volume, conn, session_id, key)

    def consider(self, volume: Volume, conn, session_id: int, key: str) -> Job | None:
        request = self.request
        facts = thread_facts(conn, session_id)
        due = check_due(request.config.memory, facts.runs, facts.live_turns)
        if not due.is_due and not request.force:
            if request.key is not None:
                # --force with memory.scope: none is a usage error: never advise it then
                can_force = request.config.memory.scope == "thread"
                reason = f"not due: {due.reason}" + (" (--force compacts anyway)" * can_force)
                self.skip(volume, key, session_id, reason, due)
            return None
        if facts.held and request.key is None:
            reason = "held after thread undo (compact --key compacts it and releases the hold)"
            self.skip(volume, key, session_id, reason, due, why=HELD_AFTER_UNDO)
            return None
        until = backoff_until(facts.failures, facts.last_failure_at)
        if until is not None and until > self.now and not request.force:
            self.skip(
                volume,
                key,
                session_id,
                f"backing off after {plural(facts.failures, 'failed compaction')}: next try at "
                f"{iso(until)} (--force tries now)",
                due,
                # A due thread left uncompacted is a problem of the pass (SPEC 13): a broken
                # endpoint stays red. A dry run only predicts it.
                code=0 if request.dry_run else 1,
                why=BACKING_OFF,
            )
            return None
        thread = load_thread(conn, session_id)
        plan = plan_fold(thread.live)
        if plan.empty:
            reason = plan.why_empty
            self.skip(volume, key, session_id, reason, due)
            return None
        folded = estimate_tokens(None, plan.fold)
        if folded < request.min_fold_tokens:
            self.skip(
                volume,
                key,
                session_id,
                f"nothing worth folding: ~{folded:,} tokens < --min-fold-tokens "
                f"{request.min_fold_tokens:,}",
                due,
            )
            return None
        return Job(volume, thread, plan, due, self._scale)


def _unusable(argument: str | None, exc: VolumetoolError) -> Outcome:
    """A volume that cannot be opened or read, as a row of its own."""
    code, error = exc.exit_code, exc.format_message()
    return Outcome(str(argument), None, None, "skipped", error=error, exit_code=code)


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


def _not_started(job: Job, model: str | None) -> Outcome:
    """A job Ctrl-C or SIGTERM stopped before its call went out: nothing was written."""
    return _planned(job, model, "skipped", error=NOT_STARTED, reason=INTERRUPTED_REASON)


NOT_STARTED = f"{INTERRUPTED_BY_SIGNAL} before its model call; nothing was written"
# Ctrl-C or SIGTERM once a request had gone out: the call may be billed, so it is recorded as a
# failed run, with what the calls that answered reported; a summary that came back is not committed.
INTERRUPTED = f"{INTERRUPTED_BY_SIGNAL} during the model call; the provider may bill it"
INTERRUPTED_AFTER = (
    f"{INTERRUPTED_BY_SIGNAL} before the summary was committed; the call is paid for"
)


@dataclass
class Ending:
    """How a thread's summary request ended, before anything is written."""

    model: str
    times: RunTimes
    summary: Summary | None = None
    failure: str | None = None
    usage: Usage = field(default_factory=Usage)
    kept: Retention | None = None

    def interrupted(self) -> Ending:
        """This ending, once Ctrl-C came before it was written: recorded, not committed."""
        if self.summary is None:
            return self  # a failure is recorded as it is
        usage, kept = self.summary.usage, self.kept
        return Ending(self.model, self.times, failure=INTERRUPTED_AFTER, usage=usage, kept=kept)


def _tokens(usage: Usage) -> dict:
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}


def _retention(kept: Retention | None) -> dict:
    if kept is None:
        return {}
    return {
        "retention": None if kept.retention is None else round(kept.retention, 4),
        "missing_facts": list(kept.missing_facts),
        "invented_facts": list(kept.invented_facts),
    }


def write_ending(job: Job, ending: Ending) -> Outcome:
    """Write how one compaction ended, in one transaction."""
    thread, fold, model = job.thread, job.plan.fold, ending.model
    usage = ending.summary.usage if ending.summary else ending.usage
    kept = _retention(ending.kept)
    with job.volume.write() as conn:
        if ending.summary is None:
            # One escaped line (SPEC 6), whichever text a server put in it.
            failure = one_line(ending.failure or "no summary", 1000)
            run_id = record_failure(conn, thread, model, failure, usage, ending.times, kept)
            return _planned(
                job,
                model,
                "failed",
                run_id=run_id,
                error=failure,
                exit_code=1,
                **_tokens(usage),
                **kept,
            )
        reason = conflict_reason(conn, thread, fold)
        if reason is not None:
            run_id = record_failure(
                conn, thread, model, reason, usage, ending.times, kept, action="conflict"
            )
            return _planned(
                job, model, "conflict", run_id=run_id, error=reason, exit_code=1, **_tokens(usage)
            )
        text = ending.summary.text
        saved = estimate_tokens(thread.summary, fold) - estimate_text_tokens(text)
        written = Written(
            text,
            saved,
            kept.get("retention"),
            tuple(kept.get("missing_facts", ())),
            tuple(kept.get("invented_facts", ())),
            ending.summary.tokens_per_estimate,
        )
        run_id = commit_summary(conn, thread, fold, written, model, usage, ending.times)
        return _planned(
            job,
            model,
            "compacted",
            run_id=run_id,
            saved_tokens=saved,
            **_tokens(usage),
            **kept,
        )


def finish(job: Job, ending: Ending) -> Outcome:
    """Write the ending; whatever stops that becomes the thread's outcome. A commit that finds
    the file locked past the busy timeout still records what the call cost: at once if it
    can, else (the outcome's `unrecorded`) at the end of the pass, else the next (SPEC 13)."""
    try:
        return write_ending(job, ending)
    except Busy as exc:
        usage = ending.summary.usage if ending.summary else ending.usage
        reason = one_line(f"not committed: {exc.format_message()}", 1000)
        retry = Ending(ending.model, ending.times, failure=reason, usage=usage, kept=ending.kept)
        try:
            outcome = write_ending(job, retry)
        except Exception:  # nothing could be written yet: the result carries the cost
            thread = job.thread
            return _planned(
                job,
                ending.model,
                "skipped",
                error=f"{exc.format_message()}; {UNRECORDED}",
                exit_code=4,
                unrecorded=UnrecordedRun(
                    thread.session_id,
                    thread.conversation_key,
                    ending.model,
                    reason,
                    usage,
                    ending.times,
                ),
                **_tokens(usage),
            )
        outcome.exit_code = 4
        return outcome
    except VolumetoolError as exc:
        return _planned(
            job, ending.model, "failed", error=exc.format_message(), exit_code=exc.exit_code
        )
    except Exception as exc:  # a bug must cost this thread, never the others
        return _planned(job, ending.model, "failed", error=_internal(exc), exit_code=1)


UNRECORDED = "the call's tokens are in this result only"


@contextlib.contextmanager
def settling(pending: Pending) -> Iterator[None]:
    """Once the calls are over, the runs the busy volume could not take are written, or kept
    beside it for the next pass (at once when the pass was stopped: no more waiting)."""
    try:
        yield
    except BaseException:
        _settled(pending.settle(write=False))
        raise
    _settled(pending.settle())


def _settled(settled) -> None:
    """Bring the result rows of the runs written or kept up to date."""
    for one in settled:
        outcome = one.outcome
        if one.run_id is not None:
            outcome.status, outcome.run_id, outcome.error = "failed", one.run_id, one.run.reason
        elif one.kept_in is not None:
            outcome.error = (outcome.error or "").replace(
                UNRECORDED, f"the call's cost is kept in {one.kept_in}; the next pass records it"
            )


def _internal(exc: BaseException) -> str:
    return one_line(f"internal error: {type(exc).__name__}: {exc}", 300)


def fold_facts(
    previous_summary: str | None, fold: Sequence[Message], system: str = ""
) -> list[Fact]:
    """The fold's hard facts (retention.facts_of_fold), read in the reader thread, with what
    else the summarizer was given (its prompt). The fact scanner is imported there, on first
    use: compiling its patterns takes 20-30 ms that the first requests of a run no longer wait
    for."""
    from volumetool.compaction.retention import facts_of_fold

    return facts_of_fold(previous_summary, fold, (system,))


async def summarize_job(
    job: Job,
    client: ModelClient,
    system: str,
    limits: Limits,
    min_retention: float | None,
    reader: Executor,
) -> Ending | str:
    """The thread's ending, or the reason it was skipped without a call. The fold's hard facts
    are read by `reader` while the model writes (they do not need its answer); the summary is
    then held to them."""
    model = client.endpoint.model
    started = now_iso()
    previous, fold = job.thread.summary, job.plan.fold
    spent = Spent()
    answered = interrupted = False

    async def read_facts() -> list[Fact]:
        return await asyncio.get_running_loop().run_in_executor(
            reader, fold_facts, previous, fold, system
        )

    facts = asyncio.ensure_future(read_facts())
    try:
        summary = await summarize(client, system, previous, fold, limits, spent)
        answered = True
        # Imported by fold_facts in the reader thread, unless the answer came back before
        # that thread started on this fold: then it is imported here, once.
        from volumetool.compaction.retention import refusal_reason, retention_of

        kept = retention_of(await facts, summary.text)
        times = RunTimes(started, now_iso())
        failure = refusal_reason(kept, min_retention)
        if failure is not None:
            return Ending(model, times, failure=failure, usage=summary.usage, kept=kept)
        return Ending(model, times, summary=summary, kept=kept)
    except SummaryFailed as exc:
        if exc.unusable:
            return str(exc)
        return Ending(model, RunTimes(started, now_iso()), failure=str(exc), usage=exc.usage)
    except Exception as exc:  # containment: one thread's surprise is that thread's failure
        return Ending(model, RunTimes(started, now_iso()), failure=_internal(exc))
    except asyncio.CancelledError:
        if not spent.sent:
            raise  # no request went out: nothing to account for
        # The cancellation goes on once this is written (`summarize_all`).
        interrupted = True
        failure = INTERRUPTED_AFTER if answered else INTERRUPTED  # the facts were still read
        return Ending(model, RunTimes(started, now_iso()), failure=failure, usage=spent.usage)
    finally:
        # A thread cannot be cancelled: its reading of the facts is waited for. Ctrl-C during
        # that wait keeps the ending being returned, as Ctrl-C during the call would (a call
        # made is recorded); a second Ctrl-C stops at once.
        while not facts.done():
            try:
                await asyncio.wait([facts])
            except asyncio.CancelledError:
                if interrupted or not spent.sent:
                    raise
                interrupted = True


# The longest turn the agent is given after an ending: one that waited long for the lock (the
# agent busy) gives no longer turn than this.
MOST_GIVEN = 0.1


class _Writes:
    """The endings, written one at a time once planning is over (each volume is read in one
    snapshot). Ctrl-C while an ending waits for its turn does not lose a call that was made: it
    is then recorded, not committed. A write under way finishes in its thread."""

    def __init__(
        self, pending: Pending | None = None, stopped: list[Outcome] | None = None
    ) -> None:
        self.turn = asyncio.Lock()
        # The outcome of the write under way when Ctrl-C came: it finished, whatever it wrote.
        self.stopped = stopped if stopped is not None else []
        self.planned = asyncio.Event()
        self.pending = pending  # the runs a busy volume could not take yet
        self.agents_turn: dict[Path, float] = {}  # each volume's: until when the agent has it

    def kept(self, job: Job, outcome: Outcome) -> Outcome:
        """The outcome, its run kept for the end of the pass if the volume could not take it."""
        run = getattr(outcome, "unrecorded", None)
        if run is not None and self.pending is not None:
            self.pending.add(job.volume, run, outcome)
        return outcome

    async def write(self, job: Job, ending: Ending) -> Outcome:
        """The ending's outcome. After Ctrl-C the task goes on to its end, so that every call
        under way is recorded; `summarize_all` is cancelled once all are."""
        under_way = False
        try:
            await self.planned.wait()
            await self.give_way(job.volume)  # outside the turn: other volumes' endings go on
            async with self.turn:
                await self.give_way(job.volume)  # one on this volume was written meanwhile
                under_way = True
                writing = asyncio.ensure_future(self.finish(job, ending))
                try:
                    return self.kept(job, await asyncio.shield(writing))
                except asyncio.CancelledError:
                    # Ctrl-C while it is written in its thread: its outcome is what was written.
                    outcome = self.kept(job, await writing)
                    self.stopped.append(outcome)
                    return outcome
        except asyncio.CancelledError:
            # Ctrl-C twice: while written in its thread, or the ending of a call Ctrl-C stopped.
            if under_way or ending.failure in (INTERRUPTED, INTERRUPTED_AFTER):
                raise
            await self.planned.wait()
            async with self.turn:
                return self.kept(job, await self.finish(job, ending.interrupted()))

    async def give_way(self, volume: Volume) -> None:
        """Endings written back to back would keep the agent from its file for as long as
        several take: after each, the agent gets a turn as long as the ending held the lock
        (`volume.give_way`'s rule) before the next on the same volume. On the bench's 217
        endings (BENCHMARKS.md) the agent's p99 went from 19 to 6-10 ms and its longest wait
        from 38-80 ms to 9-54 ms (one ending's own transaction); the pass took 1.2-1.5 s
        longer (3.3 s to 4.5-4.8 s) against a server that answers in 0.2 s."""
        wait = self.agents_turn.get(volume.path, 0.0) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    async def finish(self, job: Job, ending: Ending) -> Outcome:
        started = time.monotonic()
        try:
            return await asyncio.to_thread(finish, job, ending)
        finally:
            held = min(time.monotonic() - started, MOST_GIVEN)
            self.agents_turn[job.volume.path] = time.monotonic() + max(held, GIVE_WAY)


async def summarize_all(
    planner: _Planner,
    request: Request,
    endpoint: Endpoint,
    transport: httpx.AsyncBaseTransport | None,
    on_planned: Callable[[int], None],
    on_done: Callable[[Outcome], None],
    pending: Pending | None = None,
    stopped: list[Outcome] | None = None,
) -> list[Outcome]:
    """Each job's outcome, in the order planned. The first `concurrency` calls go out together,
    the others as jobs are planned; the writes wait until planning is over (each volume is
    read in one snapshot). `stopped` gets the outcome of a write Ctrl-C came during."""
    candidates = planner.candidates()
    # Planned before any is sent: interleaved with planning, each first call's connection and
    # request waited a thread's planning at every turn of the loop.
    first = list(itertools.islice(filter(None, candidates), request.concurrency))
    if not first:
        return []
    semaphore = asyncio.Semaphore(request.concurrency)
    writes = _Writes(pending, stopped)
    system = system_prompt(request.prompt, request.instructions)
    limits = Limits(request.max_input_tokens, request.max_summary_tokens)
    # One thread reads the folds' facts, one fold after another: it is CPU work under the GIL,
    # so more threads would not read faster, only take turns with the event loop, whose every
    # send and receive then waited for the GIL behind them.
    with ThreadPoolExecutor(1, thread_name_prefix="volumetool-facts") as reader:
        async with ModelClient(
            endpoint,
            retry=request.retry_policy(),
            transport=transport,
            max_connections=request.concurrency,
            breaker=Breaker(),
        ) as client:

            async def one(job: Job) -> Outcome:
                try:
                    async with semaphore:
                        scaled = replace(limits, token_scale=job.token_scale)
                        ending = await summarize_job(
                            job, client, system, scaled, request.min_retention, reader
                        )
                except asyncio.CancelledError:  # Ctrl-C before its call went out
                    on_done(_not_started(job, endpoint.model))
                    raise
                if isinstance(ending, str):
                    outcome = _planned(
                        job,
                        endpoint.model,
                        "skipped",
                        error=ending,
                        reason=ENDPOINT_UNUSABLE,
                        exit_code=1,
                    )
                else:
                    outcome = await writes.write(job, ending)
                on_done(outcome)
                return outcome

            def planning_over() -> None:
                candidates.close()  # the last snapshot ends: nothing may write while it is open
                writes.planned.set()

            tasks = [asyncio.create_task(one(job)) for job in first]
            try:
                await asyncio.sleep(0)  # the calls go on between two threads planned
                for job in candidates:
                    if job is not None:
                        tasks.append(asyncio.create_task(one(job)))
                    await asyncio.sleep(0)
                planning_over()
                on_planned(len(tasks))
                return list(await asyncio.gather(*tasks))
            except (Exception, asyncio.CancelledError) as exc:
                # A bug while planning: the calls already made are written first. Ctrl-C: the
                # calls are stopped (once planned, by the gather, which stops those it waits
                # for), and every one under way is recorded before the cancellation goes on.
                while_planning = not writes.planned.is_set()
                planning_over()
                if isinstance(exc, asyncio.CancelledError) and while_planning:
                    for task in tasks:
                        task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            finally:
                planning_over()  # whatever stopped it (Ctrl-C twice), no write waits for ever


T = TypeVar("T")


# A signal sent twice at once counts once: `timeout` and a kill of the process group send it
# both to the process and to its group, and the handler may run for each (then the second,
# taken for "stop at once", lost the record of the calls under way, 1 run in 10).
ONE_SIGNAL = 0.5


def run_until_stopped(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, where Ctrl-C and SIGTERM stop the run the same way: the main task
    is cancelled, so that every call under way is recorded (`summarize_all`), then
    KeyboardInterrupt goes on; a second signal, ONE_SIGNAL seconds or more after the first,
    stops at once. Without this, SIGTERM raised KeyboardInterrupt wherever the loop was, which
    asyncio does too for Ctrl-C when SIGINT is not its to take (ignored: a job started in the
    background without job control) -- and inside a task that ended the task without
    recording its call."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)  # signals are the main thread's
    with asyncio.Runner() as runner:
        loop, task, first = runner.get_loop(), None, None

        async def tracked() -> T:
            nonlocal task
            task = asyncio.current_task()
            return await main

        def stop(signum: int, frame: Any) -> None:
            nonlocal first
            if signum == signal.SIGTERM:
                Interrupted.by = signal.SIGTERM
            if first is not None and time.monotonic() - first < ONE_SIGNAL:
                return  # the same signal, sent twice at once
            if task is None or task.done() or task.cancelling():
                raise KeyboardInterrupt
            first = time.monotonic()
            task.cancel()
            loop.call_soon_threadsafe(lambda: None)  # wakes the loop to see it

        taken = [signal.SIGTERM]
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            taken.append(signal.SIGINT)  # not when ignored (a background job)
        previous = {signum: signal.signal(signum, stop) for signum in taken}
        try:
            return runner.run(tracked())
        except asyncio.CancelledError:
            if task is None or not task.cancelling():
                raise
            raise KeyboardInterrupt from None
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def open_volume(argument: str | None, request: Request, stack: contextlib.ExitStack) -> Volume:
    """A dry run reads; a real one opens for writing the one way every write command does:
    check the file, then take the volume lock (no two compactions of a volume overlap)."""
    if request.dry_run:
        return stack.enter_context(Volume(argument, busy_timeout=request.busy_timeout))
    with contextlib.ExitStack() as opened:
        volume = opened.enter_context(
            open_for_write(
                argument, busy_timeout=request.busy_timeout, lock=True, wait=request.wait
            )
        )
        # Before anything is spent on it: the write lock can be had (else Busy, exit 4, and no
        # call), and the runs an earlier pass could not write are written first (SPEC 13).
        record_kept(volume)
        stack.push(opened.pop_all())
    return volume


def compact(
    volumes: Sequence[str | None],
    request: Request,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    on_planned: Callable[[int], None] = lambda total: None,
    on_done: Callable[[Outcome], None] = lambda outcome: None,
    on_skipped: Callable[[Outcome], None] = lambda outcome: None,
) -> tuple[list[Outcome], int]:
    """Compact every due thread (or the --key thread) of every volume; outcomes and exit code.
    `on_done` gets each job's outcome as it ends, `on_skipped` each thread or volume the pass
    decides to leave: when Ctrl-C or SIGTERM stops the pass (`Interrupted`), they have had
    every outcome it decided, and the message of a pass over several volumes says which it
    finished."""
    check_request(request)
    model, endpoint = resolve_endpoint(request, need_key=not request.dry_run)
    ended: list[Outcome] = []  # the jobs' outcomes, as they end
    recorded: list[Outcome] = []  # calls under way at Ctrl-C, recorded as failed runs
    stopped: list[Outcome] = []  # the write under way at Ctrl-C, which finished
    calling = False  # past planning's start: every write under way at Ctrl-C finishes

    def job_ended(outcome: Outcome) -> None:
        if outcome.error in (INTERRUPTED, INTERRUPTED_AFTER):
            outcome.reason = INTERRUPTED_REASON
            if outcome.run_id is not None:
                recorded.append(outcome)
        ended.append(outcome)
        on_done(outcome)

    with contextlib.ExitStack() as stack:
        planner = _Planner(request, model, stack, on_skipped)
        try:
            planner.open(volumes)
            if request.dry_run:
                for job in planner.candidates():
                    if job is not None:
                        job_ended(_planned(job, model, "would_compact"))
                done = ended
            else:
                assert endpoint is not None
                pending = Pending()
                calling = True
                with settling(pending):
                    done = run_until_stopped(
                        summarize_all(
                            planner,
                            request,
                            endpoint,
                            transport,
                            on_planned,
                            job_ended,
                            pending,
                            stopped,
                        )
                    )
        except (KeyboardInterrupt, Interrupted) as exc:
            # Before the calls (opening, a dry run): a volume's own Interrupted says what
            # became of its writes. After: the pass says it, for no write was rolled back.
            written = any(v is not None and v.written for v, _ in planner.volumes)
            interrupt = _interrupted(recorded, stopped, written) if calling else exc
            if len(volumes) < 2:
                raise interrupt from None
            finished = planner.finished(volumes, ended)
            raise Interrupted.between_volumes(
                interrupt,
                [str(v) for v, ok in zip(volumes, finished, strict=True) if ok],
                [str(v) for v, ok in zip(volumes, finished, strict=True) if not ok],
            ) from None
        outcomes = [*planner.outcomes, *done]
    return outcomes, worst_exit_code(o.exit_code for o in outcomes)


def _interrupted(
    recorded: Sequence[Outcome], stopped: Sequence[Outcome], written: bool
) -> Interrupted:
    """Ctrl-C or SIGTERM once the calls had started: each call under way, and each answer not
    yet committed, is recorded as a failed run; a write under way finished (it is not stopped
    in its thread), and its row says what it wrote."""
    parts = []
    if recorded:
        calls = sum(outcome.error == INTERRUPTED for outcome in recorded)
        answers = len(recorded) - calls
        what = [f"the {plural(calls, 'model call')} under way"] * bool(calls) + [
            f"the {plural(answers, 'answer')} not yet committed"
        ] * bool(answers)
        one = len(recorded) == 1
        parts.append(
            " and ".join(what)
            + (" is recorded as a failed run" if one else " are recorded as failed runs")
            + f" (the provider may bill {'it' if one else 'them'})"
        )
    for outcome in stopped:
        key = escape_control(outcome.conversation_key or "")
        parts.append(f"the write under way finished ({key}: {outcome.status})")
    parts.append(
        "what was committed before stays" if written or recorded else "nothing was written"
    )
    return Interrupted("interrupted; " + "; ".join(parts))

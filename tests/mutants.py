"""`make mutants`: after `mutmut run`, write tests/MUTANTS.md — every surviving mutant of the
compaction core and the model client, one line each, with why it survives — and exit 1 when a
survivor has no explanation (kill it with a test, or explain it here).

    python -m tests.mutants            # reads mutmut's results in ./mutants
    python -m tests.mutants --recheck  # first, survivors against the tests written since
    python -m tests.mutants --run-pending  # first, the mutants a stopped `mutmut run` left
    python -m tests.mutants --save     # keep mutmut's results in the repository (RESULTS)
    python -m tests.mutants --restore  # before `mutmut run` in a new clone: resume from them

A full run takes longer than one sitting on a small machine, and a clone starts without
./mutants: `--save` keeps each mutant's verdict with the hash of the function it mutates, and
`--restore` puts them back where mutmut keeps them. mutmut then runs again only the mutants of
functions whose code changed since (it compares the hashes) and those never run.

An explanation is a rule: a pattern over the mutant's diff (the removed and added line) and
the reason every mutant it matches is harmless. Rules name a reason once; the report lists
each mutant under it. A rule about text holds for prose only (words with a space between):
a key, an event type, a header's name or a default is a behaviour, explained by name or
killed by a test.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "tests" / "MUTANTS.md"
# Survivors of a run that tests written since then kill (--recheck), kept beside mutmut's own
# results rather than in them: a `mutmut run` going at the same time rewrites its files.
RECHECKED = ROOT / "mutants" / "rechecked-killed.json"
MUTMUT = [sys.executable, "-m", "mutmut"]
# mutmut's verdicts kept in the repository (--save, --restore): per mutated module, each
# mutant's exit code and the hash of each function, which is what makes a verdict current.
RESULTS = ROOT / "tests" / "mutants-results.json"


@dataclass(frozen=True)
class Rule:
    pattern: str  # searched in "-old\n+new"
    reason: str
    prose: bool = False  # only when a string literal the added line has is a message


RULES = (
    Rule(
        r"^-.*\b(SELECT|INSERT|UPDATE|DELETE|WHERE|FROM)\b.*\n\+.*\b(select|insert|update|"
        r"delete|where|from|SUMMARY|SESSIONS|MESSAGES|COUNT|FOLDED_BY|ID)\b",
        "SQL in another letter case: SQLite reads keywords and names without regard to case.",
    ),
    Rule(
        r"^XX.* .*XX$",
        "Text wrapped in XX: a message or a label that tests check by what it says (a "
        "fragment), not letter for letter.",
        prose=True,
    ),
    Rule(
        r"^[^a-z]*[A-Z]{4,}[^a-z]* [^a-z]*$",
        "Text in capitals: a message whose case no behaviour depends on.",
        prose=True,
    ),
)
# Mutants whose reason is their own: name -> reason.
_JSON_ESCAPES = (
    "JSON written with or without \\uXXXX escapes for non-ASCII: the same JSON value when "
    "read back, which is how the column is read."
)
_HEADER_CASE = "httpx.Headers looks names up without regard to case."
SINGLES: dict[str, str] = {
    "volumetool.compaction.prompt.x_data_tag__mutmut_10": (
        "'UTF-8' and 'utf-8' name the same codec (Python looks codec names up without case)."
    ),
    "volumetool.compaction.prompt.x_data_tag__mutmut_21": (
        "range(16, 66, 8) and range(16, 65, 8) give the same sizes, 16 to 64."
    ),
    "volumetool.compaction.plan.x_backoff_until__mutmut_15": (
        "The exponent's cap only keeps the number small: 15 min x 2^16 and x 2^17 are both far "
        "past the 24 h the wait is cut to."
    ),
    "volumetool.compaction.prompt.x_cut_pieces__mutmut_13": (
        "A piece of at least 1 or at least 2 characters: with a budget of at least 500 tokens "
        "(MIN_PART_TOKENS) a piece is hundreds of characters in any script, so the floor "
        "never binds."
    ),
    "volumetool.compaction.summarize.x_summarize__mutmut_101": (
        "A halved budget of x.5 instead of x: it only meets whole token counts (n <= x.5 "
        "exactly when n <= x), and moves where a cut message's pieces end by under a "
        "character a token; nothing a summary or a test can see."
    ),
    **{
        f"volumetool.compaction.summarize.x_summarize__mutmut_{n}": (
            "`calls` is only ever compared with 0 (did this thread send anything): set to 1 or "
            "raised by 2 at each sent call, it is non-zero exactly when `+= 1` makes it so "
            "(test_a_breaker_opened_after_a_paid_call_fails_the_thread_with_its_cost)."
        )
        for n in (71, 73)
    },
    **{
        f"volumetool.model_client.xǁModelClientǁ_answer__mutmut_{n}": (
            "Location's default None instead of '': `if location` reads both as no Location "
            "(test_every_3xx_answer_is_a_redirect_naming_where_it_points)."
        )
        for n in (17, 19)
    },
    **{
        f"volumetool.compaction.store.x_commit_summary__mutmut_{n}": _JSON_ESCAPES
        for n in (24, 26, 28, 32, 34, 36)  # missing_facts, invented_facts
    },
    **{
        f"volumetool.model_client.x_parse_retry_after__mutmut_{n}": _HEADER_CASE for n in (2, 7, 15)
    },
    **{
        f"volumetool.compaction.prompt.x_accept_answer__mutmut_{n}": (
            "The default of NORMAL_FINISH.get(api, …) is never used: the api is 'openai' or "
            "'anthropic', the settings refuse any other."
        )
        for n in (8, 10)
    },
    **{
        f"volumetool.model_client.x__causes__mutmut_{n}": (
            "Caught as a timeout: with the cycle of test_every_cause_is_read_once_even_in_a_cycle "
            "the walk never ends (mutmut's run stopped before it timed it out; checked by hand)."
        )
        for n in (4, 7, 8)
    },
    "volumetool.model_client.x__inflate__mutmut_9": (
        "Inflating MAX_BODY_BYTES + 2 bytes at most instead of + 1: either way a body over "
        "MAX_BODY_BYTES is more than the limit (or leaves a tail) and is refused; one within it "
        "is read whole."
    ),
    "volumetool.model_client.x__text__mutmut_3": (
        "ensure_ascii=None is falsy, as False is: the same JSON text."
    ),
    "volumetool.model_client.x_parse_retry_after__mutmut_16": (
        "An absent Retry-After read as 'XXXX' instead of '': neither is a number or a date, "
        "so both give None."
    ),
    "volumetool.model_client.x_error_details__mutmut_10": (
        "Python's codec names are case-insensitive: 'UTF-8' is 'utf-8'."
    ),
    **{
        f"volumetool.model_client.x_connection_failure__mutmut_{n}": (
            "A pattern in capitals searched with re.IGNORECASE: the same pattern."
        )
        for n in (17, 60)
    },
    "volumetool.model_client.x_connection_failure__mutmut_6": (
        "The causes' texts joined with 'XX XX' instead of ' ': no pattern looked for spans two "
        "causes, so each still matches where it did."
    ),
    "volumetool.compaction.run.x_summarize_all__mutmut_36": (
        "A connection pool without a limit instead of one of --concurrency: the semaphore "
        "around each thread's calls already holds the requests in flight to --concurrency "
        "(test_concurrency_above_the_pools_default_is_honoured kills a pool smaller than it)."
    ),
    **{
        f"volumetool.compaction.run.x_summarize_all__mutmut_{n}": (
            "The run's breaker not passed: ModelClient makes its own when given none, and one "
            "client serves every thread of the run, so all its threads still share one."
        )
        for n in (37, 43)
    },
    **{
        f"volumetool.compaction.run.x_summarize_all__mutmut_{n}": (
            "The exit code of a thread skipped because the endpoint became unusable: only "
            "another thread's failed call makes it unusable, and that failure already makes "
            "the run exit 1."
        )
        for n in (63, 68)
    },
    **{
        f"volumetool.compaction.run.x_summarize_all__mutmut_{n}": (
            "The calls under way gathered without return_exceptions after a bug while "
            "planning: each thread's task turns whatever its call or its write meets into an "
            "outcome (summarize_job, finish), so none raises, and the planning's own "
            "exception is raised after either way."
        )
        for n in (89, 91, 92)
    },
    **{
        f"volumetool.compaction.run.x_summarize_all__mutmut_{n}": (
            "The fact reader's thread name left to Python or spelled otherwise: it is there for "
            "people reading a stack dump or a profile; nothing reads it."
        )
        for n in (27, 29, 31, 32)
    },
    "volumetool.compaction.run.x_summarize_all__mutmut_81": (
        "A second instead of no time between two threads planned: the same outcomes, later "
        "(`make bench` measures the run's time; tests do not time it)."
    ),
    **{
        f"volumetool.compaction.plan.x_check_due__mutmut_{n}": (
            "Compaction runs let in among the agent runs newer than the last compaction: "
            "`compacted` is the newest successful compaction's id, so no successful "
            "compaction run is newer than it, and only successful runs are let in."
        )
        for n in (50, 51)
    },
    "volumetool.compaction.plan.x_check_due__mutmut_55": (
        "An agent run newer than or as new as the last compaction: run ids are unique and the "
        "compaction's own run is excluded by its trigger, so no agent run has its id."
    ),
    "volumetool.providers.openai_chat.xǁChatEventsǁ__init____mutmut_1": (
        "The usage before any usage chunk, None instead of {}: payload() only tests it for "
        "truth and event() replaces it only with a dict, so both mean no usage."
    ),
    "volumetool.providers.openai_chat.xǁChatEventsǁpayload__mutmut_3": (
        'A stream without a usage chunk gives {"usage": {}} instead of no usage: '
        "reported_usage reads both as Usage() (neither figure reported)."
    ),
    **{
        f"volumetool.providers.openai_chat.xǁChatEventsǁpayload__mutmut_{n}": (
            "The tool call's item spelled otherwise: parse() only tests the tool_calls list "
            "for truth (a one-item list either way) and reads none of its items."
        )
        for n in (18, 19, 20, 21)
    },
    "volumetool.providers.base.xǁProviderǁoutcome__mutmut_5": (
        "reasons.get(None, None) is None, as the guard returns: `reasons` maps finish reasons, "
        "which are text, so None is never one of its keys."
    ),
    "volumetool.providers.base.xǁEventStreamǁfeed__mutmut_5": (
        "_first set to None instead of False: it is only tested for truth."
    ),
    **{
        f"volumetool.providers.base.xǁEventStreamǁclose__mutmut_{n}": (
            "The buffer left otherwise after close(): close is a stream's last call "
            "(ModelClient._stream feeds nothing after it, then reads payload()), so it is "
            "never read again."
        )
        for n in (5, 6)
    },
    "volumetool.providers.base.x_repeating__mutmut_12": (
        "The look-back starting at 1 instead of 0 misses only the probe at index 0, whose "
        "passage (end - 8 characters) cannot fit 3 times in a text of at least SPAN = 240, so "
        "it never made a repetition."
    ),
    **{
        f"volumetool.providers.base.x_repeating__mutmut_{n}": (
            "The first search up to the end (or past it) instead of end - 1 first finds the "
            "probe where it ends the text (a passage of 0, rejected by unit >= UNIT[0]); the "
            "next search, up to that index + 7 = end - 1, is the original's first."
        )
        for n in (20, 23, 25)
    },
    "volumetool.providers.base.x_repeating__mutmut_26": (
        "The first search up to end - 2 instead of end - 1 misses only the probe at end - 9, "
        "a passage of 1, rejected by unit >= UNIT[0]; after it the original searches up to "
        "end - 9 + 7 = end - 2, as the mutant does first."
    ),
    "volumetool.providers.base.x_repeating__mutmut_41": (
        "A passage of exactly UNIT[0] = 8 not tried: a tail of SPAN characters that repeats it "
        "also repeats its double (16 x 3 = 48 <= SPAN, the same span), whose probe the loop "
        "finds next (24 characters back, within the look-back), so the answer is the same."
    ),
    "volumetool.compaction.plan.x_fold_cut__mutmut_16": (
        "One more pass at cut 0: no pair can move a cut of 0 (both conditions need a turn "
        "before it), so the pass changes nothing and the loop ends."
    ),
    "volumetool.compaction.plan.x_fold_cut__mutmut_18": "None and False are both false.",
    "volumetool.compaction.prompt.x_render_request__mutmut_1": (
        "The default of `part`: it is read only when parts > 1, and every call with more than "
        "one part passes both."
    ),
    "volumetool.compaction.prompt.x__render_calls__mutmut_48": (
        "ensure_ascii=None instead of False: json.dumps only tests it for truth."
    ),
    **{
        f"volumetool.compaction.run.x_write_ending__mutmut_{n}": (
            "The default for missing facts when an ending has no retention: an ending with a "
            "summary always has one (summarize_job measures every summary before it returns "
            "it), so the default is never read."
        )
        for n in (106, 108)
    },
    "volumetool.compaction.run.xǁ_Plannerǁ__init____mutmut_4": (
        "The outcomes list before any volume is planned: candidates() sets it before each "
        "volume's threads are read, so this first value is never read."
    ),
    **{
        f"volumetool.compaction.run.xǁ_Plannerǁ_volume__mutmut_{n}": (
            "The candidates read without the threshold: the SQL filter is a necessary "
            "condition of check_due, which decides each candidate anyway (as for "
            "store.active_threads mutant 15): a slower read, the same outcomes."
        )
        for n in (23, 25)
    },
    **{f"volumetool.model_client.xǁEndpointǁheaders__mutmut_{n}": _HEADER_CASE for n in (20, 26)},
    "volumetool.model_client.xǁModelClientǁ__init____mutmut_1": (
        "The default pool size: compaction always passes --concurrency (run.summarize_all)."
    ),
    **{
        f"volumetool.model_client.xǁModelClientǁ__init____mutmut_{n}": (
            "httpx's own timeout changed or gone: asyncio.timeout bounds the whole exchange "
            "to the same --timeout (ModelClient._attempt), with the same message."
        )
        for n in (11, 16, 25)
    },
    "volumetool.model_client.xǁModelClientǁ__init____mutmut_13": (
        "follow_redirects=None instead of False: httpx only tests it for truth."
    ),
    "volumetool.model_client.xǁModelClientǁ__init____mutmut_18": (
        "follow_redirects=False left out: False is httpx's default."
    ),
    **{
        f"volumetool.model_client.xǁModelClientǁ__init____mutmut_{n}": (
            "A connection pool of httpx's defaults (100, 20 kept alive) or without a limit, "
            "instead of --concurrency: the semaphore around each thread's calls holds the "
            "requests in flight to --concurrency, so a larger pool changes nothing up to 100 "
            "(keep-alive only reuses connections); a pool smaller than it is tested "
            "(test_concurrency_above_the_pools_default_is_honoured)."
        )
        for n in (12, 17, 26, 27, 28, 29)
    },
    "volumetool.model_client.xǁModelClientǁ_exchange__mutmut_14": (
        "'post' for 'POST': httpx upper-cases the method."
    ),
    "volumetool.model_client.xǁModelClientǁ_read__mutmut_6": (
        "The declared length never read: a body over the limit is then refused by the "
        "streamed count after 8 MiB are read, with the same error."
    ),
    **{
        f"volumetool.model_client.xǁModelClientǁ_read__mutmut_{n}": (
            "The encoding named when a body does not decode and no Content-Encoding was "
            "sent: httpx only decodes (and only fails to) what that header declares."
        )
        for n in (22, 24, 27)
    },
    "volumetool.model_client.xǁModelClientǁ_read__mutmut_8": (
        "The default of an absent Content-Length, 'XXXX' for '': neither is digits."
    ),
    **{f"volumetool.model_client.xǁModelClientǁ_read__mutmut_{n}": _HEADER_CASE for n in (7, 26)},
    **{
        f"volumetool.model_client.xǁModelClientǁ_read__mutmut_{n}": (
            "httpx's read timeout while the body streams: asyncio's bound on the whole "
            "exchange, of the same --timeout and started earlier, always ends it first "
            "(ModelClient._attempt), with the same message."
        )
        for n in (30, 31, 32, 33, 34)
    },
    "volumetool.compaction.store.x_active_threads__mutmut_15": (
        "The threshold filter in SQL left out: it is a necessary condition of check_due, which "
        "every candidate meets before anything happens to it, so only the reading is slower "
        "(--force, which would skip check_due, needs --key, which bypasses the filter)."
    ),
    "volumetool.compaction.run.x_resolve_endpoint__mutmut_20": (
        "The API's default base URL when none is set: ModelSettings already puts it in place "
        "(its __post_init__), so base_url is never empty on that line."
    ),
    **{
        f"volumetool.compaction.run.x_resolve_endpoint__mutmut_{n}": (
            'An unset key variable read as None instead of "": both are false, and the '
            "next line makes either the same usage error."
        )
        for n in (41, 43)
    },
    "volumetool.compaction.run.x_resolve_endpoint__mutmut_78": (
        "The name shown when no key variable is named: there always is one (as for mutant 45)."
    ),
    "volumetool.compaction.run.x_resolve_endpoint__mutmut_45": (
        "The variable looked up when none is named: ModelSettings names its API's default "
        "(its __post_init__), so there always is one."
    ),
    "volumetool.providers.openai_responses.x_failure__mutmut_23": (
        "A failed response's code that is not text kept as the error's type: the error body's "
        "reader (providers.errors._kind) takes a code or a type only when it is text "
        "(test_a_failed_response_is_an_error_and_a_server_error_is_retried: the same reason)."
    ),
    **{
        f"volumetool.providers.openai_responses.xǁResponseEventsǁerror_of__mutmut_{n}": (
            "response.* events handed to the base check: it calls an event an error only when "
            "`error` is at its top, and a response.* event carries the response under "
            "`response` (OpenAI's, and LiteLLM's in tests/data/litellm); response.failed, "
            "the one that fails, is read before."
        )
        for n in (35, 36)
    },
    "volumetool.providers.anthropic_messages.xǁMessageEventsǁ__init____mutmut_3": (
        "None and False are both false: whether message_start came is only tested for truth."
    ),
    "volumetool.providers.anthropic_messages.xǁMessageEventsǁevent__mutmut_44": (
        "The key of the text in a block opened by its first delta: a text delta sets `text` "
        "itself, so only a non-text delta of a block whose start never came leaves a text "
        "block without it (malformed) rather than with '' (an empty answer): no summary "
        "either way, and no server sends a block's deltas before its content_block_start."
    ),
    "volumetool.providers.base.xǁStreamErrorǁ__init____mutmut_1": (
        "The text of a StreamError is never shown: every one goes through "
        "ModelClient._stream_failure, which reads the error event it carries instead."
    ),
    **{
        f"volumetool.model_client.xǁModelClientǁ_stream_failure__mutmut_{n}": (
            "A Repeated's usage passed on or not: it is None, as base.EventStream.write raises "
            "it without one (test_a_model_that_repeats_itself_is_stopped_naming_the_request "
            "holds what it does carry)."
        )
        for n in (12, 16)
    },
    **{
        f"volumetool.compaction.unrecorded.x_keep__mutmut_{n}": (
            "The kept runs' file indented otherwise: read_kept parses it, the same JSON value."
        )
        for n in (7, 9, 14)
    },
    **{
        f"volumetool.compaction.unrecorded.x_keep__mutmut_{n}": (
            "The name of the file's format number: it is there for a later layout to be told "
            "apart; read_kept reads only `runs`."
        )
        for n in (10, 11)
    },
    **{
        f"volumetool.compaction.unrecorded.x_keep__mutmut_{n}": (
            "The kept runs' file written in another encoding: json.dumps escapes every "
            "non-ASCII character (ensure_ascii), so the text is ASCII, the same bytes in UTF-8 "
            "and in any locale's encoding."
        )
        for n in (21, 23, 27)
    },
    **{
        f"volumetool.compaction.unrecorded.x_write_runs__mutmut_{n}": (
            "The conversation key or the messages of the Thread handed to record_failure: it "
            "reads only the thread's session_id (the key is in the run's own check before it)."
        )
        for n in (13, 14)
    },
    "volumetool.model_client.xǁRetryPolicyǁdelay__mutmut_15": (
        "The share of the backoff added to a Retry-After (a quarter, or a fifth) is a tuning "
        "constant; what the SPEC asks, that a Retry-After is waited for in full and a longer "
        "one than --max-retry-wait not at all, is tested."
    ),
}


def tally() -> dict[str, collections.Counter]:
    """Per mutated module: how many mutants were killed, survived, timed out or not run yet
    (mutmut keeps each module's results in mutants/<module>.py.meta)."""
    # 33 is mutmut's "no tests": no test of its selection reached the function; not killed.
    status = {1: "killed", 0: "survived", None: "not run", 33: "not run"}
    status |= {36: "timeout", -24: "timeout"}
    counts: dict[str, collections.Counter] = {}
    killed_since = rechecked()
    for meta in sorted((ROOT / "mutants" / "volumetool").rglob("*.py.meta")):
        codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
        codes = {name: 1 if name in killed_since else c for name, c in codes.items()}
        if codes:
            module = str(meta.relative_to(ROOT / "mutants")).removesuffix(".meta")
            counts[module] = collections.Counter(status.get(c, "killed") for c in codes.values())
    return counts


def rechecked() -> set[str]:
    return set(json.loads(RECHECKED.read_text())) if RECHECKED.exists() else set()


def survivors() -> list[str]:
    out = subprocess.run(
        [*MUTMUT, "results"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    names = [line.split(":")[0].strip() for line in out.splitlines() if line.endswith("survived")]
    killed_since = rechecked()
    return [name for name in names if name not in killed_since]


def diff_of(name: str) -> str:
    for _ in range(3):  # a `mutmut run` writing its files meanwhile can fail a read
        done = subprocess.run([*MUTMUT, "show", name], capture_output=True, text=True, cwd=ROOT)
        if done.returncode == 0:
            break
    done.check_returncode()
    out = done.stdout
    lines = [line for line in out.splitlines() if re.match(r"^[-+](?![-+])", line)]
    return "\n".join(lines)


# The tests that hold each module, for --recheck: those a mutant there is most likely to fail.
RECHECK_TESTS = {
    "volumetool.model_client": ["tests/test_model_client.py"],
    "volumetool.providers.openai_responses": ["tests/test_model_client.py"],
    "volumetool.providers.anthropic_messages": ["tests/test_model_client.py"],
    "volumetool.providers.base": ["tests/test_model_client.py"],
    "volumetool.compaction.unrecorded": ["tests/test_compaction.py"],
    "volumetool.compaction.plan": ["tests/test_compaction_plan.py"],
    "volumetool.compaction.prompt": ["tests/test_compaction_plan.py"],
    "volumetool.compaction.undo": ["tests/test_undo.py"],
}
DEFAULT_RECHECK = ["tests/test_compaction.py", "tests/test_providers.py"]


def meta_of(name: str) -> Path:
    module = re.match(r"(.*?)\.x[_ǁ]", name).group(1)
    return ROOT / "mutants" / (module.replace(".", "/") + ".py.meta")


def recheck_one(name: str) -> bool:
    """Run the module's tests against one mutant the way mutmut does (its trampoline takes
    the mutant from MUTANT_UNDER_TEST, in the mutated copy under ./mutants): killed or not."""
    module = meta_of(name).relative_to(ROOT / "mutants").with_suffix("").with_suffix("")
    tests = RECHECK_TESTS.get(str(module).replace("/", "."), DEFAULT_RECHECK)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
        cwd=ROOT / "mutants",
        env={**os.environ, "MUTANT_UNDER_TEST": name, "HYPOTHESIS_PROFILE": "mutants"},
        capture_output=True,
    )
    return done.returncode == 1


def recheck(workers: int = 2, until: float | None = None) -> None:
    """Unexplained survivors of the last `mutmut run` against the tests as they are now
    (tests written since the run was started are not in its copy): each one a test now kills
    is recorded as killed (in RECHECKED), as it is found. The compaction core goes first;
    `until` (a time.time()) stops it where it is. A `mutmut run` may go on meanwhile."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    shutil.copytree(ROOT / "tests", ROOT / "mutants" / "tests", dirs_exist_ok=True)
    # An explained survivor is harmless whatever the tests do: only the others are run again.
    unexplained = [n for n in survivors() if explain(n, diff_of(n)) is None]
    names = sorted(unexplained, key=lambda n: n.startswith("volumetool.model_client"))
    lock, killed = threading.Lock(), []

    def one(name: str) -> None:
        if until is not None and time.time() > until:
            return
        if recheck_one(name):
            with lock:
                killed.append(name)
                RECHECKED.write_text(json.dumps(sorted(rechecked() | {name})))

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, names))
    print(f"recheck: {len(killed)} of {len(names)} survivors killed by the tests as they are now")


# The selection's files, fastest and nearest to each module first: a mutant most tests kill
# dies in seconds; one that survives has run them all (a superset of mutmut's own selection).
RUN_ORDER = {
    "volumetool.model_client": ["tests/test_model_client.py"],
    "volumetool.compaction.plan": ["tests/test_compaction_plan.py"],
    "volumetool.compaction.prompt": ["tests/test_compaction_plan.py"],
    "volumetool.compaction.undo": ["tests/test_undo.py"],
    "volumetool.compaction.run": ["tests/test_providers.py"],
}
SELECTION = [
    "tests/test_compaction_plan.py",
    "tests/test_model_client.py",
    "tests/test_providers.py",
    "tests/test_compaction.py",
    "tests/test_compaction_properties.py",
    "tests/test_undo.py",
]
FILE_TIMEOUT = 600  # seconds for one test file against one mutant: a loop that never ends


def verdict(name: str, near_only: bool = False) -> int | None:
    """Run a mutant against the selection's files, nearest first, stopping at the first that
    fails: 1 killed, 0 survived, 36 timed out (caught), None when pytest itself broke; with
    near_only, against the nearest files alone (0: survived those)."""
    module = str(meta_of(name).relative_to(ROOT / "mutants").with_suffix("").with_suffix(""))
    first = RUN_ORDER.get(module.replace("/", "."), [])
    files = first if near_only else [*first, *(f for f in SELECTION if f not in first)]
    env = {**os.environ, "MUTANT_UNDER_TEST": name, "HYPOTHESIS_PROFILE": "mutants"}
    for tests in files:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", tests],
                cwd=ROOT / "mutants",
                env=env,
                capture_output=True,
                timeout=FILE_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            return 36
        if done.returncode == 1:
            return 1
        if done.returncode != 0:
            return None
    return 0


def run_pending(workers: int = 3) -> None:
    """Run the mutants `mutmut run` left unrun (it was stopped) the way it does (its
    trampoline, in its mutated copy) and record each verdict in mutmut's results: first all
    of them against their nearest files, which kill most in seconds, then those still alive
    against the whole selection as it is by then (with the tests written meanwhile). Three
    at a time on two cores: tests wait on sockets and timers. Run it with no `mutmut run`
    going: both write those results."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    pending = [
        name
        for meta in sorted((ROOT / "mutants" / "volumetool").rglob("*.py.meta"))
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items()
        if code is None
    ]
    lock = threading.Lock()
    alive: list[str] = []

    def record(name: str, code: int | None) -> None:
        with lock:
            meta = meta_of(name)
            data = json.loads(meta.read_text())
            data["exit_code_by_key"][name] = code
            meta.write_text(json.dumps(data))
            print(f"{name}: {({1: 'killed', 0: 'survived', 36: 'timeout'}).get(code, 'error')}")

    def near(name: str) -> None:
        if name in rechecked():  # killed by a test written since
            record(name, 1)
            return
        code = verdict(name, near_only=True)
        if code == 0:
            with lock:
                alive.append(name)
                print(f"{name}: alive after its nearest tests", flush=True)
        else:
            record(name, code)

    def whole(name: str) -> None:
        if name not in rechecked():
            record(name, verdict(name))

    for phase, names in ((near, pending), (whole, alive)):
        shutil.copytree(ROOT / "tests", ROOT / "mutants" / "tests", dirs_exist_ok=True)
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(phase, list(names)))


_SQL_WORD = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|WHERE|FROM|ORDER BY|GROUP BY|AND|OR|JOIN)\b"
)
_SQL_VALUE = re.compile(r"'[^']*'")


def sql_case_only(diff: str) -> bool:
    """Whether a mutant only changes the letter case of SQL outside its quoted values ('ok'
    stays 'ok'): SQLite reads keywords and names without regard to case."""
    lines = diff.splitlines()
    if len(lines) != 2 or not (lines[0].startswith("-") and lines[1].startswith("+")):
        return False
    old, new = lines[0][1:], lines[1][1:]
    return (
        old != new
        and _SQL_WORD.search(old) is not None
        and _SQL_VALUE.findall(old) == _SQL_VALUE.findall(new)
        and _SQL_VALUE.sub("''", old).casefold() == _SQL_VALUE.sub("''", new).casefold()
    )


def added_literals(diff: str) -> list[str]:
    """The string literals of the added line that the removed line does not have, read left
    to right (so that the text between two literals is never taken for one)."""
    old = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("-"))
    new = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("+"))
    found = []
    for quote in "\"'":
        literal = re.compile(f"{quote}([^{quote}\\n]*){quote}")
        before = set(literal.findall(old))
        found += [text for text in literal.findall(new) if text not in before]
    return found


def explain(name: str, diff: str) -> str | None:
    if name in SINGLES:
        return SINGLES[name]
    if sql_case_only(diff):
        return RULES[0].reason
    for rule in RULES:
        if rule.prose:
            if any(re.search(rule.pattern, text) for text in added_literals(diff)):
                return rule.reason
        elif re.search(rule.pattern, diff, re.MULTILINE):
            return rule.reason
    return None


def main() -> int:
    rows, unexplained = [], []
    for name in survivors():
        diff = diff_of(name)
        reason = explain(name, diff)
        change = " → ".join(line[1:].strip() for line in diff.splitlines())[:160]
        if reason is None:
            unexplained.append(f"{name}: {change}")
        else:
            rows.append((name, change, reason))
    lines = [
        "# Surviving mutants",
        "",
        "Written by `make mutants` (tests/mutants.py) from `mutmut run` over",
        "`volumetool/compaction/`, `volumetool/model_client.py` and `volumetool/providers/`,",
        "its survivors then held to the tests written since the run began (`--recheck`).",
        "Every mutant that survives is listed with why it is harmless, or under *Not explained",
        "yet*; either that list or a mutant not run fails `make mutants`. Killed mutants are not",
        "listed. The verdicts are kept in tests/mutants-results.json, each with the hash of the",
        "function it mutates: `make mutants` resumes from them and runs again the mutants of",
        "every function changed since, so a run stopped on one day goes on the next.",
        "",
        "Not mutated, by configuration (pyproject.toml, `[tool.mutmut]`):",
        "",
        "- `compaction/retention.py`: its behaviour is held by a corpus of 48 folds with good and",
        "  lossy summaries (precision and recall asserted in tests/test_retention.py) and its",
        "  properties; its hundreds of pattern strings make mutants that a corpus, not a unit",
        "  test, is the judge of, and its parse cache outlives mutmut's forks.",
        "- Lines that are nothing but message text (a continued string, a docstring line): tests",
        "  check what a message says by its fragments; XX-wrapped prose is not a behaviour.",
        "",
        "| module | mutants | killed | survived | timeout | not run |",
        "|---|---|---|---|---|---|",
    ]
    counts = tally()
    for module, c in [*counts.items(), ("all", sum(counts.values(), collections.Counter()))]:
        lines.append(
            f"| {module if module == 'all' else f'`{module}`'} | {c.total():,} | {c['killed']:,}"
            f" | {c['survived']:,} | {c['timeout']:,} | {c['not run']:,} |"
        )
    lines += [
        "",
        "A timeout is a mutant that made the tests run forever (a loop that never ends): caught.",
        "",
        "| mutant | change | why it survives |",
        "|---|---|---|",
    ]
    for name, change, reason in rows:
        short = name.removeprefix("volumetool.")
        lines.append(f"| `{short}` | `{change.replace('|', '¦')}` | {reason} |")
    if unexplained:
        lines += [
            "",
            "## Not explained yet",
            "",
            "Survivors of the last run that no rule explains and no test kills yet: each is a",
            "test to write (or a reason to give) before `make mutants` passes.",
            "",
            *(f"- `{line.removeprefix('volumetool.')}`" for line in unexplained),
        ]
    not_run = sum(c["not run"] for c in counts.values())
    if not_run:
        lines += [
            "",
            f"{not_run:,} mutants were not run (the run was stopped): `make mutants` resumes it.",
        ]
    REPORT.write_text("\n".join(lines) + "\n")
    for line in unexplained:
        print(f"unexplained: {line}")
    print(f"{len(rows)} explained, {len(unexplained)} unexplained; wrote {REPORT}")
    return 1 if unexplained or not_run else 0


def save() -> None:
    """Write mutmut's verdicts (survivors a test written since kills counted as killed, as
    in the report) and its function hashes to RESULTS; a mutant not run yet is left out."""
    killed_since = rechecked()
    modules = {}
    for meta in sorted((ROOT / "mutants" / "volumetool").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        codes = {
            name: 1 if name in killed_since else code
            for name, code in sorted(data.get("exit_code_by_key", {}).items())
            if code is not None
        }
        modules[str(meta.relative_to(ROOT / "mutants").with_suffix(""))] = {
            "exit_code_by_key": codes,
            "hash_by_function_name": dict(sorted(data.get("hash_by_function_name", {}).items())),
        }
    RESULTS.write_text(json.dumps(modules, indent=0, ensure_ascii=False) + "\n")
    print(f"saved {sum(len(m['exit_code_by_key']) for m in modules.values()):,} verdicts")


def restore() -> None:
    """Put RESULTS where mutmut keeps its results, for each module it has none for yet (a new
    clone; a resumed run keeps its own). mutmut drops the verdicts of changed functions."""
    if not RESULTS.exists():
        return
    for module, data in json.loads(RESULTS.read_text()).items():
        meta = ROOT / "mutants" / f"{module}.meta"
        if not meta.exists():
            meta.parent.mkdir(parents=True, exist_ok=True)
            empty = ("type_check_error_by_key", "durations_by_key", "estimated_durations_by_key")
            meta.write_text(json.dumps({**data, **{key: {} for key in empty}}))


if __name__ == "__main__":
    if "--restore" in sys.argv[1:]:
        restore()
        sys.exit(0)
    if "--save" in sys.argv[1:]:
        save()
        sys.exit(0)
    if "--run-pending" in sys.argv[1:]:
        run_pending()
    if "--recheck" in sys.argv[1:]:
        recheck()
    sys.exit(main())

"""What every wire format has in common: the interface a provider module fills in, the answer
it parses into (`Completion`), the headers a key may travel in, and the reading of an event
stream (server-sent events) up to the point where each API's events differ.

Pure: no httpx, no I/O. A provider turns a request into a JSON body and a JSON answer (or its
events) into a Completion; model_client.py sends and receives.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from volumetool.usage import Usage


class AuthHeader(NamedTuple):
    """An auth scheme: the header the key travels in, and what it looks like (for messages)."""

    name: str
    shown: str

    def value(self, key: str) -> str:
        return f"Bearer {key}" if self.name == "authorization" else key


# model.auth -> its header: the schemes a config may choose, whatever its api.
AUTH_HEADERS = {
    "bearer": AuthHeader("authorization", "Authorization: Bearer KEY"),
    "api-key": AuthHeader("api-key", "api-key: KEY, as Azure OpenAI wants"),
    "x-api-key": AuthHeader("x-api-key", "x-api-key: KEY, as Anthropic wants"),
}
# What a finish reason means when it is not a provider's normal one (SPEC 6): the words of
# compaction.prompt.NOT_A_SUMMARY. Compatible servers mix the APIs' reasons, so every API reads
# these; a provider names its own others in `Provider.reasons`.
CUT_OFF = frozenset({"length", "max_tokens"})


@dataclass(frozen=True)
class Completion:
    text: str | None
    finish: str | None  # the provider's own finish_reason / stop_reason, None when absent
    usage: Usage
    refusal: str | None = None  # OpenAI's message.refusal
    tool_call: bool = False  # the answer calls a tool
    request_id: str | None = None

    def hidden(self, secret: str) -> Completion:
        """This answer with the key taken out of all the server chose to say: a summary, a
        refusal, a finish reason or a request id can echo it as well as an error can."""
        if not secret:
            return self
        texts = (self.text, self.finish, self.refusal, self.request_id)
        text, finish, refusal, request_id = (
            t.replace(secret, "[redacted]") if t else t for t in texts
        )
        return dataclasses.replace(
            self, text=text, finish=finish, refusal=refusal, request_id=request_id
        )


class Malformed(ValueError):
    def __init__(self, what: str, usage: Usage | None = None) -> None:
        super().__init__(what)
        self.usage = usage


class StreamError(Malformed):
    """An error event in a stream, as the error body it stands for (`{"error": {...}}`)."""

    def __init__(self, payload: dict) -> None:
        super().__init__("an error event")
        self.payload = payload


class Repeated(Malformed):
    """The model writes the same passage over and over: stopped there."""


# The key under which an error body a provider makes of a failed answer (`error_of`) carries
# the usage that answer reported: a failed call may be billed.
USAGE = "volumetool_usage"


def reported_usage(raw: object, prompt: str, output: str) -> Usage:
    """The call's usage from an answer's `usage` object, by the names of its two figures."""
    if not isinstance(raw, dict):
        return Usage()
    return Usage.of_call(raw.get(prompt), raw.get(output))


def mapping(value: object, what: str, usage: Usage) -> dict:
    if not isinstance(value, dict):
        raise Malformed(f"{what} is not an object", usage)
    return value


class Provider:
    """One wire format. A module in volumetool/providers/ subclasses this once and lists its
    instance in the registry (providers/__init__.py); everything else reads it from there."""

    name: ClassVar[str]  # the config's `api` value
    called: ClassVar[str]  # what the API is called, for messages
    base_url: ClassVar[str]  # what model.base_url defaults to
    api_key_env: ClassVar[str]  # the usual variable of its key (SPEC 14)
    auth: ClassVar[str]  # its key's usual header: a key of AUTH_HEADERS
    path: ClassVar[str]  # appended to base_url for one request
    headers: ClassVar[Mapping[str, str]] = {}  # sent with every request besides the key's
    # The request field of the output limit when the API has one only; None: the config's
    # model.max_tokens_param names it.
    max_tokens_field: ClassVar[str | None] = None
    finished: ClassVar[tuple[str, ...]]  # finish reasons of an answer that is a summary
    reasons: ClassVar[Mapping[str, str]] = {}  # its other reasons, in NOT_A_SUMMARY's words

    def body(self, model: str, system: str, user: str, max_tokens: int, field: str) -> dict:
        """The request: a streamed answer (SSE), `field` carrying the output limit."""
        raise NotImplementedError

    def parse(self, payload: dict, request_id: str | None) -> Completion:
        """The answer in a plain JSON body (or what an event stream amounts to); Malformed
        when it is not one."""
        raise NotImplementedError

    def events(self) -> EventStream:
        """A reader for one streamed answer."""
        raise NotImplementedError

    def error_of(self, payload: dict) -> dict | None:
        """The error a 200's JSON body carries instead of an answer (OpenRouter), as an error
        body (`{"error": ...}`); None when it is an answer."""
        if "error" in payload and not ("choices" in payload or "content" in payload):
            return payload
        return None

    def outcome(self, finish: str | None) -> str | None:
        """What a finish reason means: "summary" for a normal one (SPEC 6), else the word
        compaction.prompt.NOT_A_SUMMARY knows it by (an unknown reason as it came)."""
        if finish in self.finished:
            return "summary"
        return self.reasons.get(finish, finish) if finish is not None else None

    def cut_off(self, finish: str | None) -> bool:
        """Whether the answer stopped at its token limit."""
        return self.outcome(finish) in CUT_OFF


REPEATED = "the model repeated itself: its answer is one passage over and over, not a summary"
# A repetition is clear when the end of the answer is one passage (of UNIT characters) written
# at least REPEATS times over at least SPAN characters: a sentence said three times, a phrase
# many times. Checked each time the answer grows by CHECK_EVERY characters.
UNIT = (8, 600)
REPEATS = 3
SPAN = 240
CHECK_EVERY = 32


def repeating(text: str) -> bool:
    """Whether the text ends in one passage written over and over (see UNIT, REPEATS, SPAN):
    its last `span` characters equal themselves shifted by the passage's length.

    Only lengths at which the text's last UNIT[0] characters occur again are tried: a text
    that repeats a passage of length u ends in characters that stood u earlier too. So a check
    costs a few `rfind`s, not one comparison for every length from UNIT[0] to UNIT[1]: it runs
    every CHECK_EVERY characters of a streamed answer."""
    end = len(text)
    if end < SPAN:  # every span is at least SPAN long
        return False
    probe = text[-UNIT[0] :]
    start = max(0, end - UNIT[0] - UNIT[1])
    found = text.rfind(probe, start, end - 1)
    while found != -1:
        unit = end - UNIT[0] - found
        span = max(unit * REPEATS, SPAN)
        if unit >= UNIT[0] and span <= end:
            tail = text[-span:]
            if tail[unit:] == tail[:-unit] and not tail.isspace():
                return True
        found = text.rfind(probe, start, found + UNIT[0] - 1)
    return False


class EventStream:
    """A streamed answer (server-sent events) taken in as it arrives and turned into the
    answer a plain JSON response would have been, for the same checks. This class reads the
    frames; a provider's subclass takes each event (`event`) and says what they amount to
    (`payload`). An error event raises StreamError; an answer that repeats itself raises
    Repeated as soon as it is."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._first = True
        self.text = ""  # every text delta so far, for the repetition check
        self._checked = 0

    def feed(self, chunk: bytes) -> None:
        if self._first:
            chunk = chunk.removeprefix(b"\xef\xbb\xbf")
            self._first = False
        *lines, self._buffer = (self._buffer + chunk).split(b"\n")
        for line in lines:
            self._line(line.rstrip(b"\r"))

    def close(self) -> None:
        """The end of the stream: what is left is the last line and event."""
        if self._buffer:
            self._line(self._buffer.rstrip(b"\r"))
            self._buffer = b""
        self._dispatch()

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
            return
        field, _, value = line.partition(b":")
        if field == b"data":
            self._data.append(value.removeprefix(b" ").decode("utf-8", "replace"))

    def _dispatch(self) -> None:
        if not self._data:
            return
        data, self._data = "\n".join(self._data), []
        if data.strip() == "[DONE]":
            return
        try:
            event = json.loads(data)
        except RecursionError:
            raise Malformed("JSON nested too deeply") from None
        except ValueError:
            raise Malformed("not JSON") from None
        if not isinstance(event, dict):
            raise Malformed("not a JSON object")
        error = self.error_of(event)
        if error is not None:
            raise StreamError(error)
        self.event(event)

    def error_of(self, event: dict) -> dict | None:
        """The error body an error event stands for; None for any other event."""
        return event if "error" in event and "choices" not in event else None

    def event(self, event: dict) -> None:
        raise NotImplementedError

    def payload(self) -> dict:
        """The answer as the API's plain JSON response would have carried it."""
        raise NotImplementedError

    def write(self, text: str) -> None:
        """Text of the answer as it arrives: stopped as soon as it repeats itself."""
        self.text += text
        if len(self.text) - self._checked >= CHECK_EVERY:
            self._checked = len(self.text)
            if repeating(self.text):
                raise Repeated(f"{REPEATED} (stopped after {len(self.text):,} characters)")


def index(event: dict) -> int:
    value = event.get("index")
    return value if isinstance(value, int) else 0

"""Fact retention: which hard facts of what a compaction replaced did its summary lose.

A summary replaces the folded messages and the previous summary. Their hard facts — numbers
with their units, dates and times, URLs, file paths, e-mail addresses, identifiers (ticket ids,
hashes, UUIDs, snake_case, kebab-case-1 and CamelCase names, versions), quoted code and memory
keys — are what a reworded summary must still carry and what nobody can reconstruct once the
messages are folded. `measure` extracts them from what was replaced and looks for each in the
summary: `retention` is the share it kept, `missing_facts` the first it lost.

Precision comes before recall: a good summary must not be flagged, so this reads fewer, harder
facts rather than every token that looks like one. The choices below were measured on the
corpus in tests/data/retention (good and lossy summaries of 48 folds; see BENCHMARKS.md).

- **Which texts.** What the conversation states counts: user, assistant and system text, the
  previous summary, and the keys of `remember` and `forget` calls. A tool result is the world's
  answer and the other arguments of a tool call are the agent's mechanics (a search window, a
  SQL query, a file's new content); what matters of them the agent says in its reply, and the
  reply counts. Reading short tool results and every argument as well flagged 25 of the
  first 39 good summaries instead of 8 and caught no lossy summary more. A text longer than
  `TEXT_MAX_CHARS` (a pasted log) and a fenced code block of more than `FENCE_MAX_LINES`
  lines are material the conversation quotes: a summary keeps their gist, so they add no
  facts. So a 1 MB file dump neither fails every summary nor costs time: it is never scanned.
- **Which numbers.** A number counts when it carries a unit, a currency or a percent sign
  (`16 GB`, `$1,200`, `0.4%`, `4m12s`), has a fraction (`0.005`), or has three digits or more
  (`300 requests`, `port 8080`). Small bare counts ("2 turns", "3 options"), list numbering,
  bare years (1900-2100) and zero amounts ("$0 difference", which a summary writes "at no
  cost") are not demanded. Neither are weekday names and relative dates ("Monday",
  "tomorrow"), which a summary may rightly turn into a date, nor the time of day inside a
  machine timestamp (`2026-11-30T05:27:20Z` demands its day only).
- **Matching is normalised.** The summary is read with the same extractor, and a fact is
  found when the summary holds the same value or name. Values are compared normalised: case;
  thousands separators (`1,200` = `1200` = `1 200` = `1.200`: one dot or comma before exactly
  three digits groups them unless the integer part is 0); a decimal comma (`0,4 %` = `0.4%`)
  and zero cents (`12528.00` = `12 528`); units in English, German, Spanish, French,
  Portuguese and Japanese, durations by their total (`4m12s` = `4 min 12 s` = `252 s`,
  `45 min` = `45 Minuten` = `45分`); currencies by symbol, code or name (`$` = `USD`,
  `€` = `EUR` = `euros`); dates by their day in any of those formats (`2026-11-30` =
  `30.11.2026` = `Nov 30, 2026` = `30 de noviembre de 2026` = `2026年11月30日`; a summary may
  drop the year or write `30/11`, but another year is another date); times as 24-hour
  `HH:MM` (`9:30 pm` = `21:30` = `21h30`). Names: URLs without their scheme, `www.` and
  trailing slash; a path also by a longer path that ends with it; Windows paths with either
  slash; a git hash by a prefix of at least 7 characters; `#204` by `PR 204`. Code spans are
  found as text; snake_case names and memory keys also with `-` or spaces between words.
- **No false finds.** Values are compared as values, never as substrings (the fact `20` is
  not in `2026`), with their unit (`16 GB` is not in `16 MB`, though a bare `16` is), and
  names whole (`JIRA-123` is not in `JIRA-1234`, `v1.2` not in `v1.2.3`,
  `deploy/values.yaml` not in `deploy/values.yaml.bak`, `fct_pedidos` not in
  `not_null_fct_pedidos_customer_id`).
- **Counted missing.** Spelled-out numbers ("two days"), rounded figures ("about 4 minutes"
  for `4m12s`), word multipliers ("1.2 million"), a shortened code span and translated names.
- **Refusals.** A short summary that opens with an apology or a refusal and says it cannot do
  the task ("I'm sorry, but I can't help with that.") retains nothing, whatever it mentions.

Speed: the scan jumps in C (a pattern led by a character set) from one digit, `_`, `/`, `@`,
`.` inside a word or CamelCase hump to the next, so plain prose costs almost nothing, but each
candidate fact costs 6-20 µs (finding it, one match of the scanner, the Python around them):
about 25 ms for a fold with 74 kB of fact-dense conversation, 5-10 ms for a summary of 16 kB.
`facts_of_fold` does not need the summary, so a caller runs it while the model writes, and it
prepares what holding a fact needs (`_Found`); `retention_of` is what waits: one scan of the
summary, then a lookup or two per fact (BENCHMARKS.md, "Fact retention"). A run of 256 address
characters without a break is a blob and skipped, so no text is quadratic.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

from volumetool.text import one_line, plural

if TYPE_CHECKING:
    from volumetool.compaction.plan import Message

TEXT_MAX_CHARS = 4_000
FENCE_MAX_LINES = 2
CODE_SPAN_MAX_CHARS = 80
FACT_MAX_CHARS = 1_000  # a longer match (a path of a thousand segments) is a blob
BLOB_CHARS = 256  # a run of word and address characters this long without a break
MISSING_SHOWN = 20
SOURCE_MAX_CHARS = 1_000_000  # of each text, searched for what a summary says it holds
REFUSAL_MAX_CHARS = 400


class Fact(NamedTuple):
    """One hard fact: its kind, the text as found, its normalised form (`key`) and other
    normalised forms under which a summary may carry it (`also`)."""

    kind: str
    text: str
    key: str
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class Retention:
    """What a summary kept: the share of the distinct facts (None when the fold had none it
    reads: nothing was measured), the first `MISSING_SHOWN` it lost in order of appearance,
    both counts, and the facts it states that nothing it was given holds (`invented`)."""

    retention: float | None
    missing_facts: list[str]
    facts: int
    missing: int
    invented_facts: list[str] = field(default_factory=list)
    invented: int = 0

    @property
    def kept(self) -> int:
        return self.facts - self.missing


class _Token(NamedTuple):
    """A candidate fact: `significant` when it is demanded of a summary; `offers`, the value
    keys it gives a summary that holds it."""

    fact: Fact
    significant: bool = True
    offers: tuple[str, ...] = ()


# --- the vocabulary --------------------------------------------------------------------------


def _alternation(words: Iterable[str]) -> str:
    """A pattern for any of the words, longest first, as a trie: sre tries alternatives one by
    one, and a flat list of two hundred unit spellings costs microseconds at every number."""
    trie: dict = {}
    for word in set(words):
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}
    return _trie_pattern(trie)


def _trie_pattern(node: dict) -> str:
    branches = [re.escape(c) + _trie_pattern(child) for c, child in sorted(node.items()) if c]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if "" in node else body  # a word may end here, after longer ones


def _initial(words: Iterable[str]) -> str:
    """A look-ahead for the first characters of the words: it fails a trie in one step where
    sre would enter each of its branches (case-insensitive ones have no fast path)."""
    return "(?=[" + "".join(sorted({re.escape(word[0]) for word in words})) + "])"


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_UNITS: dict[str, tuple[str, Decimal]] = {}  # spelling -> canonical unit, factor to it
# "25日" is the 25th, "25日間" 25 days; a month (月) and a year (年) are parts of dates.
_UNIT_TABLE = (
    ("%", "1", "% percent pct prozent パーセント"),
    ("%", "1", "per\u00a0cent por\u00a0ciento pour\u00a0cent por\u00a0cento"),
    ("s", "0.001", "ms msec millisecond milliseconds millisekunden milisegundo milisegundos"),
    ("s", "0.001", "milliseconde millisecondes ミリ秒"),
    ("s", "1", "s sec secs second seconds sek sek. sekunde sekunden seg segundo segundos"),
    ("s", "1", "seconde secondes 秒"),
    ("s", "60", "min mins min. minute minutes minuten minuto minutos 分 分間"),
    ("s", "3600", "h hr hrs hour hours std std. stunde stunden hora horas heure heures 時間"),
    ("s", "86400", "d day days tag tage tagen día días dia dias jour jours 日間"),  # not 日
    ("s", "604800", "wk wks week weeks woche wochen semana semanas semaine semaines 週間"),
    ("month", "1", "month months monat monate monaten mes meses mois か月 ヶ月 カ月"),
    ("year", "1", "year years yr yrs jahr jahre jahren año años ano anos an ans"),
)
for _canonical, _factor, _spellings in _UNIT_TABLE:
    for _spelling in _words(_spellings):
        _UNITS[_spelling.replace("\u00a0", " ")] = (_canonical, Decimal(_factor))
for _unit in _words(
    "byte bytes kb kib mb mib gb gib tb tib pb kbps mbps gbps rps qps rpm req/s mhz ghz kw kwh "
    "kg km cm mm px °c °f ℃"
):
    _UNITS[_unit] = (_unit, Decimal(1))

_CURRENCIES: dict[str, str] = {}  # spelling -> canonical currency
for _spellings in (
    "$ us$ usd dollar dollars dólar dólares",
    "€ eur euro euros",
    "£ gbp",
    "¥ jpy 円 yen",
    "r$ brl reais",
    "chf franken francs",
    "mxn",
    "cad",
    "aud",
    "₹ inr",
):
    for _spelling in _words(_spellings):
        _CURRENCIES[_spelling] = _words(_spellings)[0]
_CURRENCY_PREFIXES = _words("$ US$ R$ € £ ¥ ₹ USD EUR GBP JPY BRL CHF MXN CAD AUD INR")

_MONTHS: dict[str, int] = {}  # English "May" is matched apart, case-sensitively: "may" is a verb
for _month, _names in enumerate(
    (
        "january jänner januar janvier janeiro enero jan janv ene",
        "february februar février fevereiro febrero feb févr fev",
        "march märz mars março marzo mar mär",
        "april avril abril apr avr abr",
        "mai maio mayo",
        "june juni juin junho junio jun",
        "july juli juillet julho julio jul juil",
        "august août agosto aug",
        "september septembre setembro septiembre setiembre sep sept",
        "october oktober octobre outubro octubre oct okt",
        "november novembre novembro noviembre nov",
        "december dezember décembre dezembro diciembre dec dez déc dic",
    ),
    start=1,
):
    for _name in _words(_names):
        _MONTHS[_name] = _month

_TLDS = _words(
    "com net org io dev app ai co de fr es pt br jp uk eu us ch at nl it mx ar cl cloud "
    "internal local lan corp example test info biz gov edu"
)
_EXTENSIONS = _words(
    "py js ts tsx jsx mjs cjs json jsonl yaml yml toml ini cfg conf env lock md rst txt csv "
    "tsv log sql db sqlite sh bash zsh ps1 bat go rs java kt rb php c h cc cpp hpp cs swift "
    "scala html htm css scss xml pdf doc docx xls xlsx ppt pptx png jpg jpeg gif svg webp zip "
    "tar gz tgz whl tf tfvars proto graphql ipynb parquet avro vue svelte bak ics eml key pem"
)
# Product names look like CamelCase identifiers but a summary may leave them out.
_BRANDS = frozenset(
    _words(
        "github gitlab bitbucket javascript typescript coffeescript youtube linkedin paypal "
        "whatsapp powerpoint onedrive onenote sharepoint wordpress hubspot pagerduty datadog "
        "iphone ipad ipod icloud imessage itunes ebay macbook airpods facetime tiktok wechat "
        "bigquery quickbooks devops jetbrains intellij numpy scipy pytorch tensorflow dropbox "
        "fedex airbnb playstation soundcloud stackoverflow cloudwatch cloudfront servicenow "
        "salesforce openshift vmware"
    )
)
_NAME_PREFIXES = frozenset(_words("mc mac de di da du la le van von st"))  # McKenzie, DeLuca

# --- the patterns ----------------------------------------------------------------------------

_SP = "[ \u00a0\u202f]"
_NUM = r"\d{1,3}+(?:[,.'\u00a0\u202f ]\d{3})+(?:[.,]\d+)?|\d+(?:[.,]\d+)?"
_END = r"(?![A-Za-z0-9_])"
_WORD_END = "(?![A-Za-zÀ-ÖØ-öø-ÿ])"  # "01 são" holds no seconds; "16GBの" is 16 GB
_MONTH = f"(?i:{_initial(_MONTHS)})(?:(?i:{_alternation(_MONTHS)})|May)"
# "41D" is a seat, not 41 days: one-letter units count in lower case only.
_SPELLED = [u for u in _UNITS if len(u) > 1 or not u.isascii() or not u.isalpha()]
_TIME_UNIT = _alternation(u for u in _SPELLED if _UNITS[u][0] == "s")
_TIME_UNIT = f"(?:(?i:{_TIME_UNIT})|[shd])"
_OTHER_UNIT = _alternation([u for u in _SPELLED if _UNITS[u][0] != "s"] + list(_CURRENCIES))
_ANY_UNIT = f"(?i:{_initial([*_SPELLED, *_CURRENCIES, 's', 'h', 'd'])})"
_JOIN = rf"(?:{_SP}?(?:(?:and|und|y|e|et){_SP})?)"
# A number and what follows it, parsed once: a unit, a currency, or the parts of a duration
# ("4 min 12 s", "2 horas y 30 minutos", "4分12秒").
_QUANTITY = (
    rf"(?:{_NUM})(?:[kKM](?![A-Za-z]))?(?:(?:{_SP}|-(?=[^\W\d_]))?{_ANY_UNIT}"
    rf"(?:{_TIME_UNIT}{_WORD_END}(?:{_JOIN}\d+(?:[.,]\d+)?{_SP}?{_TIME_UNIT}{_WORD_END}){{0,2}}"
    rf"|(?i:{_OTHER_UNIT}){_WORD_END}))?{_END}"
)
_URL_CHARS = r"[!#$%&*+,\-./0-9:;=?@A-Z_a-z~()]"
_PATH_CHARS = r"[A-Za-z0-9_.\-@+%=]"

# In precedence order: at one position the first branch that matches wins.
_BRANCHES = {
    "code": r"`[^`\n]{1,200}`",
    "url": rf"(?:[A-Za-z][A-Za-z0-9+.\-]{{1,15}}+://|www\.){_URL_CHARS}+",
    "email": r"[A-Za-z0-9._%+\-]++@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}" + _END,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}" + _END,
    "winpath": r"[A-Za-z]:[\\/][^\s\\/:*?\"<>|`']+(?:[\\/][^\s\\/:*?\"<>|`']+)*[\\/]?",
    "abspath": rf"(?:~|\.{{1,2}})?(?:/{_PATH_CHARS}+)+/?",
    "isodate": r"\d{4}(?:-\d{1,2}-|/\d{1,2}/|\.\d{1,2}\.)\d{1,2}"
    r"(?:T\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![0-9])",
    "numdate": r"\d{1,2}(?:\.\d{1,2}\.\d{4}|-\d{1,2}-\d{4}|/\d{1,2}/(?:\d{4}|\d{2}))(?![0-9])",
    "jadate": r"(?:\d{4}年)?\d{1,2}月\d{1,2}日",
    "dotdate": r"(?:[12]\d|3[01]|0?[1-9])\.(?:1[0-2]|0?[1-9])\.(?![0-9])",  # "am 30.11."
    "dmdate": rf"\d{{1,2}}(?:\.|er|º|°|st|nd|rd|th)?{_SP}+(?:de{_SP}+)?{_MONTH}"
    rf"(?:\.?,?{_SP}+(?:del?{_SP}+)?\d{{4}})?(?![A-Za-z0-9])",
    "mddate": rf"{_MONTH}\.?{_SP}+\d{{1,2}}(?:st|nd|rd|th)?(?:,?{_SP}+\d{{4}})?(?![A-Za-z0-9])",
    "dotted": r"(?:[vV]\d+(?:\.\d+)*|\d+(?:\.\d+){2,})(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?"
    r"(?![A-Za-z0-9_]|\.\d)",
    "duration": r"\d+(?:h\d+m(?:\d+s)?|m\d+s|h\d+s)" + _END,
    "time": rf"(?:[01]?\d|2[0-3])(?::[0-5]\d(?::[0-5]\d(?:\.\d+)?)?(?:{_SP}?(?i:[ap]\.?m\.?))?"
    rf"|h[0-5]\d|(?:[.:][0-5]\d)?{_SP}Uhr)(?![0-9A-Za-z])"
    rf"|(?:1[0-2]|0?[1-9]){_SP}?(?i:[ap]\.?m\.?)(?![A-Za-z])"
    r"|(?:午前|午後)?\d{1,2}時(?:\d{1,2}分|半)?(?!間)",
    "phone": r"\+(?=(?:[ \-()]{0,2}\d){8})(?!(?:[ \-()]{0,2}\d){16})"
    r"\d{1,3}(?:[ \-]?\(?\d{1,4}\)?){1,6}(?![0-9]|\.\d)",
    "money": rf"(?:{_alternation(_CURRENCY_PREFIXES)}){_SP}?(?:{_NUM})(?:[kKM](?![A-Za-z]))?"
    + _END,
    "number": _QUANTITY,
    "ticket": r"#\d{2,}(?![A-Za-z0-9_])"
    r"|[A-Z][A-Z0-9]{1,9}(?:-[A-Z0-9]+)*-\d{2,}(?![A-Za-z0-9_]|-[A-Za-z0-9])",
    "hash": r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}" + _END,
    "codeid": r"(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{5,}" + _END,
    "host": r"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+"
    rf"(?i:{_alternation(_TLDS)})(?::\d{{2,5}})?(?:/{_URL_CHARS}*)?"
    r"(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])",
    "relpath": rf"[A-Za-z0-9_.\-]+(?:/{_PATH_CHARS}+)+/?",
    "filename": rf"[A-Za-z0-9_\-][A-Za-z0-9_.\-]*\.(?i:{_alternation(_EXTENSIONS)})"
    r"(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])",
    "snake": r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+" + _END,
    "kebab": r"(?=[a-z0-9\-]*\d)[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![A-Za-z0-9_]|-[A-Za-z0-9])",
    "camel": r"(?:[a-z]+|[A-Z][a-z0-9]+)(?:[A-Z][a-z0-9]+)+" + _END,
    "channel": r"#[a-z][a-z0-9_\-]{2,}" + _END,
}
# Most digits start a plain number ("order 4471", "180 ms"): that is tried first, unless what
# follows could make it a date, a time, a version or an address, whose branches come before.
# The digits are taken whole (possessive): a shorter run is followed by a digit, which none
# of what may follow them begins with, so giving some back could only fail again.
_PLAIN = (
    r"(?!\d++(?:[-/.:@年月時日h]\d|@)|\d{1,2}+(?:(?:\.|er|º|°|st|nd|rd|th)?"
    rf"{_SP}+(?:de{_SP}+)?{_MONTH}|{_SP}?(?i:[ap]\.?m\.?)(?![A-Za-z])"
    rf"|(?:[.:]\d\d)?{_SP}Uhr|[時月]))" + _QUANTITY
)


@functools.cache
def _scanner() -> re.Pattern[str]:
    """Every branch in one pattern, "plain" first: it starts with a digit, so at a digit the
    branches that can start there are tried in its order, and elsewhere in `_BRANCHES`'.
    Compiled on first use: it takes longer than the rest of this module to build, and a
    compaction needs it once its first calls are out (facts_of_fold runs while they wait)."""
    branches = {"plain": _PLAIN, **_BRANCHES}
    # Each branch is named by an empty group at its end (`lastgroup`), not by a group around
    # it: then the alternation sees the branch's first character set, and skips in C the
    # branches that cannot start at a position, where a group would have it enter each one.
    alternatives = "|".join(f"(?:{pattern})(?P<{name}>)" for name, pattern in branches.items())
    # A fact starts a token: the look-behind rejects the inside of words.
    return re.compile(f"(?<![A-Za-z0-9_])(?:{alternatives})")


# Every fact holds one of these where it starts or in its first word. The pattern is led by a
# character set, so the search jumps in C from one to the next over plain prose.
_TRIGGER = re.compile(
    r"[0-9`/@#$€£¥₹\\~午+_.:A-Z](?:(?<=[0-9])(?<![0-9][0-9])|(?<=[`/@#$€£¥₹\\午])"
    r"|(?<=~)(?=/)|(?<=\+)(?=[0-9])|(?<=[A-Za-z0-9]_)(?=[A-Za-z0-9])"
    r"|(?<=[A-Za-z0-9]\.)(?=[A-Za-z])|(?<=:)(?=//|\\)|(?<=[a-z][A-Z])(?=[a-z0-9]))"
)
_CAPITALS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ$")
_ASCII_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_ADDRESS_MARKS = ".-@%+:/\\#$~€£¥₹"  # what joins the words of an address, an id or an amount
_TOKEN_CHARS = _ASCII_WORD | frozenset(_ADDRESS_MARKS)
_TOKEN_BREAK = re.compile(f"[^A-Za-z0-9_{re.escape(_ADDRESS_MARKS)}]")
_LEADING_WORDS = frozenset(_MONTHS) | {"may", *(p.casefold() for p in _CURRENCY_PREFIXES)}
_FENCE = re.compile(r"```(.*?)(?:```|\Z)", re.S)
_SEPARATORS = re.compile(r"[\s_\-]+")
_DIGITS = re.compile(r"\d+")
_WORD_RUN = re.compile(r"[A-Za-z0-9_]+")  # a word as `_occurs` bounds it (_ASCII_WORD)
_WORD_BYTES = bytes(c if chr(c) in _ASCII_WORD else ord(" ") for c in range(256))  # the rest: " "
_SCHEME = re.compile(r"^(?:[a-z][a-z0-9+.\-]*://)?(?:www\.)?")
_TRAILING = ".,;:!?)]}'\"»」』。、"
_REFUSAL = re.compile(
    r"\W*(?:i'?m |i am )?(?:so |very |really )?(?:sorry|unable|not able|afraid)"
    r"|\W*(?:i can(?:no|')?t|i won'?t|as an ai)"
    r"|\W*(?:lo siento|lo lamento|no puedo|désolée?|je ne (?:peux|suis pas)|es tut mir leid"
    r"|leider|ich kann|desculpe|sinto muito|não posso|申し訳|すみません|ごめんなさい)",
    re.I,
)
_INABILITY = re.compile(
    r"can(?:no|')?t|unable|not able|won'?t|no puedo|ne (?:peux|suis pas)|kann (?:\w+ )?nicht"
    r"|não (?:posso|consigo)|できません|いたしかねます",
    re.I,
)
# One or two digits, a slash or a dot, one or two digits; led by the separator, not by the
# digits before it (read by the look-behinds), so that the search jumps in C from one slash
# or dot to the next, which are rarer than digits.
_SHORT_DATE = re.compile(
    r"[/.](?:(?<=(?<![0-9./])(\d\d)[/.])|(?<=(?<![0-9./])(\d)[/.]))(\d{1,2})(?![0-9/]|\.[0-9])"
)

# --- what a match means ----------------------------------------------------------------------

_GROUP_SPACES = re.compile(r"[\u00a0\u202f' ]")
_HEAD = re.compile(rf"({_NUM})([kKM](?![A-Za-z]))?(?:{_SP}|-)?")
_UNIT_WORD = re.compile(rf"(?:{_TIME_UNIT}|(?i:{_OTHER_UNIT})){_WORD_END}")
_PARTS = re.compile(rf"(\d+(?:[.,]\d+)?){_SP}?({_TIME_UNIT})")
_MONEY_PARTS = re.compile(rf"(\D*?){_SP}?({_NUM})([kKM]?)")
_COMPACT_PARTS = re.compile(r"(\d+)([hms])")
_DATE_PARTS = re.compile(r"\d+")
_ISO_CLOCK = re.compile(r"T(\d{1,2}):(\d{2})")
_NAMED_DATE = re.compile(rf"({_MONTH})|(\d{{4}})|(\d{{1,2}})")
_CLOCK = re.compile(r"(\d{1,2})(?:[:h.時](\d{2}))?")
_AFTERNOON = re.compile(r"p\.?m|午後", re.I)
_MORNING = re.compile(r"a\.?m", re.I)
_HUMPS = re.compile(r"[A-Z]?[a-z0-9]+")
_MULTIPLIERS = {"k": 1_000, "K": 1_000, "M": 1_000_000}
_SECONDS = {"h": 3600, "m": 60, "s": 1}


def _decimal(number: str) -> str:
    """A number's canonical digits: grouping removed, one '.' before a fraction that is not
    all zeros."""
    if number.isdigit():
        return number
    digits = _GROUP_SPACES.sub("", number)
    marks = [c for c in digits if c in ".,"]
    if not marks:
        return digits
    last = max(digits.rfind("."), digits.rfind(","))
    head, tail = digits[:last], digits[last + 1 :]
    grouping = len(set(marks)) == 1 and (
        len(marks) > 1 or (len(tail) == 3 and head not in ("0", "") and len(head) <= 3)
    )
    if grouping:
        return digits.replace(".", "").replace(",", "")
    head = head.replace(".", "").replace(",", "")
    return head if tail.strip("0") == "" else f"{head}.{tail}"


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f")


def _scaled(raw: str, multiplier: str | None) -> str:
    return _plain(Decimal(raw) * _MULTIPLIERS[multiplier]) if multiplier else raw


def _bare(text: str, raw: str) -> _Token:
    whole = raw.split(".")[0]
    significant = "." in raw or (len(whole) >= 3 and not (len(whole) == 4 and _is_year(whole)))
    return _Token(Fact("number", text, f"n:{raw}"), significant, (f"n:{raw}", f"b:{raw}"))


def _is_year(digits: str) -> bool:
    return 1900 <= int(digits) <= 2100


def _quantity(kind: str, text: str, raw: str, unit: str, factor: Decimal) -> _Token:
    amount = Decimal(raw)
    key = f"q:{_plain(amount * factor)}|{unit}"
    # A zero ("$0 difference", "0 % errors") is how a summary says "none" in words.
    return _Token(Fact(kind, text, key, (f"b:{raw}",)), amount != 0, (key, f"n:{raw}"))


def _number(text: str) -> list[_Token]:
    """A number with its unit, its currency or the other parts of its duration, if any."""
    if text.isdigit():
        return [_bare(text, text)]
    head = _HEAD.match(text)
    if head is None:  # pragma: no cover - the scanner hands over only what this matches
        return []
    raw = _scaled(_decimal(head[1]), head[2])
    unit = _UNIT_WORD.match(text, head.end())
    if unit is None:
        return [_bare(text, raw)]
    spelling = unit[0].casefold()
    if spelling in _CURRENCIES:
        return [_quantity("money", text, raw, _CURRENCIES[spelling], Decimal(1))]
    canonical, factor = _UNITS[spelling]
    if unit.end() == len(text):
        return [_quantity("number", text, raw, canonical, factor)]
    total = Decimal(raw) * factor  # "4 min 12 s": the other parts of the duration
    for amount, part in _PARTS.findall(text, unit.end()):
        total += Decimal(amount.replace(",", ".")) * _UNITS[part.casefold()][1]
    key = f"q:{_plain(total)}|s"
    return [_Token(Fact("number", text, key), True, (key,))]


def _money(text: str) -> list[_Token]:
    """An amount after its currency: "$1,200", "USD 1,200", "R$ 59,90"."""
    parts = _MONEY_PARTS.match(text)
    if parts is None:  # pragma: no cover
        return []
    currency = _CURRENCIES[parts[1].strip().casefold()]
    return [_quantity("money", text, _scaled(_decimal(parts[2]), parts[3]), currency, Decimal(1))]


def _duration(text: str) -> list[_Token]:
    """A duration written without spaces: "4m12s", "1h30m"."""
    total = sum(int(n) * _SECONDS[unit] for n, unit in _COMPACT_PARTS.findall(text))
    key = f"q:{total}|s"
    return [_Token(Fact("number", text, key), True, (key,))]


def _date_token(text: str, year: int | None, month: int, day: int) -> _Token | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    any_year = f"dp:--{month:02d}-{day:02d}"
    if year is None:
        return _Token(Fact("date", text, any_year), True, (f"d:--{month:02d}-{day:02d}", any_year))
    full = f"d:{year:04d}-{month:02d}-{day:02d}"
    return _Token(Fact("date", text, full, (f"d:--{month:02d}-{day:02d}",)), True, (full, any_year))


def _dates(text: str, readings: Sequence[tuple[int | None, int, int]]) -> list[_Token]:
    """One date; when day and month may be read either way (03/04/2026), either day counts."""
    tokens = [t for y, m, d in readings if (t := _date_token(text, y, m, d)) is not None]
    if len(tokens) < 2:
        return tokens
    first, second = tokens
    also = (*first.fact.also, second.fact.key, *second.fact.also)
    return [_Token(Fact("date", text, first.fact.key, also), True, first.offers + second.offers)]


def _year(digits: str) -> int:
    year = int(digits)
    return year + 2000 if year < 100 else year


def _isodate(text: str) -> list[_Token]:
    year, month, day = (int(n) for n in _DATE_PARTS.findall(text)[:3])
    tokens = _dates(text, [(year, month, day)])
    clock = _ISO_CLOCK.search(text)
    if tokens and clock:  # a machine timestamp: its time of day is offered, never demanded
        time_key = f"t:{int(clock[1]):02d}:{clock[2]}"
        tokens = [tokens[0]._replace(offers=(*tokens[0].offers, time_key))]
    return tokens


def _numdate(text: str) -> list[_Token]:
    first, second, year = _DATE_PARTS.findall(text)
    if "." in text:
        return _dates(text, [(_year(year), int(second), int(first))])
    return _dates(
        text, [(_year(year), int(first), int(second)), (_year(year), int(second), int(first))]
    )


def _dotdate(text: str) -> list[_Token]:
    day, month = _DATE_PARTS.findall(text)
    return _dates(text, [(None, int(month), int(day))])


def _jadate(text: str) -> list[_Token]:
    numbers = [int(n) for n in _DATE_PARTS.findall(text)]
    return _dates(text, [(numbers[0] if len(numbers) == 3 else None, numbers[-2], numbers[-1])])


def _named_date(text: str) -> list[_Token]:
    month = day = year = None
    for name, four, one in _NAMED_DATE.findall(text):
        if name:
            month = _MONTHS.get(name.casefold(), 5)
        elif four:
            year = int(four)
        else:
            day = int(one)
    if month is None or day is None:  # pragma: no cover
        return []
    return _dates(text, [(year, month, day)])


def _time(text: str) -> list[_Token]:
    clock = _CLOCK.search(text)
    if clock is None:  # pragma: no cover
        return []
    hour, minute = int(clock[1]), 30 if "半" in text else int(clock[2] or 0)
    if _AFTERNOON.search(text) and hour < 12:
        hour += 12
    elif _MORNING.search(text) and hour == 12:
        hour = 0
    key = f"t:{hour:02d}:{minute:02d}"
    return [_Token(Fact("time", text, key), True, (key,))]


def _dotted(text: str) -> list[_Token]:
    bare = text.lstrip("vV")
    groups = bare.split("-")[0].split(".")
    grouped = len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])
    is_ip = len(groups) == 4 and all(int(g) <= 255 for g in groups)
    if text[0] not in "vV" and grouped and not is_ip:
        return _number(text)  # 1.200.000: thousands separated by dots, not a version
    key = f"v:{bare.casefold()}"
    two_parts = len(groups) == 2 and "-" not in bare  # v3.11 is also the number 3.11
    kind = "ip" if len(groups) == 4 and text[0] not in "vV" else "version"
    fact = Fact(kind, text, key, (f"b:{bare}",) if two_parts else ())
    return [_Token(fact, True, (key, f"n:{bare}") if two_parts else (key,))]


def _phone(text: str) -> list[_Token]:
    key = "p:" + "".join(c for c in text if c.isdigit())
    return [_Token(Fact("phone", text, key), True, (key,))]


def _normal(text: str) -> str:
    return _spaced(text.casefold())


def _spaced(folded: str) -> str:
    """A case-folded text normalised: one slash, one space."""
    return " ".join(folded.replace("\\", "/").split())  # str.split() is \s+


def _named(kind: str, text: str, key: str, also: tuple[str, ...] = ()) -> list[_Token]:
    """A fact found as text in the summary; `also`, value keys that find it too."""
    return [_Token(Fact(kind, text, key, also), True, also)] if key else []


def _strip_trailing(text: str) -> str:
    while text and text[-1] in _TRAILING:
        if text[-1] == ")" and text.count("(") >= text.count(")"):
            break
        text = text[:-1]
    return text


def _url(text: str) -> list[_Token]:
    text = _strip_trailing(text)
    return _named("url", text, _SCHEME.sub("", _normal(text)).rstrip("/"))


def _host(text: str) -> list[_Token]:
    return _url(text) if "/" in text else _named("host", text, _normal(text))


def _path(text: str) -> list[_Token]:
    text = _strip_trailing(text)
    return _named("path", text, _normal(text).rstrip("/"))


def _abspath(text: str) -> list[_Token]:
    stripped = _strip_trailing(text).rstrip("/")
    segments = [s for s in stripped.split("/") if s not in ("", "~", ".", "..")]
    if not segments or (
        len(segments) < 2 and "." not in segments[-1].strip(".") and stripped[0] == "/"
    ):
        return []  # "/health", "/compact": a route or a command, too soft to demand
    return _path(text)


def _relpath(text: str) -> list[_Token]:
    segments = _strip_trailing(text).rstrip("/").split("/")
    if not any(c.isalpha() for c in text):
        return []
    has_extension = "." in segments[-1].strip(".") and segments[-1].rsplit(".", 1)[1].isalnum()
    marked = any(c in "_-0123456789" for s in segments for c in s)
    if has_extension or len(segments) >= 3 or marked:
        return _path(text)
    return []  # "and/or", "km/h", "TCP/IP": words around a slash


def _ticket(text: str) -> list[_Token]:
    return _named("ticket", text, text.casefold(), (f"n:{text[1:]}",) if text[0] == "#" else ())


def _camel(text: str) -> list[_Token]:
    humps = _HUMPS.findall(text)
    if text.casefold() in _BRANDS or (len(humps) == 2 and humps[0].casefold() in _NAME_PREFIXES):
        return []
    return _named("identifier", text, text.casefold())


def _code(text: str) -> list[_Token]:
    """A quoted code span: the fact it is, when it is one (`v1.2.3`), else the span itself; a
    long span is read as text."""
    inner = text[1:-1].strip().strip("\"'")
    if len(inner) < 2:
        return []
    whole = _scanner().fullmatch(inner)
    if whole is not None:
        return list(_parsed(whole.lastgroup or "", inner))
    if len(inner) > CODE_SPAN_MAX_CHARS:
        return _tokens(inner)
    return _named("code", inner, _normal(inner))


def _kind(kind: str) -> Callable[[str], list[_Token]]:
    return lambda text: _named(kind, text, _normal(_strip_trailing(text)))


_HANDLERS: dict[str, Callable[[str], list[_Token]]] = {
    "code": _code,
    "url": _url,
    "email": _kind("email"),
    "uuid": _kind("uuid"),
    "winpath": _path,
    "abspath": _abspath,
    "isodate": _isodate,
    "numdate": _numdate,
    "jadate": _jadate,
    "dotdate": _dotdate,
    "dmdate": _named_date,
    "mddate": _named_date,
    "dotted": _dotted,
    "duration": _duration,
    "time": _time,
    "phone": _phone,
    "money": _money,
    "number": _number,
    "plain": _number,
    "ticket": _ticket,
    "hash": _kind("hash"),
    "codeid": _kind("id"),
    "host": _host,
    "relpath": _relpath,
    "filename": _path,
    "snake": _kind("identifier"),
    "kebab": _kind("identifier"),
    "camel": _camel,
    "channel": _kind("channel"),
}


@functools.lru_cache(maxsize=8192)
def _parsed(branch: str, text: str) -> tuple[_Token, ...]:
    """What a matched text means; the same ids and numbers recur through a conversation, and
    a summary repeats the fold's: read while the model writes, they cost the summary less."""
    return tuple(_HANDLERS[branch](text))


def _tokens(text: str) -> list[_Token]:
    """The candidate facts of a text, left to right."""
    return [token for branch, found in _scan(text) for token in _parsed(branch, found)]


def _scan(text: str) -> list[tuple[str, str]]:
    """Where the candidate facts of a text are: the branch and the text of each match, left
    to right (`_parsed` says what they mean)."""
    found: list[tuple[str, str]] = []
    pos = 0
    search, digit_at, fact_at, token_chars = _TRIGGER.search, _number_at, _fact_at, _TOKEN_CHARS
    scan = _scanner().match
    while (trigger := search(text, pos)) is not None:
        i = trigger.start()
        if text[i].isdigit() and (i == pos or text[i - 1] not in token_chars):
            match = digit_at(scan, text, i, pos)  # the common case, without the walk back
        else:
            match = fact_at(scan, text, i, pos)
        if match is None:
            pos = _after_blob(text, i + 1)
            continue
        start, pos = match.span()
        if pos - start <= FACT_MAX_CHARS:
            found.append((match.lastgroup or "", match[0]))
    return found


def _after_blob(text: str, pos: int) -> int:
    """Past the run of word and address characters at pos when it is a blob (base64, a
    minified line, `a.a.a…`), where every attempt would read to its end again; else pos."""
    if _TOKEN_BREAK.search(text, pos, pos + BLOB_CHARS) is not None or len(text) - pos < BLOB_CHARS:
        return pos
    end = _TOKEN_BREAK.search(text, pos)
    return end.start() if end else len(text)


_Match = Callable[[str, int], "re.Match[str] | None"]  # the scanner's match


def _fact_at(scan: _Match, text: str, i: int, floor: int) -> re.Match[str] | None:
    """The first fact that starts in the word holding position i, or in the word before it
    ("Nov 30", "USD 1,200"), but not before floor."""
    start = i
    while start > floor and text[start - 1] in _TOKEN_CHARS:
        start -= 1
    if start == i and text[i].isdigit():
        return _number_at(scan, text, i, floor)
    if text[start].isdigit():
        before = _word_before(text, start, floor) if _may_follow_a_word(text, start) else None
        if before is not None and (match := scan(text, before)) is not None:
            return match
    for k in range(start, i + 1):
        if (k == start or text[k - 1] not in _ASCII_WORD) and (match := scan(text, k)):
            return match
    return None


def _number_at(scan: _Match, text: str, i: int, floor: int) -> re.Match[str] | None:
    """The fact at a digit that starts its word: a day after its month or an amount after its
    currency code ("Nov 30", "USD 1,200") starts at that word, anything else at the digit."""
    if i - 1 > floor and text[i - 1] in " \u00a0" and _may_follow_a_word(text, i):
        before = _word_before(text, i, floor)
        if before is not None and (match := scan(text, before)) is not None:
            return match
    return scan(text, i)


def _may_follow_a_word(text: str, start: int) -> bool:
    """Whether the number at start may belong to the word before it: a day after its month
    has one or two digits ("Nov 30"), an amount follows a currency code in capitals."""
    return not text[start + 2 : start + 3].isdigit() or text[start - 2 : start - 1] in _CAPITALS


def _word_before(text: str, start: int, floor: int) -> int | None:
    """Where the word before start begins, when it is a month name or a currency code."""
    end = start - 1
    if end <= floor or text[end] not in " \u00a0":
        return None
    begin = end
    while begin > floor and (text[begin - 1].isalpha() or text[begin - 1] in ".$"):
        begin -= 1
    return begin if text[begin:end].rstrip(".").casefold() in _LEADING_WORDS else None


# --- what was replaced -----------------------------------------------------------------------


class _Source:
    """What a summary may have taken its facts from: the value keys and names of every
    candidate fact of the texts read, and every text it was given — tool results, call
    arguments and long texts too, the first `SOURCE_MAX_CHARS` of each — searched as text.
    A fact a summary states that none of it holds is invented."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.names: set[str] = set()
        self.texts: list[str] = []
        self.text = ""

    def add(self, token: _Token) -> None:
        fact = token.fact
        self.keys.update(token.offers)
        matcher = _MATCHER.get(fact.kind, "name")
        if matcher == "value":
            self.keys.update((fact.key, *fact.also))
        elif matcher == "name":
            self.names.update(_names(fact))

    def add_text(self, text: str | None) -> None:
        if text:
            self.texts.append(text[:SOURCE_MAX_CHARS])

    def seal(self) -> None:
        """Made once, where the fold's facts are read (while the model writes)."""
        self.text = _spaced("\n".join(self.texts).casefold())
        self.texts = []

    def holds(self, fact: Fact) -> bool:
        """Whether what the summary was given holds the fact: by value or name as read, or
        as text (generously: a wrong find only lets a fact pass, never makes one up)."""
        matcher = _MATCHER.get(fact.kind, "name")
        if matcher == "value":
            if fact.key in self.keys or any(key in self.keys for key in fact.also):
                return True
            runs = _DIGITS.findall(fact.text)  # "€1,240.50" in a tool result's "1240.50"
            return bool(runs) and all(run in self.text for run in runs)
        if matcher == "name" and not self.names.isdisjoint(_names(fact)):
            return True
        needles = {fact.key, _normal(fact.text)}
        needles.update(needle for needle, _ in _needles(fact) or ())
        return any(needle and needle in self.text for needle in needles)


class _Facts:
    """Distinct facts in order of first appearance, and what they were read from."""

    def __init__(self, source: _Source | None = None) -> None:
        self.seen: set[tuple[str, str]] = set()
        self.facts: list[Fact] = []
        self.source = source

    def add(self, fact: Fact) -> None:
        identity = (_MATCHER.get(fact.kind, "name"), fact.key)
        if identity not in self.seen:
            self.seen.add(identity)
            self.facts.append(fact)

    def add_tokens(self, tokens: Iterable[_Token]) -> None:
        source = self.source
        for token in tokens:
            if source is not None:
                source.add(token)
            if token.significant:
                self.add(token.fact)

    def add_text(self, text: str, limit: int | None = TEXT_MAX_CHARS) -> None:
        """The facts a text states; none when, without its fenced blocks, it is longer than
        limit (material it quotes: a pasted log)."""
        if self.source is not None:
            self.source.add_text(text)
        if limit is not None and len(text) > limit and _prose_chars(text) > limit:
            return
        if "```" not in text:
            self.add_tokens(_tokens(text))
            return
        start = 0
        for fence in _FENCE.finditer(text):
            self.add_tokens(_tokens(text[start : fence.start()]))
            lines = fence[1].splitlines()
            if len(lines) > 1 and " " not in lines[0].strip():
                lines = lines[1:]  # the first line names the language: ```sh
            lines = [line.strip() for line in lines if line.strip()]
            if len(lines) <= FENCE_MAX_LINES:  # a command, not a listing
                for line in lines:
                    self.add_tokens(_code(f"`{line}`"))
            start = fence.end()
        self.add_tokens(_tokens(text[start:]))

    def add_memory_key(self, key: object) -> None:
        if isinstance(key, str) and 0 < len(key.strip()) <= 200:
            self.add(Fact("memory", key.strip(), _normal(key)))

    def add_message(self, message: Any) -> None:
        tool_calls = message.tool_calls or ""
        if self.source is not None:
            self.source.add_text(tool_calls)
        if message.role == "tool":
            if self.source is not None:
                self.source.add_text(message.content)
            return  # the world's answer: what matters of it, the agent says in its reply
        self.add_text(message.content or "")
        if "remember" not in tool_calls and "forget" not in tool_calls:
            return
        for name, arguments in _calls(tool_calls):
            if name in ("remember", "forget") and isinstance(arguments, dict):
                self.add_memory_key(arguments.get("key"))


def _calls(tool_calls: str | None) -> Iterator[tuple[str, Any]]:
    """Each call's name and decoded arguments, in the OpenAI or the Anthropic shape."""
    if not tool_calls:
        return
    try:
        calls = json.loads(tool_calls)
    except (ValueError, RecursionError):  # not JSON, or planted a thousand levels deep
        return
    for call in calls if isinstance(calls, list) else [calls]:
        function = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments", function.get("input"))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                continue
        yield str(function.get("name", "")), arguments


def _prose_chars(text: str) -> int:
    """The length of a text without its fenced blocks."""
    if "```" not in text:
        return len(text)
    return len(text) - sum(fence.end() - fence.start() for fence in _FENCE.finditer(text))


def extract_facts(texts: Iterable[str], memory_keys: Iterable[str] = ()) -> list[Fact]:
    """The distinct hard facts the texts state, then the memory keys, in order of appearance."""
    facts = _Facts(_Source())
    for text in texts:
        facts.add_text(text)
    for key in memory_keys:
        facts.add_memory_key(key)
    return _Found(facts.facts, facts.source)


def facts_of_fold(
    previous_summary: str | None, fold: Sequence[Message], given: Iterable[str] = ()
) -> list[Fact]:
    """The distinct hard facts of what a summary replaces: the previous summary (whatever its
    length), then what the folded messages say and the memory keys their calls touch. `given`:
    other texts the summarizer was given (its prompt), where a summary's facts may come from."""
    facts = _Facts(_Source())
    if previous_summary:
        facts.add_text(previous_summary, limit=None)
    for message in fold:
        facts.add_message(message)
    for text in given:
        facts.source.add_text(text)
    return _Found(facts.facts, facts.source)


# --- the summary -----------------------------------------------------------------------------

_VALUE_KINDS = frozenset({"number", "money", "date", "time", "version", "ip", "phone"})
_MATCHER = {
    **dict.fromkeys(_VALUE_KINDS, "value"),
    "hash": "hash",
    "identifier": "separated",
    "memory": "separated",
    "code": "substring",
}


def is_refusal(summary: str) -> bool:
    """Whether the summary is a refusal ("I'm sorry, but I can't help with that.")."""
    text = summary.replace("\u2019", "'")
    return (
        len(text) <= REFUSAL_MAX_CHARS
        and _REFUSAL.match(text) is not None
        and _INABILITY.search(text) is not None
    )


_Needles = tuple[tuple[str, tuple[bytes, ...]], ...]


def _needles(fact: Fact) -> _Needles | None:
    """The texts a summary's text is searched for when its keys and names do not hold the
    fact, each with its word runs (`_Summary.has`); None when it is not searched for."""
    matcher = _MATCHER.get(fact.kind)
    if matcher == "separated":  # deploy_region = deploy-region = "deploy region"
        words = _SEPARATORS.split(fact.key.strip(" _-"))
        needles: tuple[str, ...] = tuple(sep.join(words) for sep in "_- ")
    elif matcher == "substring" or fact.kind in ("ticket", "id"):
        needles = (fact.key,)  # a ticket written in lower case is no longer read as one
    else:
        return None
    return tuple((needle, _runs(needle)) for needle in needles)


def _runs(needle: str) -> tuple[bytes, ...]:
    """The word runs of a needle, as `_Summary.words` holds them."""
    return tuple(run.encode() for run in _WORD_RUN.findall(needle))


class _Holding:
    """How a summary may hold each of a list of facts, by index: a value key it offers, a
    name, a hash, or a needle found in its text. Made once, so that a summary's keys, names
    and words are matched to all the facts at once, set against set, and only the needles
    that need its text are searched for one by one."""

    def __init__(self, facts: Sequence[Fact]) -> None:
        self.by_key: dict[str, list[int]] = {}
        self.by_name: dict[str, list[int]] = {}
        self.by_word: dict[bytes, list[int]] = {}  # a needle that is one word run, whole
        self.hashes: list[tuple[int, str]] = []
        self.searched: list[tuple[int, str, tuple[bytes, ...]]] = []  # (fact, needle, its runs)
        for n, fact in enumerate(facts):
            for key in (fact.key, *fact.also):
                self.by_key.setdefault(key, []).append(n)
            matcher = _MATCHER.get(fact.kind, "name")
            if matcher == "name":
                self.by_name.setdefault(fact.key, []).append(n)
            elif matcher == "hash":
                self.hashes.append((n, fact.key))
            for needle, runs in _needles(fact) or ():
                if len(runs) == 1 and len(runs[0]) == len(needle):  # a word, whole (`has`)
                    self.by_word.setdefault(runs[0], []).append(n)
                else:
                    self.searched.append((n, needle, runs))
        self.keys, self.names = frozenset(self.by_key), frozenset(self.by_name)
        self.words = frozenset(self.by_word)

    def held(self, summary: _Summary) -> set[int]:
        """The indices of the facts the summary holds."""
        held: set[int] = set()
        for key in summary.keys & self.keys:
            held.update(self.by_key[key])
        for name in summary.names & self.names:
            held.update(self.by_name[name])
        for n, key in self.hashes:
            if n not in held and summary.holds_hash(key):
                held.add(n)
        if self.by_word or self.searched:
            words = summary.words
            for word in words & self.words:
                held.update(self.by_word[word])
            for n, needle, runs in self.searched:
                if n not in held and summary.has(needle, runs):
                    held.add(n)
        return held


class _Found(list):
    """The facts of a fold, with how a summary may hold them: made with the facts, off the
    critical path (a compaction reads them while the model writes)."""

    def __init__(self, facts: Iterable[Fact], source: _Source | None = None) -> None:
        super().__init__(facts)
        self.holding = _Holding(self)
        self.size = len(self)
        self.source = source
        if source is not None:
            source.seal()


def _holding_of(facts: Sequence[Fact]) -> _Holding:
    if isinstance(facts, _Found) and facts.size == len(facts):
        return facts.holding
    return _Holding(facts)


class _Summary:
    """A summary read once with the same extractor, so that each fact is a lookup: a value by
    its keys, a name (URL, path, e-mail, ticket, id) by its normalised text. Code and names
    that may be written with other separators are searched in the text, and only where its
    words are: a set of them rules out most at once."""

    def __init__(self, summary: str, scanned: Iterable[tuple[str, str]] | None = None) -> None:
        self.summary = summary
        self.keys: set[str] = set()
        self.names: set[str] = set()
        self.hashes: list[str] = []
        # Read as the fold side reads text, and each code span also opened up (`v1.2.3`
        # carries its version, `spark.executor.memory=8g` a name and a size): a fact either
        # reading offers is found. A span is read on its own, a boundary on both sides.
        matches = set(_scan(summary) if scanned is None else scanned)
        for span in [found for branch, found in matches if branch == "code"]:
            matches.update(_scan(span[1:-1]))
        for branch, found in matches:
            for fact, _, offers in _parsed(branch, found):
                self.keys.update(offers)
                matcher = _MATCHER.get(fact.kind, "name")
                if matcher == "name":
                    self.names.update(_names(fact))
                elif matcher == "hash":
                    self.hashes.append(fact.key)
        # "25/11", "30.11": read generously on this side only, where a wrong reading can make
        # a fact found but never make one up.
        for two, one, second in _SHORT_DATE.findall(summary):
            first = two or one
            for day, month in ((int(first), int(second)), (int(second), int(first))):
                if 1 <= day <= 31 and 1 <= month <= 12:
                    self.keys.update((f"d:--{month:02d}-{day:02d}", f"dp:--{month:02d}-{day:02d}"))

    def holds_hash(self, key: str) -> bool:
        """A git hash is held by a prefix of at least 7 characters, either way."""
        return any(h.startswith(key) or key.startswith(h) for h in self.hashes)

    def has(self, needle: str, runs: tuple[bytes, ...]) -> bool:
        """Whether the needle occurs in the text between word boundaries (`_occurs`); every
        run of word characters of such a needle is a whole word of the text, which rules out
        most needles without a search. (A needle that is one run, whole, is a word of the
        text: `_Holding` looks those up in `words` at once.)"""
        return (not runs or self.words.issuperset(runs)) and _occurs(needle, self.text)

    @functools.cached_property
    def words(self) -> set[bytes]:
        """The words of the normalised text (normalising changes no word but its case), as
        `_WORD_RUN` finds them, in ASCII: what is not a word character becomes a space."""
        ascii_text = self.folded.encode("ascii", "replace")  # "?" for the rest
        return set(ascii_text.translate(_WORD_BYTES).split())

    @functools.cached_property
    def text(self) -> str:
        return _spaced(self.folded)

    @functools.cached_property
    def folded(self) -> str:
        return self.summary.casefold()


def _names(fact: Fact) -> list[str]:
    """The normalised names a summary's name fact stands for: a path also names its tail
    (/srv/app/deploy/values.yaml names deploy/values.yaml), a URL also its host."""
    if fact.kind == "path":
        return [fact.key, *(fact.key[i + 1 :] for i, c in enumerate(fact.key) if c == "/")]
    if fact.kind == "url":
        return [fact.key, fact.key.split("/", 1)[0]]
    return [fact.key]


def _occurs(needle: str, text: str) -> bool:
    """Whether needle occurs in text between word boundaries: `deploy_region` is not in
    `deploy_regions`, `OrderService` is in `OrderService.create`."""
    if not needle:
        return False
    check_left, check_right = needle[0] in _ASCII_WORD, needle[-1] in _ASCII_WORD
    start = text.find(needle)
    while start >= 0:
        end = start + len(needle)
        left = not check_left or start == 0 or text[start - 1] not in _ASCII_WORD
        if left and (not check_right or end == len(text) or text[end] not in _ASCII_WORD):
            return True
        start = text.find(needle, start + 1)
    return False


def invented_facts(source: _Source, scanned: Iterable[tuple[str, str]]) -> list[str]:
    """The hard facts a summary states (its scan) that nothing it was given holds."""
    stated = _Facts()
    stated.add_tokens(token for branch, found in scanned for token in _parsed(branch, found))
    return [fact.text for fact in stated.facts if not source.holds(fact)]


def retention_of(facts: Sequence[Fact], summary: str) -> Retention:
    """Which of the facts the summary holds (a refusal holds none; None: there were none),
    and, when the facts come with what they were read from, which it invented."""
    scanned = _scan(summary)
    source = getattr(facts, "source", None)
    invented = [] if source is None else invented_facts(source, scanned)
    made_up = (invented[:MISSING_SHOWN], len(invented))
    if not facts:
        return Retention(None, [], 0, 0, *made_up)
    if is_refusal(summary):
        missing = [fact.text for fact in facts]
    else:
        held = _holding_of(facts).held(_Summary(summary, scanned))
        missing = [fact.text for n, fact in enumerate(facts) if n not in held]
    share = 1 - len(missing) / len(facts)
    return Retention(share, missing[:MISSING_SHOWN], len(facts), len(missing), *made_up)


def measure(previous_summary: str | None, fold: Sequence[Message], summary: str) -> Retention:
    """The share of the hard facts of the previous summary and the fold that the new summary
    keeps, and the first it lost."""
    return retention_of(facts_of_fold(previous_summary, fold), summary)


# --- the gate --------------------------------------------------------------------------------

DEFAULT_MIN_RETENTION = 0.3
GATE_MIN_FACTS = 4  # the default gate judges a fold with at least this many hard facts


def refusal_reason(kept: Retention, min_retention: float | None) -> str | None:
    """Why a summary must not replace the history, or None. `min_retention` None is the
    default gate: below `DEFAULT_MIN_RETENTION` of a fold of at least `GATE_MIN_FACTS` facts;
    0 turns both checks off. A summary that invents more hard facts than it keeps is refused
    whatever its share (docs/compaction.md, "A summary that lost the conversation")."""
    if min_retention == 0:
        return None
    default = min_retention is None
    share = DEFAULT_MIN_RETENTION if default else min_retention
    judged = kept.retention is not None and (not default or kept.facts >= GATE_MIN_FACTS)
    reasons = []
    if judged and kept.retention < share:
        gate = f"the default gate {share:g}" if default else f"--min-retention {share:g}"
        lost = one_line(", ".join(kept.missing_facts), 300)
        reasons.append(
            f"the summary kept {kept.retention:.0%} of the fold's hard facts, below {gate}; "
            f"missing: {lost}"
        )
    if kept.invented > kept.kept:
        made_up = one_line(", ".join(kept.invented_facts), 300)
        reasons.append(
            f"the summary invented {plural(kept.invented, 'fact')} found nowhere in what it was"
            " given, "
            f"more than the {kept.kept} it kept: {made_up}"
        )
    if reasons and default:
        reasons.append("--min-retention 0 turns these checks off")
    return "; ".join(reasons) or None

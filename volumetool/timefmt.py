"""Timestamps as the volume stores them: ISO-8601 UTC with milliseconds and `Z`."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
# The volume's own form, field by field in range; only days 29-31 need the calendar.
_TIMESTAMP = re.compile(
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z"
)
_LAST_DAY = {
    "01": "31", "02": "29", "03": "31", "04": "30", "05": "31", "06": "30",
    "07": "31", "08": "31", "09": "30", "10": "31", "11": "30", "12": "31",
}  # fmt: skip
TIMESTAMP_FORM = "YYYY-MM-DDTHH:MM:SS.sssZ"
# The same rule in SQL, for rows already in a file: a real moment prints back as itself.
SQL_IS_TIMESTAMP = "(strftime('%Y-%m-%dT%H:%M:%fZ', julianday({0})) IS {0})"


def iso(moment: datetime) -> str:
    """Format an aware datetime as `2026-11-30T05:27:20.123Z`."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def is_timestamp(text: object) -> bool:
    """Is `text` a timestamp in the volume's form (`2026-11-30T05:27:20.123Z`) naming a real
    moment? A compiled pattern and string comparisons (no parsing), so that a million-record
    import does not feel it."""
    if not isinstance(text, str) or not _TIMESTAMP.fullmatch(text):
        return False
    day = text[8:10]
    if day <= "28":
        return True
    if day > _LAST_DAY[text[5:7]]:
        return False
    if text[5:10] != "02-29":
        return True
    year = int(text[:4])
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def now_iso() -> str:
    return iso(datetime.now(UTC))


def parse_since(text: str, now: datetime | None = None) -> str:
    """Turn `--since` (an ISO date/time, or a duration like `90m`, `12h`, `7d`) into a timestamp.

    Times without an offset are taken as UTC. Raises ValueError with a one-line reason.
    """
    now = now or datetime.now(UTC)
    match = _DURATION.match(text)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        return iso(now - timedelta(**{_UNITS[unit]: amount}))
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise ValueError(
            f"{text!r} is neither an ISO date/time (2026-11-30, 2026-11-30T05:00Z) "
            "nor a duration (90m, 12h, 7d)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return iso(moment)

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
    m = moment.astimezone(UTC)
    # Not strftime: its %Y leaves years before 1000 unpadded on glibc, out of sort order.
    return (
        f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}"
        f".{m.microsecond // 1000:03d}Z"
    )


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
    """Turn `--since` (an ISO date/time, or a duration: `30s`, `90m`, `12h`, `7d`, `2w`) into a
    timestamp.

    Times without an offset are taken as UTC. Raises ValueError with a one-line reason, also for
    a moment outside the years 1 to 9999 (`800000d`, `99999999999w`).
    """
    now = now or datetime.now(UTC)
    try:
        match = _DURATION.match(text)
        if match:
            amount, unit = match.group(1), match.group(2)
            if len(amount) > 12:  # more than any timedelta holds, however it is counted
                raise OverflowError
            return iso(now - timedelta(**{_UNITS[unit]: int(amount)}))
        moment = _parse_moment(text)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return iso(moment)
    except OverflowError:
        raise ValueError(f"{_shown(text)} is out of range (years 1 to 9999)") from None


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:40]) + "…"


def _parse_moment(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise ValueError(
            f"{_shown(text)} is neither an ISO date/time (2026-11-30, 2026-11-30T05:00Z) "
            "nor a duration (30s, 90m, 12h, 7d, 2w)"
        ) from None

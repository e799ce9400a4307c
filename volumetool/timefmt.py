"""Timestamps as the volume stores them: ISO-8601 UTC with milliseconds and `Z`."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def iso(moment: datetime) -> str:
    """Format an aware datetime as `2026-11-30T05:27:20.123Z`."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


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

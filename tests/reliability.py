"""RELIABILITY.md is written by two runs: the kill suite's table (`make faults`) and the fuzz
test's hostile-input table (`make fuzz`). Each rewrites its own part and keeps the other's."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RELIABILITY = ROOT / "RELIABILITY.md"
HOSTILE = "## Hostile input"


def hostile_section(text: str) -> str:
    """The hostile-input section of a RELIABILITY.md text ("" when it has none)."""
    start = text.find(f"\n{HOSTILE}\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)].rstrip("\n") + "\n"


def with_hostile_section(text: str, section: str) -> str:
    """`text` with its hostile-input section replaced by `section` (placed before the first
    other `## ` section when it had none)."""
    old = hostile_section(text)
    if old:
        return text.replace(old, section, 1)
    cut = text.find("\n## ")
    if cut < 0:
        return text.rstrip("\n") + "\n" + section
    return text[:cut].rstrip("\n") + "\n" + section + text[cut:]

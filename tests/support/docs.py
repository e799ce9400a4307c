"""The docs' pages (docs/*.md) as tests read them: whole, or one section by its heading."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"


def page(name: str) -> str:
    """A page of the docs by its name without .md (`compaction`, `reference/exit-codes`)."""
    return (DOCS / f"{name}.md").read_text(encoding="utf-8")


def section(name: str, heading: str) -> str:
    """The text under `heading` (`## Providers`) on a page, up to the next heading of its level
    or above."""
    text = page(name)
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    rest = text[start + len(heading) + 2 :]
    ends = [rest.find(f"\n{'#' * n} ") for n in range(1, len(level) + 1)]
    return rest[: min((e for e in ends if e >= 0), default=len(rest))]


def pages_in_order() -> list[str]:
    """Every page the site's table of contents lists, in its order (index first)."""
    names = ["index"]
    in_toctree = False
    for line in page("index").splitlines():
        if line.startswith("```{toctree}"):
            in_toctree = True
        elif line.startswith("```"):
            in_toctree = False
        elif in_toctree and line.strip() and not line.startswith(":"):
            names.append(line.strip())
    return names

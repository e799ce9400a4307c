"""Where each command is explained: `--help` ends with the page's address, and the docs
(docs/, built by `make docs`) are that site; tests/test_docs.py holds every address to a page."""

from __future__ import annotations

import click

DOCS_URL = "https://volumetool.readthedocs.io/en/latest/"

# command path (below `volumetool`) -> its page, a file of docs/ without .md
PAGES = {
    "": "index",
    "init": "memories",
    "demo": "tutorial",
    "status": "fleet",
    "sessions": "inspecting",
    "transcript": "inspecting",
    "runs": "inspecting",
    "audit": "inspecting",
    "memories": "memories",
    "thread": "memories",
    "thread undo": "compaction",
    "validate": "validate",
    "config": "validate",
    "compact": "compaction",
    "migrate": "migrating",
    "backup": "migrating",
    "check": "migrating",
    "report": "fleet",
    "search": "lifecycle",
    "prune": "lifecycle",
    "erase": "lifecycle",
}


def page_of(path: str) -> str:
    """The page of a command path (`memories export`): its own, else its group's."""
    while path not in PAGES:
        path = path.rpartition(" ")[0]
    return PAGES[path]


def url_of(path: str) -> str:
    page = page_of(path)
    return DOCS_URL if page == "index" else f"{DOCS_URL}{page}.html"


class Documented:
    """A command whose help ends with the address of the page that explains it."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)  # type: ignore[misc]
        path = ctx.command_path.partition(" ")[2]
        formatter.write_paragraph()
        formatter.write_text(f"Docs: {url_of(path)}")

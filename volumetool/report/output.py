"""Where a page goes: written in place at once, and never over anything but an earlier page."""

from __future__ import annotations

from pathlib import Path

from volumetool.atomic import replaceable_mode, staged_file
from volumetool.report.page import DOCTYPE


def page_mode(path: Path) -> int:
    """The mode of the page at `path`; refused (exit 2) unless new, empty or an earlier page."""
    return replaceable_mode(path, (DOCTYPE.encode(),), "report page")


def write_page(path: Path, document: bytes) -> None:
    """The page in place at once (a temporary sibling renamed over it): a reader, or a web
    server, sees the old page or the new one; only ever a new file or an earlier page."""
    with staged_file(path, mode=page_mode(path), replace=True) as tmp:
        tmp.write_bytes(document)

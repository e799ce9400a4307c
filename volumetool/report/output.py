"""Where a page goes: written in place at once, and never over anything but an earlier page."""

from __future__ import annotations

import os
from pathlib import Path

from volumetool.create import staged_file
from volumetool.errors import UnusableInput
from volumetool.report.page import DOCTYPE


def replaceable_mode(path: Path) -> int:
    """The mode the page will have at `path`: a new file's (0600: conversation keys can name
    people), or the mode of the earlier page it replaces. Anything else there — a volume, a
    directory, a file that is not a page — is refused (exit 2), so that no argument named by
    mistake is overwritten."""
    mode = 0o600
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise UnusableInput(f"{path}: not a regular file", "name the page's file")
        try:
            with path.open("rb") as existing:
                start = existing.read(len(DOCTYPE))
        except OSError as exc:
            raise UnusableInput(f"{path}: cannot read it ({exc.strerror})") from None
        if start and start != DOCTYPE.encode():
            raise UnusableInput(
                f"{path}: exists and is not a report page; refusing to replace it",
                "name a new file, or an earlier page",
            )
        mode = os.stat(path).st_mode & 0o777
    return mode


def write_page(path: Path, document: bytes) -> None:
    """The page in place at once (a temporary sibling renamed over it): a reader, or a web
    server, sees the old page or the new one; only ever a new file or an earlier page."""
    with staged_file(path, mode=replaceable_mode(path), replace=True) as tmp:
        tmp.write_bytes(document)

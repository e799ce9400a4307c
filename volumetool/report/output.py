"""Where a page goes: written in place at once, and never over anything but an earlier page."""

from __future__ import annotations

from volumetool.output import OutputTarget
from volumetool.report.page import DOCTYPE


def page_target(name: str) -> OutputTarget:
    """Where `report -o NAME` writes, checked: stdout for `-`; else in place at once (a
    temporary sibling renamed over it: a reader, or a web server, sees the old page or the new
    one), only ever a new file or an earlier page, whose mode it keeps."""
    target = OutputTarget(
        name, "report page", "report.html", starts=(DOCTYPE.encode(),), keep_mode=True
    )
    return target.check()

"""HTML that is escaped by default: the page is built only of `Html`, never of plain strings.

`Html` is MarkupSafe's `Markup` (a `str` that is already HTML) whose operations escape every
operand that is not itself markup: a field of `.format()`, an item of `.join()`, either side
of `+`, an argument of `%`. Volume content (keys, channels, agent and trigger names, paths,
error lines) is made printable first, controls written as escapes as for a terminal, then
escaped for HTML (`& < > " '`); so it reaches the page as text whatever it holds, and no call
site has to remember to escape it.

Markup is made only from string literals in the code (`Html("<p>{}</p>").format(value)`);
tests/test_report.py holds the report's modules to that, so markup cannot be built by hand
around a value (an f-string) and then trusted.
"""

from __future__ import annotations

import html
from typing import Any

from markupsafe import Markup

from volumetool.text import escape_control


class Html(Markup):
    """Markup whose operands are escaped unless they are markup (they have `__html__`)."""

    __slots__ = ()

    @classmethod
    def escape(cls, s: Any, /) -> Html:
        """Any value as HTML text: controls escaped as for a terminal, then markup escaped
        (html.escape's spelling, `&quot;` and `&#x27;`, as the page always had)."""
        if hasattr(s, "__html__"):
            return cls(s.__html__())
        return cls(html.escape(escape_control(str(s)), quote=True))


EMPTY = Html()  # what parts are joined with: `EMPTY.join(parts)` escapes a str among them

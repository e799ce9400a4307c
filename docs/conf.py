"""Sphinx settings of the docs site: Markdown (MyST), the Furo theme, nothing fetched.

`make docs` builds it with warnings as errors; .readthedocs.yaml builds the same on Read the
Docs."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from volumetool import __version__  # noqa: E402

project = "volumetool"
author = "the volumetool authors"
copyright = "2026, the volumetool authors"
release = version = __version__

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # `page.md#a-heading` links resolve, as they do on GitHub

nitpicky = True  # a reference that resolves nowhere is a warning, so an error under -W
intersphinx_mapping: dict = {}  # no network: nothing is fetched at build time

html_theme = "furo"
html_title = f"volumetool {release}"
html_static_path: list = []
html_copy_source = False
html_show_sourcelink = False
pygments_style = "friendly"
pygments_dark_style = "monokai"


def setup(app):
    # crontab lines: shown as they are (Pygments has no crontab lexer; GitHub shows them so)
    from pygments.lexers.special import TextLexer

    app.add_lexer("cron", TextLexer)

"""Every shell example runs, as written, in order, against the state the tour builds (the way
sqlite-utils tests its docs): the README's in one directory, the docs' (docs/, page by page in
the order of the table of contents) in another. A shell example is a ```sh block; the docs use
no other shell language, so none escapes this. The one thing the harness adds: the tour's
agent.yaml is pointed at the loopback test model server, so `compact` calls it instead of the
network."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import docs
from tests.support.model_server import ModelServer

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


SOURCES = {"README": ["README.md"], "docs": [f"docs/{n}.md" for n in docs.pages_in_order()]}
# Code blocks that are not shell examples: output shown (console), files (yaml, ini, cron…),
# the completion lines of other shells (tests/test_docs.py runs those), the setup commands.
NOT_RUN = {"console", "text", "yaml", "ini", "cron", "zsh", "fish", "json", "sql"}


def fences(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, directives (`{toctree}`) included."""
    return re.findall(r"^```([^\n`]*)\n(.*?)^```", text, re.M | re.S)


def shell_blocks(source: str) -> list[str]:
    texts = [(ROOT / path).read_text(encoding="utf-8") for path in SOURCES[source]]
    blocks = [body for text in texts for language, body in fences(text) if language == "sh"]
    # `make …` blocks set up this very checkout; the suite is already running under them.
    return [b for b in blocks if not b.lstrip().startswith("make ")]


@pytest.mark.parametrize("source", SOURCES)
def test_the_examples_are_shell_blocks_that_use_volumetool(source):
    blocks = shell_blocks(source)
    assert len(blocks) >= (2 if source == "README" else 10)
    assert all("volumetool" in block for block in blocks)
    for path in SOURCES[source]:
        languages = {lang for lang, _ in fences((ROOT / path).read_text(encoding="utf-8"))}
        unknown = {lang for lang in languages if not lang.startswith("{")} - NOT_RUN - {"sh"}
        assert not unknown, f"{path}: ```{unknown.pop()} blocks are run by no test; use ```sh"


@pytest.mark.skipif(not (BIN / "volumetool").exists(), reason="needs the installed command")
@pytest.mark.parametrize("source", SOURCES)
def test_every_shell_example_runs_as_written(tmp_path, source):
    blocks = shell_blocks(source)
    with ModelServer() as server:
        server.answer = server.faithful  # the default gate refuses a summary that kept nothing
        point_at_loopback = f"sed -i 's#^  base_url: .*#  base_url: {server.url}#' agent.yaml\n"
        # right after the block that writes the tour's agent.yaml
        [at] = [i for i, b in enumerate(blocks) if "--config-out agent.yaml" in b]
        script = "\n".join(
            ["set -euo pipefail", *blocks[: at + 1], point_at_loopback, *blocks[at + 1 :]]
        )
        env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "OPENAI_API_KEY": "sk-readme-0123456789abcdefghijklmn",
            "VOLUMETOOL_VOLUME": "",
            "COLUMNS": "100",
        }
        # A clone: the examples run where the docs have you run them, beside the project's
        # .gitignore, which must cover whatever they leave behind.
        shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
        git(tmp_path, "init", "-q")
        git(tmp_path, "add", ".gitignore")
        result = subprocess.run(
            ["bash", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
        if re.search(r"^volumetool compact (?!.*--dry-run)", script, re.M):
            assert server.requests, "the examples' compact calls the model"
        if "history.md" in script:
            assert (tmp_path / "history.md").read_text().count("summary") >= 1
        untracked = git(tmp_path, "status", "--porcelain", "--untracked-files=all").splitlines()
        assert untracked == ["A  .gitignore"], "\n".join(untracked)  # what .gitignore misses
        # Every search example finds something in the demo volume, whatever today's date.
        searches = [
            shlex.split(line, comments=True)
            for block in blocks
            for line in block.splitlines()
            if line.startswith("volumetool search ")
        ]
        assert searches
        for words in searches:
            found = subprocess.run(
                [*words, *([] if "--json" in words else ["--json"]), "-n", "0"],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
            )
            assert found.returncode == 0, found.stderr
            assert json.loads(found.stdout), f"`{shlex.join(words)}` finds nothing in the demo"


def git(where: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=where, capture_output=True, text=True, check=True
    ).stdout

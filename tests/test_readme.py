"""Every shell example in the README runs, as written, in order, against the state the tour
builds (the way sqlite-utils tests its docs). The one thing the harness adds: the tour's
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

from tests.support.model_server import ModelServer

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def shell_blocks() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    # `make …` blocks set up this very checkout; the suite is already running under them.
    return [b for b in blocks if not b.lstrip().startswith("make ")]


def test_the_readme_examples_are_shell_blocks_that_use_volumetool():
    blocks = shell_blocks()
    assert len(blocks) >= 5
    assert all("volumetool" in block for block in blocks)


@pytest.mark.skipif(not (BIN / "volumetool").exists(), reason="needs the installed command")
def test_every_readme_shell_example_runs_as_written(tmp_path):
    blocks = shell_blocks()
    tour, rest = blocks[0], blocks[1:]
    with ModelServer() as server:
        server.answer = server.faithful  # the default gate refuses a summary that kept nothing
        point_at_loopback = f"sed -i 's#^  base_url: .*#  base_url: {server.url}#' agent.yaml\n"
        script = "\n".join(["set -euo pipefail", tour, point_at_loopback, *rest])
        env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "OPENAI_API_KEY": "sk-readme-0123456789abcdefghijklmn",
            "VOLUMETOOL_VOLUME": "",
            "COLUMNS": "100",
        }
        # A clone: the examples run where the README has you run them, beside the project's
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
        assert server.requests, "the README's compact calls the model"
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
        assert len(searches) >= 3
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

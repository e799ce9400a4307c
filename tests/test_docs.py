"""The docs site (docs/): its generated parts are what the code says now, it builds with no
warning, every command's help points to a page that exists, and the shell completion it
documents works. (Its shell examples run in tests/test_examples.py.)"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tests.support import docs
from volumetool.cli import cli
from volumetool.cli.docs import DOCS_URL, PAGES, url_of

BIN = Path(sys.executable).parent


def generator():
    spec = importlib.util.spec_from_file_location("docs_generate", docs.DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command_paths() -> list[str]:
    ctx = click.Context(cli, info_name="volumetool")
    return ["", *(" ".join(path) for path in generator().command_paths(cli, ctx))]


def test_the_generated_parts_of_the_docs_are_what_the_code_says():
    """A changed --help, config key or rule, or a listing's fields, without `make docs`."""
    generate = generator()
    behind = []
    for path in generate.pages():
        text = path.read_text(encoding="utf-8")
        if generate.regenerate(text) != text:
            behind.append(str(path.relative_to(docs.ROOT)))
    assert behind == [], f"run `make docs` and commit: {', '.join(behind)} are behind the code"
    written = "".join(path.read_text(encoding="utf-8") for path in generate.pages())
    assert set(re.findall(r"<!-- generated: ([\w-]+) ", written)) == set(generate.PARTS)


def test_every_command_s_help_is_in_the_reference():
    reference = docs.page("reference/commands")
    for path in command_paths():
        heading = f"volumetool {path}".rstrip()
        assert re.search(rf"^#+ {re.escape(heading)}$", reference, re.M), heading


def test_every_command_s_help_ends_with_the_page_that_explains_it(run_cli):
    assert set(PAGES.values()) <= set(docs.pages_in_order())
    for path in command_paths():
        shown = run_cli(*path.split(), "--help").stdout
        url = url_of(path)
        assert shown.rstrip().endswith(f"Docs: {url}"), (path, shown[-200:])
        assert url.startswith(DOCS_URL)


def test_every_page_is_in_the_table_of_contents():
    pages = {
        str(p.relative_to(docs.DOCS).with_suffix(""))
        for p in docs.DOCS.rglob("*.md")
        if "_build" not in p.parts
    }
    assert pages == set(docs.pages_in_order())


def test_the_documented_completion_lines_work():
    page = docs.page("installation")
    lines = re.findall(r"^.*_VOLUMETOOL_COMPLETE=(\w+)_source volumetool.*$", page, re.M)
    assert {"bash", "zsh", "fish"} <= set(lines)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    for shell in ("bash", "zsh", "fish"):
        script = subprocess.run(
            ["volumetool"],
            env={**env, "_VOLUMETOOL_COMPLETE": f"{shell}_source"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "_volumetool_completion" in script, shell
    bash = subprocess.run(
        ["volumetool"],
        env={**env, "_VOLUMETOOL_COMPLETE": "bash_source"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    subprocess.run(["bash", "-n"], input=bash, text=True, check=True)
    offered = subprocess.run(
        ["volumetool"],
        env={
            **env,
            "_VOLUMETOOL_COMPLETE": "bash_complete",
            "COMP_WORDS": "volumetool memories ex",
            "COMP_CWORD": "2",
        },
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert offered.split() == ["plain,export"]


def test_the_docs_build_with_no_warning(tmp_path):
    """`make docs`' build: Sphinx with warnings as errors, every reference resolved, nothing
    fetched. CI (.ci/run → make test) installs the docs extra, so there it never skips."""
    if importlib.util.find_spec("sphinx") is None:
        if os.environ.get("CI"):
            pytest.fail("Sphinx is not installed: pip install -e '.[docs]'")
        pytest.skip("Sphinx is not installed: pip install -e '.[docs]'")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-n",
            "-q",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(docs.DOCS),
            str(tmp_path / "html"),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr + built.stdout
    assert built.stderr == "", built.stderr
    index = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert "Compaction and providers" in index
    commands = (tmp_path / "html" / "reference" / "commands.html").read_text(encoding="utf-8")
    assert "volumetool compact" in commands and "Docs: " in commands


def test_the_readme_is_what_a_person_reads_first():
    """Under 200 lines: the set-up commands first, a tour, where the docs are; every page it
    links to exists."""
    readme = (docs.ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    first = re.search(r"```sh\n(.*?)```", readme, re.S).group(1)
    assert [line.split()[:2] for line in first.splitlines()] == [["make", "demo"], ["make", "test"]]
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert "docs/index.md" in links
    missing = [link for link in links if not (docs.ROOT / link).exists()]
    assert missing == []

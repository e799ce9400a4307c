"""The layers hold: the pure core imports no I/O library, the library never imports the CLI's
click, and what the docs repeat of the code is the code's (ARCHITECTURE.md)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import docs
from volumetool import errors

ROOT = Path(__file__).resolve().parent.parent
IO_LIBRARIES = {"yaml", "sqlite3", "_sqlite3", "httpx", "click"}
# Decisions of data in, data out: property tests run them by the thousand, and they must not
# reach a file, a socket or a terminal library on the way.
PURE = (
    "volumetool.settings",
    "volumetool.providers",
    "volumetool.providers.errors",
    "volumetool.usage",
    "volumetool.format",
    "volumetool.render",
    "volumetool.text",
    "volumetool.conversation",
    "volumetool.compaction.plan",
    "volumetool.compaction.prompt",
    "volumetool.compaction.retention",
    "volumetool.shard",
    "volumetool.metrics",
    "volumetool.search.query",
)


def imported_by(module: str) -> set[str]:
    probe = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(result.stdout.split())


@pytest.mark.parametrize("module", PURE)
def test_the_pure_core_imports_no_io_library(module):
    assert imported_by(module) & IO_LIBRARIES == set()


def module_path(module: str) -> Path | None:
    """The source file of a volumetool module (a package's __init__.py), or None."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _runtime_nodes(tree: ast.AST):
    """Every node of `tree`, imports inside functions too, but not under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for branch in node.orelse for n in ast.walk(branch))
            continue
        yield node
        yield from _runtime_nodes(node)


def imported_names(module: str) -> set[str]:
    """Every module `module`'s source imports, wherever the import statement stands."""
    path = module_path(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            origin = ".".join(p for p in (base, node.module or "") if p)
            names.add(origin)
            names.update(f"{origin}.{alias.name}" for alias in node.names)
    return names


def reached_from(module: str) -> dict[str, str]:
    """Each module `module` can import, following volumetool's own imports transitively (a
    module's packages too): {module: the volumetool module that imports it}."""
    reached, todo = {}, [module]
    while todo:
        current = todo.pop()
        for name in sorted(imported_names(current)):
            parts = name.split(".")
            for n in range(1, len(parts) + 1):
                prefix = ".".join(parts[:n])
                if prefix in reached or prefix == module:
                    continue
                if prefix.startswith("volumetool"):
                    if module_path(prefix) is None:
                        continue  # a name imported from a module, not a module
                    todo.append(prefix)
                reached[prefix] = current
    return reached


@pytest.mark.parametrize("module", PURE)
def test_no_import_statement_of_the_pure_core_reaches_an_io_library(module):
    """The subprocess test above sees only what importing runs; an import inside a function
    runs later, from a property test too. Every import statement counts here."""
    reached = reached_from(module)
    found = {
        f"{name} (imported by {reached[name]})"
        for name in reached
        if name.split(".")[0] in IO_LIBRARIES
    }
    assert found == set()


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (ROOT / "volumetool").rglob("*.py") if "cli" not in p.parts),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_library_never_imports_click(path):
    """Errors are plain exceptions, converted once in the command group: the library is
    usable (and tested) without the CLI. (httpx and sqlite-utils bring click along with their
    own command lines; this is about ours.)"""
    assert "click" not in imports_of(path)


def test_the_docs_exit_code_table_is_the_code_s():
    table = docs.page("reference/exit-codes")
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
    defined = {
        cls.exit_code
        for cls in vars(errors).values()
        if isinstance(cls, type)
        and issubclass(cls, errors.VolumetoolError)
        and isinstance(cls.exit_code, int)
    }
    interrupted = {128 + signum for signum in errors.Interrupted.SIGNALS}  # 130, 143
    assert documented == defined | interrupted | {0}
    assert set(errors.EXIT_PRECEDENCE) == defined | interrupted


def test_every_command_the_readme_and_the_docs_name_exists():
    from volumetool.cli import COMMANDS

    readme = "\n".join(
        [(ROOT / "README.md").read_text(), *(docs.page(name) for name in docs.pages_in_order())]
    )
    named = set(re.findall(r"^volumetool ([a-z]+)\b", readme, re.MULTILINE))
    assert named <= set(COMMANDS), named - set(COMMANDS)
    assert set(COMMANDS) <= named | {"demo", "init"} | set(
        re.findall(r"`volumetool ([a-z]+)", readme)
    )

"""The layers hold: the pure core imports no I/O library, the library never imports the CLI's
click, and what the docs repeat of the code is the code's (ARCHITECTURE.md)."""

from __future__ import annotations

import ast
import json
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
    """Every node of `tree`, imports inside functions too, but not the body of
    `if TYPE_CHECKING:` (its `else:` runs; so does the body of `if not TYPE_CHECKING:`)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in TYPE_CHECKING:
            for branch in node.orelse:
                yield branch
                yield from _runtime_nodes(branch)
            continue
        yield node
        yield from _runtime_nodes(node)


TYPE_CHECKING = {"TYPE_CHECKING", "typing.TYPE_CHECKING"}
# A module named by a constant string to one of these is imported as an import statement is.
DYNAMIC_IMPORTS = {"__import__", "import_module", "importlib.import_module"}


def _dynamic_import(node: ast.AST) -> str | None:
    """The module `importlib.import_module("x")` or `__import__("x")` imports, if `node` is one."""
    if not (isinstance(node, ast.Call) and ast.unparse(node.func) in DYNAMIC_IMPORTS):
        return None
    first = node.args[0] if node.args else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


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
        elif (dynamic := _dynamic_import(node)) is not None:
            names.add(dynamic)
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


def brought_in(names: list[str]) -> dict[str, list[str]]:
    """The I/O libraries that importing each of `names` (modules outside volumetool) loads, in
    a fresh interpreter: {name: libraries}. A name that is not a module (`from x import f`
    reads as `x.f` too) brings nothing."""
    probe = (
        "import importlib, json, sys\n"
        "io, found = set(json.loads(sys.argv[1])), {}\n"
        "for name in json.loads(sys.argv[2]):\n"
        "    before = set(sys.modules)\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception:\n"
        "        continue\n"
        "    found[name] = sorted(io & (set(sys.modules) - before))\n"
        "print(json.dumps(found))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(sorted(IO_LIBRARIES)), json.dumps(names)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return {name: io for name, io in json.loads(result.stdout).items() if io}


def io_reached(module: str) -> set[str]:
    """The I/O libraries an import statement of `module` reaches, wherever it stands: through
    volumetool's own modules, and through what another library imports (sqlite_utils brings
    sqlite3)."""
    reached = reached_from(module)
    found = {
        f"{name} (imported by {reached[name]})"
        for name in reached
        if name.split(".")[0] in IO_LIBRARIES
    }
    others = sorted(
        name
        for name in reached
        if name.split(".")[0] not in IO_LIBRARIES and not name.startswith("volumetool")
    )
    found |= {
        f"{', '.join(io)} (brought by {name}, imported by {reached[name]})"
        for name, io in brought_in(others).items()
    }
    return found


@pytest.mark.parametrize("module", PURE)
def test_no_import_statement_of_the_pure_core_reaches_an_io_library(module):
    """The subprocess test above sees only what importing runs; an import inside a function
    runs later, from a property test too. Every import statement counts here."""
    assert io_reached(module) == set()


@pytest.mark.parametrize(
    "source",
    [
        "def f():\n    import sqlite3\n",
        "def f():\n    from sqlite3 import connect\n",
        "def f():\n    import sqlite_utils\n",  # brings sqlite3
        "from typing import TYPE_CHECKING\nif not TYPE_CHECKING:\n    import httpx\n",
        "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    import yaml\n",
        "def f():\n    import importlib\n    return importlib.import_module('sqlite3')\n",
        "def f():\n    return __import__('click')\n",
        "def f():\n    from volumetool import atomic\n",  # through volumetool's own modules
    ],
    ids=[
        "function",
        "from",
        "library",
        "not-type-checking",
        "else",
        "import_module",
        "dunder",
        "own",
    ],
)
def test_the_purity_check_finds_an_io_import_wherever_it_stands(tmp_path, monkeypatch, source):
    assert io_reached(probe(tmp_path, monkeypatch, source)) != set()


def test_the_purity_check_passes_what_only_type_checking_imports(tmp_path, monkeypatch):
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import sqlite3\n"
    assert io_reached(probe(tmp_path, monkeypatch, source)) == set()


def probe(tmp_path: Path, monkeypatch, source: str) -> str:
    """A module of volumetool, for the check, that holds `source`: its name."""
    (tmp_path / "probe.py").write_text(source)
    own = module_path
    monkeypatch.setattr(
        sys.modules[__name__],
        "module_path",
        lambda name: tmp_path / "probe.py" if name == "volumetool.probe" else own(name),
    )
    return "volumetool.probe"


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


# What a command may take from volume.py: the one snapshot, the one transaction, and what a
# path names (no database opened). Anything more (a Volume, open_for_write, SQL) belongs in
# the library call the command makes.
COMMAND_VOLUME_NAMES = {
    "reading",
    "writing",
    "resolve",
    "resolve_new",
    "select",
    "is_sqlite_file",
    "check_argument",  # refuses - and empty names; opens nothing
}
DATABASE_CALLS = {"execute", "executemany", "executescript", "snapshot"}


def database_work_in(path: Path) -> list[str]:
    """What a command module does with a database itself: imports of sqlite3/sqlite_utils or of
    volume.py beyond `reading`/`writing`, and calls of a connection's or a volume's methods."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in _DATABASE_LIBRARIES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in _DATABASE_LIBRARIES:
                found.append(node.module)
            elif node.module == "volumetool.volume":
                found += [
                    f"volume.{a.name}" for a in node.names if a.name not in COMMAND_VOLUME_NAMES
                ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in DATABASE_CALLS
        ):
            found.append(f"line {node.lineno}: .{node.func.attr}()")
    return found


_DATABASE_LIBRARIES = {"sqlite3", "sqlite_utils"}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "volumetool" / "cli").glob("*.py")), ids=lambda p: p.name
)
def test_a_command_opens_no_volume_and_runs_no_sql(path):
    """parse → one library call → render (ARCHITECTURE.md, "Add a command"): a command module
    reads through `volume.reading` and writes through `volume.writing` or a library function
    that opens the volume itself."""
    assert database_work_in(path) == []


def test_the_command_check_finds_database_work(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sqlite3\nfrom volumetool.volume import open_for_write, reading\n"
        "def f(vol):\n    with vol.snapshot() as conn:\n        conn.execute('SELECT 1')\n"
    )
    assert sorted(database_work_in(probe)) == sorted(
        ["sqlite3", "volume.open_for_write", "line 4: .snapshot()", "line 5: .execute()"]
    )


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

"""`validate`: gathering config files, checking them, and reporting findings as text, JSON,
GitHub workflow commands or SARIF 2.1.0."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO
from urllib.parse import quote

from volumetool import __version__
from volumetool.config import (
    DEFAULT_MAX_BYTES,
    RULES,
    Finding,
    check_source,
    looks_like_agent_config,
    read_source,
    source_size,
)
from volumetool.text import dumps, escape_control, plural

CONFIG_SUFFIXES = (".yaml", ".yml")


@dataclass
class FileResult:
    file: str
    findings: list[Finding] = field(default_factory=list)
    unreadable: str | None = None  # why the file could not be read
    directory: bool = False  # a directory that held nothing to check

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    def failed(self, strict: bool) -> bool:
        return bool(self.count("error") or (strict and self.count("warning")))

    def status(self, strict: bool) -> str:
        if self.unreadable:
            return "unreadable"
        return "failed" if self.failed(strict) else "passed"

    def problem(self) -> str:
        """The line on stderr for a path that was not checked."""
        if self.directory:
            return f"{self.unreadable} under {self.file}"
        return f"{self.file}: cannot read ({self.unreadable})"


@dataclass
class ValidationResult:
    files: list[FileResult]
    strict: bool = False
    skipped: int = 0  # files that are not agent configs (--only-agent-configs)

    @property
    def findings(self) -> list[Finding]:
        return [f for result in self.files for f in result.findings]

    @property
    def exit_code(self) -> int:
        if any(r.unreadable for r in self.files):
            return 2
        return 1 if any(r.failed(self.strict) for r in self.files) else 0

    def summary(self) -> str:
        counts = {s: sum(r.count(s) for r in self.files) for s in ("error", "warning", "note")}
        unreadable = sum(1 for r in self.files if r.unreadable)
        files = len(self.files) - unreadable
        text = (
            f"{plural(files, 'file')} checked: {plural(counts['error'], 'error')}, "
            f"{plural(counts['warning'], 'warning')}, {plural(counts['note'], 'note')}"
        )
        if unreadable:
            text += f", {unreadable} unreadable"
        if self.skipped:
            text += f"; {self.skipped} skipped (not agent configs)"
        return text


def directory_files(path: str) -> Iterator[str]:
    """The *.yaml/*.yml files under a directory (sorted, hidden directories skipped). Only
    regular files count: reading a FIFO named x.yaml would wait forever for a writer."""
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            found = os.path.join(root, name)
            if name.endswith(CONFIG_SUFFIXES) and not _special_file(found):
                yield found


def _special_file(path: str) -> bool:
    """A FIFO, socket or device (a link's target counts). A path that cannot be looked at is
    not special: reading it reports why."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def check_paths(
    paths: Iterable[str],
    *,
    stdin_name: str = "<stdin>",
    max_bytes: int = DEFAULT_MAX_BYTES,
    strict: bool = False,
    only_agent_configs: bool = False,
) -> ValidationResult:
    """Check files as given (a FIFO or /dev/fd/N too), directories recursed, `-` for stdin. A
    directory with no YAML file (or, with only_agent_configs, no agent config) is unreadable:
    a wrong path must not pass CI. With only_agent_configs, files that are not agent configs
    (`looks_like_agent_config`) are skipped: other YAML of a repository."""
    validation = ValidationResult([], strict)
    for path in paths:
        directory = path != "-" and os.path.isdir(path)
        checked = len(validation.files)
        for file in directory_files(path) if directory else [path]:
            result = _check_file(file, stdin_name, max_bytes, only_agent_configs)
            if result is None:
                validation.skipped += 1
            else:
                validation.files.append(result)
        if directory and len(validation.files) == checked:
            what = "no agent configs" if only_agent_configs else "no YAML files"
            validation.files.append(FileResult(path, unreadable=what, directory=True))
    return validation


def _check_file(
    path: str, stdin_name: str, max_bytes: int, only_agent_configs: bool
) -> FileResult | None:
    """One file's result; None when only_agent_configs skips it."""
    name = stdin_name if path == "-" else path
    try:
        data = read_source(path, max_bytes)
    except OSError as exc:
        return FileResult(name, unreadable=exc.strerror or str(exc))
    if only_agent_configs and not looks_like_agent_config(data):
        return None
    findings, _ = check_source(data, name, max_bytes, source_size(path))
    return FileResult(name, findings)


# -- formats --------------------------------------------------------------------------------


def text_line(f: Finding) -> str:
    """One finding for a person: control characters from the file name or the config escaped."""
    where = f"{f.path}: " if f.path else ""
    return escape_control(
        f"{f.file}:{f.line}:{f.column}: {f.severity}: {where}{f.message} [{f.rule}]"
    )


def write_text(validation: ValidationResult, out: TextIO) -> None:
    for finding in validation.findings:
        out.write(text_line(finding) + "\n")


def write_json(validation: ValidationResult, out: TextIO) -> None:
    document = {
        "findings": [f.as_dict() for f in validation.findings],
        "files": [
            {
                "file": r.file,
                "status": r.status(validation.strict),
                "errors": r.count("error"),
                "warnings": r.count("warning"),
                "notes": r.count("note"),
                **({"reason": r.unreadable} if r.unreadable else {}),
            }
            for r in validation.files
        ],
    }
    out.write(dumps(document, indent=2) + "\n")


def _escape_data(text: str) -> str:
    """Escaping of a workflow command's message. @actions/core writes % as %25 and CR, LF as
    %0D, %0A; here every control character is already an escape (no CR or LF is left)."""
    return escape_control(text).replace("%", "%25")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


GITHUB_LEVELS = {"error": "error", "warning": "warning", "note": "notice"}


def write_github(validation: ValidationResult, out: TextIO) -> None:
    """Workflow commands (annotations), then the text lines: GitHub shows only the first ten
    annotations of a step, and the log keeps the rest."""
    for f in validation.findings:
        where = f"{f.path}: " if f.path else ""
        out.write(
            f"::{GITHUB_LEVELS[f.severity]} file={_escape_property(f.file)},line={f.line},"
            f"col={f.column},title={_escape_property(f.rule)}::"
            f"{_escape_data(where + f.message)}\n"
        )
    write_text(validation, out)


def _uri(file: str) -> str:
    """A relative URI of the file: its name's bytes percent-encoded, so that a name that is not
    UTF-8 (held as lone surrogates) is written as it is on disk."""
    name = os.fsencode(Path(file).as_posix()) if file != "-" else b"stdin"
    return quote(name, safe="/:@!$&'()*+,;=-._~")


def sarif(validation: ValidationResult) -> dict:
    rule_ids = list(RULES)
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "volumetool",
                        "version": __version__,
                        "informationUri": "https://github.com/volumetool/volumetool",
                        "rules": [
                            {
                                "id": rule,
                                "shortDescription": {"text": description},
                                "defaultConfiguration": {"level": severity},
                            }
                            for rule, (severity, description) in RULES.items()
                        ],
                    }
                },
                "results": [
                    {
                        "ruleId": f.rule,
                        "ruleIndex": rule_ids.index(f.rule),
                        "level": f.severity,
                        "message": {"text": f"{f.path}: {f.message}" if f.path else f.message},
                        "locations": [
                            {
                                "physicalLocation": {
                                    "artifactLocation": {"uri": _uri(f.file)},
                                    "region": {"startLine": f.line, "startColumn": f.column},
                                }
                            }
                        ],
                    }
                    for f in validation.findings
                ],
                "invocations": [
                    {
                        "executionSuccessful": not any(r.unreadable for r in validation.files),
                    }
                ],
            }
        ],
    }


def write_sarif(validation: ValidationResult, out: TextIO) -> None:
    out.write(dumps(sarif(validation), indent=2) + "\n")


WRITERS = {"text": write_text, "json": write_json, "github": write_github, "sarif": write_sarif}

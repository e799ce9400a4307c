"""`make fuzz`: the CLI fuzz test (tests/test_fuzz.py) at length, its verdicts counted into
RELIABILITY.md's hostile-input table.

    python -m tests.fuzz_report --examples 20000
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.reliability import HOSTILE, RELIABILITY, ROOT, with_hostile_section


def table(verdicts: list[dict], examples: int, took: float) -> str:
    by_command: dict[str, list[dict]] = collections.defaultdict(list)
    for v in verdicts:
        by_command[v["command"]].append(v)
    lines = [
        "",
        HOSTILE,
        "",
        f"From `make fuzz` (`python -m tests.fuzz_report --examples {examples}`), "
        f"{took / 60:.0f} min: the fuzz test of `make test` (tests/test_fuzz.py) run at length. "
        "Each input is a command drawn from the whole command tree with a random argument list "
        "(its own options in any order; paths to a volume, a truncated one, zeroed pages, a "
        "foreign SQLite file, random bytes, random JSONL and YAML, a directory, nothing; numbers "
        "at their limits; unicode, control characters and empty strings). A crash is a "
        "traceback, an `internal error` or an exception out of the command; a wrong exit code "
        "is one outside 0-4; *changed* counts read commands after which the volume's tables "
        "differ. A run stops at its first failure, so a clean table is a whole run. Random "
        "argument lists break a usage rule most of the time (exit 2); the last column shows "
        "how many draws went further.",
        "",
        "| command | inputs tried | crashes | wrong exit codes | changed by a read "
        "| exit 0 / 1 / 2 / 3 / 4 |",
        "|---|---|---|---|---|---|",
    ]
    for name in [*sorted(by_command), "all"]:
        rows = verdicts if name == "all" else by_command[name]
        exits = collections.Counter(v["exit"] for v in rows)
        label = "**all**" if name == "all" else f"`{name}`"
        lines.append(
            f"| {label} | {len(rows):,} | {sum(v['crash'] for v in rows)} "
            f"| {sum(v['wrong_exit'] for v in rows)} | {sum(v['changed'] for v in rows)} "
            f"| {' / '.join(str(exits[c]) for c in range(5))} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20_000)
    parser.add_argument("--report", type=Path, default=RELIABILITY)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        record = Path(scratch) / "verdicts.jsonl"
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "tests/test_fuzz.py"],
            cwd=ROOT,
            env={**os.environ, "FUZZ_EXAMPLES": str(args.examples), "FUZZ_REPORT": str(record)},
        )
        took = time.monotonic() - started
        verdicts = [json.loads(line) for line in record.read_text().splitlines()]
    section = table(verdicts, args.examples, took)
    print(section)
    if done.returncode != 0:
        print("the fuzz test failed (above): the table is not written", file=sys.stderr)
        sys.exit(done.returncode)
    target = args.report
    target.write_text(with_hostile_section(target.read_text() if target.exists() else "", section))
    print(f"wrote {target}")


if __name__ == "__main__":
    main()

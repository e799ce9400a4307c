"""`python -m volumetool` and the `volumetool` command (pyproject's [project.scripts]).

This module imports nothing but the standard library's `os`, `signal` and `sys` before it
guards the rest: Ctrl-C or SIGTERM while the command's modules are still being imported (the
first 0.1 s) ends it as it ends a command, with one line and 130 or 143, never a traceback."""

import os
import signal
import sys


def run() -> None:
    signal.signal(signal.SIGTERM, _terminated_early)  # volumetool.cli.main takes it over
    try:
        from volumetool.cli import main
    except KeyboardInterrupt:
        _interrupted(signal.SIGINT)
    except _Terminated:
        _interrupted(signal.SIGTERM)
    main()


class _Terminated(BaseException):
    """SIGTERM before `volumetool.cli.main` installed its handler."""


def _terminated_early(signum, frame) -> None:
    raise _Terminated


def _interrupted(by: signal.Signals) -> None:
    sys.stderr.write("volumetool: interrupted while starting; nothing was done\n")
    sys.stderr.flush()
    os._exit(128 + int(by))


if __name__ == "__main__":
    run()

"""The CLI run inside the test's own process (click's ``CliRunner``), answering as a
finished process would: exit code, stdout and stderr apart.

A fresh interpreter per CLI call costs its start and imports (0.4 s on a quiet machine,
2-3.5 s on a loaded one); most CLI tests check what a command prints and returns, not
that it is a separate process, and run here.  The tests where the process is the point
(a signal, a hang, the program's own exit path in ``replay_tui.program``, what the
interpreter prints for a crash) keep a real process: the ``cli_process`` fixture, or
``tests.support.training.replay_tui``.

An exception that the command did not handle is not swallowed: it becomes exit code 1
with Python's traceback on stderr, what a process would have printed, so a test that
asserts ``"Traceback" not in stderr`` fails as it would out of process.
"""

from __future__ import annotations

import gc
import os
import subprocess
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

PROG = "python -m replay_tui.cli"
"""The program name click reads from ``python -m replay_tui.cli`` (the process fixture's
command), so usage lines read the same in and out of process."""


def run_cli(
    store: Path,
    *args: str | os.PathLike[str],
    env: Mapping[str, str | None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``replay-tui --store STORE ARGS...`` in this process (:func:`invoke`)."""
    return invoke(["--store", str(store), *map(str, args)], env=env)


def invoke(
    argv: Sequence[str | os.PathLike[str]], env: Mapping[str, str | None] | None = None
) -> subprocess.CompletedProcess[str]:
    """``replay-tui ARGV...`` in this process: ``REPLAY_TUI_STORE`` unset for the call (as
    the process fixture's environment has it), ``env`` set on top (None unsets)."""
    from click.testing import CliRunner

    from replay_tui.cli import main

    words = [str(a) for a in argv]
    # What the worker holds already (torch, Textual, MLflow: some 300,000 objects) is out
    # of the collector's sight for the call, so the collection after it walks only what
    # the command made (a full one costs about 0.5 s in such a worker; bench/RESULTS.md).
    gc.freeze()
    try:
        result = CliRunner().invoke(
            main,
            words,
            env={"REPLAY_TUI_STORE": None, **(env or {})},
            prog_name=PROG,
            catch_exceptions=True,
        )
        stdout, stderr, code = result.stdout, result.stderr, result.exit_code
        error = result.exception
        if error is not None and not isinstance(error, SystemExit):
            stderr += "".join(traceback.format_exception(error))
            code = 1
        # The exception's frames hold what the command left open (a store's connection,
        # with its -wal file beside the store): a process would have ended here and
        # closed them.
        del result, error
        gc.collect()
    finally:
        gc.unfreeze()
    return subprocess.CompletedProcess([PROG, *words], code, stdout, stderr)

"""The local backend: the recorded command runs on this host, in its environment.

Nothing is pinned and nothing is sandboxed: the replay records that as a gap.  Data is
linked into the checkout where the recording had it.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from replay_tui.replay.backends import Backend

if TYPE_CHECKING:
    from replay_tui.capture import probes
    from replay_tui.replay.context import Prepared, ReplayContext
    from storage.manifest import RunManifest


class LocalBackend(Backend):
    name = "local"
    summary = "this host, no sandbox"  # nothing pinned: Backend's defaults

    def prepare(self, ctx: ReplayContext) -> Prepared:
        from replay_tui.capture.executor import LocalExecutor
        from replay_tui.replay.context import Prepared

        exe, notes = recorded_interpreter(ctx.plan.original, ctx.plan.argv)
        return Prepared(
            LocalExecutor(exe),
            "local backend: no image (environment not pinned); the recorded command runs"
            " on this host without a sandbox",
            notes=notes,
        )

    def python_env(self, ctx: ReplayContext) -> probes.PythonEnv:
        from replay_tui.capture import probes

        return probes.probe_python(probes.interpreter_for(ctx.plan.argv, "python3"))


_PYTHON = re.compile(r"python(?:[0-9](?:\.[0-9]+)?)?")


def recorded_interpreter(m: RunManifest, argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The interpreter a local replay runs where the command names ``python`` (a bare
    name, found on PATH): the recorded one (``environment.interpreter``) when this host
    has it, else what PATH finds, said plainly.  ``(None, [])`` for any other command."""
    rec = m.environment.interpreter
    if rec is None or not argv or not _PYTHON.fullmatch(argv[0]):
        return None, []
    version = f" (Python {rec.version})" if rec.version else ""
    path = Path(rec.path)
    if path.is_absolute() and path.is_file() and os.access(path, os.X_OK):
        return rec.path, [f"runs the recorded interpreter {rec.path}{version}"]
    found = shutil.which(argv[0])
    instead = f"{argv[0]} from PATH: {found}" if found else f"{argv[0]}, which PATH does not find"
    return None, [
        f"the recorded interpreter {rec.path}{version} is not on this host: the replay runs"
        f" {instead}"
    ]

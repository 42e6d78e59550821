"""The local backend: the recorded command runs on this host, in its environment.

Nothing is pinned and nothing is sandboxed: the replay records that as a gap.  Data is
linked into the checkout where the recording had it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from replay_tui.replay.backends import Backend

if TYPE_CHECKING:
    from replay_tui.capture import probes
    from replay_tui.replay.context import Prepared, ReplayContext


class LocalBackend(Backend):
    name = "local"
    summary = "this host, no sandbox"  # nothing pinned: Backend's defaults

    def prepare(self, ctx: ReplayContext) -> Prepared:
        from replay_tui.capture.launcher import LocalExecutor
        from replay_tui.replay.context import Prepared

        return Prepared(
            LocalExecutor(),
            "local backend: no image (environment not pinned); the recorded command runs"
            " on this host without a sandbox",
        )

    def python_env(self, ctx: ReplayContext) -> probes.PythonEnv:
        from replay_tui.capture import probes

        return probes.probe_python(probes.interpreter_for(ctx.plan.argv, "python3"))

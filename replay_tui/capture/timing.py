"""The timing marks of a recording: when each phase ended, written as JSON to the
file ``REPLAY_TUI_RECORD_TIMINGS`` names (bench/bench_record.py reads it)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from replay_tui.capture.executor import ExecResult
    from replay_tui.capture.outputs import EarlyOutputs
    from replay_tui.capture.side_threads import SideWork

TIMINGS_ENV = "REPLAY_TUI_RECORD_TIMINGS"
"""A file path: ``record`` writes there a small JSON of when each phase began and
ended (``time.time()`` stamps) and how long the side work took."""

_LATER = (
    "pydantic",
    "storage.manifest",
    "storage.store",
    "replay_tui.compare",
    "replay_tui.checkpoints",
    "torch",
    "replay_tui.cli.runs",
    "replay_tui.cli.replay",
    "replay_tui.cli.audit",
    "replay_tui.cli.bisect",
    "replay_tui.cli.demo",
    "replay_tui.cli.importers",
)
"""Modules the launch of a local command does not need (the manifest's models, the
store, the readers of outputs, the other commands): imported while the command runs,
or never (the object store is imported before: the outputs read early are staged in
it, ``outputs.EarlyOutputs``).  Which of them were imported before the launch is in the timings."""


class Marks:
    """When each phase of a recording ended, for ``REPLAY_TUI_RECORD_TIMINGS``."""

    def __init__(self, mode: str) -> None:
        self.path = os.environ.get(TIMINGS_ENV) or None
        self.mode = mode
        self.stamps: dict[str, float] = {"entry": time.time()}
        self.at_launch: list[str] = []

    def mark(self, name: str) -> None:
        self.stamps[name] = time.time()
        if name == "launch" and self.path is not None:
            self.at_launch = sorted(m for m in sys.modules if m.startswith(_LATER))

    def write(self, side: SideWork | None, result: ExecResult, early: EarlyOutputs | None) -> None:
        if self.path is None:
            return
        st = self.stamps
        phases = list(st)
        data = {
            "mode": self.mode,
            "stamps": st,
            "phase_s": {b: round(st[b] - st[a], 4) for a, b in itertools.pairwise(phases)},
            "before_launch_s": round(st["launch"] - st["entry"], 4),
            "command_s": round(result.duration_s, 4),
            "after_end_s": round(st["done"] - st["ran"], 4),
            "side_s": dict(side.seconds) if side else {},
            # outputs read as soon as the run closed them (outputs.EarlyOutputs)
            "early": early.timings() if early is not None else None,
            # torch imported by record itself (the torch-free digest needs none)
            "torch_imported": "torch" in sys.modules,
            # what the launch waited for and need not have (see _LATER)
            "imported_before_launch": self.at_launch,
            "side_after_end_s": (
                {k: round(max(0.0, v - st["ran"]), 4) for k, v in side.ended.items()}
                if side
                else {}
            ),
        }
        with contextlib.suppress(OSError):
            Path(self.path).write_text(json.dumps(data, indent=1) + "\n")

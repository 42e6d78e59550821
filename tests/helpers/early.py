"""The collection of a run's outputs once it ended, as the launcher does it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay_tui.capture.artifacts import artifact_entries
from replay_tui.capture.outputs import EarlyOutputs
from storage.objects import ObjectStore


def collect(
    work: Path, globs: list[str], objects: ObjectStore, early: EarlyOutputs | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """The entries of ``globs`` under ``work`` in one pass, taking what ``early`` read
    while the run ran (it has finished); and the refusals said on the way."""
    refused: list[str] = []
    entries = artifact_entries(
        work, globs, [], refused, one_pass=True, objects=objects, early=early
    )
    return entries, refused

"""Stale outputs: files an artifact pattern matches that the run itself did not write.

A run that crashes at step 5 must not claim the ``out/model.pt`` an earlier run left in
``out/``.  Before the command starts, :func:`snapshot` notes every file the artifact
patterns match (inode, size, mtime and ctime, never following a link); afterwards
:func:`mark_stale` takes out of the artifacts every file that is still exactly as it
was, and any other whose status last changed before the run started (ctime cannot be
set back by the program), and reports it as stale: listed without a hash and with the
reason in the entry's ``stale`` field (``storage.manifest.ArtifactInfo``), so it never
compares equal, shows as an ``ARTIFACT_STALE`` gap and is not taken for the run's
output by a comparison; the reason is said beside the other refusals too.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CTIME_SLACK_NS = 1_000_000_000
"""File times come from a coarse kernel clock: a file written just as the run started
can carry a time a little before the start noted here."""


@dataclass(frozen=True)
class Before:
    """What the output folder held before the run, and when the run started."""

    files: dict[str, tuple[int, int, int, int]]  # rel path -> (inode, size, mtime, ctime)
    started_ns: int


def _key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def snapshot(base: Path, patterns: Sequence[str]) -> Before:
    """Note the regular files ``patterns`` match under ``base`` (call it just before the
    command starts)."""
    from replay_tui.door import glob_parts, glob_under

    files: dict[str, tuple[int, int, int, int]] = {}
    base = base.resolve()
    for pat in patterns:
        parts = glob_parts(pat)
        if parts is None:
            continue  # refused later, with its message, by the artifact collection
        for found in glob_under(base, parts):  # the collection's own matcher and walk
            if found.what != "file" or found.rel in files:
                continue
            try:
                st = (base / found.rel).lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                files[found.rel] = _key(st)
    return Before(files, time.time_ns())


LEFT_BEFORE = "left in the output folder before the run, unchanged by it"
CHANGED_BEFORE = "last changed before the run started"


def stale_reason(base: Path, rel: str, before: Before) -> str | None:
    """Why ``rel`` is not an output of this run (one of ``LEFT_BEFORE`` and
    ``CHANGED_BEFORE``), or None when the run wrote it."""
    try:
        st = (base / rel).lstat()
    except OSError:
        return None
    if before.files.get(rel) == _key(st):
        return LEFT_BEFORE
    if st.st_ctime_ns < before.started_ns - CTIME_SLACK_NS:
        return CHANGED_BEFORE
    return None


def mark_stale(
    base: Path, artifacts: list[dict[str, Any]], refused: list[str], before: Before
) -> list[str]:
    """Turn every stale artifact entry into an unhashed one marked ``stale`` (the reason)
    and say why in ``refused``.

    Returns the stale paths.  ``artifacts`` is changed in place (the entries of
    ``replay_tui.capture.artifacts.artifact_entries``).
    """
    base = base.resolve()
    stale: list[str] = []
    for entry in artifacts:
        rel = entry.get("path")
        if not isinstance(rel, str) or entry.get("sha256") is None:
            continue
        why = stale_reason(base, rel, before)
        if why is None:
            continue
        stale.append(rel)
        refused.append(f"{rel}: stale: {why}, not written by the run")
        entry.update(sha256=None, size_bytes=None, kind="file", stale=why)
        entry.pop("tensor_sha256", None)
    return stale

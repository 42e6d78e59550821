"""What a run leaves behind, read the same way after a recording and a replay: the
handoff, the artifacts, the metrics file, the framework files and the log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.capture import stale
from replay_tui.capture.artifacts import artifact_entries
from replay_tui.capture.handoff import read_inside
from replay_tui.capture.metrics import MetricSeries, read_metrics_file
from replay_tui.capture.outputs import EarlyOutputs, OutputBudget

if TYPE_CHECKING:
    from replay_tui.capture.frameworks import Findings
    from storage.objects import ObjectStore

LOG_TAIL_BYTES = 4000


def _log_tail(log_path: Path) -> str:
    try:
        with log_path.open("rb") as f:
            f.seek(max(0, log_path.stat().st_size - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


@dataclass
class Collected:
    """A finished run's outputs, read the same way after a recording and a replay."""

    inside: dict[str, Any]  # the SDK's handoff, validated
    artifacts: list[dict[str, Any]]
    refused: list[str]  # outputs and handoff parts not taken, and why
    log_bytes: bytes
    log_sha256: str
    log_tail: str  # the end of the log, kept for a run that did not succeed
    unmatched: list[str] = field(default_factory=list)  # artifact globs that matched nothing
    frameworks: Findings | None = None  # what Lightning, TensorBoard, the HF Trainer wrote


def collect_outputs(
    cwd: Path,
    patterns: Sequence[str],
    handoff: Path,
    log_path: Path,
    *,
    metrics_file: str | None,
    series: MetricSeries,
    succeeded: bool,
    before: stale.Before | None = None,
    one_pass: bool = False,
    objects: ObjectStore | None = None,
    early: EarlyOutputs | None = None,
    budget: OutputBudget | None = None,
) -> Collected:
    """Read the handoff, hash the outputs (never following a link, never claiming a file
    the run did not write: ``before`` is ``stale.snapshot`` taken just before the run;
    within the run's output budget: ``budget``, else ``REPLAY_TUI_OUTPUT_BUDGET`` or the
    default), merge the metrics file into ``series``, and read the log.  ``one_pass``,
    ``objects`` and ``early``: see :func:`artifact_entries`."""
    inside = read_inside(handoff)
    refused: list[str] = list(inside.get("problems") or [])
    unmatched: list[str] = []
    artifacts = artifact_entries(
        cwd,
        patterns,
        inside.get("artifacts") or [],
        refused,
        one_pass=one_pass,
        objects=objects,
        early=early,
        budget=budget,
        before=before,
        unmatched=unmatched,
    )
    if before is not None:
        stale.mark_stale(cwd, artifacts, refused, before)
    if metrics_file:
        from replay_tui.door import Refused

        try:
            series.merge(read_metrics_file(cwd, metrics_file))
        except Refused as e:  # its numbers are not taken: the metrics show as missing
            refused.append(str(e))
    from storage.manifest import sha256_hex

    log_bytes = log_path.read_bytes() if log_path.exists() else b""
    from replay_tui.capture.frameworks import read_outputs

    found = read_outputs(  # framework files, read unasked (capture/frameworks)
        cwd,
        patterns,
        [a["path"] for a in artifacts],
        metrics_file=metrics_file,
        log_bytes=log_bytes,
        before=before,
        handoff=handoff,
    )
    refused += found.refused
    return Collected(
        inside,
        artifacts,
        refused,
        log_bytes,
        sha256_hex(log_bytes),
        "" if succeeded else _log_tail(log_path),
        unmatched,
        found,
    )

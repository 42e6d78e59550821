"""What ``record`` is asked to do (the command, its inputs, outputs and metrics), and
the part of it a manifest keeps so that a replay captures the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RecordOptions:
    argv: list[str]
    cwd: Path
    name: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    seed: int | None = None
    deterministic: bool | None = None
    data: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    metrics_file: str | None = None
    metric_regex: list[str] = field(default_factory=list)
    metric_name: str | None = None
    env_names: list[str] = field(default_factory=list)
    timeout_s: float | None = None
    image: str | None = None
    output_budget: int | None = None  # bytes; None: REPLAY_TUI_OUTPUT_BUDGET or the default
    volatile: list[str] = field(default_factory=list)  # outputs listed, not judged by bytes


def capture_info(opts: RecordOptions) -> dict[str, Any]:
    """The launcher's capture options, recorded so a replay captures the same way."""
    dirs = sorted(
        {
            Path(p).parts[0]
            for p in opts.artifacts
            if len(Path(p).parts) > 1 and "*" not in Path(p).parts[0]
        }
    )
    return {
        "artifact_globs": list(opts.artifacts),
        "metrics_file": opts.metrics_file,
        "metric_regex": list(opts.metric_regex),
        "metric_name": opts.metric_name,
        "output_dirs": dirs,
        "volatile_globs": list(opts.volatile),
    }

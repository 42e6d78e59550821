"""Metrics from the outside: a regex over output lines, or a metrics file (JSON / JSONL)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay_tui.errors import BadInput

MAX_NONFINITE_STEPS = 1000
"""Steps kept per metric where it was NaN or infinite (a run that diverged early logs
NaN at every later step; the first ones say when)."""


@dataclass
class MetricSeries:
    """Metric histories keyed by name; the final value is the last point of each."""

    history: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    finals: dict[str, float] = field(default_factory=dict)
    times: dict[str, list[float | None]] = field(default_factory=dict)
    """Per point of ``history``, its wall time in seconds since the run started (None:
    unknown)."""
    nonfinite: dict[str, list[int]] = field(default_factory=dict)
    """Per metric, the steps at which it was NaN or infinite (not in ``history``)."""

    def add(self, name: str, step: int, value: float, t: float | None = None) -> None:
        """One point; ``t``: when it was logged, in seconds since the run started."""
        if not math.isfinite(value):
            steps = self.nonfinite.setdefault(name, [])
            if len(steps) < MAX_NONFINITE_STEPS:
                steps.append(step)
            return
        self.history.setdefault(name, []).append((step, value))
        self.times.setdefault(name, []).append(
            None if t is None or not math.isfinite(t) else round(max(0.0, t), 3)
        )
        self.finals[name] = value

    def timed(self) -> dict[str, list[float]]:
        """The wall times of the series whose every point has one (``metric_times``)."""
        out: dict[str, list[float]] = {}
        for name, ts in self.times.items():
            known = [t for t in ts if t is not None]
            if known and len(known) == len(ts) == len(self.history.get(name, ())):
                out[name] = known
        return out

    def set_final(self, name: str, value: float) -> None:
        if math.isfinite(value):
            self.finals[name] = value

    def merge(self, other: MetricSeries) -> None:
        """Take ``other``'s series where this one has none of that name."""
        for name, pts in other.history.items():
            if name not in self.history:
                self.history[name] = list(pts)
                self.times[name] = list(other.times.get(name) or [None] * len(pts))
        for name, steps in other.nonfinite.items():
            self.nonfinite.setdefault(name, list(steps))
        for name, v in other.finals.items():
            self.finals.setdefault(name, v)


class MetricRegex:
    """A regex with named groups ``step`` and ``value``, plus ``name`` or a fixed name."""

    def __init__(self, pattern: str, fixed_name: str | None = None) -> None:
        try:
            self.regex = re.compile(pattern)
        except re.error as e:
            raise BadInput(f"--metric-regex {pattern!r} is not a valid regex: {e}") from None
        groups = set(self.regex.groupindex)
        if not {"step", "value"} <= groups:
            raise BadInput(
                f"--metric-regex {pattern!r} needs named groups (?P<step>...) and (?P<value>...)"
            )
        if "name" not in groups and not fixed_name:
            raise BadInput(
                f"--metric-regex {pattern!r} has no (?P<name>...) group: give --metric-name too"
            )
        self.fixed_name = fixed_name

    def feed(self, line: str, into: MetricSeries, t: float | None = None) -> None:
        """Take the metrics ``line`` shows (``t``: when it was printed, in seconds since
        the run started)."""
        for m in self.regex.finditer(line):
            try:
                step = int(m.group("step"))
                value = float(m.group("value"))
            except (TypeError, ValueError):
                continue
            name = m.groupdict().get("name") or self.fixed_name or "metric"
            into.add(name, step, value, t)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def read_metrics_file(root: Path, rel: str) -> MetricSeries:
    """Read metrics the script wrote to ``root/rel`` (the run's working folder and the
    recorded ``capture.metrics_file``).

    The file was written by the run (in a replay: by code from a manifest), so it is read
    through ``replay_tui.door``: never through a link, a regular file only, at most
    ``LIMITS["metrics file"]``; a refusal raises ``door.Refused`` for the caller to list.
    A file that is not there gives no metrics.

    JSON: ``{"name": value}`` finals, or ``{"name": [[step, value], ...]}`` histories.
    JSONL: one object per line, either ``{"name": n, "step": s, "value": v}`` or
    ``{"step": s, "loss": v, "acc": w}``.
    """
    from replay_tui.capture.framework_files import kind_of
    from replay_tui.door import read_under_or_none

    out = MetricSeries()
    if kind_of(rel):  # a framework's file (trainer_state.json...): read as that format
        return out  # by replay_tui.capture.frameworks, never as plain JSON
    raw = read_under_or_none(root, rel, "metrics file")
    if raw is None:
        return out
    text = raw.decode("utf-8", "replace")
    stripped = text.strip()
    if not stripped:
        return out
    try:
        data = json.loads(stripped)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for name, v in data.items():
            if isinstance(v, list):
                for pt in v:
                    if isinstance(pt, list) and len(pt) == 2:
                        s, val = _num(pt[0]), _num(pt[1])
                        if s is not None and val is not None:
                            out.add(str(name), int(s), val)
            elif (val := _num(v)) is not None:
                out.set_final(str(name), val)
        return out
    for line in stripped.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        step = _num(obj.get("step"))
        s = int(step) if step is not None else len(out.history.get(str(obj.get("name")), []))
        if "name" in obj and "value" in obj:
            val = _num(obj["value"])
            if val is not None:
                out.add(str(obj["name"]), s, val)
            continue
        for k, v in obj.items():
            if k in ("step", "epoch", "time", "timestamp"):
                continue
            val = _num(v)
            if val is not None:
                out.add(str(k), s, val)
    return out

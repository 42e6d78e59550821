"""A noise floor: the spread of K replicas of one run, per metric (finals, tail means,
per-step mean and sd, the metric's resolution step), built from their manifests' metrics
and read back from its stored JSON.  Which stored floor speaks for a pair is
``compare.floor``; judging a candidate against a floor is ``compare.noise_rule``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Literal, cast

from replay_tui.compare.metrics import is_timing_metric, json_float
from replay_tui.compare.noise_json import (
    read_distance,
    read_finite,
    read_float,
    read_int,
    read_list,
    read_str,
)
from replay_tui.compare.noise_params import NoiseParams
from replay_tui.compare.stats import MAX_DENOMINATOR, as_fraction, grid_step
from replay_tui.compare.stats import mean_sd as _mean_sd

STEP_SLACK: Final = 1.0 + 1e-9
"""A value one step from the mean is inside a band of one step: compared with a slack far
above float rounding (values on a grid are whole multiples of the step; their difference
is not exact)."""

History = Sequence[tuple[int, float]] | Mapping[int, float]
"""A metric's history: ``(step, value)`` pairs as a manifest stores them, or step -> value.
A step logged more than once counts with its last value."""

SkipReason = Literal["timing", "not_in_every_replica", "not_finite"]
_SKIP_REASONS: Final[tuple[SkipReason, ...]] = ("timing", "not_in_every_replica", "not_finite")


@dataclass(frozen=True)
class StepStat:
    """One logged step every replica logged: the replicas' mean and sample sd there."""

    step: int
    mean: float
    sd: float


@dataclass(frozen=True)
class SkippedMetric:
    """A metric left out of the floor, and why."""

    name: str
    reason: SkipReason


@dataclass(frozen=True)
class MetricFloor:
    """One metric over the K replicas (index i is replica i throughout)."""

    name: str
    finals: tuple[float, ...]
    """Each replica's final value (its logged final, else its last history point)."""
    tail_steps: tuple[int, ...]
    """The steps of the tail endpoint (the last ``tail_fraction`` of ``steps``)."""
    tail_means: tuple[float, ...]
    """Each replica's mean over ``tail_steps``; empty when there is no common history."""
    steps: tuple[StepStat, ...]
    """Mean and sd per step that every replica logged (non-finite points dropped)."""
    step: Fraction | None = None
    """The metric's resolution: every value the replicas recorded is a whole multiple of
    it, and they differ by it somewhere (``stats.grid_step``; an accuracy over N samples
    moves in steps of 1/N).  None: no such step (a smooth float metric)."""

    @property
    def final_mean(self) -> float:
        return _mean_sd(self.finals)[0]

    @property
    def final_sd(self) -> float:
        return _mean_sd(self.finals)[1]

    @property
    def tail_mean(self) -> float | None:
        return _mean_sd(self.tail_means)[0] if self.tail_means else None

    @property
    def tail_sd(self) -> float | None:
        return _mean_sd(self.tail_means)[1] if self.tail_means else None

    @property
    def endpoint_count(self) -> int:
        return 2 if self.tail_means else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "finals": list(self.finals),
            "tail_steps": list(self.tail_steps),
            "tail_means": list(self.tail_means),
            "steps": [[s.step, s.mean, s.sd] for s in self.steps],
        } | ({"step": [self.step.numerator, self.step.denominator]} if self.step else {})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], k: int) -> MetricFloor:
        name = read_str(d, "name")
        finals = tuple(read_finite(v, f"{name}.finals") for v in read_list(d, "finals"))
        tail_steps = tuple(read_int(v, f"{name}.tail_steps") for v in read_list(d, "tail_steps"))
        tail_means = tuple(read_finite(v, f"{name}.tail_means") for v in read_list(d, "tail_means"))
        steps = []
        for row in read_list(d, "steps"):
            if not isinstance(row, list | tuple) or len(row) != 3:
                raise ValueError(f"noise floor {name}.steps: each row is [step, mean, sd]")
            sd = read_finite(row[2], f"{name}.steps")
            if sd < 0:
                raise ValueError(f"noise floor {name}.steps: negative sd")
            steps.append(StepStat(read_int(row[0], f"{name}.steps"), read_finite(row[1], name), sd))
        if len(finals) != k:
            raise ValueError(f"noise floor {name}: {len(finals)} finals for K={k}")
        if tail_means and (len(tail_means) != k or not tail_steps):
            raise ValueError(f"noise floor {name}: tail_means need K values and tail_steps")
        step = None
        if "step" in d:
            raw = d["step"]
            if not (
                isinstance(raw, list)
                and len(raw) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in raw)
                and raw[0] > 0
                and 0 < raw[1] <= MAX_DENOMINATOR
            ):
                raise ValueError(
                    f"noise floor {name}.step: [numerator, denominator], both > 0, the"
                    f" denominator at most {MAX_DENOMINATOR}"
                )
            step = Fraction(raw[0], raw[1])
            # the step was found in the replicas' values: their finals are whole multiples
            # of it (a step widened by hand, which would widen every band, is refused)
            for v in finals:
                f = as_fraction(v)
                if f is None or (f / step).denominator != 1:
                    raise ValueError(
                        f"noise floor {name}.step: {raw[0]}/{raw[1]} does not divide the"
                        f" replicas' final {v!r}"
                    )
            # and they differ by it somewhere: K values one step apart at least have a
            # standard deviation of step / sqrt(K), so a step is at most sqrt(K) times the
            # largest spread the floor holds
            spread = max([_mean_sd(finals)[1], *(s.sd for s in steps)])
            if float(step) > math.sqrt(k) * spread * STEP_SLACK:
                raise ValueError(
                    f"noise floor {name}.step: {raw[0]}/{raw[1]} is wider than the replicas"
                    f" ever differ (largest sd {spread:.3g})"
                )
        return cls(name, finals, tail_steps, tail_means, tuple(steps), step)


@dataclass(frozen=True)
class NoiseFloor:
    """The spread of K >= 2 replicas of one run, per metric, and their weight distances."""

    k: int
    labels: tuple[str, ...]
    """One label per replica (a run id), in the order of the inputs."""
    tail_fraction: float
    """The share of logged steps the tail endpoint covers (fixed when the floor is built)."""
    metrics: tuple[MetricFloor, ...]
    """The judged metrics, sorted by name."""
    skipped: tuple[SkippedMetric, ...]
    weights_pairwise: tuple[float, ...] | None
    """Distances between the replicas' weights (any number of pairs); None: not measured."""

    @classmethod
    def from_replicas(
        cls,
        histories: Sequence[Mapping[str, History]],
        finals: Sequence[Mapping[str, float]],
        *,
        params: NoiseParams | None = None,
        weights_pairwise: Sequence[float] | None = None,
        labels: Sequence[str] | None = None,
    ) -> NoiseFloor:
        """Build the floor from K replicas: ``histories[i]`` and ``finals[i]`` are replica
        i's metric histories and final metrics (a manifest's ``outputs.metric_history``
        and ``outputs.metrics``).  Only ``params.tail_fraction`` is used here."""
        params = (params or NoiseParams()).validate()
        k = len(finals)
        if len(histories) != k:
            raise ValueError(f"{len(histories)} histories but {k} finals: one of each a replica")
        if k < 2:
            raise ValueError(f"a noise floor needs at least 2 replicas, got {k}")
        names = tuple(labels) if labels is not None else tuple(f"replica {i + 1}" for i in range(k))
        if len(names) != k:
            raise ValueError(f"{len(names)} labels for {k} replicas")
        pairs: tuple[float, ...] | None = None
        if weights_pairwise is not None:
            pairs = tuple(read_distance(v, "weights_pairwise") for v in weights_pairwise)

        runs = [prepare(h, f) for h, f in zip(histories, finals, strict=True)]
        everything = sorted(set().union(*(r.names for r in runs)))
        metrics: list[MetricFloor] = []
        skipped: list[SkippedMetric] = []
        for name in everything:
            if is_timing_metric(name):
                skipped.append(SkippedMetric(name, "timing"))
                continue
            fin = [r.final(name) for r in runs]
            known = [v for v in fin if v is not None]
            if len(known) < k:
                skipped.append(SkippedMetric(name, "not_in_every_replica"))
                continue
            if not all(math.isfinite(v) for v in known):
                skipped.append(SkippedMetric(name, "not_finite"))
                continue
            metrics.append(_metric_floor(name, known, [r.history(name) for r in runs], params))
        return cls(k, names, params.tail_fraction, tuple(metrics), tuple(skipped), pairs)

    def metric(self, name: str) -> MetricFloor | None:
        for m in self.metrics:
            if m.name == name:
                return m
        return None

    @property
    def endpoint_count(self) -> int:
        """``m``, the number of endpoint tests a judgement against this floor makes."""
        return sum(m.endpoint_count for m in self.metrics)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "k": self.k,
            "labels": list(self.labels),
            "tail_fraction": self.tail_fraction,
            "metrics": [m.to_dict() for m in self.metrics],
            "skipped": [{"name": s.name, "reason": s.reason} for s in self.skipped],
            "weights_pairwise": (
                None
                if self.weights_pairwise is None
                else [json_float(v) for v in self.weights_pairwise]
            ),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NoiseFloor:
        """Read a stored floor back; ``ValueError`` when it is not one."""
        if d.get("version") != 1:
            raise ValueError(f"noise floor: unknown version {d.get('version')!r}")
        k = read_int(d.get("k"), "k")
        if k < 2:
            raise ValueError(f"noise floor: K must be >= 2, got {k}")
        labels = tuple(str(x) for x in read_list(d, "labels"))
        if len(labels) != k:
            raise ValueError(f"noise floor: {len(labels)} labels for K={k}")
        tail_fraction = read_finite(d.get("tail_fraction"), "tail_fraction")
        metrics = tuple(MetricFloor.from_dict(m, k) for m in read_list(d, "metrics"))
        skipped = []
        for s in read_list(d, "skipped"):
            reason = s.get("reason") if isinstance(s, Mapping) else None
            if reason not in _SKIP_REASONS:
                raise ValueError(f"noise floor: unknown skip reason {reason!r}")
            skipped.append(SkippedMetric(read_str(s, "name"), cast(SkipReason, reason)))
        raw = d.get("weights_pairwise")
        pairs = None
        if raw is not None:
            if not isinstance(raw, list):
                raise ValueError("noise floor: weights_pairwise must be a list or null")
            pairs = tuple(read_distance(read_float(v, "weights_pairwise"), "weights") for v in raw)
        return cls(k, labels, tail_fraction, metrics, tuple(skipped), pairs)


@dataclass(frozen=True)
class PreparedRun:
    """One run's metrics made uniform: finals, and histories as sorted step -> value."""

    finals: Mapping[str, float]
    histories: Mapping[str, dict[int, float]]

    @property
    def names(self) -> set[str]:
        return set(self.finals) | set(self.histories)

    def history(self, name: str) -> dict[int, float]:
        return self.histories.get(name, {})

    def final(self, name: str) -> float | None:
        if name in self.finals:
            return self.finals[name]
        h = self.histories.get(name)
        return h[max(h)] if h else None


def prepare(histories: Mapping[str, History], finals: Mapping[str, float]) -> PreparedRun:
    hs: dict[str, dict[int, float]] = {}
    for name, h in histories.items():
        pts: dict[int, float] = {}
        items = h.items() if isinstance(h, Mapping) else h
        for step, value in items:
            pts[int(step)] = float(value)
        if pts:
            hs[name] = dict(sorted(pts.items()))
    return PreparedRun({n: float(v) for n, v in finals.items()}, hs)


def _metric_floor(
    name: str, finals: list[float], histories: list[dict[int, float]], params: NoiseParams
) -> MetricFloor:
    common = set(histories[0])
    for h in histories[1:]:
        common &= set(h)
    steps: list[StepStat] = []
    for step in sorted(common):
        vals = [h[step] for h in histories]
        if all(math.isfinite(v) for v in vals):
            mean, sd = _mean_sd(vals)
            steps.append(StepStat(step, mean, sd))
    tail_steps: tuple[int, ...] = ()
    tail_means: tuple[float, ...] = ()
    # The replicas move on a grid when they differ somewhere (their finals, or at a step
    # they all logged) and every value they recorded is a whole multiple of one step.
    moved = any(s.sd > 0 for s in steps) or len(set(finals)) > 1
    values = [*finals, *(v for h in histories for v in h.values() if math.isfinite(v))]
    grid = grid_step(values, moved=moved)
    if steps:
        n = max(1, math.ceil(params.tail_fraction * len(steps) - 1e-9))
        tail_steps = tuple(s.step for s in steps[-n:])
        tail_means = tuple(_mean_sd([h[s] for s in tail_steps])[0] for h in histories)
    return MetricFloor(name, tuple(finals), tail_steps, tail_means, tuple(steps), grid)

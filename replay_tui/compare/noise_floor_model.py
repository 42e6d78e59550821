"""A noise floor: the spread of K replicas of one run, per metric (finals, tail means,
per-step mean and sd, the metric's resolution step), built from their manifests' metrics
and read back from its stored JSON.  Which stored floor speaks for a pair is
``compare.floor``; judging a candidate against a floor is ``compare.noise_rule``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final, Literal

from replay_tui.compare.metrics import is_timing_metric
from replay_tui.compare.noise_json import read_distance, read_finite
from replay_tui.compare.noise_params import NoiseParams
from replay_tui.compare.stats import MAX_DENOMINATOR, as_fraction, grid_step
from replay_tui.compare.stats import mean_sd as _mean_sd
from storage.wire import Wire, read_int, wire

STEP_SLACK: Final = 1.0 + 1e-9
"""A value one step from the mean is inside a band of one step: compared with a slack far
above float rounding (values on a grid are whole multiples of the step; their difference
is not exact)."""

History = Sequence[tuple[int, float]] | Mapping[int, float]
"""A metric's history: ``(step, value)`` pairs as a manifest stores them, or step -> value.
A step logged more than once counts with its last value."""

SkipReason = Literal["timing", "not_in_every_replica", "not_finite"]
FLOOR_VERSION: Final = 1


@dataclass(frozen=True)
class StepStat:
    """One logged step every replica logged: the replicas' mean and sample sd there."""

    step: int
    mean: float
    sd: float


def _finites(v: object, where: str) -> tuple[float, ...]:
    if not isinstance(v, list):
        raise ValueError(f"noise floor {where}: expected a list, got {type(v).__name__}")
    return tuple(read_finite(x, where) for x in v)


def _steps_table(steps: tuple[StepStat, ...]) -> list[list[Any]]:
    return [[s.step, s.mean, s.sd] for s in steps]


def _read_steps(v: object, where: str) -> tuple[StepStat, ...]:
    """The table ``[[step, mean, sd], ...]``: finite values, no negative sd."""
    if not isinstance(v, list):
        raise ValueError(f"noise floor {where}: expected a list, got {type(v).__name__}")
    steps = []
    for row in v:
        if not isinstance(row, list | tuple) or len(row) != 3:
            raise ValueError(f"noise floor {where}: each row is [step, mean, sd]")
        sd = read_finite(row[2], where)
        if sd < 0:
            raise ValueError(f"noise floor {where}: negative sd")
        steps.append(StepStat(step=read_int(row[0], where), mean=read_finite(row[1], where), sd=sd))
    return tuple(steps)


def _step_pair(step: Fraction) -> list[int]:
    return [step.numerator, step.denominator]


def _read_step(raw: object, where: str) -> Fraction:
    """``[numerator, denominator]``, both > 0, the denominator bounded (whether it fits
    the replicas' values is :meth:`MetricFloor.check`)."""
    if not (
        isinstance(raw, list)
        and len(raw) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in raw)
        and raw[0] > 0
        and 0 < raw[1] <= MAX_DENOMINATOR
    ):
        raise ValueError(
            f"noise floor {where}: [numerator, denominator], both > 0, the"
            f" denominator at most {MAX_DENOMINATOR}"
        )
    return Fraction(raw[0], raw[1])


@dataclass(frozen=True)
class SkippedMetric(Wire):
    """A metric left out of the floor, and why."""

    name: str
    reason: SkipReason


@dataclass(frozen=True)
class MetricFloor(Wire):
    """One metric over the K replicas (index i is replica i throughout)."""

    name: str
    finals: tuple[float, ...] = field(metadata=wire(decode=_finites))
    """Each replica's final value (its logged final, else its last history point)."""
    tail_steps: tuple[int, ...]
    """The steps of the tail endpoint (the last ``tail_fraction`` of ``steps``)."""
    tail_means: tuple[float, ...] = field(metadata=wire(decode=_finites))
    """Each replica's mean over ``tail_steps``; empty when there is no common history."""
    steps: tuple[StepStat, ...] = field(metadata=wire(encode=_steps_table, decode=_read_steps))
    """Mean and sd per step that every replica logged (non-finite points dropped)."""
    step: Fraction | None = field(
        default=None, metadata=wire(omit="none", encode=_step_pair, decode=_read_step)
    )
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

    def check(self, k: int) -> None:
        """``ValueError`` unless this is a metric of K replicas as a floor measures one:
        K finals, K tail means with their steps, and a step that is the replicas' own."""
        name = self.name
        finals, steps, step = self.finals, self.steps, self.step
        if len(finals) != k:
            raise ValueError(f"noise floor {name}: {len(finals)} finals for K={k}")
        if self.tail_means and (len(self.tail_means) != k or not self.tail_steps):
            raise ValueError(f"noise floor {name}: tail_means need K values and tail_steps")
        if step is not None:
            raw = (step.numerator, step.denominator)
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


def _read_pairs(v: object, where: str) -> tuple[float, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        raise ValueError("noise floor: weights_pairwise must be a list or null")
    return tuple(read_distance(x, where) for x in v)


def _read_version(v: object, where: str) -> int:
    if v != FLOOR_VERSION or isinstance(v, bool):
        raise ValueError(f"noise floor: unknown version {v!r}")
    return FLOOR_VERSION


@dataclass(frozen=True)
class NoiseFloor(Wire):
    """The spread of K >= 2 replicas of one run, per metric, and their weight distances."""

    WIRE_ORDER = (
        "version",
        "k",
        "labels",
        "tail_fraction",
        "metrics",
        "skipped",
        "weights_pairwise",
    )

    k: int
    labels: tuple[str, ...]
    """One label per replica (a run id), in the order of the inputs."""
    tail_fraction: float = field(metadata=wire(decode=read_finite))
    """The share of logged steps the tail endpoint covers (fixed when the floor is built)."""
    metrics: tuple[MetricFloor, ...]
    """The judged metrics, sorted by name."""
    skipped: tuple[SkippedMetric, ...]
    weights_pairwise: tuple[float, ...] | None = field(metadata=wire(decode=_read_pairs))
    """Distances between the replicas' weights (any number of pairs); None: not measured."""
    version: int = field(default=FLOOR_VERSION, metadata=wire(decode=_read_version))
    """The stored form's version (one so far)."""

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
                skipped.append(SkippedMetric(name=name, reason="timing"))
                continue
            fin = [r.final(name) for r in runs]
            known = [v for v in fin if v is not None]
            if len(known) < k:
                skipped.append(SkippedMetric(name=name, reason="not_in_every_replica"))
                continue
            if not all(math.isfinite(v) for v in known):
                skipped.append(SkippedMetric(name=name, reason="not_finite"))
                continue
            metrics.append(_metric_floor(name, known, [r.history(name) for r in runs], params))
        return cls(
            k=k,
            labels=names,
            tail_fraction=params.tail_fraction,
            metrics=tuple(metrics),
            skipped=tuple(skipped),
            weights_pairwise=pairs,
        )

    def metric(self, name: str) -> MetricFloor | None:
        for m in self.metrics:
            if m.name == name:
                return m
        return None

    @property
    def endpoint_count(self) -> int:
        """``m``, the number of endpoint tests a judgement against this floor makes."""
        return sum(m.endpoint_count for m in self.metrics)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "") -> NoiseFloor:
        """A stored floor read back (``Wire.from_dict``) and checked as a whole: K >= 2,
        a label a replica, each metric one of K replicas; ``ValueError`` when it is not
        one."""
        floor = super().from_dict(d, where)
        if floor.k < 2:
            raise ValueError(f"noise floor: K must be >= 2, got {floor.k}")
        if len(floor.labels) != floor.k:
            raise ValueError(f"noise floor: {len(floor.labels)} labels for K={floor.k}")
        for m in floor.metrics:
            m.check(floor.k)
        return floor


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
            steps.append(StepStat(step=step, mean=mean, sd=sd))
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
    return MetricFloor(
        name=name,
        finals=tuple(finals),
        tail_steps=tail_steps,
        tail_means=tail_means,
        steps=tuple(steps),
        step=grid,
    )

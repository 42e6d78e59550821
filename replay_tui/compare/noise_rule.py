"""Judging a run against its own noise: K replays (replicas) of one run give its spread,
and a candidate (the original run, or a new replay) is judged against that spread.

GPU training is not bit-deterministic, so "the same" can only mean "within the run's own
noise".  The rule (written down for users in ``docs/noise.md``):

- **Endpoints decide.**  For each metric, its final value and its mean over the last
  ``tail_fraction`` of the logged steps.  The candidate passes an endpoint when
  ``|x - mean| <= t(1 - alpha / (2 m), K - 1) * s * sqrt(1 + 1 / K)``, the two-sided
  prediction interval for one more draw from the replicas' distribution, Bonferroni
  corrected over the ``m`` endpoint tests, its half-width floored at
  ``max(rel_floor * |mean|, abs_floor)``.  WITHIN_NOISE when every endpoint passes.
- **The per-step band is a diagnostic**: where the candidate leaves the replicas' band
  (per-step alpha, the spread pooled over neighbouring logged points) and stays out for
  ``exit_run`` points.  It says where a divergence starts; it does not decide.
- **Weights** (median candidate-to-replica distance over the median replica-to-replica
  distance) are a diagnostic too.
- **Noise too wide**: a declared practical ``margin`` the band is wider than is recorded,
  for the caller to report as a gap.

Why not the naive rule "the candidate's largest distance to a replica is at most the
largest replica-to-replica distance": the candidate and the K replicas of a true
reproduction are exchangeable draws of one distribution, and (for one metric) the naive
rule fails exactly when the candidate is the smallest or the largest of the K + 1 values,
which happens with probability 2 / (K + 1): one true reproduction in two at K = 3.

Timing metrics (``is_timing_metric``) measure the machine and are left out.  Standard
library only; the results are frozen dataclasses with ``to_dict`` (strict JSON: ``inf``
and ``nan`` become strings) and ``from_dict``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Literal, cast

from replay_tui.compare.metrics import is_timing_metric, json_float
from replay_tui.compare.stats import MAX_DENOMINATOR, as_fraction, fraction_gcd, grid_step, tost_p
from replay_tui.compare.stats import mean_sd as _mean_sd
from replay_tui.compare.stats import student_t_ppf as student_t_ppf

# -- parameters ----------------------------------------------------------------------------


@dataclass(frozen=True)
class NoiseParams:
    """The knobs of the rule.  Invalid values raise ``ValueError`` on construction."""

    alpha: float = 0.05
    """Family-wise false-failure rate of the endpoint tests (Bonferroni over them)."""
    rel_floor: float = 1e-3
    """Smallest half-width, relative to ``|mean|`` (numerical epsilon: 0.1 %)."""
    abs_floor: float = 1e-12
    """Smallest half-width, absolute (for metrics whose mean is 0)."""
    margin: float | None = None
    """A practical margin the user declared, relative (0.01 = 1 % of the metric's value):
    a band wider than it is recorded as ``too_wide``, and the candidate is tested for
    equivalence within ``± margin * |mean|`` (TOST).  None: no relative margin declared."""
    margin_abs: float | None = None
    """The same margin declared in the metric's own units (``--margin 0.01``: ± 0.01);
    at most one of ``margin`` and ``margin_abs`` is set."""
    exit_run: int = 3
    """Consecutive logged points out of the band that count as leaving it."""
    tail_fraction: float = 0.02
    """The tail endpoint: the mean over the last this share of the logged steps (>= 1)."""
    window: int = 5
    """The per-step spread is pooled over this many logged points each side."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> NoiseParams:
        """Raise ``ValueError`` naming the first bad value; return self."""

        def number(name: str, v: object) -> float:
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ValueError(f"{name} must be a number, got {v!r}")
            return float(v)

        def integer(name: str, v: object) -> int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{name} must be an integer, got {v!r}")
            return v

        if not 0.0 < number("alpha", self.alpha) < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")
        for name, v in (("rel_floor", self.rel_floor), ("abs_floor", self.abs_floor)):
            f = number(name, v)
            if not (f >= 0.0 and math.isfinite(f)):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.margin is not None:
            f = number("margin", self.margin)
            if not (f > 0.0 and math.isfinite(f)):
                raise ValueError(
                    f"margin must be a finite number > 0 (relative: 0.01 = 1 %) or None, "
                    f"got {self.margin!r}"
                )
        if self.margin_abs is not None:
            f = number("margin_abs", self.margin_abs)
            if not (f > 0.0 and math.isfinite(f)):
                raise ValueError(f"margin_abs must be a finite number > 0, got {self.margin_abs!r}")
            if self.margin is not None:
                raise ValueError("declare one margin: relative (margin) or absolute (margin_abs)")
        if integer("exit_run", self.exit_run) < 1:
            raise ValueError(f"exit_run must be >= 1, got {self.exit_run!r}")
        if not 0.0 < number("tail_fraction", self.tail_fraction) <= 0.5:
            raise ValueError(f"tail_fraction must be in (0, 0.5], got {self.tail_fraction!r}")
        if integer("window", self.window) < 0:
            raise ValueError(f"window must be >= 0, got {self.window!r}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "rel_floor": self.rel_floor,
            "abs_floor": self.abs_floor,
            "margin": self.margin,
            "exit_run": self.exit_run,
            "tail_fraction": self.tail_fraction,
            "window": self.window,
        } | ({"margin_abs": self.margin_abs} if self.margin_abs is not None else {})

    @property
    def declared_margin(self) -> bool:
        return self.margin is not None or self.margin_abs is not None

    def margin_at(self, mean: float) -> float | None:
        """The declared margin in the metric's units at a mean of ``mean`` (None: none)."""
        if self.margin_abs is not None:
            return self.margin_abs
        return None if self.margin is None else self.margin * abs(mean)

    def margin_text(self) -> str:
        """``±0.5 %`` (relative) or ``±0.01`` (absolute); ``none``."""
        if self.margin_abs is not None:
            return f"±{self.margin_abs:g}"
        return "none" if self.margin is None else f"±{_pct(self.margin)}"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NoiseParams:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown noise parameter(s): {', '.join(unknown)}")
        return cls(**{k: d[k] for k in known if k in d})


# -- the floor -----------------------------------------------------------------------------

History = Sequence[tuple[int, float]] | Mapping[int, float]
"""A metric's history: ``(step, value)`` pairs as a manifest stores them, or step -> value.
A step logged more than once counts with its last value."""

SkipReason = Literal["timing", "not_in_every_replica", "not_finite"]
_SKIP_REASONS: Final[tuple[SkipReason, ...]] = ("timing", "not_in_every_replica", "not_finite")
_SKIP_TEXT: Final[dict[str, str]] = {
    "timing": "a timing metric (measures the machine)",
    "not_in_every_replica": "not logged by every replica",
    "not_finite": "a replica's final value is not finite",
}


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
        name = _str(d, "name")
        finals = tuple(_finite(v, f"{name}.finals") for v in _list(d, "finals"))
        tail_steps = tuple(_int(v, f"{name}.tail_steps") for v in _list(d, "tail_steps"))
        tail_means = tuple(_finite(v, f"{name}.tail_means") for v in _list(d, "tail_means"))
        steps = []
        for row in _list(d, "steps"):
            if not isinstance(row, list | tuple) or len(row) != 3:
                raise ValueError(f"noise floor {name}.steps: each row is [step, mean, sd]")
            sd = _finite(row[2], f"{name}.steps")
            if sd < 0:
                raise ValueError(f"noise floor {name}.steps: negative sd")
            steps.append(StepStat(_int(row[0], f"{name}.steps"), _finite(row[1], name), sd))
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
            if float(step) > math.sqrt(k) * spread * _STEP_SLACK:
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
            pairs = tuple(_distance(v, "weights_pairwise") for v in weights_pairwise)

        runs = [_prepare(h, f) for h, f in zip(histories, finals, strict=True)]
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
        k = _int(d.get("k"), "k")
        if k < 2:
            raise ValueError(f"noise floor: K must be >= 2, got {k}")
        labels = tuple(str(x) for x in _list(d, "labels"))
        if len(labels) != k:
            raise ValueError(f"noise floor: {len(labels)} labels for K={k}")
        tail_fraction = _finite(d.get("tail_fraction"), "tail_fraction")
        metrics = tuple(MetricFloor.from_dict(m, k) for m in _list(d, "metrics"))
        skipped = []
        for s in _list(d, "skipped"):
            reason = s.get("reason") if isinstance(s, Mapping) else None
            if reason not in _SKIP_REASONS:
                raise ValueError(f"noise floor: unknown skip reason {reason!r}")
            skipped.append(SkippedMetric(_str(s, "name"), cast(SkipReason, reason)))
        raw = d.get("weights_pairwise")
        pairs = None
        if raw is not None:
            if not isinstance(raw, list):
                raise ValueError("noise floor: weights_pairwise must be a list or null")
            pairs = tuple(_distance(_float_in(v, "weights_pairwise"), "weights") for v in raw)
        return cls(k, labels, tail_fraction, metrics, tuple(skipped), pairs)


@dataclass(frozen=True)
class _Run:
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


def _prepare(histories: Mapping[str, History], finals: Mapping[str, float]) -> _Run:
    hs: dict[str, dict[int, float]] = {}
    for name, h in histories.items():
        pts: dict[int, float] = {}
        items = h.items() if isinstance(h, Mapping) else h
        for step, value in items:
            pts[int(step)] = float(value)
        if pts:
            hs[name] = dict(sorted(pts.items()))
    return _Run({n: float(v) for n, v in finals.items()}, hs)


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


# -- the judgement -------------------------------------------------------------------------

JudgementStatus = Literal["WITHIN_NOISE", "OUTSIDE_NOISE", "INCOMPLETE", "NO_METRICS"]
"""WITHIN_NOISE: every endpoint within the replicas' prediction interval (reproduced within
this run's noise; not bit-identical).  OUTSIDE_NOISE: at least one endpoint outside (or not
finite).  INCOMPLETE: none outside, but the candidate lacks an endpoint the replicas have.
NO_METRICS: the replicas have no metric to judge by."""
_JUDGEMENT_STATUSES: Final = ("WITHIN_NOISE", "OUTSIDE_NOISE", "INCOMPLETE", "NO_METRICS")

EndpointKind = Literal["final", "tail_mean"]
EndpointStatus = Literal["ok", "outside", "missing", "not_finite"]
BandStatus = Literal["inside", "leaves_band", "no_overlap"]
WeightsStatus = Literal["measured", "not_measured"]


@dataclass(frozen=True)
class EndpointResult:
    """One endpoint test of one metric."""

    metric: str
    endpoint: EndpointKind
    status: EndpointStatus
    value: float | None
    """The candidate's value (None: it has none)."""
    mean: float
    sd: float
    half_width: float
    """Of the prediction interval, after the floor."""
    floored: bool
    """The floor, not the replicas' spread, set the half-width."""
    ratio: float | None
    """``|value - mean| / half_width``: <= 1 inside (None without a finite value)."""
    state: str | None = None
    """The item state (``compare.states``: within_noise, outside_noise, missing) the
    comparison gave it; None in a body stored before states existed."""
    step: float | None = None
    """One step of the metric's resolution at this endpoint (the final: the step; the
    tail mean over n points: step / n), the least the half-width may be; None: the
    metric moves in no detected step."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def by_step(self) -> bool:
        """One step of the metric's resolution, not its spread or the floor, set the
        half-width."""
        return self.step is not None and self.step >= self.half_width

    @property
    def relative_width(self) -> float | None:
        """``half_width / |mean|``: the smallest change this endpoint could see, as a share
        of the value (None when the mean is 0)."""
        return self.half_width / abs(self.mean) if self.mean != 0 else None

    def to_dict(self) -> dict[str, Any]:
        return (
            {
                "metric": self.metric,
                "endpoint": self.endpoint,
                "status": self.status,
                "ok": self.ok,
                "value": json_float(self.value),
                "mean": self.mean,
                "sd": self.sd,
                "half_width": self.half_width,
                "floored": self.floored,
                "ratio": json_float(self.ratio),
            }
            | ({"step": self.step} if self.step is not None else {})
            | ({"state": self.state} if self.state is not None else {})
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EndpointResult:
        endpoint = _choice(d.get("endpoint"), ("final", "tail_mean"), "endpoint")
        status = _choice(d.get("status"), ("ok", "outside", "missing", "not_finite"), "status")
        return cls(
            _str(d, "metric"),
            cast(EndpointKind, endpoint),
            cast(EndpointStatus, status),
            _opt_float(d.get("value"), "value"),
            _float_in(d.get("mean"), "mean"),
            _float_in(d.get("sd"), "sd"),
            _float_in(d.get("half_width"), "half_width"),
            bool(d.get("floored")),
            _opt_float(d.get("ratio"), "ratio"),
            d["state"] if isinstance(d.get("state"), str) else None,
            _opt_float(d.get("step"), "step"),
        )


@dataclass(frozen=True)
class BandPoint:
    """The band at one step every replica logged, and the candidate's value there."""

    step: int
    mean: float
    lo: float
    hi: float
    value: float | None

    @property
    def out(self) -> bool:
        """The candidate logged this step and its value is outside ``[lo, hi]``."""
        return self.value is not None and not self.lo <= self.value <= self.hi


@dataclass(frozen=True)
class MetricBand:
    """The per-step band of one metric (a diagnostic: where a divergence starts)."""

    metric: str
    status: BandStatus
    t: float
    """The per-step t quantile, ``t(1 - alpha / 2, K - 1)``."""
    leaves_band_at: int | None
    """The first step of the first ``exit_run`` consecutive compared points out."""
    points_compared: int
    points_out: int
    points: tuple[BandPoint, ...]

    @property
    def exit_point(self) -> BandPoint | None:
        for p in self.points:
            if p.step == self.leaves_band_at:
                return p
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "status": self.status,
            "t": self.t,
            "leaves_band_at": self.leaves_band_at,
            "points_compared": self.points_compared,
            "points_out": self.points_out,
            "point_fields": ["step", "mean", "lo", "hi", "value"],
            "points": [[p.step, p.mean, p.lo, p.hi, json_float(p.value)] for p in self.points],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MetricBand:
        status = _choice(d.get("status"), ("inside", "leaves_band", "no_overlap"), "status")
        points = []
        for row in _list(d, "points"):
            if not isinstance(row, list | tuple) or len(row) != 5:
                raise ValueError("band points: each is [step, mean, lo, hi, value]")
            points.append(
                BandPoint(
                    _int(row[0], "step"),
                    _float_in(row[1], "mean"),
                    _float_in(row[2], "lo"),
                    _float_in(row[3], "hi"),
                    _opt_float(row[4], "value"),
                )
            )
        at = d.get("leaves_band_at")
        return cls(
            _str(d, "metric"),
            cast(BandStatus, status),
            _float_in(d.get("t"), "t"),
            None if at is None else _int(at, "leaves_band_at"),
            _int(d.get("points_compared"), "points_compared"),
            _int(d.get("points_out"), "points_out"),
            tuple(points),
        )


@dataclass(frozen=True)
class WeightsDiagnostic:
    """Median candidate-to-replica weight distance over the median replica-to-replica one
    (about 1 for a true reproduction).  A diagnostic, never part of pass/fail."""

    status: WeightsStatus
    ratio: float | None
    candidate_median: float | None
    replica_median: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "ratio": json_float(self.ratio),
            "candidate_median": json_float(self.candidate_median),
            "replica_median": json_float(self.replica_median),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WeightsDiagnostic:
        status = _choice(d.get("status"), ("measured", "not_measured"), "status")
        return cls(
            cast(WeightsStatus, status),
            _opt_float(d.get("ratio"), "ratio"),
            _opt_float(d.get("candidate_median"), "candidate_median"),
            _opt_float(d.get("replica_median"), "replica_median"),
        )


@dataclass(frozen=True)
class TooWide:
    """The endpoint band of a metric is wider than the declared practical margin: this
    run's noise cannot show agreement to that margin (the caller reports a gap)."""

    metric: str
    endpoint: EndpointKind
    margin: float
    """Declared, relative to ``|mean|`` (an absolute margin: as a share of this mean)."""
    half_width: float
    """Measured, absolute."""
    mean: float
    margin_abs: float | None = None
    """The margin as declared, when it was declared in the metric's units."""

    @property
    def relative_width(self) -> float:
        return self.half_width / abs(self.mean) if self.mean != 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "endpoint": self.endpoint,
            "margin": json_float(self.margin),
            "half_width": self.half_width,
            "mean": self.mean,
            "relative_width": json_float(self.relative_width),
        } | ({"margin_abs": self.margin_abs} if self.margin_abs is not None else {})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TooWide:
        endpoint = _choice(d.get("endpoint"), ("final", "tail_mean"), "endpoint")
        return cls(
            _str(d, "metric"),
            cast(EndpointKind, endpoint),
            _float_in(d.get("margin"), "margin"),
            _float_in(d.get("half_width"), "half_width"),
            _float_in(d.get("mean"), "mean"),
            _opt_float(d.get("margin_abs"), "margin_abs"),
        )


@dataclass(frozen=True)
class EndpointTost:
    """One endpoint's two one-sided tests against the declared margin."""

    metric: str
    endpoint: EndpointKind
    margin: float
    """The margin at this endpoint, in the metric's units (``Δ``)."""
    diff: float | None
    """``value - mean`` (None: the candidate has no finite value)."""
    se: float
    """The standard error of ``diff``: ``half_width / t_endpoint`` (the replicas' spread,
    ``s * sqrt(1 + 1/K)``, unless a floor or a step raised the half-width)."""
    p: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "endpoint": self.endpoint,
            "margin": self.margin,
            "diff": json_float(self.diff),
            "se": self.se,
            "p": self.p,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EndpointTost:
        endpoint = _choice(d.get("endpoint"), ("final", "tail_mean"), "endpoint")
        return cls(
            _str(d, "metric"),
            cast(EndpointKind, endpoint),
            _float_in(d.get("margin"), "margin"),
            _opt_float(d.get("diff"), "diff"),
            _float_in(d.get("se"), "se"),
            _float_in(d.get("p"), "p"),
        )


@dataclass(frozen=True)
class Equivalence:
    """The positive claim a declared margin gives: the candidate is within ± margin of
    the replicas' mean at every endpoint, by two one-sided tests (TOST) each at ``alpha``
    (an intersection-union test: no multiplicity correction is needed).  Never changes
    the verdict."""

    margin: float
    """As declared: a share of the value (``relative``) or in the metric's units."""
    relative: bool
    alpha: float
    p: float
    """The largest endpoint p value (the intersection-union test's p)."""
    endpoints: tuple[EndpointTost, ...]

    @property
    def equivalent(self) -> bool:
        return bool(self.endpoints) and self.p <= self.alpha

    @property
    def margin_text(self) -> str:
        return f"±{_pct(self.margin)}" if self.relative else f"±{self.margin:g}"

    def text(self) -> str:
        """``equivalent within ±0.5 % (TOST, p=0.012)``, or ``not shown equivalent ...``."""
        p = _p_text(self.p)
        if self.equivalent:
            return f"equivalent within {self.margin_text} (TOST, {p}, α={self.alpha:g})"
        return f"not shown equivalent within {self.margin_text} (TOST, {p}, α={self.alpha:g})"

    def short(self) -> str:
        """``equivalent within ±0.5 % (p=0.0199)`` for a one-line header."""
        head = "equivalent" if self.equivalent else "not shown equivalent"
        return f"{head} within {self.margin_text} ({_p_text(self.p)})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "margin": self.margin,
            "relative": self.relative,
            "alpha": self.alpha,
            "p": self.p,
            "equivalent": self.equivalent,
            "text": self.text(),
            "endpoints": [e.to_dict() for e in self.endpoints],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Equivalence:
        return cls(
            _float_in(d.get("margin"), "margin"),
            bool(d.get("relative")),
            _float_in(d.get("alpha"), "alpha"),
            _float_in(d.get("p"), "p"),
            tuple(EndpointTost.from_dict(e) for e in _list(d, "endpoints")),
        )


@dataclass(frozen=True)
class MetricSensitivity:
    """The smallest change of one metric a WITHIN_NOISE could have seen: its narrowest
    endpoint half-width."""

    metric: str
    endpoint: EndpointKind
    half_width: float
    mean: float

    @property
    def relative(self) -> float | None:
        return self.half_width / abs(self.mean) if self.mean != 0 else None

    def text(self) -> str:
        r = self.relative
        return (
            f"{self.metric} {_pct(r)}"
            if r is not None
            else (f"{self.metric} ±{self.half_width:.3g} (its mean is 0)")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "endpoint": self.endpoint,
            "half_width": self.half_width,
            "mean": self.mean,
            "relative": json_float(self.relative),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MetricSensitivity:
        endpoint = _choice(d.get("endpoint"), ("final", "tail_mean"), "endpoint")
        return cls(
            _str(d, "metric"),
            cast(EndpointKind, endpoint),
            _float_in(d.get("half_width"), "half_width"),
            _float_in(d.get("mean"), "mean"),
        )


@dataclass(frozen=True)
class Sensitivity:
    """How strong a WITHIN_NOISE is: per metric, the smallest change it could have seen
    (the half-width h as a share of the value), and overall the largest of them (a
    change of every metric by less than that may pass as noise)."""

    metrics: tuple[MetricSensitivity, ...]

    @property
    def overall(self) -> float | None:
        rel = [r for m in self.metrics if (r := m.relative) is not None]
        return max(rel) if rel else None

    def text(self) -> str:
        """``the smallest change it could have seen: 0.72 % of the value (loss 0.72 %,
        val_loss 0.1 %)``."""
        each = ", ".join(m.text() for m in self.metrics)
        o = self.overall
        head = f"{_pct(o)} of the value" if o is not None else "stated per metric"
        return (
            f"the smallest change it could have seen: {head} ({each}); a smaller change"
            " passes as noise"
        )

    def short(self) -> str:
        o = self.overall
        return (
            f"smallest visible change: {_pct(o)}"
            if o is not None
            else "smallest visible change: per metric"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "overall": json_float(self.overall),
            "text": self.text(),
            "metrics": [m.to_dict() for m in self.metrics],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sensitivity:
        return cls(tuple(MetricSensitivity.from_dict(m) for m in _list(d, "metrics")))


def sensitivity_of(endpoints: Sequence[EndpointResult]) -> Sensitivity | None:
    """Each metric's narrowest endpoint (by ``h / |mean|``; a mean of 0: by h), in the
    order of ``endpoints``; None without endpoints."""
    best: dict[str, EndpointResult] = {}
    for e in endpoints:
        cur = best.get(e.metric)
        if cur is None or _width_key(e) < _width_key(cur):
            best[e.metric] = e
    if not best:
        return None
    return Sensitivity(
        tuple(MetricSensitivity(e.metric, e.endpoint, e.half_width, e.mean) for e in best.values())
    )


def _width_key(e: EndpointResult) -> tuple[int, float]:
    r = e.relative_width
    return (0, r) if r is not None else (1, e.half_width)


def _p_text(p: float) -> str:
    return "p<0.0001" if p < 1e-4 else f"p={p:.3g}"


@dataclass(frozen=True)
class NoiseJudgement:
    """A candidate judged against a noise floor."""

    status: JudgementStatus
    k: int
    alpha: float
    tests: int
    """``m``: endpoint tests, the Bonferroni divisor."""
    t_endpoint: float | None
    """``t(1 - alpha / (2 m), K - 1)``; None when there is nothing to test."""
    t_step: float
    """``t(1 - alpha / 2, K - 1)``, for the per-step band."""
    endpoints: tuple[EndpointResult, ...]
    bands: tuple[MetricBand, ...]
    weights: WeightsDiagnostic
    too_wide: tuple[TooWide, ...]
    not_judged: tuple[str, ...]
    """Candidate metrics (timing aside) the floor has no spread for."""
    reasons: tuple[str, ...]
    """Plain-English lines, the headline first."""
    equivalence: Equivalence | None = None
    """With a declared margin: whether the candidate is shown within it (TOST).  None:
    no margin declared (or a judgement stored before the claim existed)."""
    sensitivity: Sensitivity | None = None
    """A WITHIN_NOISE's strength: the smallest change it could have seen.  None: not
    WITHIN_NOISE (or stored before it was kept: :meth:`smallest_change` works it out)."""

    @property
    def within(self) -> bool:
        """Every endpoint test passed, and there was at least one."""
        return self.status == "WITHIN_NOISE"

    def smallest_change(self) -> Sensitivity | None:
        """For a WITHIN_NOISE, the smallest change it could have seen: as stored, or (a
        body stored before it was kept) from its endpoints by the same rule."""
        if not self.within:
            return None
        return self.sensitivity or sensitivity_of(self.endpoints)

    def band(self, metric: str) -> MetricBand | None:
        for b in self.bands:
            if b.metric == metric:
                return b
        return None

    def to_dict(self) -> dict[str, Any]:
        return (
            {
                "version": 1,
                "status": self.status,
                "within": self.within,
                "k": self.k,
                "alpha": self.alpha,
                "tests": self.tests,
                "t_endpoint": json_float(self.t_endpoint),
                "t_step": json_float(self.t_step),
                "endpoints": [e.to_dict() for e in self.endpoints],
                "bands": [b.to_dict() for b in self.bands],
                "weights": self.weights.to_dict(),
                "too_wide": [w.to_dict() for w in self.too_wide],
                "not_judged": list(self.not_judged),
                "reasons": list(self.reasons),
            }
            | ({"equivalence": self.equivalence.to_dict()} if self.equivalence is not None else {})
            | ({"sensitivity": self.sensitivity.to_dict()} if self.sensitivity is not None else {})
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NoiseJudgement:
        if d.get("version") != 1:
            raise ValueError(f"noise judgement: unknown version {d.get('version')!r}")
        status = _choice(d.get("status"), _JUDGEMENT_STATUSES, "status")
        weights = d.get("weights")
        if not isinstance(weights, Mapping):
            raise ValueError("noise judgement: weights must be an object")
        return cls(
            cast(JudgementStatus, status),
            _int(d.get("k"), "k"),
            _float_in(d.get("alpha"), "alpha"),
            _int(d.get("tests"), "tests"),
            _opt_float(d.get("t_endpoint"), "t_endpoint"),
            _float_in(d.get("t_step"), "t_step"),
            tuple(EndpointResult.from_dict(e) for e in _list(d, "endpoints")),
            tuple(MetricBand.from_dict(b) for b in _list(d, "bands")),
            WeightsDiagnostic.from_dict(weights),
            tuple(TooWide.from_dict(w) for w in _list(d, "too_wide")),
            tuple(str(x) for x in _list(d, "not_judged")),
            tuple(str(x) for x in _list(d, "reasons")),
            _optional(Equivalence.from_dict, d.get("equivalence"), "equivalence"),
            _optional(Sensitivity.from_dict, d.get("sensitivity"), "sensitivity"),
        )


def judge(
    floor: NoiseFloor,
    candidate_histories: Mapping[str, History],
    candidate_finals: Mapping[str, float],
    params: NoiseParams | None = None,
    weights_to_replicas: Sequence[float] | None = None,
) -> NoiseJudgement:
    """Judge a candidate run (its ``outputs.metric_history`` and ``outputs.metrics``)
    against ``floor``.  ``weights_to_replicas``: distances from the candidate's weights
    to the replicas' (None: not measured).  The tail endpoint uses the floor's
    ``tail_steps`` (``params.tail_fraction`` only matters when a floor is built)."""
    params = (params or NoiseParams()).validate()
    cand = _prepare(candidate_histories, candidate_finals)
    k = floor.k
    m = floor.endpoint_count
    t_step = student_t_ppf(1.0 - params.alpha / 2.0, k - 1)
    t_end = student_t_ppf(1.0 - params.alpha / (2.0 * m), k - 1) if m else None
    inflate = math.sqrt(1.0 + 1.0 / k)

    endpoints: list[EndpointResult] = []
    too_wide: list[TooWide] = []
    bands: list[MetricBand] = []
    steps: list[StepNote] = []
    for mf in floor.metrics:
        assert t_end is not None  # a floor metric means m >= 1
        h = cand.history(mf.name)
        final = cand.final(mf.name)
        grid = _common_step(mf.step, [final, *h.values()])
        if mf.step is not None:
            steps.append(StepNote(mf.name, mf.step, grid))
        ends: list[tuple[EndpointKind, tuple[float, ...], float | None, float | None]] = [
            ("final", mf.finals, final, None if grid is None else float(grid))
        ]
        if mf.tail_means:
            tail = [h.get(s) for s in mf.tail_steps]
            known = [v for v in tail if v is not None]
            value = math.fsum(known) / len(known) if len(known) == len(tail) else None
            tail_step = None if grid is None else float(grid / len(mf.tail_steps))
            ends.append(("tail_mean", mf.tail_means, value, tail_step))
        for which, replicas, value, step in ends:
            e = _endpoint(mf.name, which, replicas, value, t_end, inflate, params, step)
            endpoints.append(e)
            if params.declared_margin and _too_wide(e, params):
                too_wide.append(_too_wide_entry(e, params))
        if mf.steps:
            bands.append(_band(mf, h, t_step, inflate, params, grid))

    weights = _weights(floor.weights_pairwise, weights_to_replicas)
    judged = {mf.name for mf in floor.metrics}
    not_judged = tuple(n for n in sorted(cand.names - judged) if not is_timing_metric(n))

    if not endpoints:
        status: JudgementStatus = "NO_METRICS"
    elif any(e.status in ("outside", "not_finite") for e in endpoints):
        status = "OUTSIDE_NOISE"
    elif any(e.status == "missing" for e in endpoints):
        status = "INCOMPLETE"
    else:
        status = "WITHIN_NOISE"
    equivalence = None
    if params.declared_margin and t_end is not None:
        equivalence = _equivalence(endpoints, t_end, k, params)
    sensitivity = sensitivity_of(endpoints) if status == "WITHIN_NOISE" else None
    reasons = _reasons(
        status, floor, params, m, t_end, endpoints, bands, too_wide, weights, not_judged
    )
    claims = [c.text() for c in (sensitivity, equivalence) if c is not None]
    claims += [n.text() for n in steps if n.matters(floor, params)]
    reasons[1:1] = claims  # right under the headline
    return NoiseJudgement(
        status=status,
        k=k,
        alpha=params.alpha,
        tests=m,
        t_endpoint=t_end,
        t_step=t_step,
        endpoints=tuple(endpoints),
        bands=tuple(bands),
        weights=weights,
        too_wide=tuple(too_wide),
        not_judged=not_judged,
        reasons=tuple(reasons),
        equivalence=equivalence,
        sensitivity=sensitivity,
    )


def claims(j: NoiseJudgement | None) -> list[str]:
    """What a judgement claims beside its verdict, in the words every face shows: a
    WITHIN_NOISE's smallest change it could have seen, and with a declared margin the
    equivalence claim (TOST)."""
    if j is None:
        return []
    strength = j.smallest_change()
    return [c.text() for c in (strength, j.equivalence) if c is not None]


def short_claims(j: NoiseJudgement | None) -> str:
    """:func:`claims` in a few words for a one-line header: ``sees changes > 0.72 % ·
    equivalent within ±0.5 % (TOST, p=0.012)``."""
    if j is None:
        return ""
    strength = j.smallest_change()
    parts = [strength.short()] if strength is not None else []
    if j.equivalence is not None:
        parts.append(j.equivalence.short())
    return " · ".join(parts)


@dataclass(frozen=True)
class StepNote:
    """A metric the floor found a resolution for, and the step the judgement used."""

    metric: str
    floor_step: Fraction
    used: Fraction | None
    """The greatest step of the replicas' and the candidate's values (None: a value of
    the candidate is on no grid with the replicas', so no step was used)."""

    def matters(self, floor: NoiseFloor, params: NoiseParams) -> bool:
        """Worth saying: the step is at least the numerical floor at the final (a step far
        below it, such as a float32 value's last bit, changes nothing)."""
        mf = floor.metric(self.metric)
        step = self.used if self.used is not None else self.floor_step
        return mf is not None and float(step) >= _floor_of(mf.final_mean, params)

    def text(self) -> str:
        if self.used is None:
            return (
                f"{self.metric}: the replicas move in steps of {_step_text(self.floor_step)}"
                " but the candidate's values are not whole multiples of one step with"
                " theirs: no step used (the band is the spread and the floor alone)"
            )
        return (
            f"{self.metric} moves in steps of {_step_text(self.used)} (detected: every value"
            " the replicas and the candidate recorded is a whole multiple of it): its band"
            " is never narrower than one step (the tail mean's: one step over its points)"
        )


def _step_text(q: Fraction) -> str:
    if q.denominator == 1:
        return str(q.numerator)
    return f"{float(q):.6g}" + (f" (1/{q.denominator})" if q.numerator == 1 else "")


def _common_step(step: Fraction | None, values: Sequence[float | None]) -> Fraction | None:
    """The greatest step of ``step`` and the candidate's finite ``values`` (None when
    ``step`` is, or a value is on no grid)."""
    if step is None:
        return None
    fracs = [step]
    for v in values:
        if v is None or not math.isfinite(v):
            continue
        f = as_fraction(v)
        if f is None:
            return None
        fracs.append(f)
    return fraction_gcd(fracs)


def _equivalence(
    endpoints: Sequence[EndpointResult], t_end: float, k: int, params: NoiseParams
) -> Equivalence:
    """TOST at every endpoint: ``diff = x - mean``, ``se = h / t_end`` (the spread's
    ``s * sqrt(1 + 1/K)`` unless a floor or a step raised h), ``k - 1`` df; the claim's p
    is the largest (intersection-union)."""
    out: list[EndpointTost] = []
    for e in endpoints:
        delta = params.margin_at(e.mean)
        assert delta is not None
        se = e.half_width / t_end
        diff = e.value - e.mean if e.value is not None and math.isfinite(e.value) else None
        p = 1.0 if diff is None or delta <= 0 else tost_p(diff, se, delta, k - 1)
        out.append(EndpointTost(e.metric, e.endpoint, delta, diff, se, p))
    worst = max((t.p for t in out), default=1.0)
    relative = params.margin_abs is None
    declared = params.margin if relative else params.margin_abs
    assert declared is not None
    return Equivalence(declared, relative, params.alpha, worst, tuple(out))


def _too_wide_entry(e: EndpointResult, params: NoiseParams) -> TooWide:
    if params.margin_abs is not None:
        rel = params.margin_abs / abs(e.mean) if e.mean != 0 else math.inf
        return TooWide(e.metric, e.endpoint, rel, e.half_width, e.mean, params.margin_abs)
    assert params.margin is not None
    return TooWide(e.metric, e.endpoint, params.margin, e.half_width, e.mean)


def _floor_of(mean: float, params: NoiseParams) -> float:
    return max(params.rel_floor * abs(mean), params.abs_floor)


def _endpoint(
    metric: str,
    which: EndpointKind,
    replicas: Sequence[float],
    value: float | None,
    t: float,
    inflate: float,
    params: NoiseParams,
    step: float | None = None,
) -> EndpointResult:
    mean, sd = _mean_sd(replicas)
    spread = t * sd * inflate
    floor = _floor_of(mean, params)
    half = max(spread, floor, step or 0.0)
    floored = floor >= spread and floor >= (step or 0.0)
    if value is None:
        return EndpointResult(
            metric, which, "missing", None, mean, sd, half, floored, None, step=step
        )
    if not math.isfinite(value):
        return EndpointResult(
            metric, which, "not_finite", value, mean, sd, half, floored, None, step=step
        )
    diff = abs(value - mean)
    ratio = diff / half if half > 0 else (0.0 if diff == 0 else math.inf)
    # a value one step away is inside: compared with a slack far above float rounding
    # (values on a grid are whole multiples of the step; their difference is not exact)
    inside = diff <= half or (step is not None and half == step and diff <= step * _STEP_SLACK)
    status: EndpointStatus = "ok" if inside else "outside"
    return EndpointResult(metric, which, status, value, mean, sd, half, floored, ratio, step=step)


_STEP_SLACK: Final = 1.0 + 1e-9


def _too_wide(e: EndpointResult, params: NoiseParams) -> bool:
    """Wider than the declared margin (``margin * |mean|``, or ``margin_abs``); a band
    that is only the absolute floor (a metric whose mean is 0 and that never moved) is
    not noise and never too wide."""
    delta = params.margin_at(e.mean)
    assert delta is not None
    return e.half_width > delta and e.half_width > params.abs_floor


def _band(
    mf: MetricFloor,
    history: Mapping[int, float],
    t: float,
    inflate: float,
    params: NoiseParams,
    grid: Fraction | None = None,
) -> MetricBand:
    # The variance is pooled over neighbouring logged points because one step's sd from
    # K = 3..5 replicas is itself very uncertain.  The t quantile keeps K - 1 degrees of
    # freedom: neighbouring steps of one run are strongly correlated, so the pooled
    # estimate is not worth n * (K - 1) independent ones.
    var = [s.sd * s.sd for s in mf.steps]
    n, w = len(var), params.window
    points: list[BandPoint] = []
    for j, s in enumerate(mf.steps):
        lo_i, hi_i = max(0, j - w), min(n, j + w + 1)
        pooled = math.sqrt(math.fsum(var[lo_i:hi_i]) / (hi_i - lo_i))
        half = max(t * pooled * inflate, _floor_of(s.mean, params))
        if grid is not None and float(grid) >= half:
            half = float(grid) * _STEP_SLACK  # one step, and float rounding of it
        points.append(BandPoint(s.step, s.mean, s.mean - half, s.mean + half, history.get(s.step)))
    compared = [p for p in points if p.value is not None]
    leaves: int | None = None
    run, start = 0, 0
    for p in compared:
        if p.out:
            run += 1
            if run == 1:
                start = p.step
            if run >= params.exit_run:
                leaves = start
                break
        else:
            run = 0
    status: BandStatus = "leaves_band" if leaves is not None else "inside"
    if not compared:
        status = "no_overlap"
    out = sum(1 for p in compared if p.out)
    return MetricBand(mf.name, status, t, leaves, len(compared), out, tuple(points))


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _weights(
    pairwise: Sequence[float] | None, to_replicas: Sequence[float] | None
) -> WeightsDiagnostic:
    if not pairwise or not to_replicas:
        return WeightsDiagnostic("not_measured", None, None, None)
    cand = _median([_distance(v, "weights_to_replicas") for v in to_replicas])
    reps = _median(pairwise)
    if reps == 0:
        ratio = 1.0 if cand == 0 else math.inf
    elif math.isinf(reps):
        ratio = 1.0 if math.isinf(cand) else 0.0
    else:
        ratio = cand / reps
    return WeightsDiagnostic("measured", ratio, cand, reps)


# -- reasons -------------------------------------------------------------------------------


def _fmt(x: float | None, scale: float) -> str:
    """``x`` with enough digits to show differences of about ``scale`` (2 significant
    digits of it)."""
    if x is None:
        return "none"
    if not math.isfinite(x):
        return str(x)
    if not (scale > 0 and math.isfinite(scale)):
        return f"{x:.6g}"
    exp = math.floor(math.log10(scale))
    if x == 0 or 1e-3 <= abs(x) < 1e9:
        return f"{x:.{min(12, max(0, 1 - exp))}f}"
    digits = max(2, min(17, math.floor(math.log10(abs(x))) - exp + 2))
    return f"{x:.{digits}g}"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _pct(x: float) -> str:
    return f"{100 * x:.3g} %"


def floored_words(e: EndpointResult, params: NoiseParams | None = None) -> str:
    """Why a floored half-width is what it is, in words: the replicas agreed more closely
    than the numerical floor, so the floor was used (not their spread)."""
    params = params or NoiseParams()
    if e.mean == 0 or params.rel_floor * abs(e.mean) < params.abs_floor:
        least = f"{params.abs_floor:g}"
        return f"the replicas agreed more closely than ±{least}; the ±{least} minimum was used"
    pct = _pct(params.rel_floor)
    return f"the replicas agreed more closely than {pct}; the {pct} minimum was used"


def _endpoint_line(e: EndpointResult, k: int, params: NoiseParams) -> str:
    label = "final" if e.endpoint == "final" else "tail mean"
    band = f"{_fmt(e.mean, e.half_width)} ± {_fmt(e.half_width, e.half_width)}"
    if e.floored:
        band += f" ({floored_words(e, params)})"
    elif e.by_step and e.step is not None:
        band += f" (one step of its resolution, {_fmt(e.step, e.step)}: the least it may be)"
    tag = f"(K={k}, α={params.alpha:g})"
    if e.status == "missing":
        return f"{e.metric} {label}: the candidate has no value (replicas {band})"
    if e.status == "not_finite":
        return f"{e.metric} {label} is {e.value} (not finite; replicas {band})"
    if e.status == "ok":
        return f"{e.metric} {label} {_fmt(e.value, e.half_width)} within {band} {tag}"
    return (
        f"{e.metric} {label} {_fmt(e.value, e.half_width)} outside {band} {tag}: "
        f"{e.ratio:.3g} half-widths from the replicas' mean"
    )


def _reasons(
    status: JudgementStatus,
    floor: NoiseFloor,
    params: NoiseParams,
    m: int,
    t_end: float | None,
    endpoints: Sequence[EndpointResult],
    bands: Sequence[MetricBand],
    too_wide: Sequence[TooWide],
    weights: WeightsDiagnostic,
    not_judged: Sequence[str],
) -> list[str]:
    k, a = floor.k, f"{params.alpha:g}"
    lines: list[str] = []
    if status == "NO_METRICS":
        lines.append(f"no metrics to judge: the {k} replicas share no judged metric")
    else:
        bad = sum(1 for e in endpoints if not e.ok)
        head = {
            "WITHIN_NOISE": "within this run's noise (reproduced; not bit-identical)",
            "OUTSIDE_NOISE": f"outside this run's noise: {bad} of {_n(m, 'endpoint test')} failed",
            "INCOMPLETE": f"incomplete: the candidate lacks {bad} of {_n(m, 'endpoint')}",
        }[status]
        assert t_end is not None
        lines.append(
            f"{head}; {_n(m, 'endpoint test')} over {_n(len(floor.metrics), 'metric')}, K={k} "
            f"replicas, family α={a} (Bonferroni: each at {params.alpha / m:.3g}, "
            f"t={t_end:.4g} on {k - 1} df)"
        )
    lines.extend(_endpoint_line(e, k, params) for e in endpoints)
    for b in bands:
        p = b.exit_point
        if p is not None and p.value is not None:
            half = 0.5 * (p.hi - p.lo)
            lines.append(
                f"{b.metric} leaves the noise band at step {p.step} (value "
                f"{_fmt(p.value, half)}, band {_fmt(p.lo, half)}–{_fmt(p.hi, half)}) and stays "
                f"out for at least {params.exit_run} logged points"
            )
        elif b.status == "no_overlap":
            lines.append(f"{b.metric}: the candidate logged none of the replicas' common steps")
    for w in too_wide:
        label = "final" if w.endpoint == "final" else "tail mean"
        declared = f"±{w.margin_abs:g}" if w.margin_abs is not None else _pct(w.margin)
        lines.append(
            f"{w.metric} {label}: the noise band (± {_fmt(w.half_width, w.half_width)}, "
            f"{_pct(w.relative_width)} of |mean|) is wider than the declared margin of "
            f"{declared}: this run's noise cannot show agreement to that margin"
        )
    if weights.ratio is not None:
        lines.append(
            f"weights: the candidate is {weights.ratio:.3g}× as far from the replicas as they "
            f"are from each other (median distances; a diagnostic, not part of the rule)"
        )
    for s in floor.skipped:
        if s.reason != "timing":
            lines.append(f"{s.name}: not judged, {_SKIP_TEXT[s.reason]}")
    timing = [s.name for s in floor.skipped if s.reason == "timing"]
    if timing:
        lines.append(f"timing metrics not judged: {', '.join(timing)}")
    if not_judged:
        lines.append(f"not judged, no replica spread: {', '.join(not_judged)}")
    return lines


# -- the self-check ------------------------------------------------------------------------

SelfCheckStatus = Literal["WELL_BEHAVED", "NOT_WELL_BEHAVED", "TOO_FEW_REPLICAS", "NO_METRICS"]
SELF_CHECK_MIN_K: Final = 4


@dataclass(frozen=True)
class LeftOut:
    """One replica judged against the others."""

    label: str
    status: JudgementStatus
    failed: tuple[str, ...]
    """The reason lines of its failed endpoints."""

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "status": self.status, "failed": list(self.failed)}


@dataclass(frozen=True)
class SelfCheck:
    """Each replica, left out, judged against the others.  Exchangeable replicas fail
    about ``K * alpha`` of these (0.25 at K=5, alpha 0.05); more than one failure says
    the replicas are not draws of one distribution, and the floor is not to be trusted."""

    status: SelfCheckStatus
    k: int
    failures: int
    results: tuple[LeftOut, ...]
    message: str

    @property
    def well_behaved(self) -> bool:
        return self.status == "WELL_BEHAVED"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "well_behaved": self.well_behaved,
            "k": self.k,
            "failures": self.failures,
            "results": [r.to_dict() for r in self.results],
            "message": self.message,
        }


def self_check(
    histories: Sequence[Mapping[str, History]],
    finals: Sequence[Mapping[str, float]],
    params: NoiseParams | None = None,
    *,
    labels: Sequence[str] | None = None,
) -> SelfCheck:
    """Leave-one-out over the K replicas (K >= 4), by the endpoint rule; weights play no
    part.  ``well_behaved`` when at most one replica falls outside the others' noise."""
    params = (params or NoiseParams()).validate()
    k = len(finals)
    if len(histories) != k:
        raise ValueError(f"{len(histories)} histories but {k} finals: one of each a replica")
    names = tuple(labels) if labels is not None else tuple(f"replica {i + 1}" for i in range(k))
    if len(names) != k:
        raise ValueError(f"{len(names)} labels for {k} replicas")
    if k < SELF_CHECK_MIN_K:
        return SelfCheck(
            "TOO_FEW_REPLICAS",
            k,
            0,
            (),
            f"the self-check needs at least {SELF_CHECK_MIN_K} replicas, got {k}",
        )
    results: list[LeftOut] = []
    for i in range(k):
        rest = [j for j in range(k) if j != i]
        floor = NoiseFloor.from_replicas(
            [histories[j] for j in rest],
            [finals[j] for j in rest],
            params=params,
            labels=[names[j] for j in rest],
        )
        if not floor.metrics:
            return SelfCheck("NO_METRICS", k, 0, (), "no metrics to judge the replicas by")
        j = judge(floor, histories[i], finals[i], params)
        failed = tuple(_endpoint_line(e, k - 1, params) for e in j.endpoints if not e.ok)
        results.append(LeftOut(names[i], j.status, failed))
    bad = [r.label for r in results if r.status != "WITHIN_NOISE"]
    a = f"{params.alpha:g}"
    if len(bad) <= 1:
        extra = f" ({bad[0]}, which chance allows)" if bad else ""
        msg = f"{len(bad)} of {k} replicas fall outside the others' noise{extra}"
        return SelfCheck("WELL_BEHAVED", k, len(bad), tuple(results), msg)
    msg = (
        f"{len(bad)} of {k} replicas fall outside the others' noise ({', '.join(bad)}); at "
        f"most one is expected by chance at α={a}.  The replicas do not behave as draws of "
        f"one distribution (different machines or software, an input that changed between "
        f"them): this noise floor should not be trusted"
    )
    return SelfCheck("NOT_WELL_BEHAVED", k, len(bad), tuple(results), msg)


# -- JSON helpers --------------------------------------------------------------------------


def _float_in(v: object, what: str) -> float:
    """A float from JSON: a number, or the strings "inf", "-inf", "nan"."""
    if isinstance(v, bool):
        raise ValueError(f"{what}: expected a number, got {v!r}")
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    raise ValueError(f"{what}: expected a number, got {v!r}")


def _opt_float(v: object, what: str) -> float | None:
    return None if v is None else _float_in(v, what)


def _finite(v: object, what: str) -> float:
    f = _float_in(v, what)
    if not math.isfinite(f):
        raise ValueError(f"noise floor {what}: values must be finite, got {v!r}")
    return f


def _distance(v: object, what: str) -> float:
    f = _float_in(v, what)
    if not f >= 0.0:  # NaN fails too
        raise ValueError(f"{what}: a distance must be >= 0, got {v!r}")
    return f


def _int(v: object, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{what}: expected an integer, got {v!r}")
    return v


def _str(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise ValueError(f"{key}: expected a string, got {v!r}")
    return v


def _list(d: Mapping[str, Any], key: str) -> list[Any]:
    v = d.get(key)
    if not isinstance(v, list):
        raise ValueError(f"{key}: expected a list, got {type(v).__name__}")
    return v


def _optional(read: Any, v: object, what: str) -> Any:
    """``read(v)`` for a stored object, None for an absent one."""
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise ValueError(f"noise judgement: {what} must be an object")
    return read(v)


def _choice(v: object, allowed: Sequence[str], what: str) -> str:
    if not isinstance(v, str) or v not in allowed:
        raise ValueError(f"{what}: expected one of {', '.join(allowed)}, got {v!r}")
    return v

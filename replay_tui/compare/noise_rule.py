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
from functools import lru_cache
from typing import Any, Final, Literal, cast

from replay_tui.compare.metrics import is_timing_metric, json_float

# -- Student's t ---------------------------------------------------------------------------

_CF_EPS: Final = 4e-16
_CF_TINY: Final = 1e-300
_CF_MAXIT: Final = 20_000


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function, modified Lentz's method
    (Numerical Recipes ``betacf``)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < _CF_TINY:
        d = _CF_TINY
    d = 1.0 / d
    h = d
    for m in range(1, _CF_MAXIT + 1):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        if abs(d) < _CF_TINY:
            d = _CF_TINY
        c = 1.0 + aa / c
        if abs(c) < _CF_TINY:
            c = _CF_TINY
        d = 1.0 / d
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        if abs(d) < _CF_TINY:
            d = _CF_TINY
        c = 1.0 + aa / c
        if abs(c) < _CF_TINY:
            c = _CF_TINY
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def _betai(a: float, b: float, x: float, y: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)``; ``y`` is ``1 - x`` computed by the
    caller without cancellation."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, y) / b


def _t_sf(t: float, df: int) -> float:
    """``P(T > t)`` for ``t >= 0``: ``I_{df/(df+t^2)}(df/2, 1/2) / 2``."""
    t2 = t * t
    return 0.5 * _betai(0.5 * df, 0.5, df / (df + t2), t2 / (df + t2))


def _t_pdf(t: float, df: int) -> float:
    return math.exp(
        math.lgamma(0.5 * (df + 1))
        - math.lgamma(0.5 * df)
        - 0.5 * math.log(df * math.pi)
        - 0.5 * (df + 1) * math.log1p(t * t / df)
    )


def student_t_ppf(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom.

    Closed forms for ``df`` 1 and 2; otherwise Newton's method on the upper tail
    (``I_x(df/2, 1/2) / 2``, the regularized incomplete beta by Lentz's continued
    fraction), kept inside a bisection bracket.  Accurate to about 1e-12 relative.
    """
    if isinstance(df, bool) or not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    p = float(p)
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    return _t_ppf(p, df)


@lru_cache(maxsize=256)
def _t_ppf(p: float, df: int) -> float:
    if p == 0.5:
        return 0.0
    # by symmetry, solve for the tail q < 1/2 (1 - p is exact for p >= 1/2)
    return -_t_upper(p, df) if p < 0.5 else _t_upper(1.0 - p, df)


def _t_upper(q: float, df: int) -> float:
    """The t > 0 with ``P(T > t) = q``, for ``0 < q < 1/2``."""
    if df == 1:
        return 1.0 / math.tan(math.pi * q)
    if df == 2:
        return (1.0 - 2.0 * q) / math.sqrt(2.0 * q * (1.0 - q))
    lo, hi = 0.0, 1.0
    while _t_sf(hi, df) > q:
        lo, hi = hi, hi * 2.0
        if math.isinf(hi):
            return math.inf
    t = 0.5 * (lo + hi)
    for _ in range(200):
        g = _t_sf(t, df) - q
        if g == 0.0:
            return t
        if g > 0.0:
            lo = t
        else:
            hi = t
        pdf = _t_pdf(t, df)
        nxt = t + g / pdf if pdf > 0.0 else 0.5 * (lo + hi)
        if not lo < nxt < hi:
            nxt = 0.5 * (lo + hi)
        if abs(nxt - t) <= 1e-15 * max(1.0, t) or hi - lo <= 4e-16 * hi:
            return nxt
        t = nxt
    return t


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
    a band wider than it is recorded as ``too_wide``.  None: no margin declared."""
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
        }

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
        }

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
        return cls(name, finals, tail_steps, tail_means, tuple(steps))


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
    if steps:
        n = max(1, math.ceil(params.tail_fraction * len(steps) - 1e-9))
        tail_steps = tuple(s.step for s in steps[-n:])
        tail_means = tuple(_mean_sd([h[s] for s in tail_steps])[0] for h in histories)
    return MetricFloor(name, tuple(finals), tail_steps, tail_means, tuple(steps))


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); exactly (x, 0) when all are equal."""
    first = values[0]
    if all(v == first for v in values):
        return first, 0.0
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, 0.0
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var)


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

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
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
        } | ({"state": self.state} if self.state is not None else {})

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
    """Declared, relative to ``|mean|``."""
    half_width: float
    """Measured, absolute."""
    mean: float

    @property
    def relative_width(self) -> float:
        return self.half_width / abs(self.mean) if self.mean != 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "endpoint": self.endpoint,
            "margin": self.margin,
            "half_width": self.half_width,
            "mean": self.mean,
            "relative_width": json_float(self.relative_width),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TooWide:
        endpoint = _choice(d.get("endpoint"), ("final", "tail_mean"), "endpoint")
        return cls(
            _str(d, "metric"),
            cast(EndpointKind, endpoint),
            _float_in(d.get("margin"), "margin"),
            _float_in(d.get("half_width"), "half_width"),
            _float_in(d.get("mean"), "mean"),
        )


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

    @property
    def within(self) -> bool:
        """Every endpoint test passed, and there was at least one."""
        return self.status == "WITHIN_NOISE"

    def band(self, metric: str) -> MetricBand | None:
        for b in self.bands:
            if b.metric == metric:
                return b
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
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
    for mf in floor.metrics:
        assert t_end is not None  # a floor metric means m >= 1
        h = cand.history(mf.name)
        ends: list[tuple[EndpointKind, tuple[float, ...], float | None]] = [
            ("final", mf.finals, cand.final(mf.name))
        ]
        if mf.tail_means:
            tail = [h.get(s) for s in mf.tail_steps]
            known = [v for v in tail if v is not None]
            value = math.fsum(known) / len(known) if len(known) == len(tail) else None
            ends.append(("tail_mean", mf.tail_means, value))
        for which, replicas, value in ends:
            e = _endpoint(mf.name, which, replicas, value, t_end, inflate, params)
            endpoints.append(e)
            if params.margin is not None and _too_wide(e, params):
                too_wide.append(TooWide(mf.name, which, params.margin, e.half_width, e.mean))
        if mf.steps:
            bands.append(_band(mf, h, t_step, inflate, params))

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
    reasons = _reasons(
        status, floor, params, m, t_end, endpoints, bands, too_wide, weights, not_judged
    )
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
    )


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
) -> EndpointResult:
    mean, sd = _mean_sd(replicas)
    spread = t * sd * inflate
    floor = _floor_of(mean, params)
    half = max(spread, floor)
    floored = floor >= spread
    if value is None:
        return EndpointResult(metric, which, "missing", None, mean, sd, half, floored, None)
    if not math.isfinite(value):
        return EndpointResult(metric, which, "not_finite", value, mean, sd, half, floored, None)
    diff = abs(value - mean)
    ratio = diff / half if half > 0 else (0.0 if diff == 0 else math.inf)
    status: EndpointStatus = "ok" if diff <= half else "outside"
    return EndpointResult(metric, which, status, value, mean, sd, half, floored, ratio)


def _too_wide(e: EndpointResult, params: NoiseParams) -> bool:
    """Wider than ``margin * |mean|``; a band that is only the absolute floor (a metric
    whose mean is 0 and that never moved) is not noise and never too wide."""
    assert params.margin is not None
    return e.half_width > params.margin * abs(e.mean) and e.half_width > params.abs_floor


def _band(
    mf: MetricFloor,
    history: Mapping[int, float],
    t: float,
    inflate: float,
    params: NoiseParams,
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
        lines.append(
            f"{w.metric} {label}: the noise band (± {_fmt(w.half_width, w.half_width)}, "
            f"{_pct(w.relative_width)} of |mean|) is wider than the declared margin of "
            f"{_pct(w.margin)}: this run's noise cannot show agreement to that margin"
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


def _choice(v: object, allowed: Sequence[str], what: str) -> str:
    if not isinstance(v, str) or v not in allowed:
        raise ValueError(f"{what}: expected one of {', '.join(allowed)}, got {v!r}")
    return v

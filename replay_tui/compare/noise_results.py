"""What judging a candidate against a noise floor gives (``compare.noise_rule.judge``):
the endpoint tests, the per-step bands, the weights diagnostic, the too-wide margins, the
equivalence claim (TOST), the sensitivity of a WITHIN_NOISE, and the judgement holding
them.  Frozen ``storage.wire`` models: ``to_dict`` (strict JSON: ``inf`` and ``nan``
become strings) and ``from_dict``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from replay_tui.compare.noise_params import pct
from storage.wire import Wire, json_float, read_float, read_int, wire

JudgementStatus = Literal["WITHIN_NOISE", "OUTSIDE_NOISE", "INCOMPLETE", "NO_METRICS"]
"""WITHIN_NOISE: every endpoint within the replicas' prediction interval (reproduced within
this run's noise; not bit-identical).  OUTSIDE_NOISE: at least one endpoint outside (or not
finite).  INCOMPLETE: none outside, but the candidate lacks an endpoint the replicas have.
NO_METRICS: the replicas have no metric to judge by."""

EndpointKind = Literal["final", "tail_mean"]
EndpointStatus = Literal["ok", "outside", "missing", "not_finite"]
BandStatus = Literal["inside", "leaves_band", "no_overlap"]
WeightsStatus = Literal["measured", "not_measured"]


@dataclass(frozen=True)
class EndpointResult(Wire):
    """One endpoint test of one metric."""

    WIRE_EXTRA = ("ok",)

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
    state: str | None = field(default=None, metadata=wire(omit="none"))
    """The item state (``compare.states``: within_noise, outside_noise, missing) the
    comparison gave it; None in a body stored before states existed."""
    step: float | None = field(default=None, metadata=wire(omit="none"))
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


POINT_FIELDS: Final = ("step", "mean", "lo", "hi", "value")
"""A band's points are stored as a table, one row ``[step, mean, lo, hi, value]`` a
point, under these column names."""


def _points_table(points: tuple[BandPoint, ...]) -> list[list[Any]]:
    return [
        [p.step, json_float(p.mean), json_float(p.lo), json_float(p.hi), json_float(p.value)]
        for p in points
    ]


def _read_points(v: object, where: str) -> tuple[BandPoint, ...]:
    if not isinstance(v, list):
        raise ValueError(f"{where}: expected a list, got {type(v).__name__}")
    points = []
    for i, row in enumerate(v):
        if not isinstance(row, list | tuple) or len(row) != 5:
            raise ValueError("band points: each is [step, mean, lo, hi, value]")
        at = f"{where}[{i}]"
        points.append(
            BandPoint(
                step=read_int(row[0], f"{at}.step"),
                mean=read_float(row[1], f"{at}.mean"),
                lo=read_float(row[2], f"{at}.lo"),
                hi=read_float(row[3], f"{at}.hi"),
                value=None if row[4] is None else read_float(row[4], f"{at}.value"),
            )
        )
    return tuple(points)


@dataclass(frozen=True)
class MetricBand(Wire):
    """The per-step band of one metric (a diagnostic: where a divergence starts)."""

    WIRE_EXTRA = ("point_fields",)
    WIRE_ORDER = (
        "metric",
        "status",
        "t",
        "leaves_band_at",
        "points_compared",
        "points_out",
        "point_fields",
        "points",
    )

    metric: str
    status: BandStatus
    t: float
    """The per-step t quantile, ``t(1 - alpha / 2, K - 1)``."""
    leaves_band_at: int | None
    """The first step of the first ``exit_run`` consecutive compared points out."""
    points_compared: int
    points_out: int
    points: tuple[BandPoint, ...] = field(metadata=wire(encode=_points_table, decode=_read_points))

    @property
    def point_fields(self) -> tuple[str, ...]:
        """The columns of the stored points table."""
        return POINT_FIELDS

    @property
    def exit_point(self) -> BandPoint | None:
        for p in self.points:
            if p.step == self.leaves_band_at:
                return p
        return None


@dataclass(frozen=True)
class WeightsDiagnostic(Wire):
    """Median candidate-to-replica weight distance over the median replica-to-replica one
    (about 1 for a true reproduction).  A diagnostic, never part of pass/fail."""

    status: WeightsStatus
    ratio: float | None
    candidate_median: float | None
    replica_median: float | None


@dataclass(frozen=True)
class TooWide(Wire):
    """The endpoint band of a metric is wider than the declared practical margin: this
    run's noise cannot show agreement to that margin (the caller reports a gap)."""

    WIRE_EXTRA = ("relative_width",)
    WIRE_ORDER = (
        "metric",
        "endpoint",
        "margin",
        "half_width",
        "mean",
        "relative_width",
        "margin_abs",
    )

    metric: str
    endpoint: EndpointKind
    margin: float
    """Declared, relative to ``|mean|`` (an absolute margin: as a share of this mean)."""
    half_width: float
    """Measured, absolute."""
    mean: float
    margin_abs: float | None = field(default=None, metadata=wire(omit="none"))
    """The margin as declared, when it was declared in the metric's units."""

    @property
    def relative_width(self) -> float:
        return self.half_width / abs(self.mean) if self.mean != 0 else math.inf


@dataclass(frozen=True)
class EndpointTost(Wire):
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


@dataclass(frozen=True)
class Equivalence(Wire):
    """The positive claim a declared margin gives: the candidate is within ± margin of
    the replicas' mean at every endpoint, by two one-sided tests (TOST) each at ``alpha``
    (an intersection-union test: no multiplicity correction is needed).  Never changes
    the verdict."""

    WIRE_EXTRA = ("equivalent", "text")
    WIRE_ORDER = ("margin", "relative", "alpha", "p", "equivalent", "text", "endpoints")

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
        return f"±{pct(self.margin)}" if self.relative else f"±{self.margin:g}"

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


@dataclass(frozen=True)
class MetricSensitivity(Wire):
    """The smallest change of one metric a WITHIN_NOISE could have seen: its narrowest
    endpoint half-width."""

    WIRE_EXTRA = ("relative",)

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
            f"{self.metric} {pct(r)}"
            if r is not None
            else (f"{self.metric} ±{self.half_width:.3g} (its mean is 0)")
        )


@dataclass(frozen=True)
class Sensitivity(Wire):
    """How strong a WITHIN_NOISE is: per metric, the smallest change it could have seen
    (the half-width h as a share of the value), and overall the largest of them (a
    change of every metric by less than that may pass as noise)."""

    WIRE_EXTRA = ("overall", "text")
    WIRE_ORDER = ("overall", "text", "metrics")

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
        head = f"{pct(o)} of the value" if o is not None else "stated per metric"
        return (
            f"the smallest change it could have seen: {head} ({each}); a smaller change"
            " passes as noise"
        )

    def short(self) -> str:
        o = self.overall
        return (
            f"smallest visible change: {pct(o)}"
            if o is not None
            else "smallest visible change: per metric"
        )


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
        metrics=tuple(
            MetricSensitivity(
                metric=e.metric, endpoint=e.endpoint, half_width=e.half_width, mean=e.mean
            )
            for e in best.values()
        )
    )


def _width_key(e: EndpointResult) -> tuple[int, float]:
    r = e.relative_width
    return (0, r) if r is not None else (1, e.half_width)


def _p_text(p: float) -> str:
    return "p<0.0001" if p < 1e-4 else f"p={p:.3g}"


JUDGEMENT_VERSION: Final = 1


def _read_version(v: object, where: str) -> int:
    if v != JUDGEMENT_VERSION or isinstance(v, bool):
        raise ValueError(f"noise judgement: unknown version {v!r}")
    return JUDGEMENT_VERSION


@dataclass(frozen=True)
class NoiseJudgement(Wire):
    """A candidate judged against a noise floor."""

    WIRE_EXTRA = ("within",)
    WIRE_ORDER = (
        "version",
        "status",
        "within",
        "k",
        "alpha",
        "tests",
        "t_endpoint",
        "t_step",
        "endpoints",
        "bands",
        "weights",
        "too_wide",
        "not_judged",
        "reasons",
        "equivalence",
        "sensitivity",
    )

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
    equivalence: Equivalence | None = field(default=None, metadata=wire(omit="none"))
    """With a declared margin: whether the candidate is shown within it (TOST).  None:
    no margin declared (or a judgement stored before the claim existed)."""
    sensitivity: Sensitivity | None = field(default=None, metadata=wire(omit="none"))
    """A WITHIN_NOISE's strength: the smallest change it could have seen.  None: not
    WITHIN_NOISE (or stored before it was kept: :meth:`smallest_change` works it out)."""
    version: int = field(default=JUDGEMENT_VERSION, metadata=wire(decode=_read_version))
    """The stored form's version (one so far)."""

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

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
library only.  This module holds the rule (``judge``) and its words; the parts live
beside it: the knobs in ``noise_params``, the floor in ``noise_floor_model``, the results
(frozen dataclasses with ``to_dict``, strict JSON, and ``from_dict``) in
``noise_results``, the leave-one-out check in ``noise_self_check``, the statistics in
``stats``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from replay_tui.compare.metrics import is_timing_metric
from replay_tui.compare.noise_floor_model import (
    STEP_SLACK,
    History,
    MetricFloor,
    NoiseFloor,
    prepare,
)
from replay_tui.compare.noise_json import read_distance
from replay_tui.compare.noise_params import NoiseParams, pct
from replay_tui.compare.noise_results import (
    BandPoint,
    BandStatus,
    EndpointKind,
    EndpointResult,
    EndpointStatus,
    EndpointTost,
    Equivalence,
    JudgementStatus,
    MetricBand,
    NoiseJudgement,
    TooWide,
    WeightsDiagnostic,
    sensitivity_of,
)
from replay_tui.compare.stats import as_fraction, fraction_gcd, student_t_ppf, tost_p
from replay_tui.compare.stats import mean_sd as _mean_sd

_SKIP_TEXT: Final[dict[str, str]] = {
    "timing": "a timing metric (measures the machine)",
    "not_in_every_replica": "not logged by every replica",
    "not_finite": "a replica's final value is not finite",
}


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
    cand = prepare(candidate_histories, candidate_finals)
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
    inside = diff <= half or (step is not None and half == step and diff <= step * STEP_SLACK)
    status: EndpointStatus = "ok" if inside else "outside"
    return EndpointResult(metric, which, status, value, mean, sd, half, floored, ratio, step=step)


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
            half = float(grid) * STEP_SLACK  # one step, and float rounding of it
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
    cand = _median([read_distance(v, "weights_to_replicas") for v in to_replicas])
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


def floored_words(e: EndpointResult, params: NoiseParams | None = None) -> str:
    """Why a floored half-width is what it is, in words: the replicas agreed more closely
    than the numerical floor, so the floor was used (not their spread)."""
    params = params or NoiseParams()
    if e.mean == 0 or params.rel_floor * abs(e.mean) < params.abs_floor:
        least = f"{params.abs_floor:g}"
        return f"the replicas agreed more closely than ±{least}; the ±{least} minimum was used"
    share = pct(params.rel_floor)
    return f"the replicas agreed more closely than {share}; the {share} minimum was used"


def endpoint_line(e: EndpointResult, k: int, params: NoiseParams) -> str:
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
    lines.extend(endpoint_line(e, k, params) for e in endpoints)
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
        declared = f"±{w.margin_abs:g}" if w.margin_abs is not None else pct(w.margin)
        lines.append(
            f"{w.metric} {label}: the noise band (± {_fmt(w.half_width, w.half_width)}, "
            f"{pct(w.relative_width)} of |mean|) is wider than the declared margin of "
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

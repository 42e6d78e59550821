"""The rule that judges a candidate run against its replicas' noise (fixed numbers only).

Why not the naive rule "the candidate's largest distance to a replica is at most the
largest replica-to-replica distance": the candidate and K replicas of a true reproduction
are exchangeable draws of one distribution.  For one metric the naive rule fails exactly
when the candidate is the smallest or largest of the K + 1 values, which happens with
probability 2 / (K + 1) (1 in 2 at K = 3).  ``test_not_the_naive_max_rule`` shows such a
case, which the prediction interval rightly passes.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest

from replay_tui.compare.noise_floor_model import NoiseFloor
from replay_tui.compare.noise_params import NoiseParams
from replay_tui.compare.noise_results import NoiseJudgement
from replay_tui.compare.noise_rule import judge
from replay_tui.compare.noise_self_check import self_check
from replay_tui.compare.stats import student_t_ppf

FINALS = [{"loss": 1.5314}, {"loss": 1.5330}, {"loss": 1.5340}]
NO_HISTORY: list[dict[str, Any]] = [{}, {}, {}]

# -- Student's t ---------------------------------------------------------------------------

# Reference quantiles from a 40-digit computation of the regularized incomplete beta;
# df 1 and 2 agree with the closed forms tan(pi (p - 1/2)) and (2p - 1) / sqrt(2p(1 - p)).
T_TABLE = [
    (0.975, 1, 12.7062047361747),
    (0.95, 1, 6.31375151467504),
    (0.975, 2, 4.30265272974946),
    (0.975, 3, 3.18244630528371),
    (0.975, 4, 2.77644510519779),
    (0.995, 3, 5.84090930973336),
    (0.9, 5, 1.47588404882448),
    (0.999, 7, 4.78528962863833),
    (0.975, 10, 2.22813885198627),
    (0.975, 30, 2.04227245630124),
    (0.975, 100, 1.98397151852355),
    (0.99, 200, 2.34513708225947),
    (0.6, 3, 0.27667066233269),
    (0.999999, 3, 103.299467780419),
    (1 - 0.05 / 6, 2, 7.64880393791554),  # Bonferroni m = 3, K = 3
    (1 - 0.05 / 4, 3, 4.1765348461045),  # m = 2, K = 4
    (1 - 0.05 / 12, 4, 4.85100844309786),  # m = 6, K = 5
    (1 - 0.05 / 12, 1, 76.3900093111361),  # m = 6, K = 2
]


@pytest.mark.parametrize(("p", "df", "expected"), T_TABLE)
def test_t_quantile_table(p: float, df: int, expected: float) -> None:
    assert student_t_ppf(p, df) == pytest.approx(expected, rel=1e-11)
    assert student_t_ppf(1 - p, df) == pytest.approx(-expected, rel=1e-11)


def test_t_quantile_closed_forms_and_centre() -> None:
    assert student_t_ppf(0.5, 7) == 0.0
    assert student_t_ppf(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), rel=1e-13)
    p = 0.9
    assert student_t_ppf(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)))
    # the tails stay accurate far out (1 - p is not formed for p < 1/2)
    assert student_t_ppf(1e-10, 4) == pytest.approx(-416.175140329604, rel=1e-9)
    assert student_t_ppf(1e-10, 3) == pytest.approx(-2225.76928468309, rel=1e-9)


@pytest.mark.parametrize(
    ("p", "df", "message"),
    [
        (0.0, 3, "p must be in"),
        (1.0, 3, "p must be in"),
        (math.nan, 3, "p must be in"),
        (0.9, 0, "df must be an integer >= 1"),
        (0.9, 2.5, "df must be an integer >= 1"),
    ],
)
def test_t_quantile_refuses(p: float, df: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        student_t_ppf(p, df)


# -- parameters ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0}, r"alpha must be in \(0, 1\), got 0.0"),
        ({"alpha": 1.0}, r"alpha must be in \(0, 1\)"),
        ({"alpha": True}, "alpha must be a number"),
        ({"rel_floor": -0.001}, "rel_floor must be a finite number >= 0"),
        ({"abs_floor": math.nan}, "abs_floor must be a finite number >= 0"),
        ({"margin": 0.0}, r"margin must be a finite number > 0 \(relative: 0.01 = 1 %\) or None"),
        ({"margin": -0.01}, "margin must be a finite number > 0"),
        ({"exit_run": 0}, "exit_run must be >= 1, got 0"),
        ({"exit_run": 2.5}, "exit_run must be an integer"),
        ({"tail_fraction": 0.0}, r"tail_fraction must be in \(0, 0.5\]"),
        ({"tail_fraction": 0.6}, r"tail_fraction must be in \(0, 0.5\], got 0.6"),
        ({"window": -1}, "window must be >= 0, got -1"),
    ],
)
def test_params_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NoiseParams(**kwargs)


def test_params_defaults_and_round_trip() -> None:
    p = NoiseParams()
    assert (p.alpha, p.rel_floor, p.abs_floor, p.margin) == (0.05, 1e-3, 1e-12, None)
    assert (p.exit_run, p.tail_fraction, p.window) == (3, 0.02, 5)
    q = NoiseParams(alpha=0.01, margin=0.02, window=0)
    assert q.validate() is q
    assert NoiseParams.from_dict(json.loads(json.dumps(q.to_dict()))) == q
    with pytest.raises(ValueError, match="unknown noise parameter"):
        NoiseParams.from_dict({"alpha": 0.05, "beta": 1})


# -- endpoints -----------------------------------------------------------------------------


def test_candidate_within_noise() -> None:
    floor = NoiseFloor.from_replicas(NO_HISTORY, FINALS)
    j = judge(floor, {}, {"loss": 1.5325})
    assert j.status == "WITHIN_NOISE" and j.within
    assert (j.k, j.tests) == (3, 1)
    assert j.t_endpoint == pytest.approx(4.30265272974946, rel=1e-11)
    (e,) = j.endpoints
    assert (e.metric, e.endpoint, e.status, e.ok, e.floored) == ("loss", "final", "ok", True, False)
    assert e.mean == pytest.approx(1.5328)
    assert e.sd == pytest.approx(math.sqrt(1.72e-6))
    # t(0.975, 2) * s * sqrt(1 + 1/3)
    assert e.half_width == pytest.approx(4.30265272974946 * math.sqrt(1.72e-6) * math.sqrt(4 / 3))
    assert e.half_width == pytest.approx(0.0065158, abs=1e-7)
    assert e.ratio == pytest.approx(0.0003 / e.half_width)
    assert "loss final 1.5325 within 1.5328 ± 0.0065 (K=3, α=0.05)" in j.reasons


def test_candidate_outside_noise() -> None:
    floor = NoiseFloor.from_replicas(NO_HISTORY, FINALS)
    j = judge(floor, {}, {"loss": 1.4274})
    assert j.status == "OUTSIDE_NOISE" and not j.within
    (e,) = j.endpoints
    assert e.status == "outside" and not e.ok
    assert e.ratio == pytest.approx(0.1054 / e.half_width)
    assert j.reasons[0].startswith("outside this run's noise: 1 of 1 endpoint test failed")
    assert any(r.startswith("loss final 1.4274 outside 1.5328 ± 0.0065") for r in j.reasons)


def test_not_the_naive_max_rule() -> None:
    """1.5342 lies beyond every replica: its distance to 1.5314 (0.0028) exceeds the largest
    replica-to-replica distance (0.0026), so the naive max rule would fail it, although it
    is an ordinary draw from the replicas' spread."""
    floor = NoiseFloor.from_replicas(NO_HISTORY, FINALS)
    assert 1.5342 - 1.5314 > 1.5340 - 1.5314
    assert judge(floor, {}, {"loss": 1.5342}).within


def test_floor_when_replicas_are_identical() -> None:
    floor = NoiseFloor.from_replicas(NO_HISTORY, [{"loss": 2.0}] * 3)
    assert floor.metrics[0].final_sd == 0.0
    near = judge(floor, {}, {"loss": 2.000001})
    assert near.within
    (e,) = near.endpoints
    assert e.floored and e.half_width == pytest.approx(0.002)  # 0.1 % of |mean|
    far = judge(floor, {}, {"loss": 2.02})  # 1 % off
    assert far.status == "OUTSIDE_NOISE"
    assert any(
        "the replicas agreed more closely than 0.1 %; the 0.1 % minimum was used" in r
        for r in far.reasons
    )
    # at mean 0 the absolute floor is all there is
    zero = NoiseFloor.from_replicas(NO_HISTORY, [{"nan_count": 0.0}] * 3)
    assert judge(zero, {}, {"nan_count": 0.0}).within
    assert not judge(zero, {}, {"nan_count": 1e-9}).within


def test_bonferroni_m_changes_t() -> None:
    one = NoiseFloor.from_replicas(NO_HISTORY, FINALS)
    two = NoiseFloor.from_replicas(
        NO_HISTORY,
        [
            {"loss": 1.5314, "acc": 0.50},
            {"loss": 1.5330, "acc": 0.51},
            {"loss": 1.5340, "acc": 0.52},
        ],
    )
    assert (one.endpoint_count, two.endpoint_count) == (1, 2)
    # 5 sd-units (times sqrt(1 + 1/K)) from the mean: beyond t(0.975, 2) = 4.30, within
    # t(1 - 0.05/4, 2) = 6.21
    x = 1.5328 + 5 * math.sqrt(1.72e-6) * math.sqrt(4 / 3)
    j1 = judge(one, {}, {"loss": x})
    j2 = judge(two, {}, {"loss": x, "acc": 0.51})
    assert j1.status == "OUTSIDE_NOISE"
    assert j2.status == "WITHIN_NOISE"
    assert j2.tests == 2
    assert j2.t_endpoint == pytest.approx(6.20534681657069, rel=1e-11)
    # a history adds the tail-mean endpoint: m = 4
    hist = [{"loss": [(0, 2.0), (10, v)]} for v in (1.5314, 1.5330, 1.5340)]
    fin = [{"loss": v, "acc": a} for v, a in ((1.5314, 0.5), (1.5330, 0.51), (1.5340, 0.52))]
    four = NoiseFloor.from_replicas(hist, fin)
    assert four.endpoint_count == 3  # acc has no history
    fin4 = [{"loss": v, "acc": v} for v in (1.5314, 1.5330, 1.5340)]
    hist4 = [{"loss": h["loss"], "acc": h["loss"]} for h in hist]
    j4 = judge(NoiseFloor.from_replicas(hist4, fin4), {}, {"loss": 1.53, "acc": 1.53})
    assert j4.tests == 4
    assert j4.t_endpoint == pytest.approx(8.8602000346543, rel=1e-11)


def test_missing_and_non_finite_candidate() -> None:
    floor = NoiseFloor.from_replicas(NO_HISTORY, FINALS)
    missing = judge(floor, {}, {"accuracy": 0.9})
    assert missing.status == "INCOMPLETE" and not missing.within
    assert missing.endpoints[0].status == "missing"
    assert missing.not_judged == ("accuracy",)
    nan = judge(floor, {}, {"loss": math.nan})
    assert nan.status == "OUTSIDE_NOISE"
    assert nan.endpoints[0].status == "not_finite"
    assert json.dumps(nan.to_dict(), allow_nan=False)  # strict JSON: "nan" as a string
    assert nan.to_dict()["endpoints"][0]["value"] == "nan"


def test_no_metrics_to_judge() -> None:
    floor = NoiseFloor.from_replicas(NO_HISTORY, [{"step_time": 0.3, "tokens_per_sec": 10.0}] * 3)
    assert floor.metrics == ()
    assert [(s.name, s.reason) for s in floor.skipped] == [
        ("step_time", "timing"),
        ("tokens_per_sec", "timing"),
    ]
    j = judge(floor, {}, {"step_time": 0.3})
    assert j.status == "NO_METRICS" and not j.within
    assert j.tests == 0 and j.t_endpoint is None
    assert j.reasons[0].startswith("no metrics to judge")


def test_metrics_left_out_of_the_floor() -> None:
    finals = [{"loss": 1.0, "acc": 0.5}, {"loss": 1.0, "acc": math.inf}, {"loss": 1.0}]
    floor = NoiseFloor.from_replicas(NO_HISTORY, finals)
    assert [m.name for m in floor.metrics] == ["loss"]
    assert [(s.name, s.reason) for s in floor.skipped] == [("acc", "not_in_every_replica")]
    floor2 = NoiseFloor.from_replicas(NO_HISTORY[:2], finals[:2])
    assert [(s.name, s.reason) for s in floor2.skipped] == [("acc", "not_finite")]
    j = judge(floor2, {}, {"loss": 1.0})
    assert "acc: not judged, a replica's final value is not finite" in j.reasons


def test_floor_refuses_bad_inputs() -> None:
    with pytest.raises(ValueError, match="at least 2 replicas, got 1"):
        NoiseFloor.from_replicas([{}], [{"loss": 1.0}])
    with pytest.raises(ValueError, match="2 histories but 3 finals"):
        NoiseFloor.from_replicas([{}, {}], FINALS)
    with pytest.raises(ValueError, match="a distance must be >= 0"):
        NoiseFloor.from_replicas(NO_HISTORY, FINALS, weights_pairwise=[1.0, -1.0])


# -- the tail endpoint ---------------------------------------------------------------------


def _ramp(offset: float, steps: range) -> list[tuple[int, float]]:
    return [(s, 2.0 - s / 1000 + offset) for s in steps]


def test_tail_mean_endpoint() -> None:
    steps = range(0, 1000, 10)  # 100 logged steps: the tail is the last 2
    hist = [{"loss": _ramp(o, steps)} for o in (0.0, 0.001, -0.001)]
    floor = NoiseFloor.from_replicas(hist, [{}, {}, {}])
    (mf,) = floor.metrics
    assert mf.tail_steps == (980, 990)
    assert mf.tail_mean == pytest.approx(1.015)
    assert mf.final_mean == pytest.approx(1.01)  # the last history point stands for the final
    ok = judge(floor, {"loss": _ramp(0.0005, steps)}, {})
    assert ok.within and [e.endpoint for e in ok.endpoints] == ["final", "tail_mean"]
    short = judge(floor, {"loss": _ramp(0.0, range(0, 985, 10))}, {"loss": 1.01})
    assert short.status == "INCOMPLETE"
    assert [e.status for e in short.endpoints] == ["ok", "missing"]
    # a larger fraction: 10 % of 100 steps
    wide = NoiseFloor.from_replicas(hist, [{}, {}, {}], params=NoiseParams(tail_fraction=0.1))
    assert len(wide.metrics[0].tail_steps) == 10


def test_step_logged_twice_counts_with_its_last_value() -> None:
    hist = [{"loss": [(0, 9.0), (10, 1.0), (10, v)]} for v in (1.5314, 1.5330, 1.5340)]
    floor = NoiseFloor.from_replicas(hist, [{}, {}, {}])
    assert floor.metrics[0].finals == (1.5314, 1.5330, 1.5340)


# -- the per-step band ---------------------------------------------------------------------

STEPS = range(0, 200, 10)  # 20 logged points
REPLICAS = [{"loss": _ramp(o, STEPS)} for o in (0.0, 0.001, -0.001)]


def _candidate(out_steps: set[int]) -> dict[str, list[tuple[int, float]]]:
    return {"loss": [(s, 2.0 - s / 1000 + (0.05 if s in out_steps else 0.0)) for s in STEPS]}


def test_band_exit_after_exit_run_points() -> None:
    floor = NoiseFloor.from_replicas(REPLICAS, [{}, {}, {}])
    j = judge(floor, _candidate({50, 60, 120, 130, 140}), {}, NoiseParams(exit_run=3))
    band = j.band("loss")
    assert band is not None
    assert band.status == "leaves_band"
    assert band.leaves_band_at == 120  # not 50: that excursion lasts only 2 points
    assert (band.points_compared, band.points_out) == (20, 5)
    assert band.t == pytest.approx(4.30265272974946, rel=1e-11)  # per-step alpha
    line = next(r for r in j.reasons if "leaves the noise band" in r)
    assert line.startswith(
        "loss leaves the noise band at step 120 (value 1.9300, band 1.8750–1.8850)"
    )
    # the band is a diagnostic: the endpoints decide
    assert j.within


def test_two_point_excursion_does_not_leave_the_band() -> None:
    floor = NoiseFloor.from_replicas(REPLICAS, [{}, {}, {}])
    j = judge(floor, _candidate({50, 60}), {}, NoiseParams(exit_run=3))
    band = j.band("loss")
    assert band is not None
    assert band.status == "inside" and band.leaves_band_at is None
    assert band.points_out == 2
    assert not any("leaves the noise band" in r for r in j.reasons)
    # with exit_run 2 the same excursion counts
    j2 = judge(floor, _candidate({50, 60}), {}, NoiseParams(exit_run=2))
    assert j2.bands[0].leaves_band_at == 50


def test_band_points_for_shading() -> None:
    floor = NoiseFloor.from_replicas(REPLICAS, [{}, {}, {}])
    j = judge(floor, {"loss": _ramp(0.0, range(0, 100, 10))}, {})
    (band,) = j.bands
    assert [p.step for p in band.points] == list(STEPS)
    assert all(p.lo < p.mean < p.hi for p in band.points)
    assert [p.value is None for p in band.points] == [False] * 10 + [True] * 10
    assert band.points_compared == 10
    half = 4.30265272974946 * 0.001 * math.sqrt(4 / 3)  # t(0.975, 2) * s * sqrt(1 + 1/K)
    assert band.points[0].hi - band.points[0].mean == pytest.approx(half, rel=1e-9)
    none = judge(floor, {"loss": [(5, 2.0)]}, {})
    assert none.bands[0].status == "no_overlap"


def test_band_pools_the_spread_over_a_window() -> None:
    reps = [{"loss": _ramp(o, STEPS)} for o in (0.0, 0.001, -0.001)]
    for r in reps:  # at step 100 the replicas happen to agree exactly
        r["loss"] = [(s, 1.9 if s == 100 else v) for s, v in r["loss"]]
    floor = NoiseFloor.from_replicas(reps, [{}, {}, {}])
    at = {s.step: s for s in floor.metrics[0].steps}
    assert at[100].sd == 0.0

    def half_at_100(window: int) -> float:
        band = judge(floor, {}, {}, NoiseParams(window=window)).bands[0]
        p = next(p for p in band.points if p.step == 100)
        return p.hi - p.mean

    assert half_at_100(0) == pytest.approx(0.0019)  # only the floor: 0.1 % of 1.9
    # window 1: variance pooled over steps 90, 100, 110 = (s^2 + 0 + s^2) / 3
    t = 4.30265272974946
    assert half_at_100(1) == pytest.approx(t * 0.001 * math.sqrt(2 / 3) * math.sqrt(4 / 3))


# -- margin: noise too wide ----------------------------------------------------------------


def test_margin_too_wide() -> None:
    floor = NoiseFloor.from_replicas(NO_HISTORY, FINALS)
    narrow = judge(floor, {}, {"loss": 1.5325}, NoiseParams(margin=0.001))  # 0.1 %
    assert narrow.within  # too wide is recorded, it does not fail the candidate
    (w,) = narrow.too_wide
    assert (w.metric, w.endpoint, w.margin) == ("loss", "final", 0.001)
    assert w.half_width == pytest.approx(0.0065158, abs=1e-7)
    assert w.relative_width == pytest.approx(0.0065158 / 1.5328, rel=1e-4)
    assert any("wider than the declared margin of 0.1 %" in r for r in narrow.reasons)
    assert judge(floor, {}, {"loss": 1.5325}, NoiseParams(margin=0.01)).too_wide == ()
    # a metric that is exactly 0 in every replica has only the absolute floor: never too wide
    zero = NoiseFloor.from_replicas(NO_HISTORY, [{"nan_count": 0.0}] * 3)
    assert judge(zero, {}, {"nan_count": 0.0}, NoiseParams(margin=0.01)).too_wide == ()


# -- weights diagnostic --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pairwise", "to_replicas", "ratio"),
    [
        ([1.0, 2.0, 3.0], [2.0, 2.0, 4.0], 1.0),
        ([1.0, 2.0, 3.0], [4.0, 4.0, 6.0], 2.0),
        ([1.0, 3.0], [1.0, 1.0, 1.0], 0.5),  # even count: median 2
        ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 1.0),  # 0 / 0: the same as each other
        ([0.0, 0.0, 0.0], [0.0, 1.0, 1.0], math.inf),
    ],
)
def test_weights_ratio(pairwise: list[float], to_replicas: list[float], ratio: float) -> None:
    floor = NoiseFloor.from_replicas(NO_HISTORY, FINALS, weights_pairwise=pairwise)
    j = judge(floor, {}, {"loss": 1.5325}, weights_to_replicas=to_replicas)
    assert j.weights.status == "measured"
    assert j.weights.ratio == ratio
    assert j.within  # a diagnostic only
    assert json.dumps(j.to_dict(), allow_nan=False)


def test_weights_not_measured() -> None:
    floor = NoiseFloor.from_replicas(NO_HISTORY, FINALS)
    j = judge(floor, {}, {"loss": 1.5325}, weights_to_replicas=[1.0])
    assert (j.weights.status, j.weights.ratio) == ("not_measured", None)
    floor2 = NoiseFloor.from_replicas(NO_HISTORY, FINALS, weights_pairwise=[1.0])
    assert judge(floor2, {}, {"loss": 1.5325}).weights.ratio is None


# -- self-check ----------------------------------------------------------------------------


def test_self_check_one_outlier_among_five() -> None:
    finals = [{"loss": v} for v in (1.5314, 1.5330, 1.5340, 1.5322, 1.6000)]
    labels = ["r1", "r2", "r3", "r4", "r5"]
    sc = self_check([{}] * 5, finals, labels=labels)
    assert sc.status == "WELL_BEHAVED" and sc.well_behaved
    assert (sc.k, sc.failures) == (5, 1)
    assert [r.status for r in sc.results] == ["WITHIN_NOISE"] * 4 + ["OUTSIDE_NOISE"]
    assert sc.results[4].failed[0].startswith("loss final 1.6000 outside")
    assert "r5" in sc.message


def test_self_check_two_misfits_is_not_well_behaved() -> None:
    # r1 is alone on loss, r2 alone on acc: two replicas do not fit the others
    finals = [
        {"loss": 1.6, "acc": 0.5},
        {"loss": 1.5, "acc": 0.6},
        {"loss": 1.5, "acc": 0.5},
        {"loss": 1.5, "acc": 0.5},
        {"loss": 1.5, "acc": 0.5},
    ]
    sc = self_check([{}] * 5, finals, labels=["r1", "r2", "r3", "r4", "r5"])
    assert sc.status == "NOT_WELL_BEHAVED" and not sc.well_behaved
    assert sc.failures == 2
    assert "2 of 5 replicas fall outside the others' noise (r1, r2)" in sc.message
    assert "should not be trusted" in sc.message
    assert json.dumps(sc.to_dict(), allow_nan=False)


def test_self_check_needs_four_replicas() -> None:
    sc = self_check(NO_HISTORY, FINALS)
    assert sc.status == "TOO_FEW_REPLICAS" and not sc.well_behaved
    assert "at least 4 replicas, got 3" in sc.message


# -- storage -------------------------------------------------------------------------------


def test_floor_round_trip() -> None:
    hist = [{"loss": _ramp(o, STEPS), "step_time": [(0, 0.1)]} for o in (0.0, 0.001, -0.001)]
    fin = [{"loss": 1.81, "acc": 0.9}, {"loss": 1.811, "acc": 0.91}, {"loss": 1.809}]
    floor = NoiseFloor.from_replicas(
        hist, fin, weights_pairwise=[0.1, 0.2, math.inf], labels=["a", "b", "c"]
    )
    text = json.dumps(floor.to_dict(), allow_nan=False)
    assert NoiseFloor.from_dict(json.loads(text)) == floor
    assert floor.labels == ("a", "b", "c")
    assert [(s.name, s.reason) for s in floor.skipped] == [
        ("acc", "not_in_every_replica"),
        ("step_time", "timing"),
    ]


def test_floor_from_dict_refuses() -> None:
    good = NoiseFloor.from_replicas(NO_HISTORY, FINALS).to_dict()
    with pytest.raises(ValueError, match="unknown version"):
        NoiseFloor.from_dict({**good, "version": 2})
    bad = json.loads(json.dumps(good))
    bad["metrics"][0]["finals"][0] = "nan"
    with pytest.raises(ValueError, match="values must be finite"):
        NoiseFloor.from_dict(bad)
    with pytest.raises(ValueError, match="2 labels for K=3"):
        NoiseFloor.from_dict({**good, "labels": ["a", "b"]})


def test_judgement_round_trip() -> None:
    floor = NoiseFloor.from_replicas(REPLICAS, [{}, {}, {}], weights_pairwise=[0.0, 0.0, 0.0])
    j = judge(
        floor,
        _candidate({120, 130, 140}),
        {"extra": 1.0},
        NoiseParams(margin=0.001),
        weights_to_replicas=[1.0],
    )
    assert j.weights.ratio == math.inf and j.too_wide and j.not_judged == ("extra",)
    stored = json.loads(json.dumps(j.to_dict(), allow_nan=False))
    assert stored["weights"]["ratio"] == "inf"
    back = NoiseJudgement.from_dict(stored)
    assert back == j
    assert back.within == j.within
    with pytest.raises(ValueError, match="unknown version"):
        NoiseJudgement.from_dict({**stored, "version": 0})


def test_module_is_cheap_to_import() -> None:
    code = (
        "import sys, replay_tui.compare.noise_rule\n"
        "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'textual') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

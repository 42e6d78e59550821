"""Item 8 of the noise rule, on fixed numbers: a metric's resolution (a band no narrower
than one step), a declared margin's positive claim (TOST), and the smallest change a
WITHIN_NOISE could have seen.  Expected values are worked out by hand in the comments
(t quantiles from a table; df = 2 has the closed form ``P(T > t) = 1/2 - t / (2 sqrt(2 +
t^2))``), as in docs/noise.md."""

from __future__ import annotations

import json
import math
import struct
from fractions import Fraction
from typing import Any

import pytest

from replay_tui.compare.noise_floor_model import NoiseFloor
from replay_tui.compare.noise_params import NoiseParams
from replay_tui.compare.noise_results import NoiseJudgement
from replay_tui.compare.noise_rule import claims, judge, short_claims
from replay_tui.compare.stats import as_fraction, grid_step, t_sf, tost_p
from replay_tui.compare.tolerance import Tolerance, ToleranceError, parse_margin

FINALS = [{"loss": 1.5314}, {"loss": 1.5330}, {"loss": 1.5340}]
NO_HISTORY: list[dict[str, Any]] = [{}, {}, {}]
# mean 1.5328, s = sqrt(1.72e-6) = 0.00131149, se = s * sqrt(4/3) = 0.00151438;
# one endpoint: t(0.975, 2) = 4.30265 (table), h = 4.30265 * 0.00151438 = 0.0065158
MEAN, S, SE, H = 1.5328, 0.00131149, 0.00151438, 0.0065158


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _t2_sf(t: float) -> float:
    """P(T > t) at df = 2, closed form."""
    return 0.5 - t / (2.0 * math.sqrt(2.0 + t * t))


def _floor() -> NoiseFloor:
    return NoiseFloor.from_replicas(NO_HISTORY, FINALS)


# -- (a) resolution ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "step"),
    [
        ([0.85, 0.86, 0.85], Fraction(1, 100)),  # an accuracy over 100 samples
        ([0.84, 0.86, 0.88], Fraction(1, 50)),  # few values: the step looks coarser
        ([_f32(0.83), _f32(0.84), _f32(0.85)], Fraction(1, 100)),  # stored as float32
        ([12.0, 14.0, 15.0], Fraction(1)),  # a count
        ([0.25, 0.75], Fraction(1, 4)),  # multiples of 1/4, not of the 1/2 between them
    ],
)
def test_a_metric_on_a_grid_has_its_step(values: list[float], step: Fraction) -> None:
    assert grid_step(values, moved=True) == step


@pytest.mark.parametrize(
    "values",
    [
        [math.pi, math.e, math.sqrt(2)],  # smooth floats
        [2.302585092994046, 2.2966101234567, 2.31],  # one smooth value is enough
        [1 / 999983, 1 / 999979],  # each on a grid, but no common denominator <= 1e6
        [_f32(1.2345678), _f32(1.2345679)],  # float32 values of no small fraction
    ],
)
def test_a_smooth_metric_gets_no_step(values: list[float]) -> None:
    assert grid_step(values, moved=True) is None


def test_no_step_without_evidence_that_the_metric_moves() -> None:
    assert grid_step([0.85, 0.85, 0.85], moved=False) is None
    assert as_fraction(math.nan) is None and as_fraction(0.1) == Fraction(1, 10)


# replicas of an accuracy over 100 samples: equal finals, one step apart at step 0
ACC_H: list[dict[str, Any]] = [
    {"acc": {0: 0.50, 10: 0.85}},
    {"acc": {0: 0.51, 10: 0.85}},
    {"acc": {0: 0.50, 10: 0.85}},
]
ACC_F = [{"acc": 0.85}] * 3


def test_one_step_of_the_resolution_is_the_least_band() -> None:
    floor = NoiseFloor.from_replicas(ACC_H, ACC_F)
    assert floor.metrics[0].step == Fraction(1, 100)
    # s = 0 at the final: without the step the band is the 0.1 % floor, 0.00085, and
    # one sample out of 100 would fail; with it, h = 0.01
    one = judge(floor, {"acc": {0: 0.5, 10: 0.86}}, {"acc": 0.86})
    assert one.status == "WITHIN_NOISE"
    assert [(e.half_width, e.step, e.by_step, e.floored) for e in one.endpoints] == [
        (0.01, 0.01, True, False),
        (0.01, 0.01, True, False),  # the tail mean over 1 point: 0.01 / 1
    ]
    assert any("acc moves in steps of 0.01 (1/100) (detected" in r for r in one.reasons)
    assert "one step of its resolution, 0.010: the least it may be" in one.reasons[3]
    two = judge(floor, {"acc": {0: 0.5, 10: 0.87}}, {"acc": 0.87})
    assert two.status == "OUTSIDE_NOISE"  # two steps away
    # the per-step band is one step wide too (no pooling with step 0's spread)
    alone = judge(floor, {"acc": {0: 0.5, 10: 0.86}}, {"acc": 0.86}, NoiseParams(window=0))
    band = alone.band("acc")
    assert band is not None and band.points[1].hi == pytest.approx(0.86, abs=1e-9)
    assert band.points_out == 0


def test_the_tail_mean_moves_in_a_step_over_its_points() -> None:
    h = [{"acc": {0: 0.50 + d, 10: 0.85, 20: 0.85, 30: 0.85}} for d in (0.0, 0.01, 0.0)]
    floor = NoiseFloor.from_replicas(h, ACC_F, params=NoiseParams(tail_fraction=0.5))
    j = judge(floor, {"acc": {0: 0.5, 10: 0.85, 20: 0.85, 30: 0.86}}, {"acc": 0.86})
    tail = next(e for e in j.endpoints if e.endpoint == "tail_mean")
    assert tail.step == 0.005 and tail.half_width == 0.005  # 0.01 over 2 points
    assert tail.value == pytest.approx(0.855) and tail.ok


def test_a_smooth_metric_keeps_its_band_and_the_words_say_nothing_of_steps() -> None:
    h = [{"loss": {0: v * math.pi, 10: 0.85 * math.pi}} for v in (0.50, 0.51, 0.50)]
    floor = NoiseFloor.from_replicas(h, [{"loss": 0.85 * math.pi}] * 3)
    assert floor.metrics[0].step is None
    j = judge(floor, {"loss": {0: 0.5 * math.pi, 10: 0.86 * math.pi}}, {"loss": 0.86 * math.pi})
    assert j.status == "OUTSIDE_NOISE"
    assert all(e.step is None for e in j.endpoints)
    assert not any("steps of" in r for r in j.reasons)


def test_a_candidate_off_the_replicas_grid_gets_no_step() -> None:
    floor = NoiseFloor.from_replicas(ACC_H, ACC_F)
    j = judge(floor, {"acc": {0: 0.5, 10: 0.8512345}}, {"acc": 0.8512345})
    assert all(e.step is None for e in j.endpoints) and j.status == "OUTSIDE_NOISE"
    assert any("not whole multiples of one step" in r for r in j.reasons)


def test_the_step_is_stored_exactly_and_only_when_there_is_one() -> None:
    floor = NoiseFloor.from_replicas(ACC_H, ACC_F)
    d = floor.to_dict()
    assert d["metrics"][0]["step"] == [1, 100]
    assert NoiseFloor.from_dict(json.loads(json.dumps(d))) == floor
    smooth = _floor().to_dict()  # 4-decimal finals: 1/5000, below the floor, still stored
    assert smooth["metrics"][0]["step"] == [1, 5000]
    old = json.loads(json.dumps(d))
    del old["metrics"][0]["step"]  # a floor stored before steps: none
    assert NoiseFloor.from_dict(old).metrics[0].step is None
    for bad in ([0, 100], [1, 0], [1, 10**7], [1.0, 100], "1/100"):
        old["metrics"][0]["step"] = bad
        with pytest.raises(ValueError, match="step"):
            NoiseFloor.from_dict(old)


# -- (b) the declared margin's claim -------------------------------------------------------


def test_t_tail_matches_the_closed_form_at_two_df() -> None:
    for t in (0.5, 2.919986, 9.9896, -1.3):
        assert t_sf(t, 2) == pytest.approx(_t2_sf(t), rel=1e-10)
    assert t_sf(math.inf, 3) == 0.0 and t_sf(-math.inf, 3) == 1.0
    assert t_sf(2.919986, 2) == pytest.approx(0.05, rel=1e-5)  # t(0.95, 2), table


def test_tost_edge_cases() -> None:
    assert tost_p(0.001, 0.0, 0.01, 2) == 0.0  # no spread, inside
    assert tost_p(0.02, 0.0, 0.01, 2) == 1.0
    assert tost_p(math.nan, 1.0, 0.01, 2) == 1.0 and tost_p(0.0, 1.0, 0.0, 2) == 1.0


@pytest.mark.parametrize(
    ("params", "delta", "hand", "equivalent", "words"),
    [
        # d = 0.0002; (delta - d) / se is the larger-p test: 9.990, 2.904, 6.471
        (NoiseParams(margin=0.01), 0.015328, 0.0049, True, "±1 %"),
        (NoiseParams(margin=0.003), 0.0045984, 0.0505, False, "±0.3 %"),
        (NoiseParams(margin_abs=0.01), 0.01, 0.0115, True, "±0.01"),
    ],
)
def test_tost_on_fixed_numbers(
    params: NoiseParams, delta: float, hand: float, equivalent: bool, words: str
) -> None:
    p = _t2_sf((delta - 0.0002) / SE)
    j = judge(_floor(), {}, {"loss": 1.5330}, params)
    assert j.status == "WITHIN_NOISE"
    eq = j.equivalence
    assert eq is not None
    (e,) = eq.endpoints
    assert e.margin == pytest.approx(delta, rel=1e-9)
    assert e.diff == pytest.approx(0.0002, rel=1e-9)
    assert e.se == pytest.approx(SE, rel=1e-5)
    assert eq.p == pytest.approx(p, rel=1e-4)
    assert eq.equivalent is equivalent
    assert eq.p == pytest.approx(hand, abs=1e-4)
    # the same claim: the 1 - 2 alpha interval d +- t(0.95, 2) * se inside +- delta
    inside = delta >= 0.0002 + 2.919986 * SE
    assert inside is equivalent
    head = "equivalent" if equivalent else "not shown equivalent"
    assert eq.text().startswith(f"{head} within {words} (TOST, p=")
    assert eq.text() in j.reasons and eq.text() in claims(j)


def test_the_claim_never_changes_the_verdict() -> None:
    far = judge(_floor(), {}, {"loss": 1.6}, NoiseParams(margin=0.1))
    assert far.status == "OUTSIDE_NOISE"
    assert far.equivalence is not None and far.equivalence.equivalent  # within ±10 %
    near = judge(_floor(), {}, {"loss": 1.5330}, NoiseParams(margin=0.003))
    assert near.status == "WITHIN_NOISE" and near.equivalence is not None
    assert not near.equivalence.equivalent
    plain = judge(_floor(), {}, {"loss": 1.5330})
    assert plain.equivalence is None and "equivalence" not in plain.to_dict()
    # the same judgement with and without a margin: the same status and endpoints
    assert (plain.status, plain.endpoints) == (near.status, near.endpoints)


def test_a_missing_endpoint_is_never_shown_equivalent() -> None:
    j = judge(_floor(), {}, {}, NoiseParams(margin=0.5))
    assert j.status == "INCOMPLETE"
    assert j.equivalence is not None and j.equivalence.p == 1.0
    assert not j.equivalence.equivalent


def test_an_absolute_margin_that_the_band_exceeds_is_too_wide() -> None:
    j = judge(_floor(), {}, {"loss": 1.5330}, NoiseParams(margin_abs=0.005))
    (w,) = j.too_wide
    assert w.margin_abs == 0.005 and w.margin == pytest.approx(0.005 / MEAN)
    assert any("wider than the declared margin of ±0.005" in r for r in j.reasons)


def test_the_margin_parses_as_a_percentage_or_an_amount() -> None:
    assert parse_margin("0.5%") == (0.005, None)
    assert parse_margin(" 2 % ") == (0.02, None)
    assert parse_margin("0.01") == (None, 0.01)
    for bad in ("abc", "0", "-1%", "nan", "inf%", ""):
        with pytest.raises(ToleranceError, match="--margin"):
            parse_margin(bad)
    with pytest.raises(ToleranceError, match="one margin"):
        Tolerance(margin=0.01, margin_abs=0.01)
    with pytest.raises(ValueError, match="one margin"):
        NoiseParams(margin=0.01, margin_abs=0.01)
    # stored: a relative margin as before, an absolute one under its own key only
    assert "margin_abs" not in Tolerance(margin=0.005).to_dict()
    t = Tolerance(margin_abs=0.01)
    assert t.to_dict()["margin_abs"] == 0.01 and Tolerance.from_dict(t.to_dict()) == t
    assert "margin_abs" not in NoiseParams().to_dict()


# -- (c) the smallest change a WITHIN_NOISE could have seen ---------------------------------


def test_the_smallest_change_on_fixed_numbers() -> None:
    j = judge(_floor(), {}, {"loss": 1.5330})
    s = j.sensitivity
    assert s is not None and j.smallest_change() == s
    (m,) = s.metrics
    assert m.half_width == pytest.approx(H, rel=1e-5)
    assert s.overall == pytest.approx(H / MEAN, rel=1e-5)  # 0.425 %
    text = (
        "the smallest change it could have seen: 0.425 % of the value (loss 0.425 %);"
        " a smaller change passes as noise"
    )
    assert s.text() == text and j.reasons[1] == text
    assert short_claims(j) == "smallest visible change: 0.425 %"
    eq = judge(_floor(), {}, {"loss": 1.5330}, NoiseParams(margin=0.003))
    assert short_claims(eq) == (
        "smallest visible change: 0.425 % · not shown equivalent within ±0.3 % (p=0.0505)"
    )


def test_per_metric_the_narrowest_endpoint_and_overall_the_widest_metric() -> None:
    # loss: final h = t(1 - 0.05/6, 2) * s * sqrt(4/3) = 7.6488 * 0.00151438 = 0.011583
    # (0.756 %), tail mean over [2.0, 2.0, 2.0]: the 0.1 % floor, 0.002 (0.1 %);
    # acc: equal replicas, the 0.1 % floor at 0.9 (m = 3 tests)
    h = [{"loss": {0: 2.0}} for _ in range(3)]
    fin = [{"loss": f["loss"], "acc": 0.9} for f in FINALS]
    floor = NoiseFloor.from_replicas(h, fin)
    j = judge(floor, {"loss": {0: 2.0}}, {"loss": 1.5330, "acc": 0.9})
    assert j.status == "WITHIN_NOISE" and j.tests == 3
    s = j.sensitivity
    assert s is not None
    by = {m.metric: (m.endpoint, m.relative) for m in s.metrics}
    assert by["loss"][0] == "tail_mean" and by["loss"][1] == pytest.approx(1e-3)
    assert by["acc"] == ("final", pytest.approx(1e-3))
    final = next(e for e in j.endpoints if e.metric == "loss" and e.endpoint == "final")
    assert final.half_width == pytest.approx(7.64880393791554 * SE, rel=1e-5)
    assert s.overall == pytest.approx(1e-3)


def test_only_a_within_noise_has_a_smallest_change() -> None:
    out = judge(_floor(), {}, {"loss": 1.6})
    assert out.sensitivity is None and out.smallest_change() is None
    assert "sensitivity" not in out.to_dict()


def test_a_metric_whose_mean_is_zero_is_stated_in_its_units() -> None:
    floor = NoiseFloor.from_replicas(NO_HISTORY, [{"g": -0.001}, {"g": 0.0}, {"g": 0.001}])
    j = judge(floor, {}, {"g": 0.0})
    s = j.sensitivity
    assert s is not None and s.overall is None
    assert "g ±0.00497 (its mean is 0)" in s.text()  # 4.30265 * 0.001 * 1.1547


def test_a_judgement_stored_before_the_claims_reads_back_unchanged() -> None:
    j = judge(_floor(), {}, {"loss": 1.5330}, NoiseParams(margin=0.01))
    body = json.loads(json.dumps(j.to_dict()))
    assert NoiseJudgement.from_dict(body) == j  # the claims round-trip
    for key in ("equivalence", "sensitivity"):
        del body[key]
    old = NoiseJudgement.from_dict(body)
    assert old.to_dict() == body  # its bytes unchanged: no key added
    # shown, the smallest change is worked out from the endpoints by the same rule
    assert old.smallest_change() == j.sensitivity and old.equivalence is None

"""`compare --margin` on a WITHIN_NOISE pair (a real store, the noise floor stored as
``replay --times`` stores it): the equivalence claim (TOST) and the smallest change it
could have seen, in the text and in --json, beside an unchanged verdict; a pair the noise
rule did not judge says the claim was not tested; a bad margin is exit 2.

The numbers (tests/support/noisy_pair.py): loss replicas 1.5314, 1.5330, 1.5340, the
replay 1.5325; four endpoint tests, t(1 - 0.05/8, 2) = 8.8603 (df 2: (1 - 2q) /
sqrt(2q(1 - q))); loss final h = 8.8603 * 0.0015144 = 0.013418 (0.875 %), loss tail mean
and val_loss at the 0.1 % floor, so the smallest change it could have seen is 0.1 %.
With --margin 0.5%: loss final d = -0.0003, delta = 0.007664, se = 0.0015144,
(delta + d) / se = 4.8627, p = 1/2 - 4.8627 / (2 sqrt(2 + 4.8627^2)) = 0.0199; the other
endpoints' p are far smaller, so the claim's p is 0.0199: equivalent at alpha 0.05."""

from __future__ import annotations

import json

import pytest

from storage.store import RunStore
from tests.conftest import RunCli
from tests.support.noisy_pair import NoisyPair


def test_compare_with_a_margin_claims_equivalence_beside_the_verdict(
    within: NoisyPair, cli: RunCli
) -> None:
    args = ("compare", within.original, within.replay, "--no-store")
    r = cli(*args, "--margin", "0.5%", store=within.store)
    assert r.returncode == 0, r.stderr
    assert "verdict: WITHIN_NOISE  exit code 0" in r.stdout
    assert "  - equivalent within ±0.5 % (TOST, p=0.0199, α=0.05)" in r.stdout
    assert (
        "  - the smallest change it could have seen: 0.1 % of the value (loss 0.1 %,"
        " val_loss 0.1 %); a smaller change passes as noise"
    ) in r.stdout

    j = json.loads(cli(*args, "--margin", "0.5%", "--json", store=within.store).stdout)
    assert j["verdict"] == "WITHIN_NOISE" and j["exit_code"] == 0
    eq = j["noise"]["equivalence"]
    assert eq["equivalent"] is True and eq["relative"] is True and eq["margin"] == 0.005
    assert eq["p"] == pytest.approx(0.0199, abs=1e-4)
    final = next(e for e in eq["endpoints"] if e["metric"] == "loss" and e["endpoint"] == "final")
    assert final["margin"] == pytest.approx(0.007664, rel=1e-9)
    assert final["se"] == pytest.approx(0.0015144, rel=1e-4)
    sens = j["noise"]["sensitivity"]
    assert sens["overall"] == pytest.approx(1e-3)
    loss_final = next(
        e for e in j["noise"]["endpoints"] if e["metric"] == "loss" and e["endpoint"] == "final"
    )
    assert loss_final["half_width"] == pytest.approx(8.8603 * 0.0015144, rel=1e-4)

    # a tight margin: not shown equivalent, and the verdict is the same
    tight = cli(*args, "--margin", "0.3%", store=within.store)
    assert tight.returncode == 0 and "verdict: WITHIN_NOISE" in tight.stdout
    assert "  - not shown equivalent within ±0.3 % (TOST, p=" in tight.stdout
    # an amount in the metric's units
    amount = json.loads(cli(*args, "--margin", "0.05", "--json", store=within.store).stdout)
    assert amount["noise"]["equivalence"]["relative"] is False
    assert amount["noise"]["equivalence"]["text"].startswith("equivalent within ±0.05 (TOST")
    assert amount["margin"] is None  # a share of the value, as stored before: none here


def test_without_a_margin_there_is_no_claim_and_the_body_is_as_before(
    within: NoisyPair, cli: RunCli
) -> None:
    j = json.loads(
        cli(
            "compare", within.original, within.replay, "--json", "--no-store", store=within.store
        ).stdout
    )
    assert "equivalence" not in j["noise"] and "equivalence" not in j
    with RunStore(within.store) as store:  # the stored comparison, from the fixture
        body = store.comparison(within.comparison_id)
    assert body is not None and "equivalence" not in body["noise"]


def test_a_pair_not_judged_by_the_noise_rule_says_the_claim_was_not_tested(
    within: NoisyPair, cli: RunCli
) -> None:
    r = cli("compare", within.original, within.original, "--margin", "1%", store=within.store)
    assert r.returncode == 0, r.stderr
    assert (
        "equivalence within ±1 % not tested: the pair is within the fixed tolerance, so the"
        " noise rule did not judge it"
    ) in r.stdout
    j = json.loads(
        cli(
            "compare", within.original, within.original, "--margin", "1%", "--json",
            store=within.store,
        ).stdout
    )  # fmt: skip
    assert j["equivalence"]["tested"] is False and "noise" not in j
    with RunStore(within.store) as store:  # the stored body has no such key
        body = store.comparison(j["comparison_id"])
    assert body is not None and "equivalence" not in body


@pytest.mark.parametrize("bad", ["abc", "0", "-1%", "1%%"])
def test_a_bad_margin_is_exit_2_naming_the_flag(within: NoisyPair, cli: RunCli, bad: str) -> None:
    r = cli("compare", within.original, within.replay, "--margin", bad, store=within.store)
    assert r.returncode == 2
    assert "--margin" in r.stderr


def test_replay_takes_the_same_margin(cli: RunCli) -> None:
    r = cli("replay", "--help")
    assert r.returncode == 0 and "--margin PCT%|AMOUNT" in r.stdout

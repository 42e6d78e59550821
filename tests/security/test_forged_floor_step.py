"""A noise floor's resolution step, read from a stored body (``MetricFloor.from_dict``):
a step widens every band of its metric, so a forged one (a step the replicas' values do
not move in, or no fraction at all) is refused and the fact reads as no floor; a step
that only a hand could have written (the finals are not multiples of it, or it is wider
than the replicas ever differ: K values one step apart have an sd of at least
step / sqrt(K)) is named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from replay_tui.compare.floor import FloorRecord, NoiseFloorFact
from replay_tui.compare.noise_floor_model import NoiseFloor
from replay_tui.compare.tolerance import Tolerance

HISTORIES: list[dict[str, Any]] = [
    {"acc": {0: 0.50, 10: 0.85}},
    {"acc": {0: 0.51, 10: 0.85}},
    {"acc": {0: 0.50, 10: 0.85}},
]
FINALS = [{"acc": 0.85}] * 3


def _body() -> dict[str, Any]:
    floor = NoiseFloor.from_replicas(HISTORIES, FINALS, labels=["r1", "r2", "r3"])
    body = FloorRecord(floor, "orig", floor.labels, Tolerance()).to_dict()
    out: dict[str, Any] = json.loads(json.dumps(body))
    return out


def test_the_honest_step_reads_back() -> None:
    body = _body()
    assert body["floor"]["metrics"][0]["step"] == [1, 100]
    fact = NoiseFloorFact.from_row("orig", {"id": 1, "created_at": "t", "times": 3, "body": body})
    assert fact.kind == "floor" and fact.record is not None
    assert str(fact.record.floor.metrics[0].step) == "1/100"


@pytest.mark.parametrize(
    ("step", "words"),
    [
        ([17, 20], "wider than the replicas ever differ"),  # 0.85: every band 0.85 wide
        ([1, 20], "wider than the replicas ever differ"),
        ([1, 3], "does not divide the replicas' final"),
        ([10**9, 1], "does not divide"),
        ([1, 10**9], "denominator at most"),
        ([-1, 100], "both > 0"),
        ([True, 100], "both > 0"),
        ([0.5, 1], "both > 0"),
        ("1/100", "both > 0"),
        ([1, 100, 3], "both > 0"),
    ],
)
def test_a_forged_step_is_refused_and_the_fact_is_no_floor(step: object, words: str) -> None:
    body = _body()
    body["floor"]["metrics"][0]["step"] = step
    with pytest.raises(ValueError, match=words):
        NoiseFloor.from_dict(body["floor"])
    fact = NoiseFloorFact.from_row("orig", {"id": 1, "created_at": "t", "times": 3, "body": body})
    assert fact.kind == "other" and fact.record is None
    assert fact.problem is not None and "step" in fact.problem

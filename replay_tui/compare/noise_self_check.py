"""The noise floor's self-check: each replica, left out, judged against the others by the
noise rule (``compare.noise_rule``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from replay_tui.compare.noise_floor_model import History, NoiseFloor
from replay_tui.compare.noise_params import NoiseParams
from replay_tui.compare.noise_results import JudgementStatus
from replay_tui.compare.noise_rule import endpoint_line, judge
from storage.wire import Wire

SelfCheckStatus = Literal["WELL_BEHAVED", "NOT_WELL_BEHAVED", "TOO_FEW_REPLICAS", "NO_METRICS"]
SELF_CHECK_MIN_K: Final = 4


@dataclass(frozen=True)
class LeftOut(Wire):
    """One replica judged against the others."""

    label: str
    status: JudgementStatus
    failed: tuple[str, ...]
    """The reason lines of its failed endpoints."""


@dataclass(frozen=True)
class SelfCheck(Wire):
    """Each replica, left out, judged against the others.  Exchangeable replicas fail
    about ``K * alpha`` of these (0.25 at K=5, alpha 0.05); more than one failure says
    the replicas are not draws of one distribution, and the floor is not to be trusted."""

    WIRE_EXTRA = ("well_behaved",)
    WIRE_ORDER = ("status", "well_behaved", "k", "failures", "results", "message")

    status: SelfCheckStatus
    k: int
    failures: int
    results: tuple[LeftOut, ...]
    message: str

    @property
    def well_behaved(self) -> bool:
        return self.status == "WELL_BEHAVED"


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
            status="TOO_FEW_REPLICAS",
            k=k,
            failures=0,
            results=(),
            message=f"the self-check needs at least {SELF_CHECK_MIN_K} replicas, got {k}",
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
            return SelfCheck(
                status="NO_METRICS",
                k=k,
                failures=0,
                results=(),
                message="no metrics to judge the replicas by",
            )
        j = judge(floor, histories[i], finals[i], params)
        failed = tuple(endpoint_line(e, k - 1, params) for e in j.endpoints if not e.ok)
        results.append(LeftOut(label=names[i], status=j.status, failed=failed))
    bad = [r.label for r in results if r.status != "WITHIN_NOISE"]
    a = f"{params.alpha:g}"
    if len(bad) <= 1:
        extra = f" ({bad[0]}, which chance allows)" if bad else ""
        msg = f"{len(bad)} of {k} replicas fall outside the others' noise{extra}"
        return SelfCheck(
            status="WELL_BEHAVED", k=k, failures=len(bad), results=tuple(results), message=msg
        )
    msg = (
        f"{len(bad)} of {k} replicas fall outside the others' noise ({', '.join(bad)}); at "
        f"most one is expected by chance at α={a}.  The replicas do not behave as draws of "
        f"one distribution (different machines or software, an input that changed between "
        f"them): this noise floor should not be trusted"
    )
    return SelfCheck(
        status="NOT_WELL_BEHAVED", k=k, failures=len(bad), results=tuple(results), message=msg
    )

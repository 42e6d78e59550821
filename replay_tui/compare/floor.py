"""A run's noise floor, measured from its replicas, stored, and used by every judgement.

``replay RUN --times K`` (K >= 2) replays a run K times and stores a *noise-floor fact*
for it (``store.add_noise_floor``): which replicas, each metric's per-step mean and
spread, the endpoint statistics, the replicas' pairwise weight distances, the rule's
parameters and, for K >= 4, the leave-one-out self-check.  From then on every comparison
that involves the run (a replay of it, ``compare`` with it, a drill, a bisect, an export)
finds the floor here (:func:`noise_context`) and judges what is beyond the fixed
tolerance against it (``replay_tui.compare.noise_rule``; docs/noise.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Literal

from replay_tui.compare.distance import weight_rel_l2
from replay_tui.compare.noise_rule import (
    NoiseFloor,
    NoiseJudgement,
    NoiseParams,
    SelfCheck,
    judge,
    self_check,
)
from replay_tui.compare.tolerance import Tolerance
from storage.manifest import RunManifest
from storage.objects import ObjectStore
from storage.store import RunStore

FLOOR_KEY: Final = "floor"
"""A noise-floor fact's body holds its floor under this key (older facts of the same
table hold a determinism-cost measurement instead, and are not floors)."""
DEFAULT_REPLICAS: Final = 3


def params_of(tolerance: Tolerance) -> NoiseParams:
    return NoiseParams(alpha=tolerance.alpha, margin=tolerance.margin)


def replica_inputs(
    replicas: Sequence[RunManifest],
) -> tuple[list[dict[str, Any]], list[dict[str, float]]]:
    return (
        [dict(r.outputs.metric_history) for r in replicas],
        [dict(r.outputs.metrics) for r in replicas],
    )


def measure_floor(
    replicas: Sequence[RunManifest], objects: ObjectStore | None, tolerance: Tolerance
) -> tuple[NoiseFloor, SelfCheck | None]:
    """The floor of ``replicas`` (K >= 2 succeeded replays of one run) and, for K >= 4,
    the leave-one-out self-check."""
    params = params_of(tolerance)
    histories, finals = replica_inputs(replicas)
    pairwise = [weight_rel_l2(a, b, objects) for a, b in itertools.combinations(replicas, 2)]
    labels = [r.run_id for r in replicas]
    floor = NoiseFloor.from_replicas(
        histories, finals, params=params, weights_pairwise=pairwise, labels=labels
    )
    check = self_check(histories, finals, params, labels=labels) if len(replicas) >= 4 else None
    return floor, check


def floor_body(
    floor: NoiseFloor, check: SelfCheck | None, tolerance: Tolerance, original: str
) -> dict[str, Any]:
    return {
        FLOOR_KEY: floor.to_dict(),
        "original_run": original,
        "replicas": list(floor.labels),
        "tolerance": tolerance.to_dict(),
        "self_check": check.to_dict() if check is not None else None,
    }


@dataclass(frozen=True)
class StoredFloor:
    """A noise-floor fact as read back: which run, when, from which replicas."""

    fact_id: int
    run_id: str
    created_at: str
    floor: NoiseFloor
    self_check: dict[str, Any] | None

    @property
    def replicas(self) -> tuple[str, ...]:
        return self.floor.labels

    def summary(self) -> str:
        return (
            f"noise floor #{self.fact_id} of {self.run_id}: {self.floor.k} replicas,"
            f" measured {self.created_at}"
        )

    def to_ref(self) -> dict[str, Any]:
        return {
            "fact_id": self.fact_id,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "replicas": list(self.replicas),
            "k": self.floor.k,
        }


def floor_line(floor: StoredFloor | None) -> str:
    """Whether a run's noise floor is measured, in one line (``show``, run detail)."""
    if floor is None:
        return (
            "noise floor: none measured (replay --times 3 measures one; until then a replay"
            " beyond tolerance reads DIVERGED)"
        )
    text = (
        f"noise floor: #{floor.fact_id}, {floor.floor.k} replicas, measured {floor.created_at};"
        " replays and comparisons of this run are judged against it"
    )
    if floor.self_check and floor.self_check.get("status") == "NOT_WELL_BEHAVED":
        text += f" (self-check: {floor.self_check.get('message')})"
    return text


def stored_floor(store: RunStore, run_id: str) -> StoredFloor | None:
    """The latest noise floor measured for ``run_id``, or None."""
    for fact in store.noise_floors_of(run_id):
        body = fact["body"]
        if not isinstance(body, dict) or not isinstance(body.get(FLOOR_KEY), dict):
            continue
        try:
            floor = NoiseFloor.from_dict(body[FLOOR_KEY])
        except (ValueError, KeyError, TypeError):
            continue  # an unreadable floor is no floor (verify-store says why)
        check = body.get("self_check")
        return StoredFloor(
            int(fact["id"]),
            run_id,
            str(fact["created_at"]),
            floor,
            check if isinstance(check, dict) else None,
        )
    return None


Side = Literal["a", "b"]


@dataclass(frozen=True)
class NoiseContext:
    """What a comparison needs to judge a pair against a floor: the floor, which side is
    the candidate (the one that is not among the floor's replicas), and the
    candidate's weight distances to the replicas."""

    stored: StoredFloor
    candidate: Side
    params: NoiseParams
    weights: Callable[[RunManifest], tuple[float, ...] | None] | None = None
    """The candidate's weight distances to the replicas, worked out only when a judgement
    is made (a pair within the tolerance never pays for them)."""
    in_sample: bool = False
    """Both runs are replicas of the floor: the candidate is judged against a floor it is
    part of, which is lenient; the judgement says so."""

    def judge(self, m: RunManifest) -> NoiseJudgement:
        return judge(
            self.stored.floor,
            dict(m.outputs.metric_history),
            dict(m.outputs.metrics),
            self.params,
            self.weights(m) if self.weights is not None else None,
        )


def floor_owner(store: RunStore, a: RunManifest, b: RunManifest) -> StoredFloor | None:
    """The floor that speaks for the pair: A's, A's original's, B's, B's original's."""
    seen: set[str] = set()
    for rid in (a.run_id, a.replay_of, b.run_id, b.replay_of):
        if rid and rid not in seen:
            seen.add(rid)
            found = stored_floor(store, rid)
            if found is not None:
                return found
    return None


def noise_context(
    store: RunStore,
    a: RunManifest,
    b: RunManifest,
    tolerance: Tolerance,
    *,
    weights: bool = True,
) -> NoiseContext | None:
    """How to judge the pair (A, B) against a stored floor, or None when none speaks for
    it.  The candidate is the side that is not one of the floor's replicas; when both
    are outside it, the side that does not own the floor (a new replay, another
    recording)."""
    stored = floor_owner(store, a, b)
    if stored is None:
        return None
    replicas = set(stored.replicas)
    outside = [s for s, m in (("a", a), ("b", b)) if m.run_id not in replicas]
    candidate: Side
    if not outside:
        candidate, in_sample = "b", True
    elif len(outside) == 1:
        candidate, in_sample = ("a" if outside[0] == "a" else "b"), False
    else:
        candidate = "a" if b.run_id == stored.run_id else "b"
        in_sample = False
    distances = None
    if weights and stored.floor.weights_pairwise is not None:
        distances = partial(_distances, store, stored.replicas)
    return NoiseContext(stored, candidate, params_of(tolerance), distances, in_sample)


def _distances(
    store: RunStore, replicas: Sequence[str], m: RunManifest
) -> tuple[float, ...] | None:
    """``m``'s weight distance to each replica (None when a replica cannot be read)."""
    objects = ObjectStore.beside(store.path)
    others = []
    for rid in replicas:
        if rid == m.run_id:
            continue
        try:
            others.append(store.manifest(rid))
        except Exception:  # a replica no longer readable: the diagnostic goes without
            return None
    return tuple(weight_rel_l2(m, r, objects) for r in others) if others else None

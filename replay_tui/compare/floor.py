"""A run's noise floor, measured from its replicas, stored, and used by every judgement.

``replay RUN --times K`` (K >= 2) replays a run K times and stores a *noise-floor fact*
for it (``store.add_noise_floor``): which replicas, each metric's per-step mean and
spread, the endpoint statistics, the replicas' pairwise weight distances, the rule's
parameters and, for K >= 4, the leave-one-out self-check.  From then on every comparison
that involves the run (a replay of it, ``compare`` with it, a drill, a bisect, an export)
finds the floor here (:func:`noise_context`) and judges what is beyond the fixed
tolerance against it (``replay_tui.compare.noise_rule``; docs/noise.md).

The same table holds determinism-cost measurements (``replay --determinism off``).  Each
fact's body is written and read through a typed record (:class:`FloorRecord`,
:class:`DeterminismCost`: ``storage.wire`` models, ``to_dict`` / ``from_dict``), and a
row reads back as a :class:`NoiseFloorFact` whose ``kind`` says which it is.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Literal, cast

from replay_tui.compare.distance import weight_rel_l2
from replay_tui.compare.noise_floor_model import NoiseFloor
from replay_tui.compare.noise_params import NoiseParams
from replay_tui.compare.noise_results import NoiseJudgement
from replay_tui.compare.noise_rule import judge
from replay_tui.compare.noise_self_check import SelfCheck, self_check
from replay_tui.compare.tolerance import Tolerance
from replay_tui.gaps import Gap
from storage.manifest import RunManifest
from storage.objects import ObjectStore
from storage.store import RunStore
from storage.wire import Wire, wire

FLOOR_KEY: Final = "floor"
"""A noise-floor fact's body holds its floor under this key (older facts of the same
table hold a determinism-cost measurement instead, and are not floors)."""
DETERMINISM_KEY: Final = "determinism"
"""A determinism-cost fact's body holds its measurement under this key."""
DEFAULT_REPLICAS: Final = 3

Side = Literal["a", "b"]


def params_of(tolerance: Tolerance) -> NoiseParams:
    return NoiseParams(
        alpha=tolerance.alpha, margin=tolerance.margin, margin_abs=tolerance.margin_abs
    )


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
    """The body of a noise-floor fact (:class:`FloorRecord`, no spread)."""
    return FloorRecord(
        floor=floor,
        original_run=original,
        replicas=floor.labels,
        tolerance=tolerance,
        self_check=check,
    ).to_dict()


# -- what a noise-floor fact holds -------------------------------------------------------


@dataclass(frozen=True)
class Spread(Wire):
    """The replicas' spread in a few numbers people read."""

    WIRE_EXTRA = ("largest_identical_group", "all_identical")
    WIRE_ORDER = (
        "replicas",
        "max_metric_gap",
        "max_weight_rel_l2",
        "largest_identical_group",
        "identical_groups",
        "all_identical",
        "floor_id",
    )

    replicas: int
    max_metric_gap: float
    max_weight_rel_l2: float
    identical_groups: tuple[int, ...]
    floor_id: int | None = None
    """The stored noise-floor fact that judges this run from now on."""

    @property
    def largest_identical_group(self) -> int:
        return max(self.identical_groups) if self.identical_groups else 0

    @property
    def all_identical(self) -> bool:
        return len(self.identical_groups) == 1


MeasuredOn = Literal["gpu", "cpu"]
_COST_NOTE: Final[dict[MeasuredOn, str]] = {
    "gpu": "measured on GPU",
    "cpu": "measured on CPU, where deterministic mode changes few kernels:"
    " a cost near zero is expected and run-to-run timing noise dominates",
}


def _note_of(measured_on: MeasuredOn) -> str:
    return _COST_NOTE[measured_on]


def _measured_on(note: object, where: str) -> MeasuredOn:
    """Where it ran is stored as its note (one of two sentences): the GPU's sentence reads
    as ``gpu``, any other (a note of an older wording) as ``cpu``."""
    return "gpu" if note == _COST_NOTE["gpu"] else "cpu"


@dataclass(frozen=True)
class DeterminismCost(Wire):
    """What deterministic mode costs: a replay's run time with it on against one with it
    switched off (``replay --determinism off``), and the verdict of the one with it off."""

    WIRE_EXTRA = ("determinism_cost_pct",)
    WIRE_ORDER = (
        "deterministic_s",
        "nondeterministic_s",
        "determinism_cost_pct",
        "note",
        "off_verdict",
    )

    deterministic_s: float
    nondeterministic_s: float
    measured_on: MeasuredOn = field(
        default="cpu", metadata=wire(key="note", encode=_note_of, decode=_measured_on)
    )
    """Where the two runs ran: on CPU deterministic mode changes few kernels, so the
    cost there is mostly timing noise (:attr:`note` says so; it is what is stored)."""
    off_verdict: str | None = None

    @property
    def cost_pct(self) -> float:
        return (self.deterministic_s - self.nondeterministic_s) / self.nondeterministic_s * 100

    @property
    def determinism_cost_pct(self) -> float:
        """:attr:`cost_pct` under the name it is stored by."""
        return self.cost_pct

    @property
    def note(self) -> str:
        return _COST_NOTE[self.measured_on]


def _read_floor(v: object, where: str) -> NoiseFloor:
    if not isinstance(v, Mapping):
        raise ValueError("a noise-floor fact holds its floor under 'floor'")
    try:
        return NoiseFloor.from_dict(v)
    except (KeyError, TypeError) as e:
        raise ValueError(f"noise floor: {e}") from None


def _str_or_none(v: object, where: str) -> str | None:
    """A string, or None for anything else (a floor's parts around it are read leniently)."""
    return v if isinstance(v, str) else None


def _strs(v: object, where: str) -> tuple[str, ...]:
    """Each item as a string; () for anything but a list (read leniently, as before)."""
    return tuple(str(x) for x in v) if isinstance(v, list) else ()


def _lenient(read: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """A reading of ``read`` for a JSON object, None for anything else or what it cannot
    read: a floor fact's tolerance, self-check and spread are read so (the floor is what
    matters; verify-store checks the rest)."""

    def decode(v: object, where: str) -> Any:
        if not isinstance(v, Mapping):
            return None
        try:
            return read(v, where)
        except ValueError:
            return None

    return decode


@dataclass(frozen=True)
class FloorRecord(Wire):
    """The body of a noise-floor fact: the floor, the run it is of, its replicas, the
    tolerance it was measured with, the self-check (K >= 4) and the spread summary.

    Reading it is ``ValueError`` when the floor itself cannot be read; the parts around
    it that cannot be (a tolerance, a self-check, a spread of another shape) read as None."""

    floor: NoiseFloor = field(metadata=wire(key=FLOOR_KEY, decode=_read_floor))
    original_run: str | None = field(default=None, metadata=wire(decode=_str_or_none))
    replicas: tuple[str, ...] = field(default=(), metadata=wire(decode=_strs))
    tolerance: Tolerance | None = field(
        default=None, metadata=wire(decode=_lenient(Tolerance.from_dict))
    )
    self_check: SelfCheck | None = field(
        default=None, metadata=wire(decode=_lenient(SelfCheck.from_dict))
    )
    spread: Spread | None = field(
        default=None, metadata=wire(omit="none", decode=_lenient(Spread.from_dict))
    )


FactKind = Literal["floor", "determinism", "other"]


@dataclass(frozen=True)
class NoiseFloorFact:
    """One row of the noise-floor table, typed: ``kind`` says what it holds.

    ``floor``: a measured floor (:attr:`record`); ``determinism``: a determinism-cost
    measurement (:attr:`determinism`); ``other``: a body written before floors were
    stored, or one that cannot be read (:attr:`problem` says why), which is no floor.
    """

    fact_id: int
    run_id: str
    created_at: str
    times: int
    kind: FactKind
    record: FloorRecord | None = None
    determinism: DeterminismCost | None = None
    problem: str | None = None
    stored_body: Mapping[str, Any] | None = None
    """The body exactly as the store holds it (its ledger hash covers it): what an
    evidence bundle copies, so ``to_row`` of a fact read back is the stored fact."""
    body_sha256: str | None = None
    """The hash the ledger recorded for the body (checked when the store read it)."""

    def to_row(self) -> dict[str, Any]:
        """The fact as the store lists it (``id``, ``created_at``, ``times``, ``body``)."""
        if self.stored_body is not None:
            body: Any = self.stored_body
        elif self.record is not None:
            body = self.record.to_dict()
        elif self.determinism is not None:
            body = {DETERMINISM_KEY: self.determinism.to_dict()}
        else:
            body = {}
        out = {"id": self.fact_id, "created_at": self.created_at, "times": self.times, "body": body}
        if self.body_sha256 is not None:
            out["body_sha256"] = self.body_sha256
        return out

    @classmethod
    def from_row(cls, run_id: str, fact: Mapping[str, Any]) -> NoiseFloorFact:
        """A row of ``RunStore.noise_floors_of`` (``id``, ``created_at``, ``times``,
        decoded ``body``)."""
        body = fact.get("body")
        head = (
            int(fact["id"]),
            run_id,
            str(fact.get("created_at")),
            int(fact.get("times") or 0),
        )
        stored = body if isinstance(body, Mapping) else None
        raw_sha = fact.get("body_sha256")
        sha = raw_sha if isinstance(raw_sha, str) else None
        try:
            if stored is not None and FLOOR_KEY in stored:
                record = FloorRecord.from_dict(stored)
                return cls(*head, "floor", record=record, stored_body=stored, body_sha256=sha)
            if stored is not None and isinstance(stored.get(DETERMINISM_KEY), Mapping):
                cost = DeterminismCost.from_dict(stored[DETERMINISM_KEY])
                return cls(
                    *head, "determinism", determinism=cost, stored_body=stored, body_sha256=sha
                )
        except ValueError as e:
            return cls(*head, "other", problem=str(e), stored_body=stored, body_sha256=sha)
        problem = "neither a floor nor a determinism cost"
        return cls(*head, "other", problem=problem, stored_body=stored, body_sha256=sha)


def noise_floor_facts(store: RunStore, run_id: str) -> list[NoiseFloorFact]:
    """The noise-floor facts of ``run_id``, newest first."""
    return [NoiseFloorFact.from_row(run_id, f) for f in store.noise_floors_of(run_id)]


def latest_floor_fact(store: RunStore, run_id: str) -> NoiseFloorFact | None:
    """The newest fact of ``run_id`` that holds a readable floor."""
    return next((f for f in noise_floor_facts(store, run_id) if f.kind == "floor"), None)


def _run_named(v: object, where: str) -> str:
    if not isinstance(v, str):
        raise ValueError("the floor reference names no run")
    return v


def _text(v: object, where: str) -> str:
    """A string; an empty or absent one reads as ``""``."""
    return str(v or "")


def _side(v: object, where: str) -> Side:
    """``a`` or, for anything else, ``b`` (the candidate a replay is)."""
    return "a" if v == "a" else "b"


def _is_true(v: object, where: str) -> bool:
    return v is True


@dataclass(frozen=True)
class FloorRef(Wire):
    """Which stored floor judged a comparison (``Comparison.floor``), and how: the side
    that was the candidate, and whether it was one of the floor's own replicas.

    Read leniently but for what names the floor (a fact id, a run, K): ``ValueError``
    without them."""

    fact_id: int = field(metadata=wire(decode=lambda v, where: _int(v, "floor fact_id")))
    run_id: str = field(metadata=wire(decode=_run_named))
    created_at: str = field(metadata=wire(decode=_text))
    replicas: tuple[str, ...] = field(metadata=wire(decode=_strs))
    k: int = field(metadata=wire(decode=lambda v, where: _int(v, "floor k")))
    candidate: Side = field(metadata=wire(decode=_side))
    in_sample: bool = field(metadata=wire(decode=_is_true))
    body_sha256: str | None = field(default=None, metadata=wire(omit="none", decode=_str_or_none))
    """The floor fact's body hash as the ledger recorded it when it judged (None in
    comparisons stored before it was kept): ``verify-store`` holds the comparison to it."""


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(v: object, what: str) -> int:
    if not _is_int(v):
        raise ValueError(f"{what}: expected a whole number, got {v!r}")
    return cast(int, v)


@dataclass(frozen=True)
class StoredFloor:
    """A noise-floor fact as read back: which run, when, from which replicas."""

    fact_id: int
    run_id: str
    created_at: str
    floor: NoiseFloor
    self_check: SelfCheck | None
    body_sha256: str | None = None
    """The ledger's hash of the floor's body: a comparison judged by it names it."""

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

    def ref(self, candidate: Side, in_sample: bool) -> FloorRef:
        """This floor as the reference a comparison judged by it keeps."""
        return FloorRef(
            fact_id=self.fact_id,
            run_id=self.run_id,
            created_at=self.created_at,
            replicas=self.replicas,
            k=self.floor.k,
            candidate=candidate,
            in_sample=in_sample,
            body_sha256=self.body_sha256,
        )


UNRELATED_REL_L2 = 1.0
"""Replicas whose weights are this far apart (relative L2) did not start from the same
weights.  Two independent draws of one initialisation are about sqrt(2) = 1.41 apart;
replicas of one seed whose reduction order is the only noise are 1e-3 to 1e-1 apart
(``examples/train_noisy.py``: 0.0014-0.0052)."""


def unrelated_replicas(floor: NoiseFloor) -> float | None:
    """The closest two replicas' weight distance when even they are as far apart as
    independent initialisations (:data:`UNRELATED_REL_L2`), else None."""
    pairs = floor.weights_pairwise
    if not pairs:
        return None
    closest = min(pairs)
    return closest if closest >= UNRELATED_REL_L2 else None


def unrelated_gap(floor: NoiseFloor) -> Gap | None:
    """A critical gap for a floor whose replicas do not start from the same weights: what
    they spread over is not noise but unrelated models (the seed does not reach the
    model), and a judgement against it says nothing."""
    closest = unrelated_replicas(floor)
    if closest is None:
        return None
    return Gap(
        "FLOOR_REPLICAS_UNRELATED",
        "critical",
        "noise_floor.weights_pairwise",
        "the replicas do not start from the same weights: the seed does not reach the model"
        f" (even the closest two replicas' weights are {closest:.2f} apart in relative L2;"
        " independent initialisations are about 1.41 apart), so their spread is not noise",
        "seed before the model is built (replay_tui.seed_everything(), or the framework's"
        " seed call first), then measure the floor again (replay --times 3)",
    )


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
    check = floor.self_check
    if check is not None and check.status == "NOT_WELL_BEHAVED":
        text += f" (self-check: {check.message})"
    return text


def stored_floor(store: RunStore, run_id: str) -> StoredFloor | None:
    """The latest noise floor measured for ``run_id``, or None (an unreadable floor is
    no floor: verify-store says why)."""
    fact = latest_floor_fact(store, run_id)
    if fact is None or fact.record is None:
        return None
    rec = fact.record
    return StoredFloor(
        fact.fact_id, run_id, fact.created_at, rec.floor, rec.self_check, fact.body_sha256
    )


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

    def ref(self) -> FloorRef:
        """The floor, as the comparison judged by this context keeps it."""
        return self.stored.ref(self.candidate, self.in_sample)

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

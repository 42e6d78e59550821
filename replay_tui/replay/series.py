"""Several replays of one run: the noise floor (``--times N``) and the determinism cost.

With ``--times K`` (K >= 2) the K replicas run first, unjudged; their noise floor is
measured (``compare.floor``: per-step means and spreads, endpoint statistics, pairwise
weight distances) and stored as a ledgered fact; then each replica is judged, the
original against the replicas' noise (docs/noise.md).  A replica that did not complete
is judged as it ended.  The spread is also summarised for people: the largest metric gap
between any two replicas, the largest relative L2 between their weights, and how many
were bit-identical to each other.  ``determinism_cost_pct`` compares the run time of a
replay with the SDK's deterministic mode on against one with it switched off.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from replay_tui.compare.distance import metric_gap
from replay_tui.compare.floor import (
    DEFAULT_REPLICAS,
    DETERMINISM_KEY,
    DeterminismCost,
    FloorRecord,
    Spread,
    measure_floor,
    unrelated_gap,
)
from replay_tui.compare.noise_floor_model import NoiseFloor
from replay_tui.compare.tolerance import Tolerance
from replay_tui.replay.fanout import fans_out
from replay_tui.replay.plan import ReplayOptions
from replay_tui.replay.runner import (
    OnEvent,
    ReplayEvent,
    ReplayOutcome,
    compare_and_store,
    compare_pair,
    judge_pending,
    replay_run,
)
from replay_tui.verdicts import (
    CANCELLED,
    COMPLETED,
    DIVERGED,
    INTERRUPTED,
    MEANING,
    WITHIN_NOISE,
    combine_exits,
    normalize_status,
    outcome_word,
)
from storage.manifest import RunManifest
from storage.objects import ObjectStore
from storage.records import ReplayFact
from storage.store import RunStore
from storage.vocabulary import EXIT_NOT_JUDGED
from storage.wire import Wire, wire

__all__ = ["DeterminismCost", "ReplayReport", "Spread", "replay_many", "spread"]


def _replays_json(outcomes: list[ReplayOutcome]) -> list[dict[str, Any]]:
    """Each replay as ``--json`` shows it: its run, how far it got, its verdict and its
    comparison (written only: an outcome is not read back)."""
    return [
        {
            "replay_run": o.replay.run_id if o.replay else None,
            "status": o.replay.status if o.replay else "error",
            "replay_status": o.status,
            "verdict": o.verdict,
            "reason": o.reason,
            "duration_s": o.replay.duration_s if o.replay else None,
            "determinism": o.replay.replay.determinism if o.replay and o.replay.replay else None,
            "comparison": o.comparison.to_dict() if o.comparison else None,
        }
        for o in outcomes
    ]


@dataclass
class ReplayReport(Wire):
    """A series of replays of one run: written with its exit code after the run's id."""

    WIRE_EXTRA = ("exit_code",)
    WIRE_ORDER = ("run_id", "exit_code")

    original_id: str = field(metadata=wire(key="run_id"))
    outcomes: list[ReplayOutcome] = field(
        default_factory=list, metadata=wire(key="replays", encode=_replays_json)
    )
    noise_floor: Spread | None = None
    determinism: DeterminismCost | None = None
    first_number: int = field(default=1, metadata=wire(omit="always"))
    """The per-run number of this call's first replay (``show`` numbers them 1, 2, …)."""

    @property
    def exit_code(self) -> int:
        """Every counted replay's code combined (``storage.vocabulary.combine_exits``): 1
        one completed and did not reproduce, else 130 one was cancelled, else 3 one could
        not run, else 0; 1 when none counted."""
        return combine_exits(
            o.exit_code
            for o in self.outcomes
            if not (o.replay and o.replay.replay and o.replay.replay.determinism == "off")
        )

    def text(self) -> str:
        lines = []
        for i, o in enumerate(self.outcomes, self.first_number):
            rid = o.replay.run_id if o.replay else "-"
            mode = o.replay.replay.determinism if o.replay and o.replay.replay else "recorded"
            word = outcome_word(o.status, o.verdict)
            if o.status != "completed":
                compared = o.verdict or "nothing"
                word = f"{word} (not counted; its outputs compared {compared})"
            lines.append(
                f"replay {i}: {word}  run {rid}"
                + (f"  (determinism {mode})" if mode != "recorded" else "")
                + (f"  [{o.reason}]" if o.reason else "")
            )
            for r in (o.comparison.reasons if o.comparison else ())[:8]:
                lines.append(f"    - {r}")
        if self.noise_floor:
            nf = self.noise_floor
            lines.append(
                f"noise floor over {nf.replicas} replicas:"
                f" max metric gap {nf.max_metric_gap:.3g},"
                f" max weight rel L2 {nf.max_weight_rel_l2:.3g},"
                f" largest identical group {nf.largest_identical_group}/{nf.replicas}"
                + (f"; stored as floor #{nf.floor_id}" if nf.floor_id is not None else "")
            )
        if self.determinism:
            d = self.determinism
            lines.append(
                f"determinism cost: {d.cost_pct:+.1f}% "
                f"(deterministic {d.deterministic_s:.2f}s vs off {d.nondeterministic_s:.2f}s)"
                f" — {d.note}"
            )
        code = self.exit_code
        words = [o.verdict for o in self.outcomes if o.verdict]
        if code == 0 and words and all(w == WITHIN_NOISE for w in words):
            lines.append(f"=> REPRODUCED: {MEANING[WITHIN_NOISE]}")
            return "\n".join(lines)
        verdict = {
            0: "REPRODUCED",
            1: "NOT REPRODUCED",
            EXIT_NO_FLOOR: "NOT JUDGED (no noise floor to judge against)",
        }.get(code, "NOT JUDGED (replay aborted)")
        lines.append(f"=> {verdict}")
        return "\n".join(lines)


def spread(replicas: list[RunManifest], floor: NoiseFloor | None) -> Spread:
    """The replicas' spread; the pairwise weight distances come from ``floor`` (measured
    once), the metric gaps from the manifests."""
    groups: dict[tuple[str | None, ...], int] = {}
    for r in replicas:
        key = tuple(sorted(f"{a.path}:{a.sha256}" for a in r.outputs.artifacts))
        groups[key] = groups.get(key, 0) + 1
    gap = 0.0
    for a, b in itertools.combinations(replicas, 2):
        gap = max(gap, metric_gap(a, b))
    weights = floor.weights_pairwise if floor is not None else None
    l2 = max(weights) if weights else 0.0
    return Spread(len(replicas), gap, l2, tuple(sorted(groups.values(), reverse=True)))


def _replica(
    store: RunStore,
    should_cancel: Callable[[], bool],
    *,
    original_id: str,
    options: ReplayOptions,
    emit: OnEvent,
) -> ReplayOutcome:
    return replay_run(store, original_id, options, on_event=emit, should_cancel=should_cancel)


def needs_floor(m: RunManifest) -> bool:
    """Whether a run can only be judged against its own noise: determinism was not fully
    on (not switched on, unknown, or an op with no deterministic implementation ran)."""
    d = m.determinism
    return d.deterministic_algorithms is not True or bool(d.nondeterministic_ops)


EXIT_NO_FLOOR = EXIT_NOT_JUDGED
"""``replay --times 1`` of a run whose determinism was not fully on, with no noise floor,
that did not replay within the tolerance: not judged (neither reproduced nor not)."""
NO_FLOOR_NOTE = (
    "not bit-identical; no noise floor to judge against: determinism was not fully on,"
    " so one replay cannot tell noise from a change (replay without --times measures a"
    " floor)"
)


def replay_many(
    store: RunStore,
    run_ref: str,
    options: ReplayOptions,
    *,
    times: int | None = 1,
    replicas: int = DEFAULT_REPLICAS,
    determinism: str = "recorded",
    on_event: OnEvent | None = None,
    should_cancel: Callable[[], bool] = lambda: False,
) -> ReplayReport:
    """``times`` replays (plus one with determinism off when asked) and their spread;
    with ``times`` >= 2 the replicas' noise floor is stored before any is judged.

    ``times=None`` is the adaptive rule (the CLI's, the TUI's and a drill's default): one
    replay; when it is not within the tolerance, the run's determinism was not fully on
    and no floor speaks for it, ``replicas - 1`` more replicas run (the first counts as
    one), their floor is measured, and every replica is judged against it.  A run that
    replays identical, or is judged against a floor it has, pays nothing more.  With
    ``times=1`` such a replay is not judged (:data:`NO_FLOOR_NOTE`, exit 4)."""
    emit = on_event or (lambda e: None)
    original_id = store.resolve(run_ref)
    report = ReplayReport(
        original_id=original_id, first_number=len(store.replays_of(original_id)) + 1
    )
    judged = options
    noisy = needs_floor(store.manifest(original_id))
    if noisy and times is None:
        _adaptive(store, original_id, options, replicas, report, emit, should_cancel)
    elif not noisy and times in (None, 1):  # it must reproduce bit for bit: once, judged
        report.outcomes.append(
            replay_run(store, original_id, options, on_event=emit, should_cancel=should_cancel)
        )
    else:
        assert times is not None
        _series(store, original_id, options, times, report, emit, should_cancel)
    options = judged
    if determinism == "off":
        emit(ReplayEvent("replay", "note", "replay with deterministic mode switched off"))
        off = replay_run(
            store,
            original_id,
            replace(options, determinism="off"),
            on_event=emit,
            should_cancel=should_cancel,
        )
        report.outcomes.append(off)
        on = next(
            (o for o in report.outcomes if o.replay and o is not off and o.replay.duration_s),
            None,
        )
        if on and on.replay and off.replay and on.replay.duration_s and off.replay.duration_s:
            t_on, t_off = on.replay.duration_s, off.replay.duration_s
            gpu = bool(on.original.hardware.gpus) and bool(on.replay.hardware.gpus)
            cost = DeterminismCost(t_on, t_off, "gpu" if gpu else "cpu", off.verdict)
            report.determinism = cost
            store.add_noise_floor(original_id, 2, {DETERMINISM_KEY: cost.to_dict()})
    return report


def _series(
    store: RunStore,
    original_id: str,
    options: ReplayOptions,
    times: int,
    report: ReplayReport,
    emit: OnEvent,
    should_cancel: Callable[[], bool],
) -> None:
    """``times`` replays; with ``times`` >= 2 measured as a floor, then judged."""
    if times == 1:
        one = replay_run(
            store,
            original_id,
            replace(options, defer_judgement=True),
            on_event=emit,
            should_cancel=should_cancel,
        )
        report.outcomes.append(_judge_one(store, one, options, single=True))
        return
    _replicas(store, original_id, options, times, 0, report, emit, should_cancel)
    report.noise_floor = _measure(store, original_id, report.outcomes, options, emit)
    _judge_all(store, report)


def _judge_one(
    store: RunStore, out: ReplayOutcome, options: ReplayOptions, *, single: bool
) -> ReplayOutcome:
    """Judge one deferred replay; with ``single`` (``--times 1``), a noisy run's replay
    beyond the tolerance with no floor to judge it is kept off the badge and exits 4."""
    p = out.pending
    if p is None:
        return out
    if p.status != COMPLETED or not needs_floor(p.original):
        return judge_pending(store, p)
    preview = compare_pair(store, p.original, p.replay, options.tolerance)
    if not single or preview.verdict != DIVERGED or preview.floor is not None:
        return judge_pending(store, p, comparison=preview)
    done = judge_pending(store, p, comparison=preview, sets_verdict=False, note=NO_FLOOR_NOTE)
    p.emit("compare", "note", NO_FLOOR_NOTE)
    return replace(done, exit_code=EXIT_NO_FLOOR)


def _adaptive(
    store: RunStore,
    original_id: str,
    options: ReplayOptions,
    replicas: int,
    report: ReplayReport,
    emit: OnEvent,
    should_cancel: Callable[[], bool],
) -> None:
    first = replay_run(
        store,
        original_id,
        replace(options, defer_judgement=True),
        on_event=emit,
        should_cancel=should_cancel,
    )
    p = first.pending
    if p is None or p.status != COMPLETED or not needs_floor(p.original) or replicas < 2:
        report.outcomes.append(first if p is None else judge_pending(store, p))
        return
    preview = compare_pair(store, p.original, p.replay, options.tolerance)
    if preview.verdict != DIVERGED or preview.floor is not None:
        report.outcomes.append(judge_pending(store, p, comparison=preview))
        return
    emit(
        ReplayEvent(
            "replica",
            "note",
            "beyond the tolerance, determinism not fully on and no noise floor: measuring"
            f" one over {replicas} replicas (this replay is the first)",
        )
    )
    report.outcomes.append(first)
    _replicas(store, original_id, options, replicas, 1, report, emit, should_cancel)
    report.noise_floor = _measure(store, original_id, report.outcomes, options, emit)
    _judge_all(store, report)


def _replicas(
    store: RunStore,
    original_id: str,
    options: ReplayOptions,
    times: int,
    done: int,
    report: ReplayReport,
    emit: OnEvent,
    should_cancel: Callable[[], bool],
) -> None:
    """Replicas ``done + 1 .. times`` of a series, deferred (judged once all have run)."""
    deferred = replace(options, defer_judgement=True)
    if done:
        ended = report.outcomes[-1].pending
        if should_cancel() or (ended is not None and ended.status in (CANCELLED, INTERRUPTED)):
            _judge_all(store, report)
            return
    if fans_out(deferred):  # N jobs at once, each waited on in its own thread
        from replay_tui.replay.fanout import run_each, tagged

        work = [
            partial(_replica, original_id=original_id, options=deferred, emit=tagged(emit, f"{i}"))
            for i in range(done + 1, times + 1)
        ]
        report.outcomes.extend(run_each(store.path, work, should_cancel=should_cancel))
        return
    try:
        for i in range(done, times):
            emit(ReplayEvent("replica", "start", f"replica {i + 1} of {times}"))
            out = replay_run(
                store, original_id, deferred, on_event=emit, should_cancel=should_cancel
            )
            report.outcomes.append(out)
            ended_status = out.pending.status if out.pending is not None else out.status
            if should_cancel() or ended_status in (CANCELLED, INTERRUPTED):
                break  # Ctrl-C, a signal or a cancel stopped a replica: the series stops too
    except BaseException:
        # a later replica could not run (no engine, Ctrl-C while it waited): the ones
        # that ran are still judged and recorded, without a floor of this series
        _judge_all(store, report)
        raise


def _judge_all(store: RunStore, report: ReplayReport) -> None:
    report.outcomes = [
        judge_pending(store, o.pending) if o.pending is not None else o for o in report.outcomes
    ]


def _measure(
    store: RunStore,
    original_id: str,
    outcomes: list[ReplayOutcome],
    options: ReplayOptions,
    emit: OnEvent,
) -> Spread | None:
    """Measure and store the floor of the replicas that completed and succeeded (K >= 2);
    None when fewer did (each is then judged without a floor of this series)."""
    replicas = [
        o.replay
        for o in outcomes
        if o.replay is not None
        and o.pending is not None
        and o.pending.status == COMPLETED
        and o.replay.status == "succeeded"
    ]
    if len(replicas) < 2:
        return None
    tol = options.tolerance
    floor, check = measure_floor(replicas, ObjectStore.beside(store.path), tol)
    summary = spread(replicas, floor)  # its metric gaps walk every pair once
    record = FloorRecord(floor, original_id, floor.labels, tol, check, summary)
    fid = store.add_noise_floor(original_id, len(replicas), record.to_dict())
    emit(
        ReplayEvent(
            "compare",
            "note",
            f"noise floor #{fid} measured over {len(replicas)} replicas"
            + (f"; self-check: {check.message}" if check is not None else ""),
        )
    )
    gap = unrelated_gap(floor)
    if gap is not None:
        emit(ReplayEvent("compare", "note", f"{gap.message}; {gap.remediation}"))
    again = rejudge_earlier(store, original_id, fid, {r.run_id for r in replicas}, tol)
    if again:
        emit(
            ReplayEvent(
                "compare",
                "note",
                f"{again} earlier replay(s) judged without a floor re-judged against #{fid}",
            )
        )
    return replace(summary, floor_id=fid)


def rejudge_earlier(
    store: RunStore, original_id: str, fid: int, series: set[str], tol: Tolerance
) -> int:
    """Judge again, against the floor just measured (#``fid``), each earlier replay of
    the run whose latest judgement was DIVERGED with no floor to judge it: a new
    comparison and a new replay fact for the same replay run (the older ones stay, as
    facts do; the runs list and ``stats`` count the latest judgement of each replay:
    ``replay_tui.verdicts.summarize``).  Returns how many were judged again."""
    latest: dict[str, ReplayFact] = {}
    for f in store.replays_of(original_id):
        if f.replay_run is not None:
            latest[f.replay_run] = f
    original = store.manifest(original_id)
    n = 0
    for run, f in latest.items():
        if (
            run in series
            or normalize_status(f.status) != COMPLETED
            or f.verdict != DIVERGED
            or (f.determinism or "recorded") == "off"
            or f.comparison_id is None
            or store.comparison(f.comparison_id).get("floor") is not None
        ):
            continue
        replay_m = store.manifest(run)
        verdict, _, cid = compare_and_store(
            store, original, replay_m, tolerance=tol, set_verdict_on=None
        )
        store.add_replay(
            original_id,
            replay_run=run,
            backend=f.backend or "local",
            status=COMPLETED,
            verdict=verdict,
            reason=f"re-judged against noise floor #{fid}: replay fact #{f.id} was judged"
            " without a floor",
            duration_s=f.duration_s,
            comparison_id=cid,
            body={
                "replay": {"determinism": f.determinism or "recorded"},
                "verdict": verdict,
                "rejudged": f.id,
            },
            sets_verdict=False,
        )
        n += 1
    return n

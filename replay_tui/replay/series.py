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
from replay_tui.compare.floor import DeterminismCost, FloorRecord, Spread, measure_floor
from replay_tui.compare.noise_rule import NoiseFloor
from replay_tui.replay.fanout import fans_out
from replay_tui.replay.plan import ReplayOptions
from replay_tui.replay.runner import (
    OnEvent,
    ReplayEvent,
    ReplayOutcome,
    judge_pending,
    replay_run,
)
from replay_tui.verdicts import (
    CANCELLED,
    COMPLETED,
    INTERRUPTED,
    MEANING,
    WITHIN_NOISE,
    combine_exits,
    outcome_word,
)
from storage.manifest import RunManifest
from storage.objects import ObjectStore
from storage.store import RunStore

__all__ = ["DeterminismCost", "ReplayReport", "Spread", "replay_many", "spread"]


@dataclass
class ReplayReport:
    original_id: str
    outcomes: list[ReplayOutcome] = field(default_factory=list)
    noise_floor: Spread | None = None
    determinism: DeterminismCost | None = None
    first_number: int = 1
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.original_id,
            "exit_code": self.exit_code,
            "replays": [
                {
                    "replay_run": o.replay.run_id if o.replay else None,
                    "status": o.replay.status if o.replay else "error",
                    "replay_status": o.status,
                    "verdict": o.verdict,
                    "reason": o.reason,
                    "duration_s": o.replay.duration_s if o.replay else None,
                    "determinism": o.replay.replay.determinism
                    if o.replay and o.replay.replay
                    else None,
                    "comparison": o.comparison.to_dict() if o.comparison else None,
                }
                for o in self.outcomes
            ],
            "noise_floor": self.noise_floor.to_json() if self.noise_floor else None,
            "determinism": self.determinism.to_json() if self.determinism else None,
        }

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
        verdict = {0: "REPRODUCED", 1: "NOT REPRODUCED"}.get(code, "NOT JUDGED (replay aborted)")
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


def replay_many(
    store: RunStore,
    run_ref: str,
    options: ReplayOptions,
    *,
    times: int = 1,
    determinism: str = "recorded",
    on_event: OnEvent | None = None,
    should_cancel: Callable[[], bool] = lambda: False,
) -> ReplayReport:
    """``times`` replays (plus one with determinism off when asked) and their spread;
    with ``times`` >= 2 the replicas' noise floor is stored before any is judged."""
    emit = on_event or (lambda e: None)
    original_id = store.resolve(run_ref)
    report = ReplayReport(original_id, first_number=len(store.replays_of(original_id)) + 1)
    judged = options
    if times > 1:
        options = replace(options, defer_judgement=True)
    if times > 1 and fans_out(options):  # N jobs at once, each waited on in its own thread
        from replay_tui.replay.fanout import run_each, tagged

        work = [
            partial(_replica, original_id=original_id, options=options, emit=tagged(emit, f"{i}"))
            for i in range(1, times + 1)
        ]
        report.outcomes.extend(run_each(store.path, work, should_cancel=should_cancel))
        times_left = 0
    else:
        times_left = times
    try:
        for i in range(times_left):
            if times > 1:
                emit(ReplayEvent("replica", "start", f"replica {i + 1} of {times}"))
            out = replay_run(
                store, original_id, options, on_event=emit, should_cancel=should_cancel
            )
            report.outcomes.append(out)
            ended = out.pending.status if out.pending is not None else out.status
            if should_cancel() or ended in (CANCELLED, INTERRUPTED):
                break  # Ctrl-C, a signal or a cancel stopped a replica: the series stops too
    except BaseException:
        # a later replica could not run (no engine, Ctrl-C while it waited): the ones
        # that ran are still judged and recorded, without a floor of this series
        for o in report.outcomes:
            if o.pending is not None:
                judge_pending(store, o.pending)
        raise
    if times > 1:
        report.noise_floor = _measure(store, original_id, report.outcomes, judged, emit)
        report.outcomes = [
            judge_pending(store, o.pending) if o.pending is not None else o for o in report.outcomes
        ]
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
            store.add_noise_floor(original_id, 2, cost.fact_body())
    return report


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
    fid = store.add_noise_floor(original_id, len(replicas), record.to_json())
    emit(
        ReplayEvent(
            "compare",
            "note",
            f"noise floor #{fid} measured over {len(replicas)} replicas"
            + (f"; self-check: {check.message}" if check is not None else ""),
        )
    )
    return replace(summary, floor_id=fid)

"""Several replays of one run: the noise floor (``--times N``) and the determinism cost.

The noise floor is the spread across same-seed replays: the largest metric gap between
any two replicas, the largest relative L2 between their weights, and how many replicas
were bit-identical to each other.  ``determinism_cost_pct`` compares the run time of a
replay with the SDK's deterministic mode on against one with it switched off.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from replay_tui.compare.distance import metric_gap, weight_rel_l2
from replay_tui.replay.fanout import fans_out
from replay_tui.replay.plan import ReplayOptions
from replay_tui.replay.runner import OnEvent, ReplayEvent, ReplayOutcome, replay_run
from replay_tui.verdicts import outcome_word
from storage.manifest import RunManifest
from storage.objects import ObjectStore
from storage.store import RunStore


@dataclass
class ReplayReport:
    original_id: str
    outcomes: list[ReplayOutcome] = field(default_factory=list)
    noise_floor: dict[str, Any] | None = None
    determinism: dict[str, Any] | None = None
    first_number: int = 1
    """The per-run number of this call's first replay (``show`` numbers them 1, 2, …)."""

    @property
    def exit_code(self) -> int:
        """0 every counted replay reproduced, 1 one completed and did not (that wins), else
        the code of an aborted one (3 infrastructure or timeout, 130 cancelled)."""
        checked = [
            o
            for o in self.outcomes
            if not (o.replay and o.replay.replay and o.replay.replay.determinism == "off")
        ]
        if not checked or any(o.exit_code == 1 for o in checked):
            return 1
        aborted = [o.exit_code for o in checked if o.exit_code != 0]
        return aborted[-1] if aborted else 0

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
                    "comparison": o.comparison,
                }
                for o in self.outcomes
            ],
            "noise_floor": self.noise_floor,
            "determinism": self.determinism,
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
            for r in (o.comparison or {}).get("reasons", [])[:8]:
                lines.append(f"    - {r}")
        if self.noise_floor:
            nf = self.noise_floor
            lines.append(
                f"noise floor over {nf['replicas']} replicas:"
                f" max metric gap {nf['max_metric_gap']:.3g},"
                f" max weight rel L2 {nf['max_weight_rel_l2']:.3g},"
                f" largest identical group {nf['largest_identical_group']}/{nf['replicas']}"
            )
        if self.determinism:
            d = self.determinism
            lines.append(
                f"determinism cost: {d['determinism_cost_pct']:+.1f}% "
                f"(deterministic {d['deterministic_s']:.2f}s vs off {d['nondeterministic_s']:.2f}s)"
                f" — {d['note']}"
            )
        code = self.exit_code
        verdict = {0: "REPRODUCED", 1: "NOT REPRODUCED"}.get(code, "NOT JUDGED (replay aborted)")
        lines.append(f"=> {verdict}")
        return "\n".join(lines)


def noise_floor(replicas: list[RunManifest], objects: ObjectStore) -> dict[str, Any]:
    groups: dict[tuple[str | None, ...], int] = {}
    for r in replicas:
        key = tuple(sorted(f"{a.path}:{a.sha256}" for a in r.outputs.artifacts))
        groups[key] = groups.get(key, 0) + 1
    gap = 0.0
    l2 = 0.0
    for a, b in itertools.combinations(replicas, 2):
        gap = max(gap, metric_gap(a, b))
        l2 = max(l2, weight_rel_l2(a, b, objects))
    return {
        "replicas": len(replicas),
        "max_metric_gap": gap,
        "max_weight_rel_l2": l2,
        "largest_identical_group": max(groups.values()) if groups else 0,
        "identical_groups": sorted(groups.values(), reverse=True),
        "all_identical": len(groups) == 1,
    }


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
    """``times`` replays (plus one with determinism off when asked) and their spread."""
    emit = on_event or (lambda e: None)
    original_id = store.resolve(run_ref)
    report = ReplayReport(original_id, first_number=len(store.replays_of(original_id)) + 1)
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
    for i in range(times_left):
        if times > 1:
            emit(ReplayEvent("replica", "start", f"replica {i + 1} of {times}"))
        report.outcomes.append(
            replay_run(store, original_id, options, on_event=emit, should_cancel=should_cancel)
        )
        if should_cancel():
            break
    replicas = [o.replay for o in report.outcomes if o.replay and o.replay.status == "succeeded"]
    if times > 1 and len(replicas) > 1:
        report.noise_floor = noise_floor(replicas, ObjectStore.beside(store.path))
        store.add_noise_floor(original_id, len(replicas), report.noise_floor)
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
            cost = (t_on - t_off) / t_off * 100.0
            gpu = bool(on.original.hardware.gpus) and bool(on.replay.hardware.gpus)
            note = (
                "measured on GPU"
                if gpu
                else "measured on CPU, where deterministic mode changes few kernels:"
                " a cost near zero is expected and run-to-run timing noise dominates"
            )
            report.determinism = {
                "deterministic_s": t_on,
                "nondeterministic_s": t_off,
                "determinism_cost_pct": cost,
                "note": note,
                "off_verdict": off.verdict,
            }
            store.add_noise_floor(original_id, 2, {"determinism": report.determinism})
    return report

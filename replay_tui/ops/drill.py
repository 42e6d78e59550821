"""The drill use case (``replay-tui drill``, the TUI's drill screen): replay a pick of
recorded runs, store the drill, say what it amounts to (:mod:`replay_tui.ops.judgement`:
a drill cancelled or interrupted is NOT JUDGED, exit 130)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.ops.judgement import Judgement, NotJudged, judgement_of

if TYPE_CHECKING:
    from replay_tui.replay.context import ReplayEvent
    from replay_tui.replay.drill import DrillItem as DrillItem
    from replay_tui.replay.drill import DrillReport as DrillReport
    from replay_tui.replay.drill import Pick
    from replay_tui.replay.plan import ReplayOptions
    from storage.store import RunStore


@dataclass(frozen=True, kw_only=True)
class DrillDone:
    report: DrillReport
    """The drill as ``replay.drill`` reports (and stored) it, for a face that prints it."""
    judgement: Judgement
    not_judged: NotJudged | None
    junit: Path | None
    """The JUnit XML file written, else None."""
    exit_code: int


def run_drill(
    store: RunStore,
    *,
    count: int = 3,
    pick: Pick = "random",
    seed: int | None = None,
    since: str | None = None,
    options: ReplayOptions | None = None,
    replicas: int | None = None,
    junit: Path | None = None,
    on_event: Callable[[ReplayEvent], None] | None = None,
    should_cancel: Callable[[], bool] = lambda: False,
) -> DrillDone:
    """Replay ``count`` runs picked by ``pick`` (``seed``, ``since``), measure a floor
    over ``replicas`` for a noisy run without one, store the drill, and with ``junit``
    write it as JUnit XML (the file's place checked before any replay runs)."""
    from replay_tui.compare.floor import DEFAULT_REPLICAS
    from replay_tui.replay import drill

    if junit is not None:
        from replay_tui.replay.junit import junit_target

        junit = junit_target(junit)
    rep = drill.run_drill(
        store,
        count=count,
        pick=pick,
        seed=seed,
        since=since,
        options=options,
        on_event=on_event,
        should_cancel=should_cancel,
        replicas=DEFAULT_REPLICAS if replicas is None else replicas,
    )
    if junit is not None:
        from replay_tui.replay.junit import write_junit

        write_junit(rep, junit)
    judgement, why = judgement_of(rep.exit_code)
    return DrillDone(
        report=rep, judgement=judgement, not_judged=why, junit=junit, exit_code=rep.exit_code
    )


def stored_drill_item(entry: Mapping[str, Any]) -> DrillItem | None:
    """One run of a stored drill (an entry of ``DrillReport.to_dict()["runs"]``), or None
    when the entry is no drill item (a face reading a stored drill back)."""
    from replay_tui.replay.drill import read_item

    return read_item(entry)

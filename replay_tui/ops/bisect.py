"""The bisect use cases: ``bisect GOOD BAD`` (the TUI's bisect screen) and
``bisect-show ID`` (a stored bisect again, with the output its probes printed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replay_tui.errors import BadInput

if TYPE_CHECKING:
    from replay_tui.bisect.answer import BisectResult, Outcome
    from replay_tui.bisect.options import BisectOptions
    from replay_tui.replay.context import ReplayEvent
    from storage.store import RunStore


@dataclass(frozen=True, kw_only=True)
class BisectDone:
    result: BisectResult
    outcome: Outcome
    """``cause`` (exit 0): a difference found that makes BAD diverge; else exit 1."""
    bisect_id: int | None
    exit_code: int


def _done(result: BisectResult) -> BisectDone:
    return BisectDone(
        result=result,
        outcome=result.outcome,
        bisect_id=result.bisect_id,
        exit_code=result.exit_code,
    )


def bisect_runs(
    store: RunStore,
    good: str,
    bad: str,
    opts: BisectOptions | None = None,
    *,
    on_event: Callable[[ReplayEvent], None] | None = None,
    should_cancel: Callable[[], bool] = lambda: False,
) -> BisectDone:
    """Replay GOOD with BAD's factors swapped in and store what makes BAD diverge
    (``opts`` None: the defaults)."""
    from replay_tui.bisect.options import BisectOptions
    from replay_tui.bisect.run import run_bisect

    result = run_bisect(
        store,
        good,
        bad,
        opts or BisectOptions(),
        on_event=on_event or _quiet,
        should_cancel=should_cancel,
    )
    return _done(result)


def _quiet(_: ReplayEvent) -> None:
    pass


@dataclass(frozen=True, kw_only=True)
class ProbeLog:
    """What the store kept of one probe's output (``text`` None: not kept)."""

    probe: int
    """Its number in the table; -N: GOOD's noise-floor replay N."""
    what: str
    text: str | None
    """The program's output: untrusted, escape it before it meets a terminal."""


@dataclass(frozen=True, kw_only=True)
class BisectShown:
    done: BisectDone
    logs: tuple[ProbeLog, ...] | None
    """The probes' output asked for (None: not asked)."""


def show_bisect(
    store: RunStore, bisect_id: int, *, logs: bool = False, probe: int | None = None
) -> BisectShown:
    """Stored bisect ``bisect_id``; with ``logs`` every probe's kept output, with
    ``probe`` only that one's (BadInput when the bisect has no such probe)."""
    from replay_tui.bisect.run import probe_log, stored_bisect

    res = stored_bisect(store, bisect_id)
    if not (logs or probe is not None):
        return BisectShown(done=_done(res), logs=None)
    floor = [(-(i + 1), f"GOOD's noise-floor replay {i + 1}") for i in range(len(res.floor_logs))]
    probes = [
        (p.index, f"probe {p.index}: {'+'.join(p.swapped) or '-'} ({p.why})") for p in res.probes
    ]
    which = [w for w in (*floor, *probes) if probe is None or w[0] == probe]
    if probe is not None and not which:
        raise BadInput(f"bisect #{bisect_id} has no probe {probe}")
    kept = tuple(ProbeLog(probe=n, what=label, text=probe_log(store, res, n)) for n, label in which)
    return BisectShown(done=_done(res), logs=kept)


def probe_output(store: RunStore, result: BisectResult, probe: int) -> str | None:
    """What the store kept of probe ``probe``'s output in ``result`` (-N: GOOD's
    noise-floor replay N); None: not kept (the TUI's ``l`` on a probe row)."""
    from replay_tui.bisect.run import probe_log

    return probe_log(store, result, probe)

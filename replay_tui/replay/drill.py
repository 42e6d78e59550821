"""Reproduction drills: pick historical runs, replay each, compare, and keep the result.

Meant for cron or CI.  The pick is reproducible: ``oldest`` and ``unverified`` are plain
orderings, and ``random`` ranks every candidate by ``sha256("<seed>:<run id>")`` and takes
the lowest, so the same seed over the same runs picks the same runs, in any Python, and
a run added later never reshuffles the others (it only enters where its own rank puts it).
A drill with no ``--seed`` draws one and records it, so it can be repeated.

Each picked run ends as ``reproduced`` (verdict IDENTICAL or EQUIVALENT),
``not_reproduced`` (DIVERGED or INCOMPLETE, or the manifest cannot be replayed at all),
or ``error``: its replay was aborted, and the item's ``abort`` says how (the machine
could not run it: no Docker engine, data missing...; or it was cancelled, interrupted,
timed out).  The drill passes only when every picked run reproduced; its exit code is 1
when any did not, else 3 when any hit an infrastructure error, else 0.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import partial
from typing import Any, Literal, cast, get_args

from replay_tui.compare.floor import DEFAULT_REPLICAS
from replay_tui.errors import BadInput, InfraError, ReplayTuiError
from replay_tui.replay.fanout import fans_out, run_each, tagged
from replay_tui.replay.plan import ReplayOptions
from replay_tui.replay.runner import OnEvent, ReplayEvent, ReplayOutcome
from replay_tui.replay.series import needs_floor, replay_many
from replay_tui.verdicts import (
    CANCELLED,
    COMPLETED,
    INFRA_ERROR,
    INTERRUPTED,
    MEANING,
    REPRODUCED,
    SEVERITY,
    TIMED_OUT,
    WITHIN_NOISE,
    aborted_label,
    combine_exits,
    normalize_status,
)
from storage import integrity, ledger, readmodel
from storage.store import RunStore
from storage.vocabulary import EXIT_CANCELLED, EXIT_INFRA, EXIT_NOT_REPRODUCED, EXIT_OK
from storage.wire import Wire, wire

Pick = Literal["random", "oldest", "unverified"]
ItemStatus = Literal["reproduced", "not_reproduced", "error"]
Abort = Literal["cancelled", "interrupted", "timed_out", "infra-error"]
"""How a drilled run's replay was aborted (``replay_tui.verdicts``' aborted statuses)."""
MAX_COUNT = 1000
MAX_REPLICAS = 20


@dataclass(frozen=True)
class Candidate:
    run_id: str
    name: str
    started_at: str
    last_verdict: str | None
    last_verdict_at: str | None


# -- reading a stored drill's items leniently (``decode=``): a damaged or older body
# still opens, what an item lacks or holds in another shape reading as the default.


def _text(v: object, where: str) -> str:
    return str(v or "")


def _opt_str(v: object, where: str) -> str | None:
    return v if isinstance(v, str) else None


def _opt_int(v: object, where: str) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _seconds(v: object, where: str) -> float:
    return float(v) if isinstance(v, int | float) else 0.0


def _stored_abort(d: Mapping[str, Any], where: str) -> Abort | None:
    """How a stored ``error`` item's replay was aborted: the JSON does not carry it, but
    its reason starts with how the replay ended (``cancelled``, ``interrupted``,
    ``timed_out``), as :func:`_drill_one` writes it; any other reason is an
    infrastructure error (``DrillItem.__post_init__``)."""
    if d.get("status") != "error":
        return None
    reason = d.get("reason") if isinstance(d.get("reason"), str) else ""
    ended = (w for w in (CANCELLED, INTERRUPTED, TIMED_OUT) if str(reason).startswith(w))
    return cast(Abort | None, next(ended, None))


def _not_written(v: object) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class DrillItem(Wire):
    """One drilled run and how it ended; a stored one reads back with :func:`read_item`."""

    run_id: str = field(metadata=wire(decode=_text))
    name: str = field(metadata=wire(decode=_text))
    status: ItemStatus
    verdict: str | None = field(metadata=wire(decode=_opt_str))
    replay_run: str | None = field(metadata=wire(decode=_opt_str))
    replay_fact_id: int | None = field(metadata=wire(decode=_opt_int))
    reason: str | None = field(metadata=wire(decode=_opt_str))
    duration_s: float = field(metadata=wire(decode=_seconds))
    abort: Abort | None = field(
        default=None, metadata=wire(inline=True, encode=_not_written, decode=_stored_abort)
    )
    """For an ``error`` item, how its replay was aborted (set where it was: an item in
    error without one is an infrastructure error); None for every other item.  Not
    written: a stored item's is read from its reason."""

    def __post_init__(self) -> None:
        if self.status == "error" and self.abort is None:
            object.__setattr__(self, "abort", INFRA_ERROR)
        elif self.status != "error" and self.abort is not None:
            raise ValueError(f"a {self.status} drill item was not aborted ({self.abort})")

    @property
    def stopped(self) -> bool:
        """Stopped by a cancel or an interrupt (not failed on its own)."""
        return self.abort in (CANCELLED, INTERRUPTED)

    @property
    def word(self) -> str:
        """Its word where a verdict stands, in the words replays use: its verdict, else
        how its replay was aborted (CANCELLED, INTERRUPTED, TIMED OUT, INFRA-ERROR),
        else ``-``."""
        if self.verdict:
            return self.verdict
        label = aborted_label(self.abort) if self.abort is not None else None
        return label or "-"


_ITEM_ABSENT = dict.fromkeys(
    ("run_id", "name", "verdict", "replay_run", "replay_fact_id", "reason", "duration_s")
)
"""What a stored item lacks reads as (through its lenient readings: "", None, 0.0)."""


def read_item(d: Mapping[str, Any]) -> DrillItem | None:
    """An item of a stored drill (``DrillItem.to_dict``) read leniently; None when it is
    not one (no known status)."""
    try:
        return DrillItem.from_dict({**_ITEM_ABSENT, **d})
    except ValueError:
        return None


@dataclass
class DrillReport(Wire):
    """A drill: what it picked and how each run ended; written with whether it passed,
    its exit code and its counts per status among the fields, its items as ``runs``."""

    WIRE_EXTRA = ("passed", "exit_code", "counts")
    WIRE_ORDER = (
        "drill_id",
        "ledger_head",
        "passed",
        "exit_code",
        "pick",
        "seed",
        "since",
        "count",
        "backend",
        "candidates",
        "started_at",
        "ended_at",
        "cancelled",
        "counts",
        "runs",
    )

    pick: Pick
    seed: int | None
    since: str | None
    count: int
    backend: str
    candidates: int
    started_at: str
    items: list[DrillItem] = field(default_factory=list, metadata=wire(key="runs"))
    ended_at: str | None = None
    cancelled: bool = False
    drill_id: int | None = None
    ledger_head: str | None = None  # after this drill's fact: an anchor for verify-store

    @property
    def passed(self) -> bool:
        return bool(self.items) and all(i.status == "reproduced" for i in self.items)

    @property
    def outcome(self) -> str:
        """PASSED, FAILED, or how it was stopped (CANCELLED, INTERRUPTED: not counted)."""
        if self.cancelled:
            return "INTERRUPTED" if any(_interrupted(i) for i in self.items) else "CANCELLED"
        return "PASSED" if self.passed else "FAILED"

    @property
    def exit_code(self) -> int:
        """The items' codes combined (``storage.vocabulary.combine_exits``): 1 a run did
        not reproduce, 130 the drill was cancelled or interrupted (Ctrl-C), 3 a run could
        not be replayed, 0 every run reproduced."""
        item = {"reproduced": EXIT_OK, "not_reproduced": EXIT_NOT_REPRODUCED, "error": EXIT_INFRA}
        codes = [item[i.status] for i in self.items]
        return combine_exits([*codes, *([EXIT_CANCELLED] if self.cancelled else [])], empty=0)

    @property
    def counts(self) -> dict[str, int]:
        """How many items ended in each status."""
        return {s: sum(1 for i in self.items if i.status == s) for s in _STATUSES}


_STATUSES: tuple[ItemStatus, ...] = ("reproduced", "not_reproduced", "error")


def parse_since(text: str) -> str:
    """A date (``2026-01-31``) or RFC 3339 UTC time, as the manifests' timestamp form."""
    t = text.strip()
    try:
        if len(t) == 10:
            d = date.fromisoformat(t)
            return f"{d.isoformat()}T00:00:00.000Z"
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"--since {text!r} is not a date (YYYY-MM-DD) or an ISO time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def candidates(
    store: RunStore, since: str | None = None, *, pinned: bool = False
) -> list[Candidate]:
    """Original runs that succeeded (a failed run trained no model), oldest first; with
    ``pinned`` not those recorded without an image (``readmodel.WITHOUT_IMAGE``)."""
    rows = readmodel.drill_candidates(store, since, pinned=pinned)
    return [Candidate(*r) for r in rows]


def _rank(seed: int, run_id: str) -> str:
    return hashlib.sha256(f"{seed}:{run_id}".encode()).hexdigest()


def pick_runs(cands: Sequence[Candidate], count: int, pick: Pick, seed: int | None) -> list[str]:
    """The run ids a drill replays, in the order it replays them."""
    if pick == "oldest":
        chosen = list(cands[:count])
    elif pick == "unverified":
        # never judged first (oldest first), then those judged longest ago
        order = sorted(
            cands,
            key=lambda c: (c.last_verdict is not None, c.last_verdict_at or "", c.started_at),
        )
        chosen = order[:count]
    else:
        if seed is None:
            raise ValueError("a random pick needs a seed")
        chosen = sorted(cands, key=lambda c: (_rank(seed, c.run_id), c.run_id))[:count]
    return [c.run_id for c in chosen]


def run_drill(
    store: RunStore,
    *,
    count: int = 3,
    pick: Pick = "random",
    seed: int | None = None,
    since: str | None = None,
    options: ReplayOptions | None = None,
    on_event: OnEvent | None = None,
    should_cancel: Callable[[], bool] = lambda: False,
    replicas: int = DEFAULT_REPLICAS,
) -> DrillReport:
    """Pick ``count`` runs, replay and compare each, and store the drill in the ledger.

    A run whose determinism was not fully on and that has no noise floor yet is replayed
    ``replicas`` times first: its floor is measured and stored, and the original is
    judged against it (``replay --times``).  A run with a floor is replayed once and
    judged against the floor; a fully deterministic run once, as it must reproduce bit
    for bit or within tolerance."""
    if not 1 <= count <= MAX_COUNT:
        raise BadInput(f"--count must be between 1 and {MAX_COUNT}")
    if not 2 <= replicas <= MAX_REPLICAS:
        raise BadInput(f"--replicas must be between 2 and {MAX_REPLICAS}")
    opts = options or ReplayOptions()
    emit = on_event or (lambda e: None)
    since_ts = parse_since(since) if since else None
    if pick == "random" and seed is None:
        seed = secrets.randbits(32)
    from replay_tui.replay.backends import get_backend

    pinned = get_backend(opts.backend).needs_image
    cands = candidates(store, since_ts, pinned=pinned)
    # a run recorded without an image is left out, as `stats` counts it: never "not
    # reproduced" for want of an image a pinned backend needs (readmodel.WITHOUT_IMAGE)
    without = readmodel.succeeded_without_image(store, since_ts)[1] if pinned else 0
    if without:
        emit(
            ReplayEvent(
                "drill",
                "note",
                f"{without} succeeded run(s) recorded without an image left out: the"
                f" {opts.backend} backend replays only a pinned image (--backend local"
                " replays them; `stats` counts them)",
            )
        )
    if not cands:
        where = f" since {since_ts}" if since_ts else ""
        raise BadInput(
            f"no succeeded original runs{where} to drill"
            + (
                f" on the {opts.backend} backend ({without} recorded without an image)"
                if without
                else ""
            ),
            "replay them with --backend local"
            if without
            else "record runs first (`replay-tui record`), or widen --since",
        )
    report = DrillReport(
        pick=pick,
        seed=seed if pick == "random" else None,
        since=since_ts,
        count=count,
        backend=opts.backend,
        candidates=len(cands),
        started_at=ledger.utc_now(),
    )
    names = {c.run_id: c.name for c in cands}
    chosen = pick_runs(cands, count, pick, seed)
    if len(chosen) > 1 and fans_out(opts):  # all submitted at once, each waited on apart
        emit(ReplayEvent("drill", "note", f"{len(chosen)} runs at once on {opts.backend}"))
        work = [
            partial(
                _drill_in_thread,
                run_id=r,
                name=names[r],
                opts=opts,
                emit=tagged(emit, f"run {n}"),
                replicas=replicas,
            )
            for n, r in enumerate(chosen, 1)
        ]
        report.items.extend(run_each(store.path, work, should_cancel=should_cancel))
        report.cancelled = should_cancel()
        chosen = []
    for n, run_id in enumerate(chosen, 1):
        if should_cancel():
            report.cancelled = True
            break
        emit(ReplayEvent("drill", "note", f"run {n} of {len(chosen)}: {run_id}"))
        item = _drill_one(store, run_id, names[run_id], opts, emit, should_cancel, replicas)
        report.items.append(item)
        if _interrupted(item):  # Ctrl-C or a signal stopped the run: stop the drill too
            report.cancelled = True
            break
    if should_cancel() and any(i.stopped for i in report.items):
        report.cancelled = True  # the cancel landed during a run (the last one, say)
    report.ended_at = ledger.utc_now()
    body = report.to_dict()
    del body["drill_id"]  # the fact's own id, known only once it is stored
    del body["ledger_head"]
    report.drill_id = store.add_drill(report.passed, body)
    report.ledger_head = integrity.ledger_head(store.conn)
    return report


def _interrupted(item: DrillItem) -> bool:
    """Did a signal (Ctrl-C) stop this run?"""
    return item.abort == INTERRUPTED


def _drill_in_thread(
    store: RunStore,
    should_cancel: Callable[[], bool],
    *,
    run_id: str,
    name: str,
    opts: ReplayOptions,
    emit: OnEvent,
    replicas: int,
) -> DrillItem:
    return _drill_one(store, run_id, name, opts, emit, should_cancel, replicas)


def _drill_one(
    store: RunStore,
    run_id: str,
    name: str,
    opts: ReplayOptions,
    emit: OnEvent,
    should_cancel: Callable[[], bool],
    replicas: int = DEFAULT_REPLICAS,
) -> DrillItem:
    from replay_tui.compare.floor import stored_floor

    t0 = time.monotonic()
    before = max((f.id for f in store.replays_of(run_id)), default=0)
    if needs_floor(store.manifest(run_id)) and stored_floor(store, run_id) is None:
        emit(
            ReplayEvent(
                "drill",
                "note",
                f"{run_id}: determinism not fully on and no noise floor yet: replayed once,"
                f" and measured over {replicas} replicas if it is not within the tolerance",
            )
        )
    try:  # the adaptive rule (replay_many with times=None), as replay and the TUI use
        rep = replay_many(
            store,
            run_id,
            opts,
            times=None,
            replicas=replicas,
            on_event=emit,
            should_cancel=should_cancel,
        )
    except KeyboardInterrupt:  # Ctrl-C while the backend waited: the attempt is recorded
        recorded = [f.id for f in store.replays_of(run_id) if f.id > before]
        return DrillItem(
            run_id,
            name,
            "error",
            None,
            None,
            recorded[-1] if recorded else None,
            "interrupted (Ctrl-C)",
            time.monotonic() - t0,
            INTERRUPTED,
        )
    except ReplayTuiError as e:
        infra = isinstance(e, InfraError)
        # the attempt the replay recorded before it failed (the store is the record)
        recorded = [f.id for f in store.replays_of(run_id) if f.id > before]
        return DrillItem(
            run_id,
            name,
            "error" if infra else "not_reproduced",
            None,
            None,
            recorded[-1] if recorded else None,
            e.message,
            time.monotonic() - t0,
            INFRA_ERROR if infra else None,
        )
    except Exception as e:  # one broken run must not stop the drill or go unrecorded
        why = f"{type(e).__name__}: {e}"
        return DrillItem(
            run_id, name, "error", None, None, None, why, time.monotonic() - t0, INFRA_ERROR
        )
    out = _worst(rep.outcomes)
    if out is None:
        return DrillItem(
            run_id, name, "error", None, None, None, "cancelled", time.monotonic() - t0, CANCELLED
        )
    verdict = out.verdict
    reason = out.reason
    if out.status != COMPLETED:  # cancelled, timed out, host fault: not a failed reproduction
        why = f"{out.status}: {reason}" if reason else out.status
        rep_id = out.replay.run_id if out.replay else None
        # no verdict: what its partial outputs compared is not a judgement (the replay
        # fact keeps it); the drill names how it ended (DrillItem.word)
        return DrillItem(
            run_id,
            name,
            "error",
            None,
            rep_id,
            out.replay_fact_id,
            why,
            time.monotonic() - t0,
            _abort_of(out.status),
        )
    if verdict not in REPRODUCED and reason is None and out.comparison is not None:
        reason = next(iter(out.comparison.reasons), None)
    if verdict == WITHIN_NOISE and reason is None:
        reason = MEANING[WITHIN_NOISE]
    return DrillItem(
        run_id,
        name,
        "reproduced" if verdict in REPRODUCED else "not_reproduced",
        verdict,
        out.replay.run_id if out.replay else None,
        out.replay_fact_id,
        reason,
        time.monotonic() - t0,
    )


def _abort_of(status: str) -> Abort:
    """How a replay that did not complete was aborted (its replay status)."""
    s = normalize_status(status)
    return cast(Abort, s) if s in get_args(Abort) else INFRA_ERROR


def _worst(outcomes: Sequence[ReplayOutcome]) -> ReplayOutcome | None:
    """The outcome that speaks for a drilled run: an aborted one first (it was not
    judged), else the completed one with the worst verdict."""
    if not outcomes:
        return None
    aborted = [o for o in outcomes if o.status != "completed"]
    if aborted:
        return aborted[0]
    return max(outcomes, key=lambda o: SEVERITY.get(o.verdict or "", len(SEVERITY)))

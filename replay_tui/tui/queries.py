"""What the screens read from the store, as plain data.  No Textual here.

Every function takes an open ``RunStore`` and runs inside a worker thread, which opens
its own store (sqlite3 connections belong to the thread that made them).  The few
aggregate reads the dashboard needs and ``RunStore`` does not offer are plain
read-only SQL over the store's tables, kept here in one place.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from replay_tui.verdicts import (
    REPRODUCED,
    SEVERITY,
    VERDICTS,
    Reproduction,
    aborted_replays,
    summarize,
)
from storage import readmodel
from storage.records import ReplayFact, RunRecord
from storage.store import Location, RunQuery, RunStore, SearchReach, StoreError

# The run detail's gap rules and manifest models (pydantic) load when a run is first
# opened, not with the runs browser (the first frame).
if TYPE_CHECKING:
    from replay_tui.bisect.answer import BisectResult
    from replay_tui.compare.comparison import Comparison
    from replay_tui.gaps import Gap
    from replay_tui.ops.compare import AbortedSide
    from replay_tui.ops.drill import DrillItem
    from replay_tui.ops.judgement import Judgement
    from replay_tui.ops.replay import ReplayDone
    from storage.manifest import RunManifest

__all__ = ["REPRODUCED", "VERDICTS"]


_thread = threading.local()


@contextmanager
def open_store(path: Path) -> Iterator[RunStore]:
    """The calling thread's store for ``path``.

    sqlite3 connections belong to the thread that opened them, so each worker thread
    has its own; Textual runs thread workers on a pool whose threads are reused, so a
    thread opens the store once (about 1-2 ms and a schema check) and keeps it.
    """
    stores: dict[Path, RunStore] | None = getattr(_thread, "stores", None)
    if stores is None:
        stores = _thread.stores = {}
    store = stores.get(path)
    if store is None:
        store = stores[path] = RunStore(path)
    try:
        yield store
    finally:
        readmodel.end_read(store)  # never leave a read snapshot open in a pool thread


def list_runs(store: RunStore, q: RunQuery) -> list[RunRecord]:
    """One page of runs (the store picks the plan that stops after a page)."""
    return store.list_runs(q)


def reproduction_of(store: RunStore, records: list[RunRecord]) -> dict[str, Reproduction]:
    """What every replay of each original run on a page adds up to (one query)."""
    facts = store.replay_outcomes([r.id for r in records if r.kind == "original"])
    return {run_id: summarize(f) for run_id, f in facts.items()}


# -- the runs browser ------------------------------------------------------------------

SortKey = Literal["started_at", "name", "severity", "gaps", "status", "duration_s", "kind"]
"""What the runs browser sorts by: a column of the store's own order, or ``severity``
(the verdict badge, worst last: :data:`VERDICT_RANK`) or ``gaps`` (critical, then
warning, then info)."""

NOT_REPLAYED_RANK = SEVERITY["INCOMPLETE"]
"""Where a run never replayed (no verdict) ranks in the verdict sort: for an audit an
unverified run is worse than a reproduced one (WITHIN_NOISE and better), and better
than one whose replay failed to be judged (INCOMPLETE) or diverged."""
VERDICT_RANK: dict[str, int] = {
    v: r if r < NOT_REPLAYED_RANK else r + 1 for v, r in SEVERITY.items()
}
"""Each verdict's rank in the runs browser's verdict sort (worse is larger), the order
of ``replay_tui.verdicts.SEVERITY`` with room for :data:`NOT_REPLAYED_RANK`."""


def verdict_rank(verdict: str | None) -> int:
    """A run's rank in the verdict sort (``verdict``: its verdict, None: not replayed;
    the store ranks any word it does not know as not replayed too)."""
    return VERDICT_RANK.get(verdict or "", NOT_REPLAYED_RANK)


STORE_ORDERS: frozenset[str] = frozenset({"started_at", "name", "status", "duration_s", "kind"})


@dataclass(frozen=True)
class RunsView:
    """What the runs browser shows: the query (filters, paging, direction), the sort,
    and whether replays sit under their originals (``grouped``) or in the list."""

    query: RunQuery
    sort: SortKey = "started_at"
    grouped: bool = True

    @property
    def top_level(self) -> bool:
        """Replays whose original is in the store are left out of the list (shown under
        it); not when the list asks for replays only."""
        return self.grouped and self.query.kind != "replay"


@dataclass(frozen=True)
class RunsPageData:
    records: list[RunRecord]
    reproduction: dict[str, Reproduction]
    """Per original run on the page: what all its replays add up to."""
    replay_runs: dict[str, int]
    """Per original run on the page: how many replay runs the store holds (a group)."""
    children: dict[str, list[RunRecord]]
    """The replay runs of the groups asked open (``expanded``), oldest first."""
    reach: SearchReach | None = None
    """What the query's search matched, read once for the page: its count reuses it."""


def load_runs_page(
    store: RunStore, view: RunsView, *, limit: int, offset: int, expanded: frozenset[str]
) -> RunsPageData:
    """One page of the runs browser, with what its rows show and its open groups."""
    q = replace(view.query, limit=limit, offset=offset)
    reach = store.search_reach(q)
    if view.sort in STORE_ORDERS:
        q = replace(q, order=view.sort)  # type: ignore[arg-type]
        records = readmodel.list_runs_view(store, q, top_level=view.top_level, reach=reach)
    else:
        records = readmodel.list_runs_view(
            store,
            q,
            order=view.sort,
            rank=VERDICT_RANK,
            unranked=NOT_REPLAYED_RANK,
            top_level=view.top_level,
            reach=reach,
        )
    originals = [r.id for r in records if r.kind == "original"]
    facts = store.replay_outcomes(originals) if originals else {}
    replay_runs = {
        rid: n for rid, fs in facts.items() if (n := sum(1 for f in fs if f.replay_run)) > 0
    }
    children: dict[str, list[RunRecord]] = {}
    if view.top_level:
        open_ids = [rid for rid in originals if rid in expanded]
        for child in readmodel.replays_of_runs(store, open_ids):
            if child.replay_of is not None:
                children.setdefault(child.replay_of, []).append(child)
    # a replay row whose attempt did not complete says how it ended (CANCELLED), not the
    # INCOMPLETE its own comparison found
    more = {r.replay_of for r in records if r.replay_of and r.replay_of not in facts}
    aborted = aborted_replays({**facts, **(store.replay_outcomes(list(more)) if more else {})})
    return RunsPageData(
        records=_as_ended(records, aborted),
        reproduction={rid: summarize(f) for rid, f in facts.items()},
        replay_runs=replay_runs,
        children={rid: _as_ended(rows, aborted) for rid, rows in children.items()},
        reach=reach,
    )


def _as_ended(records: list[RunRecord], aborted: dict[str, str]) -> list[RunRecord]:
    """``records`` with an aborted replay's verdict shown as how it ended."""
    if not aborted:
        return records
    return [replace(r, last_verdict=aborted[r.id]) if r.id in aborted else r for r in records]


def count_runs_view(
    store: RunStore, view: RunsView, reach: SearchReach | None = None
) -> tuple[int, int]:
    """How many rows (groups, when grouped) the view has in all, and how many runs match
    its query, the replays under the groups included (the two are equal ungrouped).
    ``reach``: the one its first page was read with (:attr:`RunsPageData.reach`)."""
    return readmodel.count_runs_view_and_all(
        store, view.query, top_level=view.top_level, reach=reach
    )


def replays_under(store: RunStore, run_id: str) -> list[RunRecord]:
    """The replay runs of one original, oldest first (a group opened)."""
    return readmodel.replays_of_runs(store, [run_id])


def find_runs(store: RunStore, text: str, limit: int) -> list[RunRecord]:
    """Runs for the picker: those whose id starts with ``text``, then full-text matches."""
    return store.find_runs(text, limit)


# -- run detail -----------------------------------------------------------------------


@dataclass(frozen=True)
class StoredBisect:
    """A bisect the store holds (``bisect GOOD BAD``, or ``b`` on a comparison): who was
    GOOD and BAD, what it found, and its whole answer, read back from its stored body
    (``BisectResult.from_dict``)."""

    id: int
    created_at: str
    good: str
    bad: str
    outcome: str
    causes: list[str]
    result: BisectResult

    @property
    def probes_run(self) -> int:
        return self.result.probes_run

    def role_of(self, run_id: str) -> str:
        """``GOOD`` or ``BAD``: what ``run_id`` was in this bisect."""
        return "GOOD" if run_id == self.good else "BAD"

    def other(self, run_id: str) -> str:
        """The other run of the pair."""
        return self.bad if run_id == self.good else self.good


def bisects_of(store: RunStore, run_id: str) -> list[StoredBisect]:
    """The bisects ``run_id`` took part in (as GOOD or BAD), oldest first."""
    from replay_tui.bisect.answer import BisectResult

    out = []
    for f in store.bisects_of(run_id):
        body = f["body"] if isinstance(f["body"], dict) else {}
        causes = [c for c in str(f["causes"] or "").split(",") if c]
        out.append(
            StoredBisect(
                id=int(f["id"]),
                created_at=str(f["created_at"]),
                good=str(f["good_run"]),
                bad=str(f["bad_run"]),
                outcome=str(f["outcome"]),
                causes=causes,
                result=BisectResult.from_dict(body),
            )
        )
    return out


@dataclass(frozen=True)
class RunDetail:
    record: RunRecord
    manifest: RunManifest
    gaps: list[Gap]
    replays: list[ReplayFact]
    locations: list[Location]
    original: RunRecord | None = None
    """For a replay: the run it replays (None if that run is not in this store)."""
    log_tail: str = ""
    """The end of the run's captured output (a failed run's traceback)."""
    log_source: str = ""
    """Where ``log_tail`` comes from: the stored log, or the manifest's tail."""
    diff: str | None = None
    """The stored uncommitted diff the run was recorded with (None: none stored)."""
    reproduction: Reproduction | None = None
    """For an original run: what all its replays add up to."""
    replay_histories: dict[str, list[list[tuple[float, float]]]] = field(default_factory=dict)
    """For an original run: each metric's history in every completed replay (newest
    last, at most ``MAX_OVERLAID``), to overlay on its own: the noise floor made visible."""
    replay_times: dict[str, list[list[float] | None]] = field(default_factory=dict)
    """Per metric, each replay history's wall times (None: not recorded)."""
    bisects: list[StoredBisect] = field(default_factory=list)
    """The bisects the run took part in, as GOOD or BAD, oldest first."""


def load_run_detail(store: RunStore, ref: str) -> RunDetail:
    from replay_tui.gaps import evaluate

    record = store.get_run(ref)
    manifest = store.manifest(record.id)
    original = None
    if record.replay_of:
        try:
            original = store.get_run(record.replay_of)
        except StoreError:
            original = None
    log_tail, log_source = _log_tail(store, manifest)
    diff = None
    if manifest.code.diff_sha256:
        blob = store.get_blob(manifest.code.diff_sha256)
        diff = None if blob is None else blob[:MAX_DIFF_BYTES].decode("utf-8", "replace")
    facts = store.replay_outcomes([record.id]).get(record.id)
    histories, replay_times = _replay_histories(store, facts or [])
    return RunDetail(
        record=record,
        manifest=manifest,
        gaps=evaluate(manifest),
        replays=store.replays_of(record.id),
        locations=store.locations(record.id),
        original=original,
        log_tail=log_tail,
        log_source=log_source,
        diff=diff,
        reproduction=summarize(facts) if facts else None,
        replay_histories=histories,
        replay_times=replay_times,
        bisects=bisects_of(store, record.id),
    )


MAX_OVERLAID = 20


def _replay_histories(
    store: RunStore, facts: list[ReplayFact]
) -> tuple[dict[str, list[list[tuple[float, float]]]], dict[str, list[list[float] | None]]]:
    """Per metric, the histories of the run's completed replays (at most
    :data:`MAX_OVERLAID`), and each one's wall times (None where it has none)."""
    from replay_tui.verdicts import counts_as_evidence

    out: dict[str, list[list[tuple[float, float]]]] = {}
    times: dict[str, list[list[float] | None]] = {}
    runs = [
        f.replay_run
        for f in facts
        if f.replay_run and counts_as_evidence(f.status, f.verdict, f.determinism)
    ]
    for rid in runs[-MAX_OVERLAID:]:
        try:
            m = store.manifest(str(rid))
        except StoreError:
            continue
        for name, hist in m.outputs.metric_history.items():
            out.setdefault(name, []).append([(float(x), float(y)) for x, y in hist])
            times.setdefault(name, []).append(m.outputs.metric_times.get(name))
    return out, times


LOG_TAIL_LINES = 400
MAX_DIFF_BYTES = 2_000_000


def _log_tail(store: RunStore, m: RunManifest) -> tuple[str, str]:
    """The last lines of the run's output: the stored log (checked against its recorded
    hash), else the tail the manifest carries."""
    from replay_tui.evidence.gather import log_bytes

    data = log_bytes(store, m)
    if data is not None:
        lines = data.decode("utf-8", "replace").splitlines()
        shown = lines[-LOG_TAIL_LINES:]
        cut = f", the last {len(shown)}" if len(lines) > len(shown) else ""
        return "\n".join(shown), f"stored log ({len(lines)} lines{cut})"
    if m.outputs.log_tail:
        return m.outputs.log_tail, "the tail kept in the manifest (the full log is not stored)"
    return "", ""


# -- comparison -----------------------------------------------------------------------


@dataclass(frozen=True)
class ComparisonView:
    """A comparison (stored, or computed now) and the two manifests it compares."""

    a: RunManifest
    b: RunManifest
    comparison: Comparison
    comparison_id: int | None
    computed: bool
    """True when computed for this view rather than read from the store."""
    not_judged: AbortedSide | None = None
    """The side that is a replay which did not complete: the comparison of its partial
    outputs is NOT JUDGED (``ops.compare.aborted_side``, the CLI's rule)."""


def _comparison_runs(store: RunStore, cid: int) -> tuple[str, str]:
    return readmodel.comparison_runs(store, cid)


def load_comparison(
    store: RunStore,
    *,
    comparison_id: int | None = None,
    a_run: str | None = None,
    b_run: str | None = None,
    recompute: bool = False,
    ordered: bool = False,
) -> ComparisonView:
    """A stored comparison by id, else the latest of A vs B, else one computed now.

    ``ordered``: the caller chose which run is A (the compare picker): A stays A, so a
    comparison stored the other way round is not used and the earlier run is not put
    first. Otherwise a computed comparison takes the earlier run as the reference."""
    from replay_tui.compare.stored import comparison_from_dict
    from replay_tui.ops.compare import aborted_side, compare_manifests, reference_first

    body: dict[str, Any] | None = None
    if comparison_id is not None:
        a_run, b_run = _comparison_runs(store, comparison_id)
        body = store.comparison(comparison_id)
    if a_run is None or b_run is None:
        raise StoreError("a comparison needs two runs")
    a_id, b_id = store.resolve(a_run), store.resolve(b_run)
    a, b = store.manifest(a_id), store.manifest(b_id)
    if body is None and not recompute:
        body = store.latest_comparison(a_id, b_id)
        if (
            body is None
            and not ordered
            and (other := store.latest_comparison(b_id, a_id)) is not None
        ):
            a, b, body = b, a, other
    if body is None and not ordered:
        a, b = reference_first(a, b)  # computed now: the earlier run is the reference
    from replay_tui.compare.states import with_states  # a body stored before states

    if body is not None:
        shown = with_states(comparison_from_dict(body))
        stopped = aborted_side(store, a, b)
        return ComparisonView(a, b, shown, comparison_id, computed=False, not_judged=stopped)
    done = compare_manifests(store, a, b)  # stored as ``replay-tui compare A B`` stores it
    # shown as read back from the store, as a stored one is
    kept = with_states(comparison_from_dict(done.comparison.to_dict()))
    return ComparisonView(a, b, kept, done.comparison_id, computed=True, not_judged=done.aborted)


# -- replay ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayResult:
    replay_run: str | None
    verdict: str | None
    reason: str | None
    comparison_id: int | None
    status: str = "completed"
    """How far it got (``replay_tui.verdicts``); only a completed replay's verdict counts."""


@dataclass(frozen=True)
class ReplaySummary:
    """What the replay screen shows of a finished replay (``ops.replay.ReplayDone``)."""

    original_id: str
    results: list[ReplayResult]
    exit_code: int
    cancelled: bool
    text: str = ""
    """Unused by the screen (an outcome carries no text); kept for callers that still
    build a summary with it."""
    judgement: Judgement | None = None
    """REPRODUCED, NOT_REPRODUCED or NOT_JUDGED (``ops.judgement``)."""

    @classmethod
    def of(cls, done: ReplayDone) -> ReplaySummary:
        """The screen's view of a replay's outcome."""
        return cls(
            original_id=done.original_id,
            results=[
                ReplayResult(
                    replay_run=a.replay_run,
                    verdict=a.verdict,
                    reason=a.reason,
                    comparison_id=a.comparison_id,
                    status=a.status,
                )
                for a in done.attempts
            ],
            exit_code=done.exit_code,
            cancelled=done.stopped,
            judgement=done.judgement,
        )

    @property
    def last_comparison(self) -> int | None:
        for r in reversed(self.results):
            if r.comparison_id is not None:
                return r.comparison_id
        return None


# -- dashboard ------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    part: int
    whole: int

    @property
    def rate(self) -> float | None:
        return self.part / self.whole if self.whole else None


@dataclass(frozen=True)
class DashboardStats:
    total_runs: int
    originals: int
    replays: int
    """Replay attempts of original runs (facts), completed or not."""
    reproducible: Share
    """Original runs whose latest completed replay reproduced (IDENTICAL, EQUIVALENT or
    WITHIN_NOISE, as ``stats``)."""
    artifact_match: Share
    """(replay, hashed checkpoint of its original) pairs where the replay wrote the same
    sha256: the SLI ``checkpoint_match`` of ``replay-tui stats``."""
    drills: Share
    critical_total: int
    critical_runs: list[RunRecord]
    recent_replays: list[ReplayFact]
    """The latest replay facts, newest first."""
    recent_drills: list[StoredDrill] = field(default_factory=list)
    """The latest drills, newest first."""
    critical_originals: int | None = None
    """Of ``critical_total``, the original runs (the runs browser's groups)."""
    aborted: Share = Share(0, 0)
    """Replay attempts that did not complete (cancelled, interrupted, timed out, infra)."""
    bit_identical: Share = Share(0, 0)
    """Of the same runs, those whose latest completed replay is IDENTICAL."""

    @property
    def replay_runs(self) -> int:
        """Runs in the store that are replays (``total_runs - originals``)."""
        return self.total_runs - self.originals


def load_dashboard(
    store: RunStore, *, critical_limit: int = 50, recent: int = 10
) -> DashboardStats:
    """The dashboard's figures: the SLIs exactly as ``replay-tui stats`` computes them,
    the runs that need attention, the latest replays and drills."""
    from replay_tui.ops.evidence import store_stats

    s = store_stats(store).stats
    critical = store.list_runs(RunQuery(has_critical=True, limit=critical_limit))
    of = {r.replay_of for r in critical if r.kind == "replay" and r.replay_of}
    return DashboardStats(
        total_runs=store.count_runs(),
        originals=store.count_runs(RunQuery(kind="original")),
        replays=s.replays,
        reproducible=Share(s.reproducible.numerator, s.reproducible.denominator),
        bit_identical=Share(s.bit_identical.numerator, s.bit_identical.denominator),
        artifact_match=Share(s.checkpoint_match.numerator, s.checkpoint_match.denominator),
        drills=Share(s.drills.numerator, s.drills.denominator),
        critical_total=store.count_runs(RunQuery(has_critical=True)),
        critical_originals=store.count_runs(RunQuery(has_critical=True, kind="original")),
        critical_runs=_as_ended(critical, aborted_replays(store.replay_outcomes(list(of)))),
        recent_replays=[
            ReplayFact.from_mapping(r) for r in readmodel.recent_replays(store, recent)
        ],
        recent_drills=[StoredDrill.from_row(d) for d in readmodel.recent_drills(store, recent)],
        aborted=Share(s.aborted.numerator, s.aborted.denominator),
    )


@dataclass(frozen=True)
class StoredDrill:
    """A drill the store holds: when, whether it passed or was cancelled, its runs
    (``DrillReport.to_dict`` read back with ``read_item``)."""

    id: int
    created_at: str
    passed: bool
    cancelled: bool
    """Stopped by a cancel or an interrupt: neither a pass nor a failure."""
    items: tuple[DrillItem, ...]
    unreadable: int = 0
    """Entries of its runs that are no drill item (a malformed body): shown as ``-``."""

    @classmethod
    def from_row(cls, fact: Mapping[str, Any]) -> StoredDrill:
        """A row of ``readmodel.recent_drills`` (``id``, ``created_at``, ``passed``,
        decoded ``body``)."""
        body = fact.get("body")
        body = body if isinstance(body, Mapping) else {}
        items, unreadable = drill_items(body)
        return cls(
            int(fact["id"]),
            str(fact.get("created_at") or ""),
            fact.get("passed") is True,
            body.get("cancelled") is True,
            items,
            unreadable,
        )

    @property
    def words(self) -> list[str]:
        """Each run's word where a verdict stands (``DrillItem.word``)."""
        return [i.word for i in self.items] + ["-"] * self.unreadable

    def summary(self) -> str:
        """``2/3 reproduced``, or ``no runs``."""
        words = self.words
        if not words:
            return "no runs"
        return f"{sum(v in REPRODUCED for v in words)}/{len(words)} reproduced"


def drill_items(body: Mapping[str, Any]) -> tuple[tuple[DrillItem, ...], int]:
    """The runs of a stored drill (``DrillReport.to_dict``), and how many of its entries
    are no drill item (a malformed body reads as fewer runs rather than failing)."""
    from replay_tui.ops.drill import stored_drill_item

    runs = body.get("runs")
    entries = runs if isinstance(runs, list) else []
    parsed = [stored_drill_item(x) for x in entries if isinstance(x, Mapping)]
    items = tuple(i for i in parsed if i is not None)
    return items, len(parsed) - len(items)

"""Read models: the queries the SLIs, the dashboard, drills and importers ask the store.

``storage/`` is the only package that holds SQL.  What the rest of the project reads in
bulk is here, as functions over a :class:`RunStore` that return plain data; what it
computes from that data (rates, variances, verdict summaries) lives with the domain
(``replay_tui.evidence.stats``, ``replay_tui.verdicts``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from storage import integrity
from storage.records import REPLAY_SELECT, RUN_SELECT, ReplayFact, RunRecord
from storage.store import ID_PART_SQL, RunQuery, RunStore, SearchReach, StoreError, id_part
from storage.vocabulary import sql_completed

# Replays that count: determinism as recorded.  A replay run with determinism switched off
# (to measure its cost) is an experiment, never evidence; failed attempts have no replay
# info at all and count (as aborted).
COUNTED = (
    "coalesce(json_extract(r.body, '$.replay.determinism'), 'recorded') != 'off'"
    f" AND {integrity.JUDGED_BY_A_RECORDED_FLOOR}"
)
"""A replay the SLIs count: not one of a run recorded with determinism off on purpose,
and not one judged by a noise floor the ledger does not record as it was then (a floor
widened and put back: ``storage.integrity.judging_floor_problem``, which verify-store
reports)."""
COMPLETED = sql_completed("r.status")
"""A replay that ran to its end (``replay_tui.verdicts``; older facts said succeeded or
failed): only such a replay's outputs are evidence.  Cancelled, interrupted, timed-out
and infrastructure-failed attempts are counted apart and never in a rate."""
_OF_ORIGINAL = "JOIN runs o ON o.id = r.original_run AND o.kind = 'original'"


@contextmanager
def snapshot(store: RunStore) -> Iterator[None]:
    """One consistent read of every table (WAL: writers go on meanwhile)."""
    conn = store.conn
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def end_read(store: RunStore) -> None:
    """Close a read snapshot left open (a pooled thread must not hold one)."""
    if store.conn.in_transaction:
        store.conn.execute("ROLLBACK")


@dataclass
class SliFacts:
    """The raw counts and rows the reproducibility SLIs are computed from."""

    original_runs: int = 0
    replays: int = 0
    replay_outcomes: dict[str, list[ReplayFact]] = field(default_factory=dict)
    """Per original run, every counted replay fact in order: status and verdict."""
    checkpoints_compared: int = 0
    checkpoints_matched: int = 0
    finals: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    """Per original run, (metric, final value) of the original and its succeeded replays."""
    durations: dict[str, list[float]] = field(default_factory=dict)
    replays_with_data: int = 0
    replays_data_verified: int = 0
    data_inputs: int = 0
    data_inputs_hashed: int = 0
    nondeterministic_ops: int = 0
    runs_with_nondeterministic_ops: int = 0
    distinct_nondeterministic_ops: list[str] = field(default_factory=list)
    signed_originals: int = 0
    drills: int = 0
    drills_passed: int = 0
    last_drill_at: str | None = None
    succeeded_originals: int = 0
    succeeded_without_image: int = 0
    """Of the succeeded original runs, those recorded without an image
    (:data:`WITHOUT_IMAGE`): a drill on a pinned backend leaves them out."""


def sli_facts(store: RunStore) -> SliFacts:
    """Everything the SLIs need, read in the caller's snapshot (see :func:`snapshot`)."""
    q = store.conn.execute
    f = SliFacts()
    f.original_runs = int(q("SELECT count(*) FROM runs WHERE kind = 'original'").fetchone()[0])
    f.succeeded_originals, f.succeeded_without_image = succeeded_without_image(store)
    f.replays = int(
        q(f"SELECT count(*) FROM replays r {_OF_ORIGINAL} WHERE {COUNTED}").fetchone()[0]
    )
    for row in q(
        f"SELECT {REPLAY_SELECT} FROM replays r {_OF_ORIGINAL} WHERE {COUNTED} ORDER BY r.id"
    ):
        fact = ReplayFact.from_row(row)
        f.replay_outcomes.setdefault(fact.original_run, []).append(fact)
    compared, matched = q(
        "SELECT count(*), coalesce(sum(rb.sha256 IS NOT NULL AND rb.sha256 = oa.sha256), 0)"
        f" FROM replays r {_OF_ORIGINAL}"
        " JOIN artifacts oa ON oa.run_id = r.original_run AND oa.kind = 'checkpoint'"
        " AND oa.sha256 IS NOT NULL"
        " LEFT JOIN artifacts rb ON rb.run_id = r.replay_run AND rb.path = oa.path"
        f" WHERE r.replay_run IS NOT NULL AND {COUNTED} AND {COMPLETED}"
    ).fetchone()
    f.checkpoints_compared, f.checkpoints_matched = int(compared), int(matched)
    members: dict[str, list[str]] = {}
    for orig, rep in q(
        f"SELECT r.original_run, r.replay_run FROM replays r {_OF_ORIGINAL}"
        " JOIN runs p ON p.id = r.replay_run"  # the replay's own command succeeded
        f" WHERE p.status = 'succeeded' AND {COUNTED} AND {COMPLETED} ORDER BY r.id"
    ):
        ids = members.setdefault(str(orig), [str(orig)])
        if rep not in ids:
            ids.append(str(rep))
    for orig, ids in members.items():
        marks = ",".join("?" * len(ids))
        f.finals[orig] = [
            (str(name), float(final))
            for name, final in q(
                f"SELECT name, final FROM metrics WHERE run_id IN ({marks}) AND final IS NOT NULL",
                ids,
            )
        ]
        f.durations[orig] = [
            float(d)
            for (d,) in q(
                f"SELECT duration_s FROM runs WHERE id IN ({marks}) AND duration_s IS NOT NULL",
                ids,
            )
        ]
    with_data, verified = q(
        "SELECT count(*), coalesce(sum(coalesce(json_extract(pm.body,"
        " '$.replay.forced_data'), 0) = 0), 0)"
        f" FROM replays r {_OF_ORIGINAL}"
        " JOIN manifests om ON om.run_id = r.original_run"
        " JOIN manifests pm ON pm.run_id = r.replay_run"
        f" WHERE {COUNTED} AND {COMPLETED} AND json_array_length(om.body, '$.data') > 0"
    ).fetchone()
    f.replays_with_data, f.replays_data_verified = int(with_data), int(verified)
    inputs, hashed = q(
        "SELECT count(*), coalesce(sum(json_extract(d.value, '$.sha256') IS NOT NULL), 0)"
        " FROM manifests m JOIN runs o ON o.id = m.run_id AND o.kind = 'original',"
        " json_each(m.body, '$.data') d"
    ).fetchone()
    f.data_inputs, f.data_inputs_hashed = int(inputs), int(hashed)
    total_ops, runs_ops = q(
        "SELECT coalesce(sum(n), 0), coalesce(sum(n > 0), 0) FROM (SELECT"
        " coalesce(json_array_length(m.body, '$.determinism.nondeterministic_ops'), 0) AS n"
        " FROM manifests m JOIN runs o ON o.id = m.run_id AND o.kind = 'original')"
    ).fetchone()
    f.nondeterministic_ops, f.runs_with_nondeterministic_ops = int(total_ops), int(runs_ops)
    f.distinct_nondeterministic_ops = [
        str(v)
        for (v,) in q(
            "SELECT DISTINCT op.value FROM manifests m"
            " JOIN runs o ON o.id = m.run_id AND o.kind = 'original',"
            " json_each(m.body, '$.determinism.nondeterministic_ops') op ORDER BY op.value"
        )
    ]
    (signed,) = q(
        "SELECT count(DISTINCT b.run_id) FROM bundles b"
        " JOIN runs o ON o.id = b.run_id AND o.kind = 'original' WHERE b.signed = 1"
    ).fetchone()
    f.signed_originals = int(signed)
    drills, passed, last = q(  # a cancelled drill is no pass and no failure
        "SELECT count(*), coalesce(sum(passed), 0), max(created_at) FROM drills"
        " WHERE coalesce(json_extract(body, '$.cancelled'), 0) = 0"
    ).fetchone()
    f.drills, f.drills_passed, f.last_drill_at = int(drills), int(passed), last
    return f


def recent_replays(store: RunStore, limit: int) -> list[dict[str, Any]]:
    """The latest replay facts, newest first."""
    cur = store.conn.execute(
        "SELECT id, created_at, original_run, replay_run, backend, status, verdict, reason,"
        " duration_s, comparison_id FROM replays ORDER BY id DESC LIMIT ?",
        (limit,),
    )
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def recent_drills(store: RunStore, limit: int) -> list[dict[str, Any]]:
    """The latest drills, newest first, each with its body decoded."""
    out = []
    for did, created, passed, body in store.conn.execute(
        "SELECT id, created_at, passed, body FROM drills ORDER BY id DESC LIMIT ?", (limit,)
    ).fetchall():
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = {}
        out.append({"id": did, "created_at": created, "passed": bool(passed), "body": decoded})
    return out


WITHOUT_IMAGE = "(image_ref IS NULL AND image_digest IS NULL)"
"""A run recorded without an image (no ``record --image``): a backend that runs only a
pinned image (docker, podman, apptainer, slurm) cannot replay it.  The one rule by which
a drill on such a backend leaves it out (:func:`drill_candidates`) and ``stats`` counts
it (:attr:`SliFacts.succeeded_without_image`): never a failed reproduction."""

_DRILLABLE = "kind = 'original' AND status = 'succeeded'"


def drill_candidates(
    store: RunStore, since: str | None, *, pinned: bool = False
) -> list[tuple[Any, ...]]:
    """(id, name, started_at, last_verdict, last_verdict_at) of original runs that
    succeeded, started at or after ``since``, oldest first; with ``pinned`` (the backend
    runs only a pinned image) not those recorded without an image (:data:`WITHOUT_IMAGE`)."""
    sql = f"SELECT id, name, started_at, last_verdict, last_verdict_at FROM runs WHERE {_DRILLABLE}"
    params: list[Any] = []
    if pinned:
        sql += f" AND NOT {WITHOUT_IMAGE}"
    if since is not None:
        sql += " AND started_at >= ?"
        params.append(since)
    return [tuple(r) for r in store.conn.execute(sql + " ORDER BY started_at, id", params)]


def succeeded_without_image(store: RunStore, since: str | None = None) -> tuple[int, int]:
    """(succeeded original runs, how many of them were recorded without an image), started
    at or after ``since``: the runs a drill draws from, and those a pinned one leaves out."""
    sql = f"SELECT count(*), coalesce(sum({WITHOUT_IMAGE}), 0) FROM runs WHERE {_DRILLABLE}"
    params: list[Any] = []
    if since is not None:
        sql += " AND started_at >= ?"
        params.append(since)
    total, without = store.conn.execute(sql, params).fetchone()
    return int(total), int(without)


def bisect_bad_run(store: RunStore, bisect_id: int) -> str | None:
    """BAD of bisect ``bisect_id`` (its body is read through ``RunStore.bisects_of``,
    which checks it), or None when the store holds no such bisect."""
    row = store.conn.execute("SELECT bad_run FROM bisects WHERE id = ?", (bisect_id,)).fetchone()
    return None if row is None else str(row[0])


def has_manifest(store: RunStore, run_id: str) -> bool:
    row = store.conn.execute("SELECT 1 FROM manifests WHERE run_id = ?", (run_id,)).fetchone()
    return row is not None


def comparison_runs(store: RunStore, cid: int) -> tuple[str, str]:
    """(A, B) of comparison ``cid``."""
    row = store.conn.execute("SELECT a_run, b_run FROM comparisons WHERE id = ?", (cid,)).fetchone()
    if row is None:
        raise StoreError(f"no comparison {cid}")
    return str(row[0]), str(row[1])


# -- the runs browser: replays under their originals, sorts the store has no index for --

VIEW_ORDERS = ("gaps", "severity")
"""Orders of :func:`list_runs_view` beyond the columns of ``RunQuery.order``: ``gaps``
(critical, then warning, then info gaps) and ``severity`` (the verdict badge, ranked by
the caller)."""

# A replay whose original is in the store is shown under that original, not on its own.
_TOP_LEVEL = (
    "(runs.kind != 'replay' OR runs.replay_of IS NULL"
    " OR NOT EXISTS (SELECT 1 FROM runs o WHERE o.id = runs.replay_of))"
)


def _view_where(
    store: RunStore,
    q: RunQuery,
    *,
    top_level: bool,
    reach: SearchReach | None = None,
    page: bool = False,
) -> tuple[str, list[Any]]:
    """``store._where`` (``page``: for a page read along the sort index), replays under
    their originals left out when ``top_level``, except those whose id the search names
    (:attr:`SearchReach.ids`): a run looked up by its id is a row of its own."""
    where, params = store._where(q, reach, page=page)
    if top_level:
        top, top_params = _top_level(q, reach)
        where = f"{where} AND {top}" if where else f" WHERE {top}"
        params = [*params, *top_params]
    return where, params


def _top_level(q: RunQuery, reach: SearchReach | None) -> tuple[str, list[Any]]:
    """The rows of the grouped list: :data:`_TOP_LEVEL`, and the runs the search names
    by id (``reach.ids``, when ``reach`` is ``q``'s)."""
    ids = reach.ids if reach is not None and q.search and reach.search == q.search else None
    if ids is None:
        return _TOP_LEVEL, []
    return f"({_TOP_LEVEL} OR {ID_PART_SQL})", id_part(ids)


def list_runs_view(
    store: RunStore,
    q: RunQuery,
    *,
    order: str | None = None,
    rank: Mapping[str, int] | None = None,
    unranked: int = -1,
    top_level: bool = False,
    reach: SearchReach | None = None,
) -> list[RunRecord]:
    """A page of the runs browser: ``q``'s filters and paging, sorted by ``q.order``, or
    by ``order`` (one of :data:`VIEW_ORDERS`; ``severity`` ranks each verdict by
    ``rank``, a run with no verdict as ``unranked``: below all by default), in
    ``q.descending`` direction, ties by id.  ``top_level``: leave out replays whose
    original is in the store (they are shown under it: :func:`replays_of_runs`).
    ``reach``: ``q``'s search's, when the caller has read it (``RunStore.search_reach``)."""
    direction = "DESC" if q.descending else "ASC"
    reach = store.reach_of(q, reach)
    if order is None:
        if not top_level:
            return store.list_runs(q, reach)
        where, params = _view_where(store, q, top_level=True, reach=reach, page=True)
        hint = " INDEXED BY runs_started" if reach.common and q.order == "started_at" else ""
        sql = (
            f'SELECT {RUN_SELECT} FROM runs{hint}{where} ORDER BY "{q.order}" {direction},'
            f" id {direction} LIMIT ? OFFSET ?"
        )
        rows = store.conn.execute(sql, [*params, max(0, q.limit), max(0, q.offset)])
        return [RunRecord.from_row(r) for r in rows.fetchall()]
    by_params: list[Any] = []
    if order == "gaps":
        by = f"gaps_critical {direction}, gaps_warning {direction}, gaps_info {direction}"
    elif order == "severity":
        ranks = dict(rank or {})
        whens = " ".join("WHEN ? THEN ?" for _ in ranks)
        by_params = [v for item in ranks.items() for v in item]
        by = f"CASE last_verdict {whens} ELSE {int(unranked)} END {direction}" if ranks else "1"
    else:
        raise StoreError(f"cannot sort by {order!r}")
    where, params = _view_where(store, q, top_level=top_level, reach=reach)
    # No index serves these orders: sort the narrow keys of every match first, then read
    # the whole rows of one page (reading every whole row into the sorter is 4x slower).
    sql = (
        f"SELECT {RUN_SELECT} FROM runs WHERE rowid IN (SELECT runs.rowid FROM runs{where}"
        f" ORDER BY {by}, id {direction} LIMIT ? OFFSET ?) ORDER BY {by}, id {direction}"
    )
    args = [*params, *by_params, max(0, q.limit), max(0, q.offset), *by_params]
    return [RunRecord.from_row(r) for r in store.conn.execute(sql, args).fetchall()]


def count_runs_view(store: RunStore, q: RunQuery, *, top_level: bool = False) -> int:
    """How many rows :func:`list_runs_view` has for ``q`` (all pages)."""
    return count_runs_view_and_all(store, q, top_level=top_level)[0]


def count_runs_view_and_all(
    store: RunStore, q: RunQuery, *, top_level: bool = False, reach: SearchReach | None = None
) -> tuple[int, int]:
    """How many rows :func:`list_runs_view` has for ``q``, and how many runs match ``q``
    in all (the replays folded under their originals included).  ``reach``: ``q``'s
    search's, when the caller has read it (for the page it shows): not counted again."""
    reach = store.reach_of(q, reach)
    total = store.count_runs(q, reach)
    if not top_level:
        return total, total
    # the replays shown under their originals, counted through the kind index
    where, params = store._where(q, reach)
    folded = "kind = 'replay' AND replay_of IN (SELECT id FROM runs)"
    if reach.ids:  # a replay the search names by id is a row of its own (_top_level)
        folded += f" AND NOT {ID_PART_SQL}"
        params = [*params, *id_part(reach.ids)]
    if where:
        folded = f"{where[len(' WHERE ') :]} AND {folded}"
    sql = f"SELECT count(*) FROM runs WHERE {folded}"
    return total - int(store.conn.execute(sql, params).fetchone()[0]), total


def replays_of_runs(store: RunStore, run_ids: list[str], limit: int = 500) -> list[RunRecord]:
    """The replay runs of each of ``run_ids``, grouped by original in the order given,
    oldest first within each (at most ``limit`` per original)."""
    out: list[RunRecord] = []
    for rid in dict.fromkeys(run_ids):
        rows = store.conn.execute(
            f"SELECT {RUN_SELECT} FROM runs WHERE replay_of = ? AND kind = 'replay'"
            " ORDER BY started_at, id LIMIT ?",
            (rid, limit),
        ).fetchall()
        out += [RunRecord.from_row(r) for r in rows]
    return out


def tags_of_runs(store: RunStore, run_ids: list[str]) -> dict[str, dict[str, str]]:
    """Each run's tags as its manifest holds them (``KEY -> VALUE``; the runs table keeps
    only a search text of them), for ``runs --json``.  A run without a stored manifest
    is left out."""
    out: dict[str, dict[str, str]] = {}
    ids = list(dict.fromkeys(run_ids))
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        rows = store.conn.execute(
            "SELECT run_id, json_extract(body, '$.tags') FROM manifests"
            f" WHERE run_id IN ({','.join('?' * len(chunk))})",
            chunk,
        ).fetchall()
        for run_id, tags in rows:
            value = json.loads(tags) if tags else {}
            if not isinstance(value, dict):
                value = {}
            out[run_id] = {str(k): str(v) for k, v in value.items()}
    return out

"""The derived tables, checked against the ledger and the stored facts.

The ledger chains every fact (manifests, blobs, comparisons, replays...), but the tables
that summarise them for fast listing (``runs``, ``artifacts``, ``metrics``, ``locations``)
are plain rows.  Each one is either rebuilt here from what the ledger covers and
compared, or covered by the ledger itself:

- ``runs`` columns that come from the manifest, and every ``artifacts`` and ``metrics``
  row, are rebuilt from the stored manifest (whose hash the ledger names);
- the values set after ingest (gap counts, where a run's files live, the verdict badge)
  each get a *state event* in the ledger when they are written: ``state:gaps``,
  ``state:locations``, ``state:verdict``, whose subject is the hash of the value.  The
  latest state event of a run must name what the row holds;
- ``signed`` must be 1 exactly when a signed bundle fact exists for the run;
- a replay fact must name a stored replay run of its original and a stored comparison;
- the set of triggers must be exactly what the migrations create, name and SQL.

Runs stored before state events existed have none: for them the badge must at least be
the verdict of some replay or comparison fact of the run.  What no check can catch is a
consistent forgery appended *after* the last head noted elsewhere; that is why every
drill report and every bundle carries the ledger head (``verify-store --anchor``).

A run's origin (``local``: recorded or replayed on this host; else how it came in:
``ingest``, ``import:mlflow``) is bound where no single deletion removes it: in its row
(``runs.origin``) and in the kind of the ledger event that records its manifest
(``ingest:<origin>``, subject the manifest's hash).  A foreign run also gets an
``origin:<how>`` event at the end of its ingest.  Only positive proof makes a run local
(:func:`origin_of`): its row says ``local`` and exactly one ``ingest:local`` event of the
run names its manifest, intact where it stands (its own hash and its links to the events
either side).  Anything missing, edited or inconsistent reads as foreign or
:data:`UNPROVEN`, and the local backend asks before running either.  So cutting the
ledger's tail (which only ``--anchor`` can see) never turns a foreign run local: that
takes a forged ``ingest:local`` event *and* a matching row, a consistent forgery that
``verify-store --anchor`` catches.  Manifest fields (host, user) are forgeable and are
not read.  Runs stored before origins were bound got their ``ingest:<origin>`` event
from migration ``m005_run_origin``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from storage import ledger
from storage.ledger import INGEST_PREFIX as INGEST_PREFIX
from storage.ledger import LOCAL as LOCAL
from storage.ledger import UNPROVEN as UNPROVEN
from storage.ledger import state_event as state_event
from storage.ledger import state_subject as state_subject

ORIGIN_PREFIX = "origin:"
_ORIGIN = re.compile(r"[a-z][a-z0-9_-]{0,31}(:[A-Za-z0-9_.-]{1,64})?")
MAX_PROBLEMS = 200


def check_origin(origin: str) -> str:
    """``origin`` if it is ``local`` or a well-formed ``how[:detail]``; ValueError if not
    (``unproven`` is what the store says of a run, never how one comes in)."""
    if origin == UNPROVEN:
        raise ValueError(f"origin {UNPROVEN!r} is reserved: it is not how a run comes in")
    if origin != LOCAL and not _ORIGIN.fullmatch(origin):
        raise ValueError(f"origin {origin!r} is not 'local' or 'how[:detail]'")
    return origin


def gaps_value(critical: int | None, warning: int | None, info: int | None) -> list[Any]:
    return [critical, warning, info]


def locations_value(rows: Iterable[Sequence[str]]) -> list[list[str]]:
    return sorted([str(r[0]), str(r[1]), str(r[2])] for r in rows)


def ingest_events(
    run_id: str,
    gaps: Any,
    locations: Iterable[Any],
    origin: str,
) -> list[tuple[str, str, str]]:
    """The events that go with one ingest, after its ``ingest`` event (none for a bare
    manifest from this host: no gap counts, no locations)."""
    out = []
    if gaps is not None:
        value = gaps_value(gaps.critical, gaps.warning, gaps.info)
        out.append(state_event("gaps", run_id, value))
    locs = locations_value((loc.role, loc.name, loc.host_path) for loc in locations)
    if locs:
        out.append(state_event("locations", run_id, locs))
    if origin != LOCAL:
        out.append((ORIGIN_PREFIX + origin, run_id, state_subject("origin", run_id, origin)))
    return out


@dataclass(frozen=True)
class Origin:
    """What the store can prove about where a run came from."""

    origin: str  # LOCAL (proven), how a foreign run came in, or UNPROVEN
    why: str | None = None  # why it is UNPROVEN

    @property
    def local(self) -> bool:
        return self.origin == LOCAL


def origin_of(conn: sqlite3.Connection, run_id: str) -> Origin:
    """Where ``run_id`` came from, local only on positive proof: its row says ``local``
    and exactly one ``ingest:local`` event of this run names the row's manifest, intact
    where it stands.  A foreign claim anywhere (row or ledger) wins; anything else
    missing or inconsistent is ``UNPROVEN`` with the reason.  Two indexed lookups and
    the event's neighbours: no walk of the ledger."""
    row = conn.execute(
        "SELECT origin, manifest_sha256 FROM runs WHERE id = ?", (run_id,)
    ).fetchone()
    if row is None:
        return Origin(UNPROVEN, "the store has no row for it")
    have, sha = row
    stated = [
        e
        for e in conn.execute(
            "SELECT seq, ts, kind, run_id, subject_sha256, prev_hash, hash FROM events"
            " WHERE subject_sha256 = ? ORDER BY seq",
            (sha,),
        )
        if str(e[2]).startswith(INGEST_PREFIX)
    ]
    claims = [have, *(str(e[2])[len(INGEST_PREFIX) :] for e in stated)]
    for claim in claims:
        if claim not in (None, LOCAL, UNPROVEN) and _ORIGIN.fullmatch(str(claim)):
            return Origin(str(claim))
    if have is None:
        return Origin(UNPROVEN, "its row in the store records no origin")
    if have not in (LOCAL, UNPROVEN):
        return Origin(UNPROVEN, "its row in the store holds a malformed origin")
    if have == UNPROVEN:
        return Origin(
            UNPROVEN,
            "it was stored before origins were bound, where the ledger could not show that"
            " it was recorded on this host",
        )
    if not stated:
        return Origin(UNPROVEN, "no ledger event records its manifest with its origin")
    if len(stated) > 1 or stated[0][3] != run_id or claims[1] != LOCAL:
        return Origin(UNPROVEN, "the ledger's record of its manifest disagrees with its row")
    if not _intact(conn, stated[0]):
        return Origin(UNPROVEN, "the ledger event that records its manifest was altered")
    return Origin(LOCAL)


def _intact(conn: sqlite3.Connection, event: Sequence[Any]) -> bool:
    """``event`` hashes to its hash and links to the events either side of it."""
    seq, ts, kind, run_id, subject, prev, h = event
    if ledger.event_hash(seq, ts, kind, run_id, subject, prev) != h:
        return False
    before = conn.execute("SELECT hash FROM events WHERE seq = ?", (seq - 1,)).fetchone()
    if (before[0] if before else ledger.GENESIS if seq == 1 else None) != prev:
        return False
    after = conn.execute(
        "SELECT seq, prev_hash FROM events WHERE seq > ? ORDER BY seq LIMIT 1", (seq,)
    ).fetchone()
    return after is None or (after[0] == seq + 1 and after[1] == h)


FACT_KINDS = {
    "comparisons": ("comparison", "comparison"),
    "replays": ("replay", "replay"),
    "noise_floors": ("noise_floor", "noise floor"),
    "drills": ("drill", "drill"),
    "bundles": ("bundle", "bundle"),
    "bisects": ("bisect", "bisect"),
}
"""Fact table -> (the kind of the ledger event that records a row, the row's name in words)."""


def recorded(
    conn: sqlite3.Connection, kinds: Iterable[str], run_id: str | None, subject: str
) -> bool:
    """Whether an intact ledger event of one of ``kinds`` (an ``ingest:`` kind matches by
    its prefix) for ``run_id`` names ``subject``: the check a fact passes when it is read
    to judge or to export, whatever the triggers say.  One indexed lookup and the
    event's neighbours: no walk of the ledger."""
    wanted = tuple(kinds)
    for event in conn.execute(
        "SELECT seq, ts, kind, run_id, subject_sha256, prev_hash, hash FROM events"
        " WHERE subject_sha256 = ?",
        (subject,),
    ):
        kind = str(event[2])
        if event[3] != run_id:
            continue
        named = kind in wanted or (INGEST_PREFIX in wanted and kind.startswith(INGEST_PREFIX))
        if named and _intact(conn, event):
            return True
    return False


JUDGED_BY_A_RECORDED_FLOOR = (
    # only a floor's verdicts can name one: the others skip the body's JSON (the runs page)
    "(r.comparison_id IS NULL OR coalesce(r.verdict, '') NOT IN ('WITHIN_NOISE', 'DIVERGED')"
    " OR NOT EXISTS (SELECT 1 FROM comparisons c WHERE c.id = r.comparison_id"
    " AND json_extract(c.body, '$.floor.fact_id') IS NOT NULL AND NOT EXISTS ("
    "SELECT 1 FROM noise_floors nf JOIN events e ON e.subject_sha256 = nf.body_sha256"
    " AND e.kind = 'noise_floor' WHERE nf.id = json_extract(c.body, '$.floor.fact_id')"
    " AND nf.body_sha256 = coalesce(json_extract(c.body, '$.floor.body_sha256'),"
    " nf.body_sha256))))"
)
"""SQL over a replay fact ``r``: its comparison, if a noise floor judged it, names a floor
that a ``noise_floor`` event records with the body hash the comparison kept.  A replay
judged by a floor widened and put back fails it and is not counted (the runs list,
``stats``); :func:`judging_floor_problem` is the whole check, for ``verify-store``."""


def judging_floor_problem(conn: sqlite3.Connection, body: Any) -> str | None:
    """What is wrong with the noise floor a comparison body says judged it, or None (no
    floor, or the floor it names is stored as the ledger recorded it, with the body hash
    the comparison kept).  A comparison made from a floor that was widened and put back
    names a hash no floor event records."""
    ref = body.get("floor") if isinstance(body, dict) else None
    if not isinstance(ref, dict) or "fact_id" not in ref:
        return None
    fid = ref.get("fact_id")
    row = conn.execute(
        "SELECT run_id, body, body_sha256 FROM noise_floors WHERE id = ?",
        (fid if isinstance(fid, int) else -1,),
    ).fetchone()
    if row is None:
        return f"noise floor #{fid}, which is not stored"
    run_id, text, sha = row
    kept = ref.get("body_sha256")
    if kept is not None and kept != sha:
        return f"noise floor #{fid} as it was then, which the ledger never recorded"
    if hashlib.sha256(str(text).encode("utf-8")).hexdigest() != sha or not recorded(
        conn, ("noise_floor",), run_id, sha
    ):
        return f"noise floor #{fid}, which was altered"
    return None


def run_origin(conn: sqlite3.Connection, run_id: str) -> str:
    """``local`` (proven, see :func:`origin_of`), how the run came in (``ingest``,
    ``import:mlflow``), or ``unproven``: anything but ``local`` is foreign to the host."""
    return origin_of(conn, run_id).origin


def foreign_runs(conn: sqlite3.Connection) -> dict[str, str]:
    """Every run that its row or its ledger events do not call local, with its origin
    (for SLIs and listings; :func:`origin_of` is the proof for one run)."""
    out: dict[str, str] = {}
    for rid, kind in conn.execute(
        "SELECT run_id, kind FROM events WHERE substr(kind, 1, 7) IN ('ingest:', 'origin:')"
        " ORDER BY seq"
    ):
        origin = str(kind).partition(":")[2]
        if origin != LOCAL and rid is not None:
            out.setdefault(str(rid), origin)
    for rid, origin in conn.execute(
        "SELECT id, origin FROM runs WHERE origin IS NULL OR origin != 'local'"
    ):
        out.setdefault(str(rid), str(origin or UNPROVEN))
    return out


def expected_triggers() -> dict[str, str]:
    """Name -> normalised SQL of every trigger the migrations create (on a fresh store)."""
    from storage import migrations

    mem = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrations.apply(migrations.database(mem))
        return {
            n: _norm(s)
            for n, s in mem.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        }
    finally:
        mem.close()


def _norm(sql: str | None) -> str:
    return " ".join((sql or "").split()).rstrip(";")


def _latest(conn: sqlite3.Connection, kind: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for run_id, subject in conn.execute(
        "SELECT run_id, subject_sha256 FROM events WHERE kind = ? ORDER BY seq", (kind,)
    ):
        out[run_id] = subject
    return out


def check(conn: sqlite3.Connection) -> list[str]:
    """Every way the derived tables disagree with the ledger and the facts (inside the
    caller's read transaction)."""
    problems: list[str] = []
    add = problems.append
    _check_triggers(conn, add)
    rows = {
        r[0]: dict(
            zip(
                (
                    "id",
                    *_FROM_MANIFEST,
                    "manifest_sha256",
                    "gc",
                    "gw",
                    "gi",
                    "lv",
                    "signed",
                    "origin",
                ),
                r,
                strict=True,
            )
        )
        for r in conn.execute(
            "SELECT id, "
            + ", ".join(f'"{c}"' for c in _FROM_MANIFEST)
            + ", manifest_sha256, gaps_critical, gaps_warning, gaps_info, last_verdict, signed,"
            " origin FROM runs"
        )
    }
    artifacts: dict[str, set[tuple[Any, ...]]] = {}
    for r in conn.execute(
        "SELECT run_id, path, sha256, size_bytes, kind, tensor_sha256 FROM artifacts"
    ):
        artifacts.setdefault(r[0], set()).add(tuple(r[1:]))
    metrics: dict[str, dict[str, tuple[Any, str | None]]] = {}
    for r in conn.execute("SELECT run_id, name, final, history FROM metrics"):
        metrics.setdefault(r[0], {})[r[1]] = (r[2], r[3])
    seen: set[str] = set()
    for sha, run_id, body in conn.execute("SELECT sha256, run_id, body FROM manifests"):
        if len(problems) >= MAX_PROBLEMS:
            break
        seen.add(run_id)
        row = rows.get(run_id)
        if row is None:
            add(f"run {run_id}: its runs row was deleted (the manifest is stored)")
            continue
        try:
            data = json.loads(body)
            want = row_from_data(data)
        except Exception:
            continue  # the manifest check reports a body that does not parse
        for col in _FROM_MANIFEST:
            if row[col] != want[col]:
                add(f"run {run_id}: runs.{col} was edited (it does not match the manifest)")
                break
        if row["manifest_sha256"] != sha:
            add(f"run {run_id}: runs.manifest_sha256 was edited")
        outputs = data.get("outputs") or {}
        a_want = {
            (
                a.get("path"),
                a.get("sha256"),
                a.get("size_bytes"),
                a.get("kind", "file"),
                a.get("tensor_sha256"),
            )
            for a in outputs.get("artifacts") or []
        }
        if artifacts.get(run_id, set()) != a_want:
            add(f"run {run_id}: its artifacts rows do not match the manifest (edited)")
        if not _metrics_match(metrics.get(run_id, {}), outputs):
            add(f"run {run_id}: its metrics rows do not match the manifest (edited)")
    for run_id in sorted(set(rows) - seen)[:20]:
        add(f"run {run_id}: a runs row with no stored manifest")
    for run_id in sorted((set(artifacts) | set(metrics)) - seen)[:20]:
        add(f"run {run_id}: artifacts or metrics rows with no stored manifest")
    _check_state(conn, rows, add)
    _check_origins(conn, rows, add)
    _check_facts(conn, rows, add)
    return problems[:MAX_PROBLEMS]


def row_from_data(d: dict[str, Any]) -> dict[str, Any]:
    """The manifest columns of ``records.run_row``, from the stored JSON (no validation:
    the stored body is this tool's own canonical JSON, checked by its hash)."""
    code = d.get("code") or {}
    image = d.get("image") or None
    dirty = code.get("dirty")
    return {
        "name": d.get("name", ""),
        "kind": d.get("kind", "original"),
        "replay_of": d.get("replay_of"),
        "status": d.get("status"),
        "exit_code": d.get("exit_code"),
        "started_at": d.get("started_at"),
        "ended_at": d.get("ended_at"),
        "duration_s": d.get("duration_s"),
        "commit": code.get("commit"),
        "branch": code.get("branch"),
        "dirty": None if dirty is None else int(dirty),
        "repo_url": code.get("repo_url"),
        "image_ref": image.get("reference") if image else None,
        "image_digest": image.get("digest") if image else None,
        "config_hash": d.get("config_hash"),
        "command": " ".join(d.get("argv") or [])[:4096],
        "tags": " ".join(f"{k}={v}" for k, v in sorted((d.get("tags") or {}).items())),
    }


_FROM_MANIFEST = tuple(row_from_data({}))
"""The runs columns rebuilt from the manifest (the rest are state or bookkeeping)."""


def _metrics_match(have: dict[str, tuple[Any, str | None]], outputs: dict[str, Any]) -> bool:
    """Rows equal the manifest's metrics by value (canonical JSON writes 1.0 as 1, -0.0
    as 0: numbers are compared, not their text)."""
    finals = outputs.get("metrics") or {}
    history = outputs.get("metric_history") or {}
    if set(have) != set(finals) | set(history):
        return False
    for name, (final, text) in have.items():
        if final != finals.get(name):
            return False
        try:
            points = json.loads(text) if text is not None else []
        except ValueError:
            return False
        if points != history.get(name, []):
            return False
    return True


def _check_triggers(conn: sqlite3.Connection, add: Any) -> None:
    want = expected_triggers()
    have = {
        n: _norm(s)
        for n, s in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
    }
    for name in sorted(set(want) - set(have)):
        add(f"trigger {name} was dropped")
    for name in sorted(set(have) - set(want)):
        add(f"trigger {name} is not one the migrations create (added)")
    for name in sorted(set(want) & set(have)):
        if want[name] != have[name]:
            add(f"trigger {name} was replaced: its SQL is not what the migrations create")


def _check_state(conn: sqlite3.Connection, rows: dict[str, dict[str, Any]], add: Any) -> None:
    gaps = _latest(conn, "state:gaps")
    locs = _latest(conn, "state:locations")
    verdicts = _latest(conn, "state:verdict")
    loc_rows: dict[str, list[tuple[str, str, str]]] = {}
    for run_id, role, name, path in conn.execute(
        "SELECT run_id, role, name, host_path FROM locations"
    ):
        loc_rows.setdefault(run_id, []).append((role, name, path))
    for run_id, row in rows.items():
        if run_id in gaps:
            value = gaps_value(row["gc"], row["gw"], row["gi"])
            if state_subject("gaps", run_id, value) != gaps[run_id]:
                add(f"run {run_id}: its gap counts were edited (the ledger says otherwise)")
        if run_id in locs:
            value = locations_value(loc_rows.get(run_id, []))
            if state_subject("locations", run_id, value) != locs[run_id]:
                add(f"run {run_id}: its locations were edited (the ledger says otherwise)")
        if run_id in verdicts:
            if state_subject("verdict", run_id, row["lv"]) != verdicts[run_id]:
                add(f"run {run_id}: its verdict badge was edited (the ledger says otherwise)")
        elif row["lv"] is not None and not _verdict_backed(conn, run_id, row["lv"]):
            add(
                f"run {run_id}: its verdict badge {row['lv']} is not the verdict of any"
                " replay or comparison of it (edited)"
            )
    for run_id in sorted(set(loc_rows) - set(rows))[:20]:
        add(f"run {run_id}: locations rows with no run")


def _check_origins(conn: sqlite3.Connection, rows: dict[str, dict[str, Any]], add: Any) -> None:
    """Each run's ``runs.origin`` is what the one ``ingest:<origin>`` event naming its
    manifest says, and a foreign run has its ``origin:<how>`` event (the last event of
    its ingest: the one a cut tail takes first)."""
    stated: dict[str, list[tuple[str | None, str]]] = {}
    for sha, rid, kind in conn.execute(
        "SELECT subject_sha256, run_id, kind FROM events WHERE substr(kind, 1, 7) = 'ingest:'"
    ):
        stated.setdefault(sha, []).append((rid, str(kind)[len(INGEST_PREFIX) :]))
    told: dict[str, set[str]] = {}
    for rid, kind in conn.execute(
        "SELECT run_id, kind FROM events WHERE substr(kind, 1, 7) = 'origin:'"
    ):
        told.setdefault(rid, set()).add(str(kind)[len(ORIGIN_PREFIX) :])
    for run_id, row in rows.items():
        have = row["origin"]
        events = stated.get(row["manifest_sha256"], [])
        if not events:
            add(
                f"run {run_id}: no ledger event records its manifest with its origin"
                " (deleted): its origin cannot be proven"
            )
            continue
        if len(events) > 1 or events[0][0] != run_id:
            add(f"run {run_id}: the ledger records its manifest more than once (forged)")
            continue
        origin = events[0][1]
        extra = told.get(run_id, set())
        if have != origin:
            add(
                f"run {run_id}: runs.origin was edited (the row says {_shown(have)},"
                f" the ledger says {_shown(origin)})"
            )
        elif origin in (LOCAL, UNPROVEN):
            if extra:
                add(
                    f"run {run_id}: the ledger records it as {origin} but also has an"
                    f" origin:{_shown(sorted(extra)[0])} event for it (forged)"
                )
        elif origin not in extra:
            add(
                f"run {run_id}: its origin:{_shown(origin)} event is missing from the ledger"
                f" (deleted; the run came in through {_shown(origin)})"
            )


def _shown(origin: str | None) -> str:
    """An origin as a problem shows it: as stored if well-formed, else quoted (escaped)."""
    if origin in (LOCAL, UNPROVEN) or (origin is not None and _ORIGIN.fullmatch(origin)):
        return str(origin)
    return repr(origin)


def _verdict_backed(conn: sqlite3.Connection, run_id: str, verdict: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM replays WHERE original_run = ? AND verdict = ?"
            " UNION ALL SELECT 1 FROM comparisons WHERE (a_run = ? OR b_run = ?) AND verdict = ?"
            " LIMIT 1",
            (run_id, verdict, run_id, run_id, verdict),
        ).fetchone()
        is not None
    )


def _check_facts(conn: sqlite3.Connection, rows: dict[str, dict[str, Any]], add: Any) -> None:
    signed = {r for (r,) in conn.execute("SELECT DISTINCT run_id FROM bundles WHERE signed = 1")}
    for run_id, row in rows.items():
        if bool(row["signed"]) != (run_id in signed):
            add(f"run {run_id}: runs.signed was edited (no signed bundle fact says so)")
    comparisons = {
        cid: (a, b, v)
        for cid, a, b, v in conn.execute("SELECT id, a_run, b_run, verdict FROM comparisons")
    }
    for fid, original, replay_run, cid in conn.execute(
        "SELECT id, original_run, replay_run, comparison_id FROM replays"
    ):
        if original not in rows:
            add(f"replays #{fid}: its original run {original} is not stored")
            continue
        if replay_run is None:
            continue
        if replay_run not in rows:
            add(f"replays #{fid}: its replay run {replay_run} is not stored")
        if cid is not None:
            c = comparisons.get(cid)
            if c is None or c[0] != original or c[1] != replay_run:
                add(f"replays #{fid}: comparison #{cid} does not compare these two runs")
    for cid, (a, b, _) in comparisons.items():
        if a not in rows or b not in rows:
            add(f"comparisons #{cid}: it names a run that is not stored")
    for cid, verdict, body in conn.execute(
        "SELECT id, verdict, body FROM comparisons WHERE json_valid(body)"
        " AND json_extract(body, '$.floor.fact_id') IS NOT NULL"
    ):
        why = judging_floor_problem(conn, json.loads(body))
        if why is not None:
            add(
                f"comparisons #{cid}: its {verdict} was judged by {why}: it is not counted"
                " (runs list, stats)"
            )


def ledger_head(conn: sqlite3.Connection) -> str | None:
    """``SEQ:HASH`` of the last ledger event: what ``verify-store --anchor`` takes."""
    row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    return f"{row[0]}:{row[1]}" if row else None

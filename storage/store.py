"""RunStore: manifests and everything learnt about them, in one SQLite file.

Writes take SQLite's write lock up front (``BEGIN IMMEDIATE``) so that the ledger's
"previous hash" is read and extended under the same lock, and each call is one
transaction: a crash or kill mid-write leaves the store as it was before the call.

Why one module of about 1,100 lines: it is one class, and every write in it follows the
one rule above (one connection, ``BEGIN IMMEDIATE``, the fact and its ledger event in the
same transaction, checked on read by ``check_fact``).  Split into mixins, that rule would
be spread over files that each look complete alone.  Reads that need no write lock live
apart: the screens' and reports' queries in ``storage/readmodel.py``, the integrity
checks in ``storage/integrity.py``, the schema's steps in ``storage/migrations.py``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from storage import integrity, ledger, migrations, vocabulary
from storage.canonical import dumps as canonical_json
from storage.records import (
    REPLAY_SELECT,
    RUN_SELECT,
    GapCounts,
    ReplayFact,
    RunRecord,
    history_json,
    run_row,
)

if TYPE_CHECKING:  # pydantic is imported by whoever builds a manifest, not by opening a store
    from storage.manifest import RunManifest

BUSY_TIMEOUT_S = 60.0
COMMON_MATCHES = 1000  # a search matching this many runs pages from the sort index
ROWS_PER_INSERT = 500  # rows per multi-row INSERT statement (_insert_many_rows)
INGEST_CACHE_KIB = 128 * 1024  # page cache while a large batch goes in (_ingest_cache)
LARGE_BATCH = 64  # manifests from which ingest_many takes the bulk measures below
Order = Literal["started_at", "name", "duration_s", "status", "last_verdict", "kind"]
_ORDER_COLUMNS = {"started_at", "name", "duration_s", "status", "last_verdict", "kind"}


class StoreError(Exception):
    """A request the store refuses (bad reference, conflicting manifest...)."""


class RunNotFound(StoreError):
    pass


class AmbiguousRun(StoreError):
    def __init__(self, prefix: str, candidates: list[str]) -> None:
        self.candidates = candidates
        shown = ", ".join(candidates[:10]) + (" ..." if len(candidates) > 10 else "")
        super().__init__(f"run prefix {prefix!r} is ambiguous; it matches: {shown}")


class ConflictError(StoreError):
    pass


class StoreAltered(StoreError):
    """A stored fact no longer matches the ledger event that recorded it: it was edited
    behind the store's back (the triggers dropped and restored, say).  Whatever reads it
    to judge or to export refuses (exit 1); ``verify-store`` says what changed."""

    exit_code = 1


@dataclass(frozen=True)
class IngestResult:
    run_id: str
    manifest_sha256: str
    created: bool


@dataclass(frozen=True)
class Location:
    role: Literal["repo", "data", "workdir", "output"]
    name: str
    host_path: str


@dataclass
class VerifyReport:
    events: int = 0
    manifests: int = 0
    blobs: int = 0
    facts: int = 0
    head: str | None = None  # "SEQ:HASH" of the last event: note it down to anchor the chain
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class RunQuery:
    """What the runs browser asks for; every filter is optional."""

    search: str | None = None
    kind: str | None = None
    verdict: str | None = None
    has_critical: bool = False
    replay_of: str | None = None
    order: Order = "started_at"
    descending: bool = True
    limit: int = 100
    offset: int = 0


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fts_query(text: str) -> str | None:
    """User text to a safe FTS5 query: every word must match, each as a prefix."""
    words = re.findall(r"\w+", text)
    if not words:
        return None
    return " ".join(f'"{w}"*' for w in words[:32])


_ID_PREFIX = re.compile(r"[0-9A-Za-z_-]{4,64}")


def id_prefix(text: str | None) -> str | None:
    """``text`` as a run id or a part of one (what tickets and bundles quote, and the
    part a person remembers: at least 4 characters of a run id's alphabet), else None."""
    text = (text or "").strip()
    return text if _ID_PREFIX.fullmatch(text) else None


ID_PART_SQL = "runs.rowid IN (SELECT rowid FROM runs_ids WHERE runs_ids MATCH ?)"
"""The runs whose id holds the search text anywhere (:func:`id_part`), from the trigram
index of ids (``migrations.m006_run_id_trigrams``).  Ids are time-ordered, so every run
of a day starts alike: the part a person remembers is in the middle."""


def id_part(text: str) -> list[str]:
    """The parameters of :data:`ID_PART_SQL` for ``text`` (:func:`id_prefix`'s alphabet,
    so one quoted phrase; the trigram tokenizer matches case-insensitively)."""
    return ['"' + text.replace('"', "") + '"']


@dataclass(frozen=True)
class SearchReach:
    """What a query's search filters.  ``fts``: the FTS5 query, or None when there is
    no search or it matches every run (a one-letter prefix often does: ``s`` of every
    image's ``sha256``), so that it filters nothing and costs nothing; building the set
    of 100,000 matches to probe costs 25-30 ms, four times the page.  ``common``: it
    matches at least ``COMMON_MATCHES`` runs, so a page comes faster from walking the
    sort index and probing the match set than from sorting every match.  ``matches``:
    how many runs it matches (None without a search).  ``search``: the search text it
    was read for (a reach passed along with another query's is read again).  ``ids``:
    the search text when it is part of some run's id (:func:`id_prefix`): those runs
    match too, whatever the full-text index says (``matches`` counts them)."""

    fts: str | None
    common: bool
    matches: int | None = None
    search: str | None = field(default=None, compare=False)
    ids: str | None = None


IngestItem = tuple[
    "RunManifest", "GapCounts | None", Sequence["Location"], Mapping[str, tuple[str, bytes]]
]
"""One manifest for ``ingest_many``: with its gap counts, locations and blobs."""


@contextmanager
def collector_paused(n: int) -> Iterator[None]:
    """Python's cyclic garbage collector off while a batch is stored (or, in the
    commands, read and validated: ``runs ingest`` reads every file before it stores).

    Validating, sealing and row building allocate many short-lived containers, and each
    time enough have been allocated the collector walks every tracked object alive, the
    batch's manifests included, though none of what a batch makes is cyclic (freed by
    reference counting).  Measured alternately, batches of 1,000: 3,000 manifests, 526-680 us per
    manifest with it on, 464-688 us paused; 10,000 manifests, 1,394 -> 1,532/s and
    1,600 -> 1,540/s.  About 5 %, within the noise at the larger size.  Reading is where
    it matters: validating 1,000 sealed manifests that are all kept took 746-788 us each
    with it on, 477-512 us paused.  It is turned back on after (unless the caller had it
    off).
    """
    if n < LARGE_BATCH or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _insert_many_rows(conn: sqlite3.Connection, insert: str, rows: list[tuple[Any, ...]]) -> None:
    """``insert`` (``INSERT INTO t (cols)``) of ``rows`` as multi-row statements.

    For ``runs``, whose insert trigger feeds the full-text index: an FTS5 table writes its
    pending terms to a new segment at every statement that opens a savepoint on it, so
    ``executemany`` (one statement per row) made a segment per run and merged them all
    again (three quarters of the insert's cost); one statement per chunk makes one.
    """
    width = len(rows[0])
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    per = max(1, min(ROWS_PER_INSERT, limit // width))
    one = "(" + ", ".join("?" * width) + ")"
    for i in range(0, len(rows), per):
        chunk = rows[i : i + per]
        conn.execute(
            f"{insert} VALUES {', '.join([one] * len(chunk))}",
            [v for row in chunk for v in row],
        )


class _Checkpointer:
    """Copies a large batch's pages from the WAL into the database file in a thread with
    its own connection, while the caller goes on (reads the next batch, seals it).

    At a commit, SQLite checkpoints once the WAL holds 1,000 pages; a batch of 1,000
    manifests writes about 5,000, so every large batch's COMMIT copied them all into the
    database file and waited for both files to reach the disk: 100-150 us a manifest of
    about 550.  The copy is the same work in this thread, but its waits for the disk no
    longer hold up ingest.  ``wait`` before the next batch's write lets that write start
    the WAL over from its beginning (it only can once every page has been copied), so
    the WAL stays about one batch long.  A checkpoint that fails leaves the pages in the
    WAL, where readers find them and a later checkpoint copies them: nothing is lost, and
    from then on the store's batches commit with SQLite's own checkpoint again (``ok``).
    ``path`` is the file SQLite opened (absolute), opened read-write only: the thread
    never creates a file, wherever the process's working folder has gone since.

    With ``synchronous=NORMAL`` a commit reaches the disk at a checkpoint: a batch is
    committed when ``ingest_many`` returns, and safe from a power cut once ``settle``
    (or ``close``) has returned, as it was once the commit's own checkpoint had run.
    """

    def __init__(self, path: str) -> None:
        self.uri = f"file:{urllib.parse.quote(path)}?mode=rw"
        self.ok = True
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.wait()
        thread = threading.Thread(target=self._run, name="store-checkpoint")
        thread.start()
        self._thread = thread

    def wait(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                busy, _, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            busy = 1
        if busy:  # the pages stay in the WAL; commits checkpoint as SQLite does again
            self.ok = False


class RunStore:
    """The run store.  One instance per thread (sqlite3 connections are per thread)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        self.conn = conn
        self._checkpointer: _Checkpointer | None = None
        main = conn.execute("PRAGMA database_list").fetchone()
        if main is not None and main[2]:  # a file, not ":memory:" or a temporary database
            self._checkpointer = _Checkpointer(str(main[2]))
        if str(path) != ":memory:":
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal":
                with self._write():
                    pass  # serialise first-open with other processes
                conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        if migrations.migrations.pending(conn):
            with self._write():
                migrations.apply(migrations.database(conn))

    def close(self) -> None:
        self.settle()
        self.conn.close()

    def settle(self) -> None:
        """Wait until the last large batch's pages are in the database file (its
        checkpoint runs in a thread after its commit; the batch itself is committed)."""
        if self._checkpointer is not None:
            self._checkpointer.wait()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    # -- writing -------------------------------------------------------------------

    def ingest(
        self,
        manifest: RunManifest,
        *,
        gaps: GapCounts | None = None,
        locations: Sequence[Location] = (),
        blobs: Mapping[str, tuple[str, bytes]] | None = None,
        origin: str = "local",
    ) -> IngestResult:
        """Store one manifest (sealing it if it is not).  Idempotent for equal content."""
        return self.ingest_many([(manifest, gaps, locations, blobs or {})], origin=origin)[0]

    def ingest_many(
        self,
        items: Sequence[IngestItem],
        *,
        origin: str = "local",
    ) -> list[IngestResult]:
        """Store several manifests in one transaction: all of them or none.

        ``origin``: ``local`` for runs recorded or replayed on this host, else how they
        came in (``ingest``, ``import:mlflow``); kept in each run's row and in the ledger
        event that records its manifest (``storage.integrity``).

        Rows go in with one ``executemany`` per table and the ledger events are chained
        in memory from the head read once under the write lock, in the same order as one
        call per manifest would write them (each manifest's new blobs, then its ingest).
        """
        with collector_paused(len(items)):
            return self._ingest_batch(items, origin)

    def _ingest_batch(self, items: Sequence[IngestItem], origin: str) -> list[IngestResult]:
        prepared = []
        try:
            integrity.check_origin(origin)
        except ValueError as e:
            raise StoreError(str(e)) from None
        for m, gaps, locs, blobs in items:
            claimed = m.integrity.manifest_sha256
            sha, body, chash = m.seal()
            if claimed is not None and claimed != sha:
                raise StoreError(f"run {m.run_id}: manifest_sha256 does not match its content")
            for blob_sha, (_, data) in blobs.items():
                if sha256_hex(data) != blob_sha:
                    raise StoreError(f"blob {blob_sha[:12]} does not match its content")
            if origin != "local" and m.kind == "replay":
                raise StoreError(
                    f"run {m.run_id} claims to be a replay (kind=replay) of {m.replay_of}:"
                    " replays are facts this host produces by running them; a replay from"
                    " elsewhere is only a claim, so it is refused (replay the original here)"
                )
            prepared.append((m, sha, body, chash, gaps, locs, blobs))
        results: list[IngestResult] = []
        now = ledger.utc_now()
        manifest_rows: list[tuple[Any, ...]] = []
        run_rows: list[tuple[Any, ...]] = []
        artifact_rows: list[tuple[Any, ...]] = []
        metric_rows: list[tuple[Any, ...]] = []
        location_rows: list[tuple[Any, ...]] = []
        blob_rows: list[tuple[Any, ...]] = []
        events: list[tuple[str, str | None, str]] = []
        run_cols: str | None = None
        with (
            self._ingest_cache(len(prepared)),
            self._checkpoint_apart(len(prepared)),
            self._write() as conn,
        ):
            stored = self._stored_shas(conn, [p[0].run_id for p in prepared])
            new_blobs: set[str] = set()
            for m, sha, body, chash, gaps, locs, blobs in prepared:
                have = stored.get(m.run_id)
                if have is not None:
                    if have != sha:
                        raise ConflictError(
                            f"run {m.run_id} is already stored with a different manifest "
                            f"({have[:12]}); a run's manifest never changes"
                        )
                    results.append(IngestResult(m.run_id, sha, False))
                    continue
                stored[m.run_id] = sha
                for blob_sha, (kind, data) in blobs.items():
                    if (
                        blob_sha in new_blobs
                        or conn.execute(
                            "SELECT 1 FROM blobs WHERE sha256 = ?", (blob_sha,)
                        ).fetchone()
                    ):
                        continue
                    new_blobs.add(blob_sha)
                    blob_rows.append((blob_sha, kind, len(data), data))
                    events.append((f"blob:{kind}", m.run_id, blob_sha))
                manifest_rows.append((sha, m.run_id, body, len(body.encode("utf-8")), now))
                r = run_row(m, sha, gaps, now)
                r["config_hash"] = chash  # m is the manifest as given, before sealing
                r["origin"] = origin  # also in the ingest event below (storage.integrity)
                run_cols = run_cols or ", ".join(f'"{c}"' for c in r)
                run_rows.append(tuple(r.values()))
                artifact_rows += [
                    (m.run_id, a.path, a.sha256, a.size_bytes, a.kind, a.tensor_sha256)
                    for a in m.outputs.artifacts
                ]
                history = m.outputs.metric_history
                metric_rows += [
                    (
                        m.run_id,
                        n,
                        m.outputs.metrics.get(n),
                        history_json(list(history.get(n, []))),
                    )
                    for n in sorted(set(m.outputs.metrics) | set(history))
                ]
                location_rows += [(m.run_id, loc.role, loc.name, loc.host_path) for loc in locs]
                events.append(ledger.ingest_event(m.run_id, sha, origin))
                events += integrity.ingest_events(m.run_id, gaps, locs, origin)
                results.append(IngestResult(m.run_id, sha, True))
            if blob_rows:
                conn.executemany(
                    "INSERT INTO blobs (sha256, kind, bytes, data) VALUES (?, ?, ?, ?)", blob_rows
                )
            conn.executemany(
                "INSERT INTO manifests (sha256, run_id, body, bytes, ingested_at)"
                " VALUES (?, ?, ?, ?, ?)",
                manifest_rows,
            )
            if run_rows:
                _insert_many_rows(conn, f"INSERT INTO runs ({run_cols})", run_rows)
            conn.executemany(
                "INSERT INTO artifacts (run_id, path, sha256, size_bytes, kind, tensor_sha256)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                artifact_rows,
            )
            conn.executemany(
                "INSERT INTO metrics (run_id, name, final, history) VALUES (?, ?, ?, ?)",
                metric_rows,
            )
            conn.executemany(
                "INSERT OR REPLACE INTO locations (run_id, role, name, host_path)"
                " VALUES (?, ?, ?, ?)",
                location_rows,
            )
            self._append_events(conn, events)
        return results

    @contextmanager
    def _checkpoint_apart(self, n: int) -> Iterator[None]:
        """A large batch commits without SQLite's automatic checkpoint, and its pages are
        copied into the database file by the ``_Checkpointer`` thread (see there)."""
        if n < LARGE_BATCH or self._checkpointer is None:
            yield
            return
        self._checkpointer.wait()
        if not self._checkpointer.ok:  # the last one failed: the commit checkpoints
            yield
            return
        before = int(self.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        self.conn.execute("PRAGMA wal_autocheckpoint = 0")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA wal_autocheckpoint = {before}")
        self._checkpointer.start()  # committed: copy its pages while the caller goes on

    @contextmanager
    def _ingest_cache(self, n: int) -> Iterator[None]:
        """A large batch touches index pages all over the file (sha256 and hash keys,
        full-text segments); SQLite's default 2 MiB page cache made a batch into a large
        store spill and re-read them.  The cache is raised for the batch and set back
        after (which frees it): 40,000 runs, ingest CPU per run down by a quarter."""
        if n < LARGE_BATCH:
            yield
            return
        before = int(self.conn.execute("PRAGMA cache_size").fetchone()[0])
        self.conn.execute(f"PRAGMA cache_size = -{INGEST_CACHE_KIB}")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA cache_size = {before}")

    @staticmethod
    def _stored_shas(conn: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, str]:
        """``run_id -> manifest sha256`` of those already stored."""
        out: dict[str, str] = {}
        ids = list(dict.fromkeys(run_ids))
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            out.update(
                conn.execute(
                    "SELECT run_id, sha256 FROM manifests"
                    f" WHERE run_id IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            )
        return out

    @staticmethod
    def _append_events(
        conn: sqlite3.Connection, events: Sequence[tuple[str, str | None, str | None]]
    ) -> None:
        """Chain ``(kind, run_id, subject_sha256)`` events onto the ledger, in order, with
        one insert; the caller holds the write lock.  Same rows as ``ledger.append`` each."""
        ledger.append_many(conn, events)

    def _put_blob(
        self, conn: sqlite3.Connection, sha: str, kind: str, data: bytes, run_id: str | None
    ) -> None:
        if conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (sha,)).fetchone():
            return
        conn.execute(
            "INSERT INTO blobs (sha256, kind, bytes, data) VALUES (?, ?, ?, ?)",
            (sha, kind, len(data), data),
        )
        ledger.append(conn, f"blob:{kind}", run_id, sha)

    def put_blob(self, data: bytes, kind: str, run_id: str | None = None) -> str:
        """Store content-addressed bytes (a diff, a log); returns their sha256."""
        sha = sha256_hex(data)
        with self._write() as conn:
            self._put_blob(conn, sha, kind, data, run_id)
        return sha

    def get_blob(self, sha: str) -> bytes | None:
        """The bytes stored under ``sha``, or None; :class:`StoreAltered` when they no
        longer hash to it (a diff or a log edited in place)."""
        row = self.conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (sha,)).fetchone()
        if row is None:
            return None
        data = bytes(row[0])
        if sha256_hex(data) != sha:
            raise StoreAltered(
                f"store altered: blob {sha[:12]} no longer hashes to its name"
                " (verify-store says what changed)"
            )
        return data

    def set_gap_counts(self, run_id: str, gaps: GapCounts) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET gaps_critical = ?, gaps_warning = ?, gaps_info = ? WHERE id = ?",
                (gaps.critical, gaps.warning, gaps.info, run_id),
            )
            value = integrity.gaps_value(gaps.critical, gaps.warning, gaps.info)
            ledger.append(conn, *integrity.state_event("gaps", run_id, value))

    def set_location(self, run_id: str, loc: Location) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO locations (run_id, role, name, host_path)"
                " VALUES (?, ?, ?, ?)",
                (run_id, loc.role, loc.name, loc.host_path),
            )
            rows = conn.execute(
                "SELECT role, name, host_path FROM locations WHERE run_id = ?", (run_id,)
            ).fetchall()
            value = integrity.locations_value(rows)
            ledger.append(conn, *integrity.state_event("locations", run_id, value))

    def _append_fact(
        self,
        conn: sqlite3.Connection,
        table: str,
        kind: str,
        run_id: str | None,
        columns: dict[str, Any],
        body: Any,
    ) -> int:
        text = canonical_json(body).decode("utf-8")
        sha = sha256_hex(text.encode("utf-8"))
        row = {"created_at": ledger.utc_now(), **columns, "body": text, "body_sha256": sha}
        cols = ", ".join(f'"{c}"' for c in row)
        cur = conn.execute(
            f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(row))})",
            tuple(row.values()),
        )
        ledger.append(conn, kind, run_id, sha)
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add_comparison(
        self,
        a_run: str,
        b_run: str,
        verdict: str,
        body: Mapping[str, Any],
        *,
        rtol: float | None = None,
        atol: float | None = None,
        set_verdict_on: str | None = None,
    ) -> int:
        """Record a comparison; ``set_verdict_on`` names the run whose badge it sets."""
        with self._write() as conn:
            cid = self._append_fact(
                conn,
                "comparisons",
                "comparison",
                b_run,
                {"a_run": a_run, "b_run": b_run, "verdict": verdict, "rtol": rtol, "atol": atol},
                dict(body),
            )
            for rid in {set_verdict_on} - {None}:
                conn.execute(
                    "UPDATE runs SET last_verdict = ?, last_verdict_at = ? WHERE id = ?",
                    (verdict, ledger.utc_now(), rid),
                )
                ledger.append(conn, *integrity.state_event("verdict", str(rid), verdict))
        return cid

    def add_replay(
        self,
        original_run: str,
        *,
        replay_run: str | None,
        backend: str,
        status: str,
        verdict: str | None,
        reason: str | None,
        duration_s: float | None,
        comparison_id: int | None,
        body: Mapping[str, Any],
        sets_verdict: bool | None = None,
    ) -> int:
        """Record a replay.  ``sets_verdict``: whether ``verdict`` becomes the original's
        badge (``last_verdict``); the caller decides (``replay_tui.verdicts.
        counts_as_evidence``: only a completed replay does).  None keeps the older rule
        for callers not yet passing it: a verdict of a command that ran to its end."""
        if sets_verdict is None:
            sets_verdict = status in vocabulary.COMPLETED_SPELLINGS
        with self._write() as conn:
            rid = self._append_fact(
                conn,
                "replays",
                "replay",
                original_run,
                {
                    "original_run": original_run,
                    "replay_run": replay_run,
                    "backend": backend,
                    "status": status,
                    "verdict": verdict,
                    "reason": reason,
                    "duration_s": duration_s,
                    "comparison_id": comparison_id,
                },
                dict(body),
            )
            if verdict is not None and sets_verdict:
                conn.execute(
                    "UPDATE runs SET last_verdict = ?, last_verdict_at = ? WHERE id = ?",
                    (verdict, ledger.utc_now(), original_run),
                )
                ledger.append(conn, *integrity.state_event("verdict", original_run, verdict))
        return rid

    def add_noise_floor(self, run_id: str, times: int, body: Mapping[str, Any]) -> int:
        with self._write() as conn:
            return self._append_fact(
                conn,
                "noise_floors",
                "noise_floor",
                run_id,
                {"run_id": run_id, "times": times},
                dict(body),
            )

    def noise_floors_of(self, run_id: str) -> list[dict[str, Any]]:
        """The noise-floor facts of ``run_id``, newest first (``id``, ``created_at``,
        ``times``, decoded ``body``)."""
        rows = self.conn.execute(
            "SELECT id, created_at, times, body, body_sha256, run_id FROM noise_floors"
            " WHERE run_id = ? ORDER BY id DESC",
            (run_id,),
        ).fetchall()
        for r in rows:
            self.check_fact("noise_floors", r[0], r[5], r[3], r[4])
        return [
            {
                "id": r[0],
                "created_at": r[1],
                "times": r[2],
                "body": json.loads(r[3]),
                "body_sha256": r[4],
            }
            for r in rows
        ]

    def check_fact(
        self, table: str, fid: int, run_id: str | None, body: str, sha: str | None
    ) -> None:
        """Raise :class:`StoreAltered` unless the fact ``table #fid`` is what the ledger
        recorded: its body hashes to its ``body_sha256``, and an intact ledger event of
        its kind, for ``run_id``, names that hash.  Every fact a judgement or a bundle
        reads passes this when it is read, so an edit made with the triggers dropped
        (and restored) is refused at use, not only by ``verify-store``."""
        kind, label = integrity.FACT_KINDS[table]
        if (
            sha is None
            or sha256_hex(body.encode("utf-8")) != sha
            or not integrity.recorded(self.conn, (kind,), run_id, sha)
        ):
            raise StoreAltered(
                f"store altered: {label} #{fid} does not match the ledger event that"
                " recorded it (verify-store says what changed)"
            )

    def add_drill(self, passed: bool, body: Mapping[str, Any]) -> int:
        with self._write() as conn:
            return self._append_fact(
                conn, "drills", "drill", None, {"passed": int(passed)}, dict(body)
            )

    def add_bundle(
        self, run_id: str, path: str, signed: bool, key_id: str | None, body: Mapping[str, Any]
    ) -> int:
        with self._write() as conn:
            bid = self._append_fact(
                conn,
                "bundles",
                "bundle",
                run_id,
                {"run_id": run_id, "path": path, "signed": int(signed), "key_id": key_id},
                dict(body),
            )
            if signed:
                conn.execute("UPDATE runs SET signed = 1 WHERE id = ?", (run_id,))
        return bid

    def add_bisect(
        self,
        good_run: str,
        bad_run: str,
        outcome: str,
        causes: Sequence[str],
        body: Mapping[str, Any],
    ) -> int:
        """Record a bisect of GOOD against BAD (``replay-tui bisect``)."""
        with self._write() as conn:
            return self._append_fact(
                conn,
                "bisects",
                "bisect",
                bad_run,
                {
                    "good_run": good_run,
                    "bad_run": bad_run,
                    "outcome": outcome,
                    "causes": ",".join(causes),
                },
                dict(body),
            )

    def bisects_of(self, run_id: str) -> list[dict[str, Any]]:
        """Every bisect with ``run_id`` as GOOD or BAD, oldest first, bodies decoded."""
        rows = self.conn.execute(
            "SELECT id, created_at, good_run, bad_run, outcome, causes, body, body_sha256"
            " FROM bisects WHERE good_run = ? OR bad_run = ? ORDER BY id",
            (run_id, run_id),
        ).fetchall()
        keys = ("id", "created_at", "good_run", "bad_run", "outcome", "causes", "body")
        out = []
        for r in rows:
            self.check_fact("bisects", r[0], r[3], r[6], r[7])
            d = dict(zip(keys, r[:7], strict=True))
            d["body"] = json.loads(d["body"])
            out.append(d)
        return out

    # -- reading -------------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """A full run id from an id or a unique prefix of one."""
        ref = ref.strip()
        if not ref or not re.fullmatch(r"[0-9A-Za-z_-]{1,64}", ref):
            raise RunNotFound(f"{ref!r} is not a run id or a prefix of one")
        rows = self.conn.execute(
            "SELECT id FROM runs WHERE id >= ? AND id < ? ORDER BY id LIMIT 51",
            (ref, ref + "\U0010ffff"),
        ).fetchall()
        ids = [r[0] for r in rows]
        if ref in ids:
            return ref
        if not ids:
            raise RunNotFound(f"no run matches {ref!r}")
        if len(ids) > 1:
            raise AmbiguousRun(ref, ids)
        return str(ids[0])

    def get_run(self, ref: str) -> RunRecord:
        rid = self.resolve(ref)
        row = self.conn.execute(f"SELECT {RUN_SELECT} FROM runs WHERE id = ?", (rid,)).fetchone()
        return RunRecord.from_row(row)

    def manifest(self, ref: str) -> RunManifest:
        import orjson  # a stored body is canonical JSON, which orjson reads as json does

        from storage.manifest import manifest_from_data

        rid = self.resolve(ref)
        row = self.conn.execute(
            "SELECT body, sha256 FROM manifests WHERE run_id = ?", (rid,)
        ).fetchone()
        if row is None:
            raise RunNotFound(f"run {rid} has no stored manifest")
        data = orjson.loads(row[0])
        self._check_manifest(rid, data, row[1])
        return manifest_from_data(data, source=f"store:{rid}")

    def _check_manifest(self, rid: str, data: Any, sha: str) -> None:
        """Raise :class:`StoreAltered` unless the stored manifest of ``rid`` hashes to its
        recorded hash and an intact ``ingest`` event of the run names that hash."""
        body = (
            {k: v for k, v in data.items() if k != "integrity"} if isinstance(data, dict) else None
        )
        if body is None or sha256_hex(canonical_json(body)) != sha:
            raise StoreAltered(
                f"store altered: the manifest of run {rid} no longer hashes to the hash it was"
                " stored under (verify-store says what changed)"
            )
        if not integrity.recorded(self.conn, ("ingest", integrity.INGEST_PREFIX), rid, sha):
            raise StoreAltered(
                f"store altered: no intact ledger event records the manifest of run {rid}"
                " (deleted or edited; a cut ledger tail shows only with"
                " verify-store --anchor)"
            )

    def search_reach(self, q: RunQuery) -> SearchReach:
        """What ``q``'s search filters (see :class:`SearchReach`): one count of its
        matches, as long as reading their row ids (7 ms at 100,000 matches)."""
        fq = fts_query(q.search) if q.search else None
        if fq is None:
            return SearchReach(None, common=False, search=q.search)
        n = int(
            self.conn.execute(
                "SELECT count(*) FROM runs_fts WHERE runs_fts MATCH ?", (fq,)
            ).fetchone()[0]
        )
        every = int(self.conn.execute("SELECT count(*) FROM runs").fetchone()[0])
        if n and n >= every:
            return SearchReach(None, common=False, matches=n, search=q.search)  # no filter
        prefix = id_prefix(q.search)
        if prefix is not None:  # a run id, or its start: those runs match as well
            by_id = int(
                self.conn.execute(
                    f"SELECT count(*) FROM runs WHERE {ID_PART_SQL} AND rowid NOT IN"
                    " (SELECT rowid FROM runs_fts WHERE runs_fts MATCH ?)",
                    (*id_part(prefix), fq),
                ).fetchone()[0]
            )
            if by_id:
                n += by_id
                if n >= every:
                    return SearchReach(None, common=False, matches=n, search=q.search)
                common = n >= COMMON_MATCHES
                return SearchReach(fq, common, matches=n, search=q.search, ids=prefix)
        return SearchReach(fq, common=n >= COMMON_MATCHES, matches=n, search=q.search)

    def reach_of(self, q: RunQuery, reach: SearchReach | None = None) -> SearchReach:
        """``reach`` if it was read for ``q``'s search, else ``q``'s, read now."""
        if reach is not None and reach.search == q.search:
            return reach
        return self.search_reach(q)

    def _where(
        self, q: RunQuery, reach: SearchReach | None = None, *, page: bool = False
    ) -> tuple[str, list[Any]]:
        """SQL filter for ``q`` (``reach``: its search's, when the caller has it).  For
        a ``page`` of a search that matches many runs, SQLite walks the sort index and
        probes the match set (``+rowid`` keeps it from driving the query from the FTS
        side and sorting every match); a count looks the matches up by row id."""
        clauses: list[str] = []
        params: list[Any] = []
        if q.search:
            reach = self.reach_of(q, reach)
            if reach.fts:
                col = "+runs.rowid" if page and reach.common else "runs.rowid"
                fts = f"{col} IN (SELECT rowid FROM runs_fts WHERE runs_fts MATCH ?)"
                params.append(reach.fts)
                if reach.ids:  # the runs whose id holds the text match too
                    fts = f"({fts} OR {ID_PART_SQL})"
                    params += id_part(reach.ids)
                clauses.append(fts)
        if q.kind:
            clauses.append("kind = ?")
            params.append(q.kind)
        if q.verdict:
            if q.verdict == "none":
                clauses.append("last_verdict IS NULL")
            else:
                clauses.append("last_verdict = ?")
                params.append(q.verdict)
        if q.has_critical:
            clauses.append("gaps_critical > 0")
        if q.replay_of:
            clauses.append("replay_of = ?")
            params.append(q.replay_of)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        return where, params

    def list_runs(
        self, q: RunQuery | None = None, reach: SearchReach | None = None
    ) -> list[RunRecord]:
        """A page of runs; ``reach``: ``q``'s search's (:meth:`search_reach`), when the
        caller has read it already (a page and its count share one)."""
        q = q or RunQuery()
        if q.order not in _ORDER_COLUMNS:
            raise StoreError(f"cannot sort by {q.order!r}")
        reach = self.reach_of(q, reach)
        where, params = self._where(q, reach, page=True)
        direction = "DESC" if q.descending else "ASC"
        # Many matches, newest first: walk the start-time index and stop after a page.
        hint = " INDEXED BY runs_started" if reach.common and q.order == "started_at" else ""
        sql = (
            f'SELECT {RUN_SELECT} FROM runs{hint}{where} ORDER BY "{q.order}" {direction},'
            f" id {direction} LIMIT ? OFFSET ?"
        )
        rows = self.conn.execute(sql, [*params, max(0, q.limit), max(0, q.offset)]).fetchall()
        return [RunRecord.from_row(r) for r in rows]

    def find_runs(self, text: str, limit: int) -> list[RunRecord]:
        """Runs whose id holds ``text`` first (those that start with it before the rest),
        then the full-text matches: what a person typing part of a run id or a word
        expects (the picker, ``runs --search``)."""
        text = text.strip()
        by_id: list[RunRecord] = []
        if id_prefix(text) is not None:
            rows = self.conn.execute(
                f"SELECT {RUN_SELECT} FROM runs WHERE {ID_PART_SQL}"
                " ORDER BY instr(lower(runs.id), lower(?)) != 1, id LIMIT ?",
                (*id_part(text), text, limit),
            ).fetchall()
            by_id = [RunRecord.from_row(r) for r in rows]
        found = self.list_runs(RunQuery(search=text or None, limit=limit))
        seen = {r.id for r in by_id}
        return (by_id + [r for r in found if r.id not in seen])[:limit]

    def count_runs(self, q: RunQuery | None = None, reach: SearchReach | None = None) -> int:
        q = q or RunQuery()
        if q.search and not (q.kind or q.verdict or q.has_critical or q.replay_of):
            reach = self.reach_of(q, reach)
            if reach.matches is not None:
                return reach.matches  # the search is the only filter: its count is the count
        where, params = self._where(q, reach)
        return int(self.conn.execute(f"SELECT count(*) FROM runs{where}", params).fetchone()[0])

    def locations(self, run_id: str) -> list[Location]:
        rows = self.conn.execute(
            "SELECT role, name, host_path FROM locations WHERE run_id = ? ORDER BY role, name",
            (run_id,),
        ).fetchall()
        return [Location(r[0], r[1], r[2]) for r in rows]

    def replays_of(self, run_id: str) -> list[ReplayFact]:
        """The run's replay attempts, oldest first, each checked against its ledger event
        (what a bundle, a drill and a series read; listings use :meth:`replay_outcomes`)."""
        for fid, body, sha in self.conn.execute(
            "SELECT id, body, body_sha256 FROM replays WHERE original_run = ?", (run_id,)
        ).fetchall():
            self.check_fact("replays", fid, run_id, body, sha)
        return self.replay_outcomes([run_id]).get(run_id, [])

    def replay_outcomes(self, run_ids: Sequence[str]) -> dict[str, list[ReplayFact]]:
        """Per original run, its replay facts oldest first (one query for a page of runs),
        leaving out a replay judged by a noise floor the ledger does not record as it was
        then (``integrity.JUDGED_BY_A_RECORDED_FLOOR``: verify-store names it)."""
        out: dict[str, list[ReplayFact]] = {}
        ids = list(dict.fromkeys(run_ids))
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            rows = self.conn.execute(
                f"SELECT {REPLAY_SELECT}, json_extract(r.body, '$.replay.determinism')"
                f" FROM replays r WHERE r.original_run IN ({','.join('?' * len(chunk))})"
                f" AND {integrity.JUDGED_BY_A_RECORDED_FLOOR} ORDER BY r.id",
                chunk,
            ).fetchall()
            for row in rows:
                fact = ReplayFact.from_row(row)
                out.setdefault(fact.original_run, []).append(fact)
        return out

    def comparison(self, cid: int) -> dict[str, Any]:
        row = self.conn.execute(
            "SELECT body, body_sha256, b_run, verdict FROM comparisons WHERE id = ?", (cid,)
        ).fetchone()
        if row is None:
            raise StoreError(f"no comparison {cid}")
        return self._checked_comparison(cid, *row)

    def _checked_comparison(
        self, cid: int, body: str, sha: str | None, b_run: str, verdict: str
    ) -> dict[str, Any]:
        """A comparison's body, checked against its ledger event, and its verdict column
        against the body's own verdict (the column is not under the hash)."""
        self.check_fact("comparisons", cid, b_run, body, sha)
        result: dict[str, Any] = json.loads(body)
        if "verdict" in result and result["verdict"] != verdict:
            raise StoreAltered(
                f"store altered: comparison #{cid}'s verdict column says {verdict!r}, its"
                f" recorded body {result['verdict']!r}"
            )
        why = integrity.judging_floor_problem(self.conn, result)
        if why is not None:
            raise StoreAltered(f"store altered: comparison #{cid} was judged by {why}")
        return result

    def latest_comparison(self, a_run: str, b_run: str) -> dict[str, Any] | None:
        row = self.conn.execute(
            "SELECT id, body, body_sha256, b_run, verdict FROM comparisons"
            " WHERE a_run = ? AND b_run = ? ORDER BY id DESC LIMIT 1",
            (a_run, b_run),
        ).fetchone()
        return None if row is None else self._checked_comparison(*row)

    def facts(self, table: str) -> list[dict[str, Any]]:
        """All rows of an append-only fact table, bodies decoded."""
        if table not in migrations.FACT_TABLES or table in ("events", "blobs", "manifests"):
            raise StoreError(f"{table} is not a fact table")
        cur = self.conn.execute(f"SELECT * FROM {table} ORDER BY id")
        names = [d[0] for d in cur.description]
        out = []
        for r in cur.fetchall():
            d = dict(zip(names, r, strict=True))
            d["body"] = json.loads(d["body"])
            out.append(d)
        return out

    def events(self) -> list[ledger.Event]:
        rows = self.conn.execute(
            "SELECT seq, ts, kind, run_id, subject_sha256, prev_hash, hash FROM events ORDER BY seq"
        ).fetchall()
        return [ledger.Event(*r) for r in rows]

    # -- integrity -----------------------------------------------------------------

    def verify(self, anchors: Sequence[str] = ()) -> VerifyReport:
        """Walk the ledger and re-hash every stored fact.

        ``anchors`` are ``SEQ:HASH`` heads noted down earlier (outside this file): a store
        rewritten consistently from some event on still fails on an anchor after it.
        """
        rep = VerifyReport()
        conn = self.conn
        conn.execute("BEGIN")  # one consistent snapshot
        try:
            rep.events, problem = ledger.walk(conn)
            if problem:
                rep.problems.append(problem)
            last = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
            rep.head = f"{last[0]}:{last[1]}" if last else None
            for anchor in anchors:
                seq, _, want = anchor.partition(":")
                row = conn.execute(
                    "SELECT hash FROM events WHERE seq = ?", (int(seq) if seq.isdigit() else -1,)
                ).fetchone()
                if row is None:
                    rep.problems.append(f"anchor {anchor[:24]}: event {seq} is gone")
                elif row[0] != want:
                    rep.problems.append(
                        f"anchor {anchor[:24]}: event {seq} no longer has the hash noted down"
                        " (the ledger was rewritten)"
                    )
            named = {
                s
                for (s,) in conn.execute(
                    "SELECT subject_sha256 FROM events WHERE subject_sha256 IS NOT NULL"
                )
            }
            for sha, run_id, body in conn.execute("SELECT sha256, run_id, body FROM manifests"):
                rep.manifests += 1
                try:
                    data = json.loads(body)
                    data.pop("integrity", None)
                    actual = hashlib.sha256(canonical_json(data)).hexdigest()
                except Exception as e:  # a body so broken it does not parse
                    rep.problems.append(f"manifest of run {run_id} does not parse: {e}")
                    continue
                if actual != sha:
                    rep.problems.append(
                        f"manifest of run {run_id} was altered: content hashes to {actual[:12]},"
                        f" stored as {sha[:12]}"
                    )
                if sha not in named:
                    rep.problems.append(f"manifest of run {run_id} has no ledger event")
            for sha, data in conn.execute("SELECT sha256, data FROM blobs"):
                rep.blobs += 1
                if hashlib.sha256(bytes(data)).hexdigest() != sha:
                    rep.problems.append(f"blob {sha[:12]} was altered")
                if sha not in named:
                    rep.problems.append(f"blob {sha[:12]} has no ledger event")
            for table in ("comparisons", "replays", "noise_floors", "drills", "bundles", "bisects"):
                for fid, body, sha in conn.execute(f"SELECT id, body, body_sha256 FROM {table}"):
                    rep.facts += 1
                    if hashlib.sha256(body.encode("utf-8")).hexdigest() != sha:
                        rep.problems.append(f"{table} #{fid} was altered")
                    elif sha not in named:
                        rep.problems.append(f"{table} #{fid} has no ledger event")
            manifest_shas = {s for (s,) in conn.execute("SELECT sha256 FROM manifests")}
            for s, run_id in conn.execute(
                "SELECT subject_sha256, run_id FROM events"
                " WHERE kind = 'ingest' OR substr(kind, 1, 7) = 'ingest:'"
            ):
                if s not in manifest_shas:
                    rep.problems.append(f"the manifest of run {run_id} ({s[:12]}) is missing")
            for rid, sha in conn.execute(
                "SELECT id, manifest_sha256 FROM runs WHERE manifest_sha256 NOT IN"
                " (SELECT sha256 FROM manifests)"
            ):
                rep.problems.append(f"run {rid} points at a manifest {sha[:12]} that is not stored")
            rep.problems += integrity.check(conn)  # derived tables, state events, triggers
            for (trig,) in conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%_no_%'"
            ):
                if trig != 2 * len(migrations.FACT_TABLES):
                    rep.problems.append("append-only triggers were removed")
        finally:
            conn.execute("COMMIT")
        return rep

"""Append-only, hash-chained event log.

Each event's hash covers its own fields and the previous event's hash, so altering,
removing or reordering any event breaks every link after it.  ``subject_sha256`` names
the content (manifest, comparison, blob...) the event is about, so a changed fact no
longer matches the event that recorded it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64
# json.dumps(..., separators=(",", ":"), ensure_ascii=True) without a new encoder per call
_EVENT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode


@dataclass(frozen=True)
class Event:
    seq: int
    ts: str
    kind: str
    run_id: str | None
    subject_sha256: str | None
    prev_hash: str
    hash: str


def utc_now() -> str:
    """RFC 3339 UTC timestamp with milliseconds, the format manifests use."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def event_hash(
    seq: int, ts: str, kind: str, run_id: str | None, subject: str | None, prev: str
) -> str:
    payload = _EVENT_JSON([seq, ts, kind, run_id, subject, prev])
    return hashlib.sha256(payload.encode("ascii")).hexdigest()


def state_subject(kind: str, run_id: str, value: Any) -> str:
    """The subject hash of a ``state:<kind>`` event: what the row must hold."""
    text = json.dumps([kind, run_id, value], separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def state_event(kind: str, run_id: str, value: Any) -> tuple[str, str, str]:
    """``(event kind, run_id, subject)`` for the ledger: a value set on a run after
    ingest (gap counts, locations, the verdict badge); ``storage.integrity`` checks it."""
    return (f"state:{kind}", run_id, state_subject(kind, run_id, value))


LOCAL = "local"
"""The origin of a run recorded (or replayed) on this host."""
UNPROVEN = "unproven"
"""The origin of a run whose ledger cannot show where it came from (``storage.integrity``)."""
INGEST_PREFIX = "ingest:"


def ingest_event(run_id: str, manifest_sha256: str, origin: str) -> tuple[str, str, str]:
    """``(event kind, run_id, subject)`` of the event that records a manifest:
    ``ingest:<origin>`` (``ingest:local``, ``ingest:import:mlflow``), its subject the
    manifest's hash.  The origin is part of the one event that names the manifest, so it
    cannot be removed without removing the manifest's record (``verify-store`` reports a
    manifest no event names)."""
    return (INGEST_PREFIX + origin, run_id, manifest_sha256)


def append(
    conn: sqlite3.Connection, kind: str, run_id: str | None, subject_sha256: str | None
) -> Event:
    """Append one event.  The caller holds the write lock (``BEGIN IMMEDIATE``)."""
    row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    seq, prev = (row[0] + 1, row[1]) if row else (1, GENESIS)
    ts = utc_now()
    h = event_hash(seq, ts, kind, run_id, subject_sha256, prev)
    conn.execute(
        "INSERT INTO events (seq, ts, kind, run_id, subject_sha256, prev_hash, hash)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (seq, ts, kind, run_id, subject_sha256, prev, h),
    )
    return Event(seq, ts, kind, run_id, subject_sha256, prev, h)


def append_many(
    conn: sqlite3.Connection, events: Sequence[tuple[str, str | None, str | None]]
) -> None:
    """Chain ``(kind, run_id, subject_sha256)`` events onto the ledger, in order, with one
    insert: the rows ``append`` would write one by one.  The caller holds the write lock."""
    if not events:
        return
    row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    seq, prev = (row[0], row[1]) if row else (0, GENESIS)
    rows = []
    for kind, run_id, subject in events:
        seq += 1
        ts = utc_now()
        h = event_hash(seq, ts, kind, run_id, subject, prev)
        rows.append((seq, ts, kind, run_id, subject, prev, h))
        prev = h
    conn.executemany(
        "INSERT INTO events (seq, ts, kind, run_id, subject_sha256, prev_hash, hash)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def walk(conn: sqlite3.Connection) -> tuple[int, str | None]:
    """Check the whole chain.  Returns (events checked, first problem or None)."""
    prev = GENESIS
    expected_seq = 1
    n = 0
    for seq, ts, kind, run_id, subject, prev_hash, h in conn.execute(
        "SELECT seq, ts, kind, run_id, subject_sha256, prev_hash, hash FROM events ORDER BY seq"
    ):
        n += 1
        if seq != expected_seq:
            return n, f"event {expected_seq} is missing (next event is {seq})"
        if prev_hash != prev:
            return n, f"event {seq} ({kind}) does not link to the hash of event {seq - 1}"
        if event_hash(seq, ts, kind, run_id, subject, prev_hash) != h:
            return n, f"event {seq} ({kind}) was altered: its hash does not match its fields"
        prev = h
        expected_seq += 1
    return n, None

"""Migrations bring a store written by an older version up to date, and the ledger holds."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest


def _replay(
    s: RunStore, original: str, status: str, verdict: str | None, *, det: str = "recorded"
) -> None:
    """A replay fact as an older version wrote it: every verdict set the badge."""
    s.add_replay(
        original,
        replay_run=None,
        backend="docker",
        status=status,
        verdict=verdict,
        reason=None,
        duration_s=1.0,
        comparison_id=None,
        body={"replay": {"determinism": det}},
        sets_verdict=True,
    )


def _forget_migration(path: Path, name: str) -> None:
    """Make the store look as if ``name`` never ran (an older version wrote it)."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = ?", (name,))
    conn.close()


def test_verdict_badges_are_recomputed_from_completed_replays(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    a, b, c, d = (make_manifest(index=i) for i in range(4))
    with RunStore(store_path) as s:
        for m in (a, b, c, d):
            s.ingest(manifest_from_data(m))
        # a: IDENTICAL, then a cancelled replay whose partial outputs compared INCOMPLETE
        _replay(s, a["run_id"], "completed", "IDENTICAL")
        _replay(s, a["run_id"], "cancelled", "INCOMPLETE")
        # b: only an infrastructure failure (older facts said "error")
        _replay(s, b["run_id"], "error", "INCOMPLETE")
        # c: an older fact's "failed" command that diverged, then a determinism-off experiment
        _replay(s, c["run_id"], "failed", "DIVERGED")
        _replay(s, c["run_id"], "completed", "IDENTICAL", det="off")
        # d: right already
        _replay(s, d["run_id"], "succeeded", "EQUIVALENT")
        wrong = {r.id: r.last_verdict for r in s.list_runs()}
        assert wrong[a["run_id"]] == "INCOMPLETE" and wrong[b["run_id"]] == "INCOMPLETE"
        assert wrong[c["run_id"]] == "IDENTICAL"
        events_before = len(s.events())
    _forget_migration(store_path, "m004_verdict_badges")
    with RunStore(store_path) as s:
        badges = {r.id: r.last_verdict for r in s.list_runs()}
        assert badges[a["run_id"]] == "IDENTICAL"
        assert badges[b["run_id"]] is None
        assert badges[c["run_id"]] == "DIVERGED"
        assert badges[d["run_id"]] == "EQUIVALENT"
        # three badges changed, each a state event in the ledger; the store verifies
        assert len(s.events()) == events_before + 3
        report = s.verify()
        assert report.ok, report
    with RunStore(store_path) as s:  # applied once: reopening changes nothing
        assert len(s.events()) == events_before + 3

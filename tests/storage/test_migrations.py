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


def test_pending_reads_what_sqlite_utils_records(store_path: Path) -> None:
    """Opening a store asks storage.migrations which migrations are pending without
    sqlite-utils; the answer is the one sqlite-utils' Migrations gives."""
    from sqlite_utils.migrations import Migrations

    from storage import migrations

    def reference(conn: sqlite3.Connection) -> list[str]:
        ref = Migrations(migrations.migrations.name)
        for step in migrations.migrations.steps:
            ref()(step)
        return [m.name for m in ref.pending(migrations.database(conn))]

    names = [s.__name__ for s in migrations.migrations.steps]
    assert names[:4] == [
        "m001_initial",
        "m002_fts_prefix_index",
        "m003_bisects",
        "m004_verdict_badges",
    ]
    conn = sqlite3.connect(store_path)
    assert migrations.migrations.pending(conn) == reference(conn) == names  # a new file
    conn.close()
    RunStore(store_path).close()
    conn = sqlite3.connect(store_path)
    assert migrations.migrations.pending(conn) == reference(conn) == []
    conn.close()
    _forget_migration(store_path, "m002_fts_prefix_index")
    conn = sqlite3.connect(store_path)
    conn.execute(
        "INSERT INTO _sqlite_migrations (migration_set, name, applied_at)"
        " VALUES ('another.set', 'm002_fts_prefix_index', 'x')"
    )
    conn.commit()
    assert migrations.migrations.pending(conn) == reference(conn) == ["m002_fts_prefix_index"]
    conn.close()
    RunStore(store_path).close()  # applies it again (it finds the prefix index there)
    conn = sqlite3.connect(store_path)
    assert migrations.migrations.pending(conn) == []
    conn.close()

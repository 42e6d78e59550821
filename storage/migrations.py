"""Schema of the run store, applied on open with sqlite-utils ``Migrations``.

Tables fall in two kinds.  *Facts* (manifests, blobs, comparisons, replays, noise floors,
drills, bundles, events) are append-only: triggers refuse UPDATE and DELETE, and every
insert is named by a hash-chained ledger event.  *Indexes for the browser* (runs,
artifacts, metrics, locations) are derived from the facts and may be refreshed.
"""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

migrations = Migrations("replay_tui.store")

APPEND_ONLY = (
    "manifests",
    "events",
    "blobs",
    "comparisons",
    "replays",
    "noise_floors",
    "drills",
    "bundles",
)


@migrations()
def m001_initial(db: Database) -> None:
    db.executescript(
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL DEFAULT '',
            kind TEXT NOT NULL,
            replay_of TEXT,
            status TEXT NOT NULL,
            exit_code INTEGER,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            duration_s REAL,
            "commit" TEXT,
            branch TEXT,
            dirty INTEGER,
            repo_url TEXT,
            image_ref TEXT,
            image_digest TEXT,
            config_hash TEXT,
            manifest_sha256 TEXT NOT NULL,
            command TEXT NOT NULL DEFAULT '',
            tags TEXT NOT NULL DEFAULT '',
            gaps_critical INTEGER,
            gaps_warning INTEGER,
            gaps_info INTEGER,
            last_verdict TEXT,
            last_verdict_at TEXT,
            signed INTEGER NOT NULL DEFAULT 0,
            ingested_at TEXT NOT NULL
        );
        CREATE INDEX runs_started ON runs (started_at DESC, id DESC);
        CREATE INDEX runs_replay_of ON runs (replay_of);
        CREATE INDEX runs_verdict ON runs (last_verdict);
        CREATE INDEX runs_kind ON runs (kind, started_at DESC);

        CREATE TABLE manifests (
            sha256 TEXT PRIMARY KEY,
            run_id TEXT NOT NULL UNIQUE,
            body TEXT NOT NULL,
            bytes INTEGER NOT NULL,
            ingested_at TEXT NOT NULL
        );

        CREATE TABLE artifacts (
            run_id TEXT NOT NULL,
            path TEXT NOT NULL,
            sha256 TEXT,
            size_bytes INTEGER,
            kind TEXT NOT NULL,
            tensor_sha256 TEXT,
            PRIMARY KEY (run_id, path)
        );
        CREATE INDEX artifacts_sha ON artifacts (sha256);

        CREATE TABLE metrics (
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            final REAL,
            history TEXT,
            PRIMARY KEY (run_id, name)
        );

        CREATE TABLE locations (
            run_id TEXT NOT NULL,
            role TEXT NOT NULL,
            name TEXT NOT NULL,
            host_path TEXT NOT NULL,
            PRIMARY KEY (run_id, role, name)
        );

        CREATE TABLE blobs (
            sha256 TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            bytes INTEGER NOT NULL,
            data BLOB NOT NULL
        );

        CREATE TABLE comparisons (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            a_run TEXT NOT NULL,
            b_run TEXT NOT NULL,
            verdict TEXT NOT NULL,
            rtol REAL,
            atol REAL,
            body TEXT NOT NULL,
            body_sha256 TEXT NOT NULL
        );
        CREATE INDEX comparisons_b ON comparisons (b_run);
        CREATE INDEX comparisons_a ON comparisons (a_run);

        CREATE TABLE replays (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            original_run TEXT NOT NULL,
            replay_run TEXT,
            backend TEXT NOT NULL,
            status TEXT NOT NULL,
            verdict TEXT,
            reason TEXT,
            duration_s REAL,
            comparison_id INTEGER,
            body TEXT NOT NULL,
            body_sha256 TEXT NOT NULL
        );
        CREATE INDEX replays_original ON replays (original_run);

        CREATE TABLE noise_floors (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            run_id TEXT NOT NULL,
            times INTEGER NOT NULL,
            body TEXT NOT NULL,
            body_sha256 TEXT NOT NULL
        );

        CREATE TABLE drills (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            passed INTEGER NOT NULL,
            body TEXT NOT NULL,
            body_sha256 TEXT NOT NULL
        );

        CREATE TABLE bundles (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            run_id TEXT NOT NULL,
            path TEXT NOT NULL,
            signed INTEGER NOT NULL,
            key_id TEXT,
            body TEXT NOT NULL,
            body_sha256 TEXT NOT NULL
        );

        CREATE TABLE events (
            seq INTEGER PRIMARY KEY,
            ts TEXT NOT NULL,
            kind TEXT NOT NULL,
            run_id TEXT,
            subject_sha256 TEXT,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL UNIQUE
        );
        CREATE INDEX events_subject ON events (subject_sha256);
        """
    )
    for table in APPEND_ONLY:
        db.executescript(
            f"""
            CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
            BEGIN SELECT RAISE(ABORT, '{table} is append-only: updates are refused'); END;
            CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
            BEGIN SELECT RAISE(ABORT, '{table} is append-only: deletes are refused'); END;
            """
        )
    db.table("runs").enable_fts(
        ["name", "command", "commit", "image_ref", "image_digest", "tags"],
        fts_version="FTS5",
        create_triggers=True,
    )


def apply(db: Database) -> None:
    """Bring ``db`` up to the current schema."""
    migrations.apply(db)

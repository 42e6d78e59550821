"""Schema of the run store, applied on open with sqlite-utils ``Migrations``.

sqlite-utils (about 0.1 s to import) is imported only when a migration is pending:
``migrations.pending`` reads the table sqlite-utils records applied migrations in with
plain ``sqlite3``, so opening an up-to-date store needs neither it nor pydantic.

Tables fall in two kinds.  *Facts* (manifests, blobs, comparisons, replays, noise floors,
drills, bundles, events) are append-only: triggers refuse UPDATE and DELETE, and every
insert is named by a hash-chained ledger event.  *Indexes for the browser* (runs,
artifacts, metrics, locations) are derived from the facts and may be refreshed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from sqlite_utils import Database

_Step = TypeVar("_Step", bound=Callable[["Database"], None])


class _Migrations:
    """The store's migrations in order, registered with ``@migrations()`` as with
    sqlite-utils' ``Migrations``, which ``apply`` hands them to."""

    table = "_sqlite_migrations"  # where sqlite-utils records what it applied

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps: list[Callable[[Database], None]] = []

    def __call__(self) -> Callable[[_Step], _Step]:
        def register(step: _Step) -> _Step:
            if any(s.__name__ == step.__name__ for s in self.steps):
                raise ValueError(f"migration {step.__name__} is registered twice")
            self.steps.append(step)
            return step

        return register

    def pending(self, conn: sqlite3.Connection) -> list[str]:
        """Names of the migrations not applied to ``conn``'s database yet, read as
        sqlite-utils' ``Migrations.pending`` reads them (read-only)."""
        names = [s.__name__ for s in self.steps]
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (self.table,)
        ).fetchone()
        if not exists:
            return names
        done = {
            n
            for (n,) in conn.execute(
                f"SELECT name FROM [{self.table}] WHERE migration_set = ?", (self.name,)
            )
        }
        return [n for n in names if n not in done]


migrations = _Migrations("replay_tui.store")

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


def _script(db: Database, sql: str) -> None:
    """Run statements one by one: ``executescript`` would COMMIT the migration's
    transaction (and give up the write lock) before it starts."""
    pending = ""
    for line in sql.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            db.execute(pending)
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement in a migration: {pending[:80]!r}")


def _append_only(db: Database, tables: Iterable[str]) -> None:
    """Triggers that refuse every UPDATE and DELETE of each of ``tables``."""
    for table in tables:
        _script(
            db,
            f"""
            CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table}
            BEGIN SELECT RAISE(ABORT, '{table} is append-only: updates are refused'); END;
            CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table}
            BEGIN SELECT RAISE(ABORT, '{table} is append-only: deletes are refused'); END;
            """,
        )


@migrations()
def m001_initial(db: Database) -> None:
    _script(
        db,
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
        """,
    )
    _append_only(db, APPEND_ONLY)
    _script(db, FTS_TABLE + FTS_TRIGGERS)


FTS_COLUMNS = "[name], [command], [commit], [image_ref], [image_digest], [tags]"
# prefix='1 2 3': a search box sends prefixes as the user types; without prefix indexes a
# 1-3 letter prefix scans the whole term list (search must stay interactive; measured
# in bench/bench_tui.py).
FTS_TABLE = f"""
CREATE VIRTUAL TABLE [runs_fts] USING FTS5 (
    {FTS_COLUMNS}, content=[runs], prefix='1 2 3'
);
"""
_OLD = ", ".join(f"old.{c}" for c in FTS_COLUMNS.split(", "))
_NEW = ", ".join(f"new.{c}" for c in FTS_COLUMNS.split(", "))
FTS_TRIGGERS = f"""
CREATE TRIGGER [runs_ai] AFTER INSERT ON [runs] BEGIN
  INSERT INTO [runs_fts] (rowid, {FTS_COLUMNS}) VALUES (new.rowid, {_NEW});
END;
CREATE TRIGGER [runs_ad] AFTER DELETE ON [runs] BEGIN
  INSERT INTO [runs_fts] ([runs_fts], rowid, {FTS_COLUMNS}) VALUES ('delete', old.rowid, {_OLD});
END;
CREATE TRIGGER [runs_au] AFTER UPDATE ON [runs] BEGIN
  INSERT INTO [runs_fts] ([runs_fts], rowid, {FTS_COLUMNS}) VALUES ('delete', old.rowid, {_OLD});
  INSERT INTO [runs_fts] (rowid, {FTS_COLUMNS}) VALUES (new.rowid, {_NEW});
END;
"""


@migrations()
def m002_fts_prefix_index(db: Database) -> None:
    """Stores made before the prefix indexes existed get them (the index is rebuilt)."""
    row = db.execute("SELECT sql FROM sqlite_master WHERE name = 'runs_fts'").fetchone()
    if row is not None and "prefix=" in row[0]:
        return
    db.execute("DROP TABLE IF EXISTS [runs_fts]")
    for trigger in ("runs_ai", "runs_ad", "runs_au"):
        db.execute(f"DROP TRIGGER IF EXISTS [{trigger}]")
    _script(db, FTS_TABLE + FTS_TRIGGERS)
    db.execute("INSERT INTO [runs_fts] ([runs_fts]) VALUES ('rebuild')")


BISECT_TABLES = ("bisects",)


@migrations()
def m003_bisects(db: Database) -> None:
    """Bisect results (``replay-tui bisect``): append-only facts like comparisons."""
    _script(
        db,
        """
        CREATE TABLE IF NOT EXISTS bisects (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            good_run TEXT NOT NULL,
            bad_run TEXT NOT NULL,
            outcome TEXT NOT NULL,
            causes TEXT NOT NULL DEFAULT '',
            body TEXT NOT NULL,
            body_sha256 TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS bisects_good ON bisects (good_run);
        CREATE INDEX IF NOT EXISTS bisects_bad ON bisects (bad_run);
        """,
    )
    _append_only(db, BISECT_TABLES)


@migrations()
def m004_verdict_badges(db: Database) -> None:
    """Recompute each original run's verdict badge from its replay facts.

    Stores written before cancelled, interrupted and infrastructure-failed replays were
    counted apart let such a replay set the badge (IDENTICAL turned INCOMPLETE when a
    replay was cancelled).  The badge is the verdict of the latest *completed* replay
    (older facts say ``succeeded``/``failed`` for completed) with determinism as
    recorded, or none.  Each change is a ``state:verdict`` event in the ledger, like
    every badge the store sets, so ``verify-store`` holds afterwards.
    """
    from storage import ledger

    conn = db.conn
    rows = conn.execute(
        "SELECT o.id, o.last_verdict, ("
        "  SELECT r.verdict FROM replays r WHERE r.original_run = o.id"
        "  AND lower(trim(r.status)) IN ('completed', 'succeeded', 'failed')"
        "  AND r.verdict IN ('IDENTICAL', 'EQUIVALENT', 'DIVERGED', 'INCOMPLETE')"
        "  AND coalesce(json_extract(r.body, '$.replay.determinism'), 'recorded') != 'off'"
        "  ORDER BY r.id DESC LIMIT 1)"
        " FROM runs o WHERE o.kind = 'original'"
        " AND EXISTS (SELECT 1 FROM replays r WHERE r.original_run = o.id)"
        " ORDER BY o.id"
    ).fetchall()
    for run_id, badge, want in rows:
        if badge == want:
            continue
        conn.execute(
            "UPDATE runs SET last_verdict = ?, last_verdict_at = ? WHERE id = ?",
            (want, None if want is None else ledger.utc_now(), run_id),
        )
        ledger.append(conn, *ledger.state_event("verdict", run_id, want))


@migrations()
def m005_run_origin(db: Database) -> None:
    """Bind each run's origin where one deletion cannot take it away.

    Before, a foreign run's origin was only an ``origin:<how>`` event after its
    ``ingest`` event: deleting the ledger's last event (invisible without
    ``verify-store --anchor``) made a just-ingested foreign run look recorded here.  Now
    the origin is in the run's row (``runs.origin``, added here) and in the event that
    records its manifest (``ingest:<origin>``; see ``storage.integrity``).  Every run
    already stored gets its row's origin and an ``ingest:<origin>`` event naming its
    manifest, with the origin its ledger shows:

    - the ``how`` of its ``origin:<how>`` event;
    - ``local`` when it has none and the ledger proves none was cut: the chain is intact,
      and an event follows its ``ingest`` that is not part of the same ingest (an
      ingest's ``origin:`` event came last in its transaction, after its state events);
    - ``unproven`` otherwise (the run whose ingest ends the ledger, or every such run of
      a broken chain): the local backend asks before running it.

    Foreign runs stored before origin events existed have none and read as local: the
    ledger of that time did not record the difference.
    """
    from storage import ledger

    conn = db.conn
    if "origin" not in {r[1] for r in conn.execute("PRAGMA table_info(runs)")}:
        conn.execute("ALTER TABLE runs ADD COLUMN origin TEXT")
    runs = conn.execute("SELECT id, manifest_sha256, origin FROM runs ORDER BY rowid").fetchall()
    if not runs:
        return
    bound = {
        sha: str(kind)[len(ledger.INGEST_PREFIX) :]
        for sha, kind in conn.execute(
            "SELECT subject_sha256, kind FROM events WHERE substr(kind, 1, 7) = 'ingest:'"
        )
    }
    ingested = {
        s for (s,) in conn.execute("SELECT subject_sha256 FROM events WHERE kind = 'ingest'")
    }
    told: dict[str, str] = {}
    for run_id, kind in conn.execute(
        "SELECT run_id, kind FROM events WHERE substr(kind, 1, 7) = 'origin:' ORDER BY seq"
    ):
        if str(kind)[7:] not in (ledger.LOCAL, ledger.UNPROVEN):
            told.setdefault(run_id, str(kind)[7:])
    _, broken = ledger.walk(conn)
    cut = _last_ingest(conn)
    origins: list[tuple[str, str]] = []
    events: list[tuple[str, str | None, str | None]] = []
    for run_id, sha, have in runs:
        if sha in bound:  # recorded by a version that binds it already
            if have is None:
                origins.append((run_id, bound[sha]))
            continue
        if run_id in told:
            origin = told[run_id]
        elif broken is None and sha in ingested and run_id != cut:
            origin = ledger.LOCAL
        else:
            origin = ledger.UNPROVEN
        origins.append((run_id, origin))
        events.append(ledger.ingest_event(run_id, sha, origin))
    if origins:  # one UPDATE statement: the full-text trigger then writes one segment
        conn.execute("CREATE TEMP TABLE _run_origins (id TEXT PRIMARY KEY, origin TEXT NOT NULL)")
        conn.executemany("INSERT INTO temp._run_origins (id, origin) VALUES (?, ?)", origins)
        conn.execute(
            "UPDATE runs SET origin = (SELECT o.origin FROM temp._run_origins o"
            " WHERE o.id = runs.id) WHERE id IN (SELECT id FROM temp._run_origins)"
        )
        conn.execute("DROP TABLE temp._run_origins")
    ledger.append_many(conn, events)


def _last_ingest(conn: sqlite3.Connection) -> str | None:
    """The run whose bare ``ingest`` event is followed only by state events of its own
    ingest (gap counts, locations), if any: an ``origin:`` event after them may have
    been cut off the ledger's end, so nothing proves that run local."""
    group = None
    for kind, run_id in conn.execute("SELECT kind, run_id FROM events ORDER BY seq DESC"):
        if kind in ("state:gaps", "state:locations"):
            if group is not None and run_id != group:
                return None
            group = run_id
            continue
        if kind == "ingest" and (group is None or run_id == group):
            return str(run_id)
        return None
    return None


ID_TRIGRAMS = """
CREATE VIRTUAL TABLE [runs_ids] USING FTS5 ([id], content=[runs], tokenize='trigram');
CREATE TRIGGER [runs_ids_ai] AFTER INSERT ON [runs] BEGIN
  INSERT INTO [runs_ids] (rowid, [id]) VALUES (new.rowid, new.[id]);
END;
CREATE TRIGGER [runs_ids_ad] AFTER DELETE ON [runs] BEGIN
  INSERT INTO [runs_ids] ([runs_ids], rowid, [id]) VALUES ('delete', old.rowid, old.[id]);
END;
CREATE TRIGGER [runs_ids_au] AFTER UPDATE OF [id] ON [runs] BEGIN
  INSERT INTO [runs_ids] ([runs_ids], rowid, [id]) VALUES ('delete', old.rowid, old.[id]);
  INSERT INTO [runs_ids] (rowid, [id]) VALUES (new.rowid, new.[id]);
END;
"""


@migrations()
def m006_run_id_trigrams(db: Database) -> None:
    """A trigram index of run ids, so that a search finds a run by any part of its id
    (ids are time-ordered: the part a person remembers is in the middle).  A scan of
    100,000 ids for a substring costs 13-50 ms a query, a trigram lookup under 1.5 ms
    (``bench/bench_tui.py``)."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs_ids'").fetchone():
        return
    _script(db, ID_TRIGRAMS)
    db.execute("INSERT INTO [runs_ids] ([runs_ids]) VALUES ('rebuild')")


# every append-only table, whichever migration made it (m001 makes APPEND_ONLY's)
FACT_TABLES = APPEND_ONLY + BISECT_TABLES


def database(conn: sqlite3.Connection) -> Database:
    """sqlite-utils' ``Database`` over ``conn``: sqlite_utils is imported here, on first
    use, without its optional pandas/numpy (``storage._import_sqlite_utils``)."""
    from storage import _import_sqlite_utils

    _import_sqlite_utils()
    from sqlite_utils import Database

    return Database(conn)


def apply(db: Database) -> None:
    """Bring ``db`` up to the current schema."""
    from sqlite_utils.migrations import Migrations

    runner = Migrations(migrations.name)
    for step in migrations.steps:
        runner()(step)
    runner.apply(db)

"""Attack B16 of the security review: a run's origin cannot be erased by one deletion.

A run that came in through ``ingest`` or an importer is foreign: the local backend does
not run its command on this host unasked.  The origin used to be only an
``origin:<how>`` event, the last event of its ingest; someone with write access to the
store file could drop the ledger's triggers, delete that last event, restore them, and
``verify-store`` (without ``--anchor``, which is the only thing that sees a cut tail)
said intact while the local backend ran the foreign command.  Now the origin is in the
run's row and in the ledger event that records its manifest, and a run is local only on
positive proof.  Each attack is staged with a plain SQLite connection, as in
``test_store_integrity``; the CLI is the real one.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from replay_tui.replay.consent import run_origin
from storage import integrity, ledger
from storage.manifest import manifest_from_data
from storage.records import GapCounts
from storage.store import IngestItem, Location, RunStore, StoreError
from tests.conftest import MakeManifest
from tests.helpers.foreign import host_claim, ingested
from tests.support.training import replay_tui


def _tamper(path: Path, *sql: tuple[str, tuple[object, ...]]) -> None:
    """Run ``sql`` with every trigger of the store dropped, then put the triggers back
    exactly as they were (so the trigger check sees nothing)."""
    conn = sqlite3.connect(path, isolation_level=None)
    triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER [{name}]")
    for stmt, args in sql:
        conn.execute(stmt, args)
    for _, create in triggers:
        conn.execute(create)
    conn.close()


def _problems(store: Path) -> list[str]:
    proc = replay_tui(store, "verify-store", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert not report["ok"]
    return list(report["problems"])


def _refused(store: Path, repo: Path, rid: str, marker: Path) -> str:
    proc = replay_tui(store, "replay", rid, "--backend", "local", "--repo", str(repo))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "--allow-foreign-on-host" in proc.stderr
    assert not marker.exists()
    return proc.stderr


def test_b16_deleting_the_last_event_does_not_make_a_foreign_run_local(
    repo: Path, store: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    rid = ingested(store, tmp_path, host_claim(repo, ["bash", "-c", f"touch {marker}"]))
    with RunStore(store) as s:
        last = s.events()[-1]
        assert (last.kind, last.run_id) == ("origin:ingest", rid)  # what the attack deletes
        assert s.verify().ok
    _tamper(store, ("DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)", ()))
    with RunStore(store) as s:
        assert all(e.kind != "origin:ingest" for e in s.events())  # it is gone
        # (a) still not local: the origin is in the event that records the manifest
        assert run_origin(s, rid) == "ingest"
        assert integrity.origin_of(s.conn, rid).origin == "ingest"
    # (b) the local backend refuses it, saying why
    err = _refused(store, repo, rid, marker)
    assert f"run {rid} came into this store through ingest" in err
    assert "without a sandbox" in err and "touch" in err
    # (c) verify-store, without an anchor, reports it
    problems = _problems(store)
    assert any(f"run {rid}: its origin:ingest event is missing" in p for p in problems), problems
    proc = replay_tui(store, "verify-store")
    assert proc.returncode == 1 and "STORE ALTERED" in proc.stdout


def test_cutting_the_whole_ingest_and_editing_the_row_leaves_the_origin_unproven(
    repo: Path, store: Path, tmp_path: Path
) -> None:
    """The forger cuts every event of the ingest (the one naming the manifest too) and
    writes 'local' into the row: nothing proves the run local, so it is refused."""
    marker = tmp_path / "pwned"
    rid = ingested(store, tmp_path, host_claim(repo, ["bash", "-c", f"touch {marker}"]))
    with RunStore(store) as s:
        first = min(e.seq for e in s.events() if e.run_id == rid)
    _tamper(
        store,
        ("DELETE FROM events WHERE seq >= ?", (first,)),
        ("UPDATE runs SET origin = 'local' WHERE id = ?", (rid,)),
    )
    with RunStore(store) as s:
        found = integrity.origin_of(s.conn, rid)
        assert found.origin == integrity.UNPROVEN and not found.local
        assert found.why and "no ledger event" in found.why
    # The manifest itself is refused when it is read: no intact event records it.
    proc = replay_tui(store, "replay", rid, "--backend", "local", "--repo", str(repo))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and not marker.exists()
    assert f"no intact ledger event records the manifest of run {rid}" in proc.stderr
    assert "verify-store --anchor" in proc.stderr
    problems = _problems(store)
    assert any(f"run {rid}: no ledger event records its manifest" in p for p in problems)
    assert any(f"manifest of run {rid} has no ledger event" in p for p in problems)


def test_editing_the_row_origin_to_local_is_caught(repo: Path, store: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    rid = ingested(store, tmp_path, host_claim(repo, ["bash", "-c", f"touch {marker}"]))
    _tamper(store, ("UPDATE runs SET origin = 'local' WHERE id = ?", (rid,)))
    with RunStore(store) as s:
        assert run_origin(s, rid) == "ingest"  # the ledger's foreign claim wins
    assert "came into this store through ingest" in _refused(store, repo, rid, marker)
    problems = _problems(store)
    want = f"run {rid}: runs.origin was edited (the row says local, the ledger says ingest)"
    assert want in problems, problems


def test_an_escape_sequence_written_into_the_row_is_not_printed(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    with RunStore(store_path) as s:
        rid = s.ingest(manifest_from_data(make_manifest()), origin="ingest").run_id
    _tamper(store_path, ("UPDATE runs SET origin = ? WHERE id = ?", ("\x1b[2Jlocal", rid)))
    with RunStore(store_path) as s:
        assert run_origin(s, rid) == "ingest"
        rep = s.verify()
    assert not rep.ok and not any("\x1b" in p for p in rep.problems)
    assert any("runs.origin was edited" in p and "\\x1b" in p for p in rep.problems)


def test_rewriting_the_ingest_event_in_place_is_not_proof(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    """``ingest:ingest`` rewritten to ``ingest:local`` (hash recomputed) in the middle of
    the chain, and the row edited to match: the next event no longer links to it."""
    with RunStore(store_path) as s:
        rid = s.ingest(manifest_from_data(make_manifest()), origin="ingest").run_id
        s.ingest(manifest_from_data(make_manifest()))  # something after it
        e = next(e for e in s.events() if e.kind == "ingest:ingest")
    h = ledger.event_hash(e.seq, e.ts, "ingest:local", e.run_id, e.subject_sha256, e.prev_hash)
    _tamper(
        store_path,
        ("UPDATE events SET kind = 'ingest:local', hash = ? WHERE seq = ?", (h, e.seq)),
        ("UPDATE runs SET origin = 'local' WHERE id = ?", (rid,)),
    )
    with RunStore(store_path) as s:
        found = integrity.origin_of(s.conn, rid)
        assert found.origin == integrity.UNPROVEN, found
        assert not s.verify().ok


def test_a_run_recorded_here_replays_locally_with_no_question(repo: Path, store: Path) -> None:
    proc = replay_tui(
        store, "record", "--json", "--", sys.executable, "-c", "print('hi')", cwd=repo
    )
    assert proc.returncode == 0, proc.stderr
    rid = json.loads(proc.stdout)["run_id"]
    with RunStore(store) as s:
        assert integrity.origin_of(s.conn, rid) == integrity.Origin(integrity.LOCAL)
        assert s.verify().ok
    proc = replay_tui(store, "replay", rid, "--backend", "local")
    assert "came into this store" not in proc.stderr
    assert "could not be proven" not in proc.stderr
    assert proc.returncode in (0, 1), proc.stderr  # it ran (a verdict, not a refusal)
    with RunStore(store) as s:  # the replay run it stored is local too
        replays = [r for r in s.list_runs() if r.replay_of == rid]
        assert replays and all(run_origin(s, r.id) == integrity.LOCAL for r in replays)
        assert s.verify().ok


def test_ingest_batches_bind_origins_without_a_query_per_run(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    selects: list[str] = []
    with RunStore(store_path) as s:
        for n, origin in ((5, "local"), (80, "import:mlflow")):
            items: list[IngestItem] = [
                (manifest_from_data(make_manifest()), None, (), {}) for _ in range(n)
            ]
            s.conn.set_trace_callback(selects.append)
            results = s.ingest_many(items, origin=origin)
            s.conn.set_trace_callback(None)
            assert len([q for q in selects if q.lstrip().upper().startswith("SELECT")]) <= 3
            selects.clear()
            for r in results:
                assert run_origin(s, r.run_id) == origin
        assert s.verify().ok
        with pytest.raises(StoreError, match="reserved"):
            s.ingest(manifest_from_data(make_manifest()), origin=integrity.UNPROVEN)


# -- stores written before origins were bound ---------------------------------------------


def _as_before_m005(path: Path) -> None:
    """Make ``path`` the store an older version wrote: bare ``ingest`` events (the chain
    rehashed), no ``runs.origin`` column, ``m005_run_origin`` not applied."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    triggers = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'"
    ).fetchall()
    for name, _ in triggers:
        conn.execute(f"DROP TRIGGER [{name}]")
    rows = conn.execute(
        "SELECT seq, ts, kind, run_id, subject_sha256 FROM events ORDER BY seq"
    ).fetchall()
    conn.execute("DELETE FROM events")
    prev = ledger.GENESIS
    for seq, ts, kind, run_id, subject in rows:
        kind = "ingest" if kind.startswith("ingest:") else kind
        h = ledger.event_hash(seq, ts, kind, run_id, subject, prev)
        conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
            (seq, ts, kind, run_id, subject, prev, h),
        )
        prev = h
    for _, create in triggers:
        conn.execute(create)
    conn.execute("ALTER TABLE runs DROP COLUMN origin")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm005_run_origin'")
    conn.execute("COMMIT")
    conn.close()


def _old_store(path: Path, make_manifest: MakeManifest, *, last: str) -> dict[str, str]:
    """Runs as an older version stored them; ``last`` is the origin of the last one."""
    ids = {}
    with RunStore(path) as s:
        for name, origin in (
            ("local", "local"),
            ("ingested", "ingest"),
            ("mlflow", "import:mlflow"),
            ("later-local", "local"),
            ("last", last),
        ):
            m = manifest_from_data(make_manifest())
            s.ingest(
                m,
                gaps=GapCounts(0, 1, 0),
                locations=[Location("repo", "root", "/srv/repo")],
                origin=origin,
            )
            ids[name] = m.run_id
    _as_before_m005(path)
    with sqlite3.connect(path) as conn:
        assert (
            conn.execute("SELECT count(*) FROM events WHERE kind LIKE 'ingest:%'").fetchone()[0]
            == 0
        )
        assert "origin" not in {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    return ids


def test_an_old_store_migrates_with_the_right_origins(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    ids = _old_store(store_path, make_manifest, last="import:wandb")
    with sqlite3.connect(store_path) as conn:
        before = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    with RunStore(store_path) as s:
        origins = {name: run_origin(s, rid) for name, rid in ids.items()}
        assert origins == {
            "local": "local",
            "ingested": "ingest",
            "mlflow": "import:mlflow",
            "later-local": "local",
            "last": "import:wandb",
        }
        rows = dict(s.conn.execute("SELECT id, origin FROM runs").fetchall())
        assert {name: rows[rid] for name, rid in ids.items()} == origins
        assert len(s.events()) == before + len(ids)  # one ingest:<origin> event a run
        rep = s.verify()
        assert rep.ok, rep.problems
    with RunStore(store_path) as s:  # applied once
        assert len(s.events()) == before + len(ids)


def test_an_old_store_whose_last_run_cannot_be_proven_local_asks(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    """The last run of an old store may have had its ``origin:`` event cut off the end
    before the upgrade: nothing proves it local, so it is ``unproven`` (not local)."""
    ids = _old_store(store_path, make_manifest, last="ingest")
    _tamper(store_path, ("DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)", ()))
    with RunStore(store_path) as s:
        assert run_origin(s, ids["last"]) == integrity.UNPROVEN
        assert run_origin(s, ids["later-local"]) == integrity.LOCAL  # followed by more
        assert run_origin(s, ids["ingested"]) == "ingest"
        rep = s.verify()
        assert rep.ok, rep.problems  # what the migration wrote is consistent


def test_an_old_store_with_a_broken_chain_proves_no_run_local(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    ids = _old_store(store_path, make_manifest, last="local")
    _tamper(store_path, ("DELETE FROM events WHERE seq = 2", ()))
    with RunStore(store_path) as s:
        assert run_origin(s, ids["local"]) == integrity.UNPROVEN
        assert run_origin(s, ids["later-local"]) == integrity.UNPROVEN
        assert run_origin(s, ids["mlflow"]) == "import:mlflow"
        assert not s.verify().ok

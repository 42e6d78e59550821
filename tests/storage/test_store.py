"""The run store on real SQLite files: lookup, idempotence, queries, tamper evidence,
concurrent writers and a writer killed with SIGKILL."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import storage.store as store_module
from storage.manifest import RunManifest, manifest_from_data
from storage.store import (
    AmbiguousRun,
    ConflictError,
    RunNotFound,
    RunQuery,
    RunStore,
    SearchReach,
    StoreError,
    fts_query,
)
from tests.conftest import REPO_ROOT, MakeManifest, RunCli, subprocess_env
from tests.support.factories import realistic_manifest


@pytest.fixture
def store(store_path: Path) -> Iterator[RunStore]:
    with RunStore(store_path) as s:
        yield s


def ingest(store: RunStore, data: dict[str, Any]) -> str:
    return store.ingest(manifest_from_data(data)).run_id


def table_counts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'runs_fts%'"
            )
        ]
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    finally:
        conn.close()


def raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection that goes around RunStore entirely."""
    return sqlite3.connect(path, isolation_level=None)


# -- lookup -----------------------------------------------------------------------------

IDS = (
    "01JRUNAAAA00000000000000A1",
    "01JRUNAAAA00000000000000B2",
    "01JRUNBBBB00000000000000C3",
)


def test_lookup_by_full_id_and_unique_prefix(store: RunStore, make_manifest: MakeManifest) -> None:
    for rid in IDS:
        ingest(store, make_manifest(run_id=rid))
    assert store.resolve(IDS[2]) == IDS[2]
    assert store.resolve("01JRUNB") == IDS[2]
    assert store.resolve("01JRUNAAAA00000000000000A") == IDS[0]
    assert store.get_run("01JRUNAAAA00000000000000B").id == IDS[1]
    assert store.manifest("01JRUNB").run_id == IDS[2]


def test_ambiguous_prefix_lists_the_candidates(
    store: RunStore, make_manifest: MakeManifest
) -> None:
    for rid in IDS:
        ingest(store, make_manifest(run_id=rid))
    with pytest.raises(AmbiguousRun) as err:
        store.resolve("01JRUNA")
    assert err.value.candidates == [IDS[0], IDS[1]]
    assert IDS[0] in str(err.value) and IDS[1] in str(err.value)
    assert IDS[2] not in str(err.value)
    with pytest.raises(AmbiguousRun):
        store.resolve("01JRUN")


def test_unknown_and_malformed_references(store: RunStore, make_manifest: MakeManifest) -> None:
    ingest(store, make_manifest(run_id=IDS[0]))
    for ref in ("01JRUNZ", "", "  ", "01JRUN%", "01JRUN_' OR 1=1 --", "x" * 65):
        with pytest.raises(RunNotFound):
            store.resolve(ref)


def test_cli_show_by_prefix_and_ambiguous_prefix(
    store_path: Path, make_manifest: MakeManifest, cli: RunCli
) -> None:
    with RunStore(store_path) as s:
        for rid in IDS:
            ingest(s, make_manifest(run_id=rid))
    proc = cli("show", "--json", "01JRUNB")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["run"]["id"] == IDS[2]
    assert shown["manifest"]["run_id"] == IDS[2]

    proc = cli("show", "01JRUNA")
    assert proc.returncode == 2
    assert "ambiguous" in proc.stderr
    assert IDS[0] in proc.stderr and IDS[1] in proc.stderr

    proc = cli("show", "01JRUNQ")
    assert proc.returncode == 2
    assert "no run matches" in proc.stderr


# -- idempotence and conflicts ------------------------------------------------------------


def test_same_manifest_twice_is_a_no_op(
    store: RunStore, store_path: Path, make_manifest: MakeManifest
) -> None:
    data = make_manifest()
    m = manifest_from_data(data)
    first = store.ingest(m)
    counts = table_counts(store_path)
    events = store.events()
    again = store.ingest(m)
    sealed_again = store.ingest(m.sealed())  # sealed or not, the content is the same
    assert first.created and not again.created and not sealed_again.created
    assert first.manifest_sha256 == again.manifest_sha256 == sealed_again.manifest_sha256
    assert table_counts(store_path) == counts
    assert store.events() == events
    # in one batch too
    results = store.ingest_many([(m, None, (), {}), (m, None, (), {})])
    assert [r.created for r in results] == [False, False]
    assert store.events() == events


def test_cli_ingesting_the_same_file_twice(
    store_path: Path, tmp_path: Path, make_manifest: MakeManifest, cli: RunCli
) -> None:
    f = tmp_path / "m.json"
    f.write_text(json.dumps(make_manifest()))
    assert cli("ingest", f).returncode == 0
    counts = table_counts(store_path)
    proc = cli("ingest", f)
    assert proc.returncode == 0, proc.stderr
    assert "already stored (unchanged)" in proc.stdout
    assert table_counts(store_path) == counts


def test_different_manifest_under_existing_run_id_is_refused(
    store: RunStore, store_path: Path, make_manifest: MakeManifest
) -> None:
    data = make_manifest()
    ingest(store, data)
    counts = table_counts(store_path)
    events = store.events()
    changed = dict(data, status="failed")
    with pytest.raises(ConflictError) as err:
        ingest(store, changed)
    assert data["run_id"] in str(err.value)
    # a batch that holds a new run and a conflicting one stores neither
    new = make_manifest()
    with pytest.raises(ConflictError):
        store.ingest_many(
            [(manifest_from_data(new), None, (), {}), (manifest_from_data(changed), None, (), {})]
        )
    assert table_counts(store_path) == counts
    assert store.events() == events
    assert store.manifest(data["run_id"]).status == data["status"]
    with pytest.raises(RunNotFound):
        store.resolve(new["run_id"])


def test_cli_conflict_exits_2_and_leaves_the_file_unchanged(
    store_path: Path, tmp_path: Path, make_manifest: MakeManifest, cli: RunCli
) -> None:
    data = make_manifest()
    with RunStore(store_path) as s:
        ingest(s, data)
    before = store_path.read_bytes()
    f = tmp_path / "conflict.json"
    f.write_text(json.dumps(dict(data, name="renamed afterwards")))
    proc = cli("ingest", f)
    assert proc.returncode == 2
    assert data["run_id"] in proc.stderr and "different manifest" in proc.stderr
    assert store_path.read_bytes() == before


def test_the_checkpoint_finds_the_store_after_a_change_of_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opened by a relative path, then the process changes folder: the checkpoint
    thread still copies into that store (the file SQLite opened), and creates no file
    in the new folder."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    with RunStore(Path("runs.db")) as store:
        monkeypatch.chdir(tmp_path / "b")
        for start in (0, 300):
            batch = [realistic_manifest(i, seed=13) for i in range(start, start + 300)]
            store.ingest_many([(manifest_from_data(d), None, (), {}) for d in batch])
            store.settle()
        assert store.count_runs() == 600
        db = tmp_path / "a" / "runs.db"
        assert db.stat().st_size > 8_000_000  # ~20 KB a run, copied into the database file
        assert not list((tmp_path / "b").iterdir())


def test_a_large_batch_is_committed_before_its_pages_are_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of 300 manifests (about 1,500 pages, past SQLite's 1,000-page automatic
    checkpoint) commits without copying its pages into the database file: the copy runs
    in a thread after the commit.  Here that thread is held until the batch is read back
    from a second connection, so the database file must still be small (before, the
    commit itself copied every page).  Once let go, the pages are in the file."""
    held = threading.Event()
    entered = threading.Event()
    run = store_module._Checkpointer._run
    started: list[str] = []

    def held_run(self: Any) -> None:
        started.append(threading.current_thread().name)
        entered.set()
        assert held.wait(60), "the test never let the checkpoint go"
        run(self)

    monkeypatch.setattr(store_module._Checkpointer, "_run", held_run)
    path = tmp_path / "big.db"
    models = [manifest_from_data(realistic_manifest(i, seed=11)) for i in range(300)]
    with RunStore(path) as store:
        try:
            results = store.ingest_many([(m, None, (), {}) for m in models])
            assert all(r.created for r in results)
            assert entered.wait(60)  # the thread may start after ingest_many returns
            assert started == ["store-checkpoint"]
            other = sqlite3.connect(path)
            assert other.execute("SELECT count(*) FROM runs").fetchone() == (300,)
            other.close()
            small = path.stat().st_size
            wal = path.with_name(path.name + "-wal").stat().st_size
            assert small < 1_000_000 < wal, (small, wal)  # the batch is in the WAL alone
        finally:
            held.set()  # let it go (close() waits for it, also after a failed assert)
        store.settle()
        assert path.stat().st_size > 4_000_000  # ~20 KB a run, now in the database file
        # the next large batch waits for nothing and starts the WAL over
        more = [manifest_from_data(realistic_manifest(i, seed=12)) for i in range(300, 400)]
        store.ingest_many([(m, None, (), {}) for m in more])
        assert store.count_runs() == 400
        store.settle()
        assert path.with_name(path.name + "-wal").stat().st_size == wal  # not longer
    with RunStore(path) as store:
        assert store.count_runs() == 400
        assert store.verify().ok


# -- listing, search, counting, paging -----------------------------------------------------


@pytest.fixture
def thirty(store: RunStore) -> list[dict[str, Any]]:
    runs = [realistic_manifest(i, seed=3) for i in range(30)]
    store.ingest_many([(manifest_from_data(d), None, (), {}) for d in runs])
    return runs


def newest_first(runs: list[dict[str, Any]]) -> list[str]:
    return [d["run_id"] for d in sorted(runs, key=lambda d: (d["started_at"], d["run_id"]))][::-1]


def test_list_is_newest_first_and_pages_cleanly(
    store: RunStore, thirty: list[dict[str, Any]]
) -> None:
    expected = newest_first(thirty)
    assert [r.id for r in store.list_runs(RunQuery(limit=100))] == expected
    pages: list[str] = []
    for offset in range(0, 35, 7):
        pages += [r.id for r in store.list_runs(RunQuery(limit=7, offset=offset))]
    assert pages == expected
    assert store.count_runs() == 30
    oldest = store.list_runs(RunQuery(limit=3, descending=False))
    assert [r.id for r in oldest] == expected[::-1][:3]
    with pytest.raises(StoreError):
        store.list_runs(RunQuery(order="id; DROP TABLE runs"))  # type: ignore[arg-type]


def test_search_by_name_word(store: RunStore, thirty: list[dict[str, Any]]) -> None:
    model = thirty[4]["config"]["model"]["arch"]
    word = model.split("-")[0]  # "gpt2-small" -> "gpt2": a name word
    expected = {d["run_id"] for d in thirty if word in d["name"].split("-")}
    assert expected
    found = {r.id for r in store.list_runs(RunQuery(search=word, limit=100))}
    assert found == expected
    assert store.count_runs(RunQuery(search=word)) == len(expected)
    # words are prefixes and all must match
    both = {
        d["run_id"]
        for d in thirty
        if word in d["name"].split("-") and d["config"]["data"]["name"] in d["name"]
    }
    dataset = thirty[4]["config"]["data"]["name"]
    two_words = {r.id for r in store.list_runs(RunQuery(search=f"{word} {dataset[:4]}"))}
    assert thirty[4]["run_id"] in two_words
    assert two_words <= both


def test_search_by_commit_prefix(store: RunStore, thirty: list[dict[str, Any]]) -> None:
    target = thirty[17]
    hits = store.list_runs(RunQuery(search=target["code"]["commit"][:10]))
    assert [r.id for r in hits] == [target["run_id"]]
    hits = store.list_runs(RunQuery(search=target["code"]["commit"]))
    assert [r.id for r in hits] == [target["run_id"]]
    assert hits[0].commit == target["code"]["commit"]


def test_search_by_tag(store: RunStore, thirty: list[dict[str, Any]]) -> None:
    owner = thirty[9]["tags"]["owner"]
    expected = {d["run_id"] for d in thirty if d["tags"]["owner"] == owner}
    assert {r.id for r in store.list_runs(RunQuery(search=owner))} == expected
    team = thirty[9]["tags"]["team"]
    expected_team = {d["run_id"] for d in thirty if d["tags"]["team"] == team}
    assert {r.id for r in store.list_runs(RunQuery(search=f"team {team}"))} == expected_team


def test_search_text_is_never_fts_syntax(store: RunStore, thirty: list[dict[str, Any]]) -> None:
    for text in ('"', "*", "a OR b", "NEAR(x y)", "col:val", "-x", "^", "'; DROP TABLE runs;--"):
        store.list_runs(RunQuery(search=text))
        store.count_runs(RunQuery(search=text))
    assert store.count_runs() == 30
    assert store.count_runs(RunQuery(search="!!!")) == 30  # no words: no filter


def test_a_search_that_matches_every_run_filters_nothing(
    store: RunStore, thirty: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every image digest starts ``sha256``: the prefix ``sha`` matches every run, so it
    is no filter at all (the same pages and count as no search, no match set built);
    a search that matches some runs stays a filter, whichever plan pages it."""
    every = store.search_reach(RunQuery(search="sha"))
    assert every == SearchReach(None, common=False, matches=30)
    assert [r.id for r in store.list_runs(RunQuery(search="sha", limit=100))] == newest_first(
        thirty
    )
    assert store.count_runs(RunQuery(search="sha")) == 30
    owner = thirty[9]["tags"]["owner"]
    owned = {d["run_id"] for d in thirty if d["tags"]["owner"] == owner}
    expected = [i for i in newest_first(thirty) if i in owned]
    assert 0 < len(expected) < 30
    some = SearchReach(fts_query(owner), common=False, matches=len(expected))
    assert store.search_reach(RunQuery(search=owner)) == some
    assert [r.id for r in store.list_runs(RunQuery(search=owner, limit=100))] == expected
    monkeypatch.setattr(store_module, "COMMON_MATCHES", 2)  # as if it matched thousands
    assert store.search_reach(RunQuery(search=owner)) == replace(some, common=True)
    assert [r.id for r in store.list_runs(RunQuery(search=owner, limit=100))] == expected
    assert store.count_runs(RunQuery(search=owner)) == len(expected)
    # with another filter the count is the rows', not the search's
    original = RunQuery(search=owner, kind="original")
    assert store.count_runs(original) == len(store.list_runs(replace(original, limit=100)))
    assert store.search_reach(RunQuery(search="zzqx")).fts == fts_query("zzqx")
    assert store.list_runs(RunQuery(search="zzqx")) == []


def test_a_page_and_its_count_read_the_search_matches_once(
    store: RunStore, thirty: list[dict[str, Any]]
) -> None:
    """The runs browser's first page reads what its search matched once, and its count
    reuses that (a second count of 100,000 matches was up to 7 ms a keystroke)."""
    from replay_tui.tui.queries import RunsView, count_runs_view, load_runs_page

    owner = thirty[9]["tags"]["owner"]
    owned = {d["run_id"] for d in thirty if d["tags"]["owner"] == owner}
    expected = [i for i in newest_first(thirty) if i in owned]
    view = RunsView(RunQuery(search=owner))
    statements: list[str] = []
    store.conn.set_trace_callback(statements.append)
    try:
        page = load_runs_page(store, view, limit=100, offset=0, expanded=frozenset())
        counted = count_runs_view(store, view, page.reach)
    finally:
        store.conn.set_trace_callback(None)
    assert [r.id for r in page.records] == expected
    assert counted == (len(expected), len(expected))
    # one count of the matches (the count of replays folded under originals is apart)
    assert sum(s.startswith("SELECT count(*) FROM runs_fts") for s in statements) == 1
    assert count_runs_view(store, view) == counted  # read afresh: the same
    # a reach read for another search is not used for this one
    every = store.search_reach(RunQuery(search="sha"))
    assert [r.id for r in store.list_runs(RunQuery(search=owner, limit=100), every)] == expected
    assert store.count_runs(RunQuery(search=owner), every) == len(expected)


def test_cli_runs_json(store_path: Path, cli: RunCli) -> None:
    runs = [realistic_manifest(i, seed=5) for i in range(12)]
    with RunStore(store_path) as s:
        s.ingest_many([(manifest_from_data(d), None, (), {}) for d in runs])
    proc = cli("runs", "--json", "--limit", "5")
    assert proc.returncode == 0, proc.stderr
    assert [r["id"] for r in json.loads(proc.stdout)] == newest_first(runs)[:5]
    commit = runs[3]["code"]["commit"]
    proc = cli("runs", "--json", "--search", commit[:8])
    assert [r["id"] for r in json.loads(proc.stdout)] == [runs[3]["run_id"]]
    assert cli("runs", "--limit", "0").returncode == 2


# -- verify-store and the append-only triggers -----------------------------------------------


@pytest.fixture
def filled(store_path: Path, make_manifest: MakeManifest) -> list[str]:
    """A closed store with five runs and one fact of every kind."""
    ids = []
    with RunStore(store_path) as s:
        for _ in range(5):
            ids.append(ingest(s, make_manifest()))
        s.put_blob(b"diff --git a/x b/x\n", "diff", ids[0])
        cid = s.add_comparison(
            ids[0], ids[1], "IDENTICAL", {"artifacts": []}, set_verdict_on=ids[0]
        )
        s.add_replay(
            ids[0],
            replay_run=ids[1],
            backend="local",
            status="succeeded",
            verdict="IDENTICAL",
            reason=None,
            duration_s=1.0,
            comparison_id=cid,
            body={"ok": True},
        )
        s.add_noise_floor(ids[0], 3, {"max_metric_gap": 0.0})
        s.add_drill(True, {"runs": ids[:2]})
        s.add_bundle(ids[0], "bundles/x", False, None, {"files": 3})
    return ids


def test_verify_store_accepts_an_intact_store(
    store_path: Path, filled: list[str], cli: RunCli
) -> None:
    with RunStore(store_path) as s:
        rep = s.verify()
        assert rep.ok, rep.problems
        assert rep.manifests == 5 and rep.blobs == 1 and rep.facts == 5
        assert rep.events == 5 + 1 + 5 + 2  # ... and the 2 verdict badges set
    proc = cli("verify-store")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "store intact" in proc.stdout
    proc = cli("verify-store", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["ok"] is True


APPEND_ONLY_PROBES = {
    "manifests": ("UPDATE manifests SET body = body || ' '", "DELETE FROM manifests"),
    "events": ("UPDATE events SET ts = 'x'", "DELETE FROM events"),
    "blobs": ("UPDATE blobs SET data = x'00'", "DELETE FROM blobs"),
    "comparisons": ("UPDATE comparisons SET verdict = 'DIVERGED'", "DELETE FROM comparisons"),
    "replays": ("UPDATE replays SET verdict = 'DIVERGED'", "DELETE FROM replays"),
    "noise_floors": ("UPDATE noise_floors SET times = 9", "DELETE FROM noise_floors"),
    "drills": ("UPDATE drills SET passed = 0", "DELETE FROM drills"),
    "bundles": ("UPDATE bundles SET signed = 1", "DELETE FROM bundles"),
}


@pytest.mark.parametrize("table", sorted(APPEND_ONLY_PROBES))
def test_triggers_refuse_update_and_delete(store_path: Path, filled: list[str], table: str) -> None:
    before = store_path.read_bytes()
    conn = raw(store_path)
    try:
        for sql in APPEND_ONLY_PROBES[table]:
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute(sql)
    finally:
        conn.close()
    assert store_path.read_bytes() == before


def verify_cli(cli: RunCli) -> tuple[int, str]:
    proc = cli("verify-store")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout + proc.stderr


def test_manifest_edited_with_triggers_dropped_is_caught(
    store_path: Path, filled: list[str], cli: RunCli
) -> None:
    victim = filled[2]
    conn = raw(store_path)
    conn.execute("DROP TRIGGER manifests_no_update")
    conn.execute(
        'UPDATE manifests SET body = replace(body, \'"status":"succeeded"\','
        ' \'"status":"failed"\') WHERE run_id = ?',
        (victim,),
    )
    assert conn.total_changes == 1
    conn.close()
    code, out = verify_cli(cli)
    assert code == 1
    assert "STORE ALTERED" in out
    assert f"manifest of run {victim} was altered" in out
    assert "append-only triggers were removed" in out
    for other in filled[:2] + filled[3:]:
        assert other not in out


def test_edit_is_caught_even_when_the_trigger_is_put_back(
    store_path: Path, filled: list[str], cli: RunCli
) -> None:
    victim = filled[0]
    conn = raw(store_path)
    (trigger_sql,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'manifests_no_update'"
    ).fetchone()
    conn.execute("BEGIN")
    conn.execute("DROP TRIGGER manifests_no_update")
    conn.execute(
        "UPDATE manifests SET body = replace(body, '\"dirty\":false', '\"dirty\":true')"
        " WHERE run_id = ?",
        (victim,),
    )
    assert conn.total_changes == 1
    conn.execute(trigger_sql)
    conn.execute("COMMIT")
    conn.close()
    code, out = verify_cli(cli)
    assert code == 1
    assert victim in out and "append-only triggers" not in out


def test_event_rehashed_after_editing_breaks_the_next_link(
    store_path: Path, filled: list[str], cli: RunCli
) -> None:
    from storage.ledger import event_hash

    conn = raw(store_path)
    conn.execute("DROP TRIGGER events_no_update")
    seq, ts, kind, run_id, subject, prev = conn.execute(
        "SELECT seq, ts, kind, run_id, subject_sha256, prev_hash FROM events WHERE seq = 2"
    ).fetchone()
    ts = "2020-01-01T00:00:00.000Z"
    conn.execute(
        "UPDATE events SET ts = ?, hash = ? WHERE seq = 2",
        (ts, event_hash(seq, ts, kind, run_id, subject, prev)),
    )
    conn.close()
    code, out = verify_cli(cli)
    assert code == 1
    assert "event 3 (ingest:local) does not link to the hash of event 2" in out


@pytest.mark.parametrize(
    ("statements", "reported"),
    [
        pytest.param(
            (
                "DROP TRIGGER events_no_update",
                "UPDATE events SET ts = '2020-01-01T00:00:00.000Z' WHERE seq = 3",
            ),
            ("event 3 (ingest:local) was altered",),
            id="event-edited-with-triggers-dropped",
        ),
        pytest.param(
            (
                "DROP TRIGGER manifests_no_delete",
                "DELETE FROM manifests WHERE run_id = :victim",
            ),
            ("the manifest of run {victim}", "missing"),
            id="deleted-manifest",
        ),
        pytest.param(
            (
                "DROP TRIGGER events_no_delete",
                "DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)",
            ),
            ("bundles #1 has no ledger event",),
            id="deleted-last-event",
        ),
        pytest.param(
            ("DROP TRIGGER events_no_delete", "DELETE FROM events WHERE seq = 2"),
            ("event 2 is missing",),
            id="deleted-middle-event",
        ),
        pytest.param(
            (
                "DROP TRIGGER blobs_no_update",
                "DROP TRIGGER comparisons_no_update",
                "UPDATE blobs SET data = CAST('rm -rf /' AS BLOB)",
                "UPDATE comparisons SET body = replace(body, '[]', '[1]')",
            ),
            ("blob", "was altered", "comparisons #1 was altered"),
            id="altered-blob-and-fact",
        ),
        pytest.param(
            ("DROP TRIGGER events_no_delete",),
            ("append-only triggers were removed",),
            id="dropping-a-trigger-alone",
        ),
    ],
)
def test_tampering_by_sql_is_caught(
    store_path: Path,
    filled: list[str],
    cli: RunCli,
    statements: tuple[str, ...],
    reported: tuple[str, ...],
) -> None:
    """Each ``statements`` run straight against the file (``:victim`` is the fifth run);
    ``verify-store`` then fails and says each of ``reported``."""
    victim = filled[4]
    conn = raw(store_path)
    for sql in statements:
        conn.execute(sql, {"victim": victim})
    conn.close()
    code, out = verify_cli(cli)
    assert code == 1
    for text in reported:
        assert text.format(victim=victim) in out


def test_bytes_edited_in_the_file_itself_are_caught(
    store_path: Path, filled: list[str], cli: RunCli
) -> None:
    """No SQL at all: one hex digit of a manifest flipped in the database file."""
    victim = filled[1]
    with RunStore(store_path) as s:
        log_sha = s.manifest(victim).outputs.log_sha256
    assert log_sha is not None
    data = store_path.read_bytes()
    assert data.count(log_sha.encode()) == 1  # only the manifest body holds it
    flipped = log_sha[:-1] + ("0" if log_sha[-1] != "0" else "1")
    store_path.write_bytes(data.replace(log_sha.encode(), flipped.encode()))
    code, out = verify_cli(cli)
    assert code == 1
    assert f"manifest of run {victim} was altered" in out


def test_a_file_that_is_not_a_store_fails_verification(tmp_path: Path, cli: RunCli) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(8192))
    code, out = verify_cli_at(cli, junk)
    assert code == 1
    assert "STORE UNREADABLE" in out


def verify_cli_at(cli: RunCli, path: Path) -> tuple[int, str]:
    proc = cli("verify-store", store=path)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout + proc.stderr


def test_verify_store_without_a_store(tmp_path: Path, cli: RunCli) -> None:
    proc = cli("verify-store", store=tmp_path / "absent.db")
    assert proc.returncode == 2
    assert "no store" in proc.stderr
    assert not (tmp_path / "absent.db").exists()


# -- two writers at once -------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from storage.manifest import manifest_from_data
    from storage.store import RunStore
    from tests.support.factories import realistic_manifest

    path, first, count, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    models = [manifest_from_data(realistic_manifest(i, history_steps=10))
              for i in range(first, first + count)]
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    store = RunStore(path)
    for m in models:
        store.ingest(m)  # one transaction per manifest: the most interleaving
    store.close()
    print("done", flush=True)
    """
)


def test_two_processes_ingesting_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"  # does not exist yet: both processes also race to create it
    go = tmp_path / "go"
    n = 1000
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(k * n), str(n), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
            cwd=REPO_ROOT,
        )
        for k in range(2)
    ]
    for p in procs:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready", p.stderr.read() if p.stderr else ""
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        assert "done" in out

    expected = {realistic_manifest(i)["run_id"] for i in range(2 * n)}
    with RunStore(path) as s:
        assert s.count_runs() == 2 * n
        stored = {r.id for r in s.list_runs(RunQuery(limit=10 * n))}
        assert stored == expected
        events = s.events()
        assert [e.seq for e in events] == list(range(1, 2 * n + 1))
        assert {e.run_id for e in events if e.kind == "ingest:local"} == expected
        rep = s.verify()
        assert rep.ok, rep.problems[:5]
        assert rep.manifests == 2 * n
    # the two writers really overlapped: their events interleave in the ledger
    first_half = {realistic_manifest(i)["run_id"] for i in range(n)}
    switches = sum(
        1
        for a, b in itertools.pairwise(events)
        if (a.run_id in first_half) != (b.run_id in first_half)
    )
    assert switches >= 1


# -- SIGKILL in the middle of ingesting -----------------------------------------------------

KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from storage import ledger
    from storage.manifest import manifest_from_data
    from storage.store import RunStore
    from tests.support.factories import realistic_manifest

    path, first, count, die_inside = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    def models():
        for i in range(first, first + count):
            yield manifest_from_data(realistic_manifest(i, history_steps=20)).sealed()
    if die_inside != "-":
        # Die inside the transaction of this run: after its manifest, run, artifact and
        # metric rows are written, while chaining its ledger event, before COMMIT.
        real_hash = ledger.event_hash
        def event_hash(seq, ts, kind, run_id, subject, prev):
            if run_id == die_inside:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_hash(seq, ts, kind, run_id, subject, prev)
        ledger.event_hash = event_hash
    store = RunStore(path)
    print("ready", flush=True)
    for m in models():
        store.ingest(m)
        print(m.run_id, flush=True)
    """
)


def check_after_kill(path: Path) -> set[str]:
    """The store a killed writer left: intact, consistent, every manifest readable."""
    with RunStore(path) as s:
        rep = s.verify()
        assert rep.ok, rep.problems[:5]
        ingest_events = [e for e in s.events() if e.kind == "ingest:local"]
        assert s.count_runs() == len(ingest_events) == rep.manifests
        ids = {r.id for r in s.list_runs(RunQuery(limit=100_000))}
        assert ids == {e.run_id for e in ingest_events}
        for rid in ids:
            m = s.manifest(rid)
            assert isinstance(m, RunManifest) and m.run_id == rid
            assert m.integrity.manifest_sha256 == m.compute_sha256()
        return ids


def test_sigkill_at_a_random_moment_leaves_an_intact_store(store_path: Path, cli: RunCli) -> None:
    landed: set[str] = set()
    for attempt, delay in enumerate((0.05, 0.17, 0.31)):
        first = str(attempt * 5000)
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, str(store_path), first, "5000", "-"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
            cwd=REPO_ROOT,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        reported = [proc.stdout.readline().strip() for _ in range(20)]  # 20 have landed
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
        # read() and not communicate(): communicate reads the pipe itself and would miss
        # the lines readline() had already buffered (ids reported, then counted as not)
        reported += proc.stdout.read().split()
        assert proc.stderr is not None
        proc.stderr.read()
        ids = check_after_kill(store_path)
        assert set(reported) | landed <= ids  # everything reported as stored is there
        assert len(ids - landed - set(reported)) <= 1  # at most the one being committed
        landed = ids
    proc_cli = cli("verify-store")
    assert proc_cli.returncode == 0, proc_cli.stdout


def test_sigkill_inside_the_transaction_leaves_no_trace_of_that_run(
    store_path: Path, cli: RunCli
) -> None:
    victim = realistic_manifest(25)["run_id"]
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(store_path), "0", "100", victim],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO_ROOT,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert store_path.with_name("store.db-wal").exists()  # killed, so never checkpointed
    ids = check_after_kill(store_path)
    assert ids == {realistic_manifest(i)["run_id"] for i in range(25)}
    conn = raw(store_path)
    for table in ("manifests", "artifacts", "metrics", "runs_fts"):
        column = "run_id" if table != "runs_fts" else "name"
        value = victim if table != "runs_fts" else realistic_manifest(25)["name"]
        sql = f"SELECT count(*) FROM {table} WHERE {column} = ?"
        assert conn.execute(sql, (value,)).fetchone()[0] == (table == "runs_fts") * sum(
            realistic_manifest(i)["name"] == value for i in range(25)
        )
    conn.close()
    proc_cli = cli("verify-store")
    assert proc_cli.returncode == 0, proc_cli.stdout
    # and the store takes new writes afterwards, the victim included
    with RunStore(store_path) as s:
        s.ingest(manifest_from_data(realistic_manifest(25, history_steps=20)))
        assert s.verify().ok


def test_anchor_catches_a_consistent_rewrite_of_the_ledger(
    store_path: Path, make_manifest: MakeManifest, cli: RunCli
) -> None:
    with RunStore(store_path) as s:
        for i in range(3):
            ingest(s, make_manifest(index=i))
    noted = json.loads(cli("verify-store", "--json").stdout)
    assert noted["ok"] and noted["head"].startswith("3:")
    anchor = noted["head"]
    # A careful forger: rewrite the first run's manifest and every hash after it, so the
    # store is consistent again with itself.
    conn = raw(store_path)
    for table in ("manifests", "events"):
        conn.execute(f"DROP TRIGGER {table}_no_update")
    run_id, body, old_sha = conn.execute(
        "SELECT run_id, body, sha256 FROM manifests ORDER BY rowid LIMIT 1"
    ).fetchone()
    data = json.loads(body)
    data["name"] = "forged"
    data.pop("integrity")
    _, new_sha, new_body = manifest_from_data(data).sealed_json()
    conn.execute(
        "UPDATE manifests SET sha256 = ?, body = ? WHERE run_id = ?", (new_sha, new_body, run_id)
    )
    conn.execute(  # and the summary row, which verify-store rebuilds from the manifest
        "UPDATE runs SET manifest_sha256 = ?, name = 'forged' WHERE id = ?", (new_sha, run_id)
    )
    conn.execute(
        "UPDATE events SET subject_sha256 = ? WHERE subject_sha256 = ?", (new_sha, old_sha)
    )
    from storage.ledger import GENESIS, event_hash

    prev = GENESIS
    for seq, ts, kind, rid, subject in conn.execute(
        "SELECT seq, ts, kind, run_id, subject_sha256 FROM events ORDER BY seq"
    ).fetchall():
        h = event_hash(seq, ts, kind, rid, subject, prev)
        conn.execute("UPDATE events SET prev_hash = ?, hash = ? WHERE seq = ?", (prev, h, seq))
        prev = h
    conn.execute(
        "CREATE TRIGGER manifests_no_update BEFORE UPDATE ON manifests"
        " BEGIN SELECT RAISE(ABORT, 'manifests is append-only: updates are refused'); END"
    )
    conn.execute(
        "CREATE TRIGGER events_no_update BEFORE UPDATE ON events"
        " BEGIN SELECT RAISE(ABORT, 'events is append-only: updates are refused'); END"
    )
    conn.close()
    # Without the anchor the rewrite cannot be seen from inside the file ...
    assert cli("verify-store").returncode == 0
    # ... with the head noted down earlier, it is.
    proc = cli("verify-store", "--anchor", anchor)
    assert proc.returncode == 1
    assert "ledger was rewritten" in proc.stdout
    assert cli("verify-store", "--anchor", "nonsense").returncode == 2


def test_runs_inserted_in_chunks_are_all_searchable(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ingest_many writes runs as multi-row INSERTs (one full-text segment per chunk, not
    per run): a batch split over several chunks, a short last one included, is whole."""
    import storage.store as store_module

    monkeypatch.setattr(store_module, "ROWS_PER_INSERT", 4)
    runs = [realistic_manifest(i, seed=11, history_steps=3) for i in range(11)]
    results = store.ingest_many([(manifest_from_data(d), None, (), {}) for d in runs])
    assert [r.run_id for r in results] == [d["run_id"] for d in runs]
    assert store.count_runs() == 11
    for d in runs:
        assert [r.id for r in store.list_runs(RunQuery(search=d["code"]["commit"]))] == [
            d["run_id"]
        ]
        assert store.get_run(d["run_id"]).config_hash == d["config_hash"]
    store.conn.execute("INSERT INTO runs_fts (runs_fts) VALUES ('integrity-check')")
    assert store.verify().ok


def test_a_large_batch_raises_the_page_cache_for_itself_only(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import storage.store as store_module

    seen: list[int] = []
    insert = store_module._insert_many_rows

    def recording(conn: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        seen.append(conn.execute("PRAGMA cache_size").fetchone()[0])
        insert(conn, sql, rows)

    monkeypatch.setattr(store_module, "_insert_many_rows", recording)
    before = store.conn.execute("PRAGMA cache_size").fetchone()[0]
    small = [realistic_manifest(i, seed=12, history_steps=2) for i in range(3)]
    store.ingest_many([(manifest_from_data(d), None, (), {}) for d in small])
    large = [realistic_manifest(i, seed=13, history_steps=2) for i in range(64)]
    store.ingest_many([(manifest_from_data(d), None, (), {}) for d in large])
    assert seen == [before, -store_module.INGEST_CACHE_KIB]
    assert store.conn.execute("PRAGMA cache_size").fetchone()[0] == before
    assert store.count_runs() == 67


def test_a_large_batch_pauses_the_garbage_collector_for_itself_only(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off while the batch is stored, on again after, after a refused batch too; a
    caller who had it off keeps it off."""
    import gc

    import storage.store as store_module

    during: list[bool] = []
    insert = store_module._insert_many_rows

    def recording(conn: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
        during.append(gc.isenabled())
        insert(conn, sql, rows)

    monkeypatch.setattr(store_module, "_insert_many_rows", recording)
    large = [manifest_from_data(realistic_manifest(i, seed=14, history_steps=2)) for i in range(64)]
    store.ingest_many([(m, None, (), {}) for m in large])
    assert during == [False] and gc.isenabled()

    changed = large[0].model_copy(update={"name": "another name"})
    with pytest.raises(ConflictError):
        store.ingest_many([(m, None, (), {}) for m in [changed, *large[1:]]])
    assert gc.isenabled()

    gc.disable()
    try:
        more = [
            manifest_from_data(realistic_manifest(i, seed=15, history_steps=2)) for i in range(64)
        ]
        store.ingest_many([(m, None, (), {}) for m in more])
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert store.count_runs() == 128

"""Item 9 of the trust issue: the derived tables are checked, not trusted.

A store is filled through the real API (ingests with gap counts and locations, a
comparison, a replay that sets the verdict badge, a bundle), then attacked with a plain
SQLite connection the way someone with write access to the file would, and
``replay-tui verify-store`` (the real CLI) must exit 1 naming what was changed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import ledger
from storage.manifest import manifest_from_data
from storage.records import GapCounts
from storage.store import Location, RunStore
from tests.conftest import MakeManifest, RunCli
from tests.helpers.replays import add_attempt


@pytest.fixture
def filled(store_path: Path, make_manifest: MakeManifest) -> list[str]:
    ids = []
    with RunStore(store_path) as s:
        for i in range(3):
            m = manifest_from_data(make_manifest(index=i))
            s.ingest(
                m,
                gaps=GapCounts(1, 2, 3),
                locations=[Location("repo", "root", f"/srv/repo{i}")],
            )
            ids.append(m.run_id)
        cid = s.add_comparison(ids[0], ids[1], "DIVERGED", {"why": []}, set_verdict_on=ids[1])
        add_attempt(
            s,
            ids[0],
            "completed",
            replay_run=ids[1],
            verdict="DIVERGED",
            comparison_id=cid,
            body={"verdict": "DIVERGED"},
            sets_verdict=True,
        )
        s.add_bundle(ids[2], "b", False, None, {"files": 1})
    return ids


def _attack(store_path: Path, *sql: tuple[str, tuple[object, ...]]) -> None:
    conn = sqlite3.connect(store_path, isolation_level=None)
    for stmt, args in sql:
        conn.execute(stmt, args)
    conn.close()


def _fails(cli: RunCli, expected: str) -> None:
    proc = cli("verify-store")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    full = json.loads(cli("verify-store", "--json").stdout)
    assert not full["ok"]
    assert any(expected in p for p in full["problems"]), full["problems"]


def test_the_filled_store_is_intact(filled: list[str], cli: RunCli) -> None:
    proc = cli("verify-store")
    assert proc.returncode == 0, proc.stdout


ATTACKS: dict[str, tuple[Callable[[list[str]], list[tuple[str, tuple[object, ...]]]], str]] = {
    "badge": (
        lambda ids: [("UPDATE runs SET last_verdict = 'IDENTICAL' WHERE id = ?", (ids[0],))],
        "its verdict badge was edited",
    ),
    "badge-on-unreplayed-run": (
        lambda ids: [("UPDATE runs SET last_verdict = 'IDENTICAL' WHERE id = ?", (ids[2],))],
        "is not the verdict of any replay or comparison",
    ),
    "signed": (
        lambda ids: [("UPDATE runs SET signed = 1 WHERE id = ?", (ids[0],))],
        "runs.signed was edited",
    ),
    "gaps": (
        lambda ids: [("UPDATE runs SET gaps_critical = 0 WHERE id = ?", (ids[0],))],
        "its gap counts were edited",
    ),
    "summary": (
        lambda ids: [('UPDATE runs SET "commit" = ? WHERE id = ?', ("f" * 40, ids[0]))],
        "runs.commit was edited",
    ),
    "deleted-row": (
        lambda ids: [("DELETE FROM runs WHERE id = ?", (ids[2],))],
        "its runs row was deleted",
    ),
    "origin": (
        lambda ids: [("UPDATE runs SET origin = 'import:mlflow' WHERE id = ?", (ids[1],))],
        "runs.origin was edited",
    ),
    "locations": (
        lambda ids: [("UPDATE locations SET host_path = '/tmp/evil' WHERE run_id = ?", (ids[0],))],
        "its locations were edited",
    ),
    "artifacts": (
        lambda ids: [("UPDATE artifacts SET sha256 = ? WHERE run_id = ?", ("a" * 64, ids[0]))],
        "its artifacts rows do not match the manifest",
    ),
    "metrics": (
        lambda ids: [("DELETE FROM metrics WHERE run_id = ?", (ids[0],))],
        "its metrics rows do not match the manifest",
    ),
    "dropped-trigger-with-decoy": (
        lambda ids: [
            ("DROP TRIGGER replays_no_update", ()),
            (
                "CREATE TRIGGER decoy_no_op AFTER INSERT ON drills BEGIN SELECT 1; END",
                (),
            ),
        ],
        "trigger replays_no_update was dropped",
    ),
    "replaced-trigger": (
        lambda ids: [
            ("DROP TRIGGER replays_no_update", ()),
            (
                "CREATE TRIGGER replays_no_update BEFORE UPDATE ON replays BEGIN SELECT 1; END",
                (),
            ),
        ],
        "trigger replays_no_update was replaced",
    ),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_edit_of_a_derived_table_is_caught(
    filled: list[str], store_path: Path, cli: RunCli, name: str
) -> None:
    make_sql, expected = ATTACKS[name]
    _attack(store_path, *make_sql(filled))
    _fails(cli, expected)


def test_a_forged_fact_with_a_correct_chain_is_caught(
    filled: list[str], store_path: Path, cli: RunCli
) -> None:
    """The forger appends a replay fact and chains its ledger event correctly, but the
    replay run it names was never stored."""
    conn = sqlite3.connect(store_path, isolation_level=None)
    body = json.dumps({"verdict": "IDENTICAL"}, separators=(",", ":"))
    sha = hashlib.sha256(body.encode()).hexdigest()
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO replays (created_at, original_run, replay_run, backend, status, verdict,"
        " body, body_sha256) VALUES (?, ?, ?, 'docker', 'completed', 'IDENTICAL', ?, ?)",
        (ledger.utc_now(), filled[2], "01a2ffff-ffff-7fff-8fff-ffffffffffff", body, sha),
    )
    ledger.append(conn, "replay", filled[2], sha)
    conn.execute("COMMIT")
    conn.close()
    _fails(cli, "is not stored")


def test_drill_reports_and_bundles_carry_the_ledger_head(
    filled: list[str], store_path: Path, cli: RunCli, tmp_path: Path
) -> None:
    out = tmp_path / "bundle"
    exp = cli("export", filled[2], "--out", out, "--json")
    assert exp.returncode == 0, exp.stderr
    head = json.loads(exp.stdout)["ledger_head"]
    assert head and head.split(":")[0].isdigit()
    statement = json.loads((out / "provenance.intoto.jsonl").read_text())
    payload = json.loads(base64.b64decode(statement["payload"]))
    assert payload["predicate"]["store"]["ledger_head"] == head  # inside the signed part
    verify = cli("verify", out, "--allow-unsigned")
    assert f"ledger head was {head}" in verify.stdout
    # the head noted by the bundle catches a consistent rewrite later
    assert cli("verify-store", "--anchor", head).returncode == 0
    conn = sqlite3.connect(store_path, isolation_level=None)
    conn.execute("DROP TRIGGER events_no_update")
    seq = int(head.split(":")[0])
    conn.execute("UPDATE events SET hash = ? WHERE seq = ?", ("0" * 64, seq))
    conn.close()
    proc = cli("verify-store", "--anchor", head)
    assert proc.returncode == 1


def test_a_drill_report_carries_the_ledger_head(filled: list[str], cli: RunCli) -> None:
    proc = cli("drill", "--count", "1", "--backend", "local", "--json")
    report = json.loads(proc.stdout)
    head = report["ledger_head"]
    assert head and head == json.loads(cli("verify-store", "--json").stdout)["head"]
    text = cli("drill", "--count", "1", "--backend", "local")
    assert "ledger head " in text.stdout and "verify-store --anchor" in text.stdout


def test_the_rebuilt_row_is_the_row_ingest_writes(make_manifest: MakeManifest) -> None:
    """``integrity.row_from_data`` mirrors ``records.run_row``: a change to one without
    the other would make verify-store cry wolf (or go blind)."""
    from storage.integrity import row_from_data
    from storage.records import run_row

    for i in range(20):
        d = make_manifest(index=i)
        if i % 3 == 0:
            d["image"] = None
            d["code"]["dirty"] = None
        m = manifest_from_data(d)
        sealed, sha, body = m.sealed_json()
        want = run_row(sealed, sha, None, "now")
        got = row_from_data(json.loads(body))
        assert {k: want[k] for k in got} == got


def test_negative_zero_and_whole_floats_are_not_edits(store_path: Path) -> None:
    """Canonical JSON writes -0.0 as 0 and 1.0 as 1; the rows keep floats: not an edit."""
    from tests.support.factories import realistic_manifest

    d = realistic_manifest(7, history_steps=5)
    name = next(iter(d["outputs"]["metric_history"]))
    d["outputs"]["metric_history"][name][0][1] = -0.0
    d["outputs"]["metric_history"][name][1][1] = 1.0
    with RunStore(store_path) as s:
        s.ingest(manifest_from_data(d))
        assert s.verify().ok, s.verify().problems

"""Attack F1 of the third trust round: a noise floor widened behind the store's back.

The attacker has write access to the store file.  They drop the append-only trigger of
``noise_floors``, widen a floor's finals and tail means (and set ``body_sha256`` to the new
body's hash, so the row is self-consistent), and put the trigger back.  Before this round,
``compare`` of a DIVERGED pair then said WITHIN_NOISE (exit 0) and ``export --sign`` signed
the widened floor.  Now every fact a judgement or a bundle reads is checked against its
ledger event when it is read: both refuse, exit 1, "store altered: noise floor #N".

A comparison that was made from the widened floor (as the older code did) and left behind
after the edit is undone is chained correctly, but it names a floor body the ledger never
recorded: ``verify-store`` reports it, and neither the runs list nor ``stats`` counts it.

The numbers are fixed (no training): B's loss leaves the true band at step 40 by 0.1;
the widened floor's replicas spread 0.4 from step 40 on, which covers it.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from replay_tui.compare.comparison import compare_runs
from replay_tui.compare.floor import FloorRecord, NoiseContext, Spread, StoredFloor
from replay_tui.compare.noise_floor_model import NoiseFloor
from replay_tui.compare.noise_params import NoiseParams
from replay_tui.compare.noise_self_check import self_check
from replay_tui.compare.tolerance import Tolerance
from storage import ledger
from storage.canonical import dumps as canonical_json
from storage.manifest import RunManifest, manifest_from_data
from storage.store import RunStore, StoreAltered
from tests.conftest import MakeManifest, RunCli
from tests.helpers.replays import add_attempt

TRUE_REPLICAS = ((1.5314, 0.0), (1.5330, 0.0), (1.5340, 0.0))  # (final, shift from step 40)
WIDE_REPLICAS = ((1.2, -0.2), (1.5, 0.0), (1.8, 0.2))


def _run(make: MakeManifest, index: int, final: float, shift: float = 0.0) -> RunManifest:
    data: dict[str, Any] = make(index=index)
    data["outputs"]["artifacts"] = []
    data["outputs"]["metrics"] = {"loss": final}
    wobble = (final - 1.533) * 0.01
    data["outputs"]["metric_history"] = {
        "loss": [
            [s, 3.0 - s / 100 + wobble + (shift if s >= 40 else 0.0)] for s in range(0, 101, 10)
        ]
    }
    data["outputs"]["metric_times"] = {}
    return manifest_from_data(data)


def _floor_body(
    make: MakeManifest, replicas: tuple[tuple[float, float], ...], original: str
) -> dict[str, Any]:
    runs = [_run(make, 90 + i, v, shift) for i, (v, shift) in enumerate(replicas)]
    histories = [dict(r.outputs.metric_history) for r in runs]
    metrics = [dict(r.outputs.metrics) for r in runs]
    labels = ["r1", "r2", "r3"]
    floor = NoiseFloor.from_replicas(histories, metrics, labels=labels)
    check = self_check(histories, metrics, labels=labels)
    record = FloorRecord(
        floor, original, floor.labels, Tolerance(), check, Spread(3, 0.0, 0.0, (1, 1, 1))
    )
    return record.to_dict()


def _store(store_path: Path, make: MakeManifest) -> tuple[str, str, int]:
    a = _run(make, 1, 1.5330)
    b = _run(make, 2, 1.4274, shift=-0.1)
    with RunStore(store_path) as s:
        s.ingest(a)
        s.ingest(b)
        fid = s.add_noise_floor(a.run_id, 3, _floor_body(make, TRUE_REPLICAS, a.run_id))
    return a.run_id, b.run_id, fid


def _rewrite_floor(store_path: Path, fid: int, body: dict[str, Any]) -> None:
    """What the attacker does with plain SQLite: trigger off, body swapped, trigger back."""
    text = canonical_json(body).decode("utf-8")
    import hashlib

    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    conn = sqlite3.connect(store_path, isolation_level=None)
    (trigger,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?",
        ("noise_floors_no_update",),
    ).fetchone()
    conn.execute("DROP TRIGGER noise_floors_no_update")
    conn.execute("UPDATE noise_floors SET body = ?, body_sha256 = ? WHERE id = ?", (text, sha, fid))
    conn.execute(trigger)
    conn.close()


def test_a_widened_floor_is_refused_by_compare_and_export(
    store_path: Path, make_manifest: MakeManifest, cli: RunCli, tmp_path: Path
) -> None:
    a, b, fid = _store(store_path, make_manifest)
    before = cli("compare", a, b, "--json")
    assert before.returncode == 1, before.stdout + before.stderr
    assert json.loads(before.stdout)["verdict"] == "DIVERGED"

    _rewrite_floor(store_path, fid, _floor_body(make_manifest, WIDE_REPLICAS, a))

    after = cli("compare", a, b)
    assert after.returncode == 1, after.stdout + after.stderr
    assert f"store altered: noise floor #{fid}" in after.stderr
    assert "WITHIN_NOISE" not in after.stdout

    assert cli("keygen", "--out", tmp_path / "k.key").returncode == 0
    export = cli("export", a, "--out", tmp_path / "bundle", "--sign", tmp_path / "k.key")
    assert export.returncode == 1, export.stdout + export.stderr
    assert f"store altered: noise floor #{fid}" in export.stderr
    assert not (tmp_path / "bundle" / "statement.intoto.jsonl").exists()

    check = json.loads(cli("verify-store", "--json").stdout)
    assert not check["ok"]
    assert any(f"noise_floors #{fid}" in p for p in check["problems"]), check["problems"]


def test_the_floor_is_read_through_the_check_in_process(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    a, _, fid = _store(store_path, make_manifest)
    _rewrite_floor(store_path, fid, _floor_body(make_manifest, WIDE_REPLICAS, a))
    named = re.escape(f"noise floor #{fid}")
    # the widened floor is never read as a fact
    with RunStore(store_path) as s, pytest.raises(StoreAltered, match=named):
        s.noise_floors_of(a)


def test_a_comparison_made_from_a_widened_floor_is_not_counted_once_it_is_undone(
    store_path: Path, make_manifest: MakeManifest, cli: RunCli
) -> None:
    a, b, fid = _store(store_path, make_manifest)
    true_body = _floor_body(make_manifest, TRUE_REPLICAS, a)
    wide_body = _floor_body(make_manifest, WIDE_REPLICAS, a)
    _rewrite_floor(store_path, fid, wide_body)
    # What the older code stored from the widened floor: a WITHIN_NOISE judgement that
    # names the floor (with the hash of the body it read), chained like any fact.
    wide = FloorRecord.from_dict(wide_body)
    wide_sha = json.loads(
        sqlite3.connect(store_path)
        .execute("SELECT json_object('s', body_sha256) FROM noise_floors WHERE id = ?", (fid,))
        .fetchone()[0]
    )["s"]
    with RunStore(store_path) as s:
        ma, mb = s.manifest(a), s.manifest(b)  # the manifests themselves are intact
        stored = StoredFloor(fid, a, "t", wide.floor, None, wide_sha)
        c = compare_runs(ma, mb, noise=NoiseContext(stored, "b", NoiseParams()))
        assert c.verdict == "WITHIN_NOISE"  # the forgery works on the rule itself
        cid = s.add_comparison(a, b, c.verdict, c.to_dict(), set_verdict_on=None)
        add_attempt(
            s,
            a,
            "completed",
            replay_run=b,
            backend="local",
            verdict=c.verdict,
            comparison_id=cid,
            body={"verdict": c.verdict},
            sets_verdict=False,
        )
    _rewrite_floor(store_path, fid, true_body)  # the edit undone: the floor verifies again
    with RunStore(store_path) as s:
        assert s.noise_floors_of(a)[0]["body"] == json.loads(canonical_json(true_body))
        assert s.replay_outcomes([a]).get(a, []) == []  # the runs list does not count it
        # the comparison judged by the widened floor is never read
        with pytest.raises(StoreAltered, match=re.escape(f"noise floor #{fid}")):
            s.comparison(cid)
    check = json.loads(cli("verify-store", "--json").stdout)
    assert not check["ok"]
    assert any(f"comparisons #{cid}" in p and "never recorded" in p for p in check["problems"]), (
        check["problems"]
    )
    stats = json.loads(cli("stats", "--json").stdout)
    assert _replays_counted(stats) == 0, stats


def _replays_counted(stats: dict[str, Any]) -> int:
    for key in ("replays", "replay_count", "replays_total"):
        if isinstance(stats.get(key), int):
            return int(stats[key])
    raise AssertionError(f"stats --json names no replay count: {sorted(stats)}")


def test_an_intact_store_reads_every_fact(store_path: Path, make_manifest: MakeManifest) -> None:
    a, b, fid = _store(store_path, make_manifest)
    with RunStore(store_path) as s:
        assert [f["id"] for f in s.noise_floors_of(a)] == [fid]
        assert s.manifest(b).run_id == b
        events = [e.kind for e in s.events()]
    assert "noise_floor" in events and ledger.GENESIS

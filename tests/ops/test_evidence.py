"""``ops.evidence``, ``ops.drill`` and ``ops.bisect``: the audit use cases the CLI and
the TUI call, over the fixed store's real SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay_tui.errors import BadInput
from replay_tui.evidence.stats import compute_stats
from replay_tui.ops.bisect import show_bisect
from replay_tui.ops.drill import run_drill
from replay_tui.ops.evidence import export_evidence, store_stats, verify_evidence, verify_store
from replay_tui.replay.plan import ReplayOptions
from storage.store import RunStore
from tests.support.app import ORIGINAL_ID, FixedStore, build_fixed_store


@pytest.fixture
def fixed(tmp_path: Path) -> FixedStore:
    return build_fixed_store(tmp_path / "fixed")


def test_an_exported_bundle_verifies_and_a_changed_one_does_not(
    fixed: FixedStore, tmp_path: Path
) -> None:
    with RunStore(fixed.path) as s:
        done = export_evidence(s, ORIGINAL_ID[:12], tmp_path / "bundle")
        bundles = len(s.facts("bundles"))
    assert done.exit_code == 0 and done.model_files is None
    assert done.result.run_id == ORIGINAL_ID and done.verdict == "DIVERGED"
    assert done.result.path == tmp_path / "bundle" and not done.result.signed
    assert bundles == 1
    # unsigned: not verified unless the caller accepts an unsigned bundle
    strict = verify_evidence(done.result.path)
    assert (strict.verdict, strict.exit_code) == ("NOT_VERIFIED", 1)
    loose = verify_evidence(done.result.path, allow_unsigned=True)
    assert (loose.verdict, loose.exit_code) == ("VERIFIED", 0)
    assert loose.check.run_id == ORIGINAL_ID
    statement = next(p for p in done.result.path.rglob("*.json") if p.is_file())
    body = json.loads(statement.read_text())
    statement.write_text(json.dumps({**body, "changed": True}))
    changed = verify_evidence(done.result.path, allow_unsigned=True)
    assert (changed.verdict, changed.exit_code) == ("NOT_VERIFIED", 1)


def test_the_store_check_passes_an_intact_store_and_fails_an_unreadable_one(
    fixed: FixedStore, tmp_path: Path
) -> None:
    ok = verify_store(fixed.path)
    assert (ok.verdict, ok.exit_code) == ("VERIFIED", 0) and ok.check.head is not None
    bad = tmp_path / "not-a-store.db"
    bad.write_bytes(b"this is no SQLite database" * 200)
    broken = verify_store(bad)
    assert (broken.verdict, broken.exit_code) == ("NOT_VERIFIED", 1)


def test_stats_are_the_stores_slis_and_write_the_textfile(
    fixed: FixedStore, tmp_path: Path
) -> None:
    prom = tmp_path / "replay_tui.prom"
    with RunStore(fixed.path) as s:
        done = store_stats(s, prometheus=prom)
        now = compute_stats(s).to_dict()
    got = done.stats.to_dict()
    assert {**got, "generated_at": None} == {**now, "generated_at": None}
    assert done.exit_code == 0 and done.prometheus == prom
    assert "replay_tui_" in prom.read_text()


def test_a_drill_whose_runs_cannot_replay_is_not_judged_exit_3(
    fixed: FixedStore, tmp_path: Path
) -> None:
    """The fixed store's runs were never on this host (no clone of their commit): the
    drill's one replay cannot run, so the drill is NOT JUDGED, exit 3, and stored."""
    junit = tmp_path / "drill.xml"
    with RunStore(fixed.path) as s:
        drills = len(s.facts("drills"))
        done = run_drill(
            s, count=1, pick="oldest", options=ReplayOptions(backend="local"), junit=junit
        )
        assert len(s.facts("drills")) == drills + 1
    assert [i.status for i in done.report.items] == ["error"]
    assert (done.judgement, done.not_judged, done.exit_code) == ("NOT_JUDGED", "aborted", 3)
    assert done.junit == junit and "<testsuite" in junit.read_text()


def test_a_bisect_the_store_does_not_hold_is_bad_input(fixed: FixedStore) -> None:
    with RunStore(fixed.path) as s, pytest.raises(BadInput):
        show_bisect(s, 999)

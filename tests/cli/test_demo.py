"""The README's first command builds its store from real runs: check what it promises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage.store import RunStore
from tests.support.training import replay_tui

pytestmark = pytest.mark.slow


def test_demo_builds_pinned_gappy_failed_runs_and_a_replay(tmp_path: Path) -> None:
    store = tmp_path / "demo" / "store.db"
    proc = replay_tui(store, "demo", "--no-open", "--no-docker", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "local backend" in proc.stderr  # says so when it falls back
    assert "  | step " in proc.stderr  # progress while each run records
    assert "[ compare] done   IDENTICAL" in proc.stderr  # stage lines as `replay` prints
    assert "(5 runs: 4 recorded, 1 replay;" in proc.stdout  # counts agree with the store
    runs = json.loads(replay_tui(store, "runs", "--json").stdout)
    by_name = {(r["name"], r["kind"]): r for r in runs}
    assert by_name[("mlp-pinned", "original")]["last_verdict"] == "IDENTICAL"
    assert by_name[("mlp-pinned", "replay")]["status"] == "succeeded"
    assert by_name[("mlp-crash", "original")]["status"] == "failed"
    gappy = by_name[("mlp-hotfix-unpinned", "original")]
    with RunStore(store) as s:
        from replay_tui.gaps import evaluate

        codes = {g.code for g in evaluate(s.manifest(gappy["id"]))}
        assert {"SEED_UNKNOWN", "CODE_DIRTY_DIFF_STORED", "IMAGE_NONE"} <= codes
        assert s.verify().ok
    again = replay_tui(store, "demo", "--no-open", "--no-docker")
    assert again.returncode == 2 and "new store path" in again.stderr

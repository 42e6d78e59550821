"""A failed run does not claim another run's checkpoints: files an earlier run left in
the output folder are reported as stale, not hashed as this run's outputs.  Real
recordings with the real launcher (CLI processes) in a real git repository, real local
replays, and the manifest's ``stale`` field (its bytes, its validation)."""

from __future__ import annotations

import copy
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from replay_tui.capture.stale import CHANGED_BEFORE, LEFT_BEFORE
from replay_tui.compare.comparison import compare_runs
from replay_tui.compare.render import comparison_text
from replay_tui.compare.stored import comparison_from_dict
from replay_tui.gaps import Gap, evaluate
from storage.manifest import ManifestError, canonical_json, manifest_from_data, parse_manifest
from storage.store import RunStore
from tests.helpers.repos import commit_repo
from tests.support.training import cli_env, replay_tui

PROGRAM = """\
import os, sys
os.makedirs("out", exist_ok=True)
for step in range(10):
    print(f"step {step} loss {1.0 / (step + 1)}", flush=True)
    if step == 5 and sys.argv[1] == "crash":
        raise SystemExit("crashed at step 5")
if sys.argv[1] == "nowrite":  # succeeds without writing its checkpoint
    raise SystemExit(0)
with open("out/model.pt", "w") as f:
    f.write(sys.argv[1])
"""


def _record(store: Path, repo: Path, mode: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "replay-tui")
    argv = [exe, "--store", str(store), "record", "--artifact", "out/*"]
    return subprocess.run(
        [*argv, "--", "python3", "train.py", mode],
        cwd=repo,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _repo(tmp_path: Path) -> Path:
    return commit_repo(tmp_path / "repo", {"train.py": PROGRAM}, "train", ignore="out/\n")


def _gaps(gaps: list[Gap], code: str) -> list[Gap]:
    return [g for g in gaps if g.code == code]


def test_a_crashed_run_reports_the_earlier_checkpoint_as_stale(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    store = tmp_path / "store.db"
    ok = _record(store, repo, "good")
    assert ok.returncode == 0, ok.stderr[-2000:]
    crashed = _record(store, repo, "crash")
    assert crashed.returncode == 1, crashed.stderr[-2000:]
    assert "out/model.pt: stale" in crashed.stdout + crashed.stderr
    rewritten = _record(store, repo, "again")  # rewrites the file: its own output again
    assert rewritten.returncode == 0, rewritten.stderr[-2000:]
    with RunStore(store) as s:
        ids = [r.id for r in reversed(s.list_runs())]  # oldest first
        arts = [{a.path: a.sha256 for a in s.manifest(i).outputs.artifacts} for i in ids]
        from replay_tui.gaps import evaluate

        gaps = {g.code for g in evaluate(s.manifest(ids[1]))}
    assert arts[0]["out/model.pt"] is not None
    assert arts[1] == {"out/model.pt": None}  # listed, never with the earlier run's hash
    assert "ARTIFACT_STALE" in gaps and "ARTIFACT_NO_HASH" not in gaps
    assert arts[2]["out/model.pt"] not in (None, arts[0]["out/model.pt"])


def test_the_crashed_run_its_gaps_and_its_comparisons_say_it_did_not_write_the_file(
    tmp_path: Path,
) -> None:
    """The user-trial case end to end: an earlier run leaves out/model.pt, a run crashes
    at step 5; its manifest marks the file stale with the reason, its gap is a warning
    that names the folder, and comparing it with the earlier run and with its own real
    replay (local backend, a fresh checkout) words what happened truthfully."""
    repo = _repo(tmp_path)
    store = tmp_path / "store.db"
    assert _record(store, repo, "good").returncode == 0
    crashed = _record(store, repo, "crash")
    assert crashed.returncode == 1, crashed.stderr[-2000:]
    # said as what it is (listed, not written by the run), and not counted as its output
    assert "replay-tui: not an output of this run: out/model.pt: stale" in crashed.stderr
    assert "refused: out/model.pt" not in crashed.stderr
    assert "0 artifact(s) (+1 stale, not written by it)" in crashed.stdout
    with RunStore(store) as s:
        good_id, crash_id = [r.id for r in reversed(s.list_runs())]
        good, crash = s.manifest(good_id), s.manifest(crash_id)
    assert crash.status == "failed"
    [art] = crash.outputs.artifacts
    assert (art.path, art.sha256, art.stale) == ("out/model.pt", None, LEFT_BEFORE)
    with sqlite3.connect(store) as db:  # the stored bytes carry the reason
        (text,) = db.execute("SELECT body FROM manifests WHERE run_id = ?", (crash_id,)).fetchone()
    assert json.loads(text)["outputs"]["artifacts"][0]["stale"] == LEFT_BEFORE

    gaps = evaluate(crash)
    [gap] = _gaps(gaps, "ARTIFACT_STALE")
    assert gap.severity == "warning"  # a failed run is expected to have no output
    assert gap.field == "outputs.artifacts[0]"
    assert "out/model.pt was not written by this run" in gap.message
    assert LEFT_BEFORE in gap.message
    assert "empty output folder" in gap.remediation
    assert "--artifact" not in gap.remediation
    assert not _gaps(gaps, "ARTIFACT_NO_HASH")
    shown = replay_tui(store, "show", crash_id)  # the CLI's view of its outputs
    assert f"out/model.pt  stale: {LEFT_BEFORE}" in shown.stdout, shown.stdout[-3000:]

    # with the run that really wrote it: B's file, not one A lost
    c = compare_runs(crash, good)
    assert c.artifacts[0].status == "only_b" and c.artifacts[0].stale_a == LEFT_BEFORE
    want = f"artifact out/model.pt was written by B; A did not write it (stale: {LEFT_BEFORE})"
    assert want in c.missing
    assert not any("is in A but not in B" in x or "in B but not in A" in x for x in c.missing)
    # the other way round
    c2 = compare_runs(good, crash)
    assert c2.artifacts[0].status == "only_a"
    assert f"artifact out/model.pt was written by A; B did not write it (stale: {LEFT_BEFORE})" in (
        c2.missing
    )

    # with its own real replay: a fresh checkout, the replay crashes too and writes nothing
    rep = replay_tui(store, "replay", crash_id, "--backend", "local", "--json")
    body = json.loads(rep.stdout)
    [r] = body["replays"]
    with RunStore(store) as s:
        replay = s.manifest(r["replay_run"])
        cmp = s.facts("comparisons")[-1]
    assert replay.status == "failed"
    assert all(a.path != "out/model.pt" for a in replay.outputs.artifacts)
    stored_c = comparison_from_dict(cmp["body"])  # what the TUI and the report read
    for c3 in (compare_runs(crash, replay), stored_c):
        [x] = [x for x in c3.artifacts if x.path == "out/model.pt"]
        assert x.status == "stale" and x.stale_a == LEFT_BEFORE and x.stale_b is None
        assert not any("out/model.pt" in m for m in c3.missing)  # not a difference
        note = f"out/model.pt was not written by A (stale: {LEFT_BEFORE}) nor by B"
        assert any(note in reason for reason in c3.reasons)
        text = comparison_text(c3)
        assert "is in A but not in B" not in text and note in text


def test_a_succeeded_run_whose_output_is_stale_has_a_critical_gap(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    store = tmp_path / "store.db"
    assert _record(store, repo, "good").returncode == 0
    done = _record(store, repo, "nowrite")  # exits 0 without writing out/model.pt
    assert done.returncode == 0, done.stderr[-2000:]
    with RunStore(store) as s:
        latest = s.manifest(s.list_runs()[0].id)
    assert latest.status == "succeeded"
    assert [(a.path, a.sha256, a.stale) for a in latest.outputs.artifacts] == [
        ("out/model.pt", None, LEFT_BEFORE)
    ]
    gaps = evaluate(latest)
    [gap] = _gaps(gaps, "ARTIFACT_STALE")
    assert gap.severity == "critical"  # it claims an output that is not its own
    assert not _gaps(gaps, "ARTIFACT_NO_HASH")


# -- the manifest field ---------------------------------------------------------------

GOLDEN: dict[str, Any] = {
    "schema_version": 1,
    "run_id": "stale-golden-0001",
    "status": "failed",
    "exit_code": 1,
    "started_at": "2026-01-02T03:04:05Z",
    "outputs": {
        "artifacts": [
            {"path": "out/model.pt", "sha256": None, "size_bytes": None, "kind": "file"},
            {"path": "out/log.txt", "sha256": "ab" * 32, "size_bytes": 3, "kind": "log"},
        ]
    },
}
# computed before the field existed: a manifest without it must keep these bytes
GOLDEN_SHA256 = "d41e46f1c6dfc97d92d4c3e5f4fb563169b74fabef6b3daab5d3804746f52935"
UNHASHED_ENTRY = (
    b'{"kind":"file","path":"out/model.pt","sha256":null,"size_bytes":null,"tensor_sha256":null}'
)


def test_a_manifest_without_stale_seals_to_the_same_bytes_as_before() -> None:
    m = manifest_from_data(copy.deepcopy(GOLDEN))
    body = canonical_json(m.body())
    assert b'"stale":' not in body
    assert UNHASHED_ENTRY in body
    assert m.compute_sha256() == GOLDEN_SHA256
    assert m.sealed().integrity.manifest_sha256 == GOLDEN_SHA256


def test_a_stale_artifact_is_in_the_bytes_and_changes_the_hash() -> None:
    d = copy.deepcopy(GOLDEN)
    d["outputs"]["artifacts"][0]["stale"] = CHANGED_BEFORE
    m = manifest_from_data(d)
    body = canonical_json(m.body())
    stale_entry = UNHASHED_ENTRY.replace(
        b'"size_bytes":null,', f'"size_bytes":null,"stale":"{CHANGED_BEFORE}",'.encode()
    )
    assert stale_entry in body and UNHASHED_ENTRY not in body
    assert m.compute_sha256() != GOLDEN_SHA256
    again = parse_manifest(canonical_json(m.sealed().model_dump(mode="json")))
    assert again.outputs.artifacts[0].stale == CHANGED_BEFORE
    assert again.compute_sha256() == m.compute_sha256()


@pytest.mark.parametrize(
    "value",
    ["x" * 1025, "left\nbefore", "left\x1b[2Jbefore", "nul\x00", "del\x7f"],
    ids=["too-long", "newline", "escape", "nul", "del"],
)
def test_a_hostile_stale_reason_is_refused(value: str) -> None:
    d = copy.deepcopy(GOLDEN)
    d["outputs"]["artifacts"][0]["stale"] = value
    with pytest.raises(ManifestError, match=r"outputs\.artifacts\[0\]\.stale"):
        manifest_from_data(d)


def test_a_stale_artifact_cannot_carry_a_hash() -> None:
    d = copy.deepcopy(GOLDEN)
    d["outputs"]["artifacts"][1]["stale"] = LEFT_BEFORE  # this one has a sha256
    with pytest.raises(ManifestError, match="stale artifact"):
        manifest_from_data(d)


def test_the_tui_shows_the_stale_file_as_stale_not_as_a_missing_hash(tmp_path: Path) -> None:
    """The run's outputs and the comparison with the run that wrote the file, in the
    real app: the row says stale and why, not "not hashed" or an empty hash."""
    import asyncio

    from textual.widgets import DataTable

    from replay_tui.tui.app import ReplayApp
    from replay_tui.tui.screens.comparison import ComparisonScreen
    from replay_tui.tui.screens.run_detail import RunDetailScreen

    repo = _repo(tmp_path)
    store = tmp_path / "store.db"
    assert _record(store, repo, "good").returncode == 0
    assert _record(store, repo, "crash").returncode == 1
    with RunStore(store) as s:
        good_id, crash_id = [r.id for r in reversed(s.list_runs())]

    def row(table: DataTable[Any], i: int) -> list[str]:
        return [str(c) for c in table.get_row_at(i)]

    async def flow() -> tuple[list[str], list[str]]:
        app = ReplayApp(store)
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            await app.push_screen(RunDetailScreen(store, crash_id))
            await app.workers.wait_for_complete()
            await pilot.pause()
            detail = row(app.screen.query_one("#artifacts", DataTable), 0)
            cmp = ComparisonScreen(store, a_run=crash_id, b_run=good_id, ordered=True)
            await app.push_screen(cmp)
            await app.workers.wait_for_complete()
            await pilot.pause()
            compared = row(app.screen.query_one("#artifacts", DataTable), 0)
        return detail, compared

    detail, compared = asyncio.run(flow())
    assert detail[0] == "out/model.pt"
    assert detail[2] == f"stale: {LEFT_BEFORE}"
    assert compared[1] == "out/model.pt"
    assert compared[3] == "only B wrote it; the other's is stale"
    assert compared[4] == "stale" and len(compared[5]) == 64  # B's hash, whole at 200 columns


def test_the_evidence_report_shows_a_stale_file_as_stale() -> None:
    from replay_tui.evidence.report import side_by_side

    replay = copy.deepcopy(GOLDEN) | {"run_id": "stale-report-0002"}
    replay["outputs"] = {"artifacts": [GOLDEN["outputs"]["artifacts"][1]]}  # log only
    stale_a = copy.deepcopy(GOLDEN)
    stale_a["outputs"]["artifacts"][0]["stale"] = LEFT_BEFORE
    a = manifest_from_data(stale_a)

    def art_rows(b_data: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
        rows = side_by_side(a, manifest_from_data(b_data))
        return {r.label: (r.original, r.replay, r.state) for r in rows if r.section == "artifacts"}

    # neither wrote it: shown, not judged a difference
    assert art_rows(replay)["out/model.pt"] == (f"stale ({LEFT_BEFORE})", "—", "info")
    assert art_rows(replay)["out/log.txt"] == ("ab" * 32, "ab" * 32, "same")
    # the replay wrote it: a difference, and A's side says why it has no hash
    wrote = copy.deepcopy(replay)
    wrote["outputs"]["artifacts"].append(
        {"path": "out/model.pt", "sha256": "cd" * 32, "size_bytes": 5, "kind": "file"}
    )
    assert art_rows(wrote)["out/model.pt"] == (f"stale ({LEFT_BEFORE})", "cd" * 32, "differs")

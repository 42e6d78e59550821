"""Drills: pick recorded runs, replay each (local backend, real runs), store the result.

The runs that reproduce are the numpy-only trainer's (a drill's picking, replaying and
storing need no torch start); the one that does not is the torch example's unseeded-noise
run, the numpy trainer's own unseeded noise staying within the run's noise floor."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from replay_tui.errors import BadInput
from replay_tui.replay.drill import (
    Candidate,
    DrillItem,
    DrillReport,
    candidates,
    parse_since,
    pick_runs,
    read_item,
    run_drill,
)
from replay_tui.replay.plan import ReplayOptions
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import REPO_ROOT, MakeManifest, subprocess_env
from tests.support.training import NUMPY_PROGRAM, NUMPY_SCRIPT

TRAIN = REPO_ROOT / "examples" / "train_mlp.py"


def _env() -> dict[str, str]:
    env = subprocess_env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _cli(store: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replay_tui.cli", "--store", str(store), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Three real recorded runs: two of the numpy-only trainer that reproduce, one of the
    torch example with an unseeded-noise bug."""
    root = tmp_path_factory.mktemp("recorded")
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "drill@example.com")
    _git(repo, "config", "user.name", "drill")
    shutil.copy(NUMPY_PROGRAM, repo / NUMPY_SCRIPT)
    shutil.copy(TRAIN, repo / "train_mlp.py")
    (repo / ".gitignore").write_text("out/\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "train")
    store = root / "store" / "store.db"
    ids = []
    runs = ((1, NUMPY_SCRIPT, []), (2, NUMPY_SCRIPT, []), (3, "train_mlp.py", ["--unseeded-noise"]))
    for seed, script, extra in runs:
        r = _cli(
            store,
            "record",
            "--seed",
            str(seed),
            "--artifact",
            "out/*",
            "--quiet",
            "--json",
            "--",
            "python",
            script,
            "--out",
            "out",
            "--epochs",
            "1",
            "--samples",
            "256",
            "--workers",
            "0",
            *extra,
            cwd=repo,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        ids.append(json.loads(r.stdout)["run_id"])
    return store, ids


def _fresh_copy(recorded: tuple[Path, list[str]], tmp_path: Path) -> Path:
    """Each test drills its own copy of the recorded store (with its objects and logs)."""
    src = recorded[0].parent
    dst = tmp_path / "store"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("repos"))
    return dst / "store.db"


@pytest.mark.slow
def test_drill_replays_the_picked_runs_and_stores_the_results(
    recorded: tuple[Path, list[str]], tmp_path: Path
) -> None:
    store = _fresh_copy(recorded, tmp_path)
    a, b, c = recorded[1]
    r = _cli(store, "drill", "--backend", "local", "--pick", "oldest", "--count", "2", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["passed"] is True and out["exit_code"] == 0
    assert [x["run_id"] for x in out["runs"]] == [a, b]
    assert [x["status"] for x in out["runs"]] == ["reproduced", "reproduced"]
    assert {x["verdict"] for x in out["runs"]} <= {"IDENTICAL", "EQUIVALENT"}
    with RunStore(store) as s:
        (drill,) = s.facts("drills")
        assert drill["passed"] == 1 and drill["id"] == out["drill_id"]
        assert [x["run_id"] for x in drill["body"]["runs"]] == [a, b]
        assert drill["body"]["pick"] == "oldest" and drill["body"]["candidates"] == 3
        replays = s.facts("replays")
        assert sorted(x["original_run"] for x in replays) == sorted([a, b])
        for item in out["runs"]:
            fact = next(x for x in replays if x["id"] == item["replay_fact_id"])
            assert fact["replay_run"] == item["replay_run"]
            assert fact["verdict"] == item["verdict"]
            replay = s.get_run(item["replay_run"])
            assert replay.kind == "replay" and replay.replay_of == item["run_id"]
        assert s.replays_of(c) == []
        assert s.verify().ok


@pytest.mark.slow
def test_drill_exits_1_when_a_picked_run_does_not_reproduce(
    recorded: tuple[Path, list[str]], tmp_path: Path
) -> None:
    store = _fresh_copy(recorded, tmp_path)
    noisy = recorded[1][2]
    with RunStore(store) as s:
        cands = candidates(s)
    seed = next(n for n in range(1000) if pick_runs(cands, 1, "random", n) == [noisy])
    r = _cli(store, "drill", "--backend", "local", "--count", "1", "--seed", str(seed), "--quiet")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "RESULT" in r.stdout and "not reproduced" in r.stdout and "DIVERGED" in r.stdout
    assert f"seed {seed}" in r.stdout and "FAILED" in r.stdout
    with RunStore(store) as s:
        (drill,) = s.facts("drills")
        assert drill["passed"] == 0 and drill["body"]["seed"] == seed
        (item,) = drill["body"]["runs"]
        assert item["run_id"] == noisy and item["verdict"] == "DIVERGED"
        assert s.get_run(noisy).last_verdict == "DIVERGED"


# -- picking, without replays ------------------------------------------------------------


def _cands(n: int) -> list[Candidate]:
    return [
        Candidate(f"run{i:05d}xx", f"r{i}", f"2026-01-{i + 1:02d}T00:00:00.000Z", None, None)
        for i in range(n)
    ]


def test_random_pick_is_reproducible_and_stable_when_runs_are_added() -> None:
    cands = _cands(20)
    first = pick_runs(cands, 5, "random", 42)
    assert first == pick_runs(list(reversed(cands)), 5, "random", 42)  # order-free
    assert len(set(first)) == 5
    assert pick_runs(cands, 5, "random", 43) != first
    newer = Candidate("run99999xx", "new", "2026-02-01T00:00:00.000Z", None, None)
    again = pick_runs([*cands, newer], 5, "random", 42)
    assert set(again) <= {*first, newer.run_id}  # an added run never reshuffles the others
    assert pick_runs(cands, 50, "random", 1) and len(pick_runs(cands, 50, "random", 1)) == 20


def test_oldest_and_unverified_picks() -> None:
    cands = _cands(5)
    assert pick_runs(cands, 2, "oldest", None) == ["run00000xx", "run00001xx"]
    judged = [
        Candidate(c.run_id, c.name, c.started_at, "IDENTICAL", f"2026-03-0{9 - i}T00:00:00.000Z")
        for i, c in enumerate(cands[:3])
    ]
    mixed = [*judged, *cands[3:]]
    # never judged first (oldest first), then the ones judged longest ago
    assert pick_runs(mixed, 4, "unverified", None) == [
        "run00003xx",
        "run00004xx",
        "run00002xx",
        "run00001xx",
    ]


def test_parse_since() -> None:
    assert parse_since("2026-01-31") == "2026-01-31T00:00:00.000Z"
    assert parse_since("2026-01-31T12:30:00Z") == "2026-01-31T12:30:00.000Z"
    assert parse_since("2026-01-31T12:30:00+02:00") == "2026-01-31T10:30:00.000Z"
    with pytest.raises(BadInput):
        parse_since("last tuesday")


def test_since_filters_candidates(store_path: Path, make_manifest: MakeManifest) -> None:
    ms = [make_manifest(index=i) for i in range(4)]  # 7 minutes apart from 2025-03-01 08:00
    failed = make_manifest(index=9, status="failed")
    with RunStore(store_path) as s:
        s.ingest_many([(manifest_from_data(m), None, (), {}) for m in [*ms, failed]])
        assert [c.run_id for c in candidates(s)] == [m["run_id"] for m in ms]
        since = parse_since("2025-03-01T08:10:00Z")
        assert [c.run_id for c in candidates(s, since)] == [m["run_id"] for m in ms[2:]]


def test_an_aborted_item_says_how_and_a_stored_one_reads_back() -> None:
    """``abort`` is set where the replay was aborted and read for the item's word; the
    stored JSON does not carry it: an item read back takes it from its reason."""
    item = DrillItem("r", "n", "error", None, None, 3, "cancelled: stopped", 1.0, "cancelled")
    assert item.abort == "cancelled" and item.stopped and item.word == "CANCELLED"
    assert "abort" not in item.to_dict()
    assert read_item(item.to_dict()) == item
    timed = DrillItem("r", "n", "error", None, None, None, "timed_out: 60 s", 1.0, "timed_out")
    assert timed.word == "TIMED OUT" and not timed.stopped
    infra = DrillItem("r", "n", "error", None, None, None, "no Docker engine", 0.5)
    assert infra.abort == "infra-error" and infra.word == "INFRA-ERROR"  # error: aborted
    assert read_item(infra.to_dict()) == infra
    done = DrillItem("r", "n", "reproduced", "IDENTICAL", "x", 4, None, 2.0)
    assert done.abort is None and done.word == "IDENTICAL"
    assert read_item(done.to_dict()) == done
    assert DrillItem("r", "n", "not_reproduced", None, None, None, "no commit", 0.0).word == "-"
    with pytest.raises(ValueError, match="not aborted"):
        DrillItem("r", "n", "reproduced", "IDENTICAL", None, None, None, 0.0, "cancelled")
    assert read_item({"status": 7}) is None


def test_exit_codes() -> None:
    def item(status: Any) -> DrillItem:
        return DrillItem("r", "", status, None, None, None, None, 0.0)

    def rep(*statuses: str) -> DrillReport:
        r = DrillReport("oldest", None, None, 3, "local", 3, "t")
        r.items = [item(s) for s in statuses]
        return r

    assert rep("reproduced", "reproduced").exit_code == 0
    assert rep("reproduced", "error").exit_code == 3
    assert rep("error", "not_reproduced").exit_code == 1
    assert rep("reproduced", "error").passed is False


def test_unreplayable_run_fails_the_drill_and_is_stored(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    """A run whose code cannot be checked out is a failure to reproduce, not a crash."""
    m = make_manifest(code__commit=None)
    with RunStore(store_path) as s:
        s.ingest(manifest_from_data(m))
        rep = run_drill(s, count=1, pick="oldest", options=ReplayOptions(backend="local"))
        assert rep.exit_code == 1 and not rep.passed
        (item,) = rep.items
        assert item.status == "not_reproduced" and "commit" in (item.reason or "")
        # refused at the plan, before an attempt is recorded: nothing to link
        assert s.replays_of(m["run_id"]) == [] and item.replay_fact_id is None
        (drill,) = s.facts("drills")
        assert drill["passed"] == 0 and drill["body"]["runs"][0]["run_id"] == m["run_id"]


def test_drill_on_an_empty_store_is_bad_input(store_path: Path) -> None:
    RunStore(store_path).close()  # a store with no runs
    r = _cli(store_path, "drill", "--backend", "local")
    assert r.returncode == 2 and "no succeeded original runs" in r.stderr
    with RunStore(store_path) as s:
        assert s.facts("drills") == []


def test_ctrl_c_during_a_drill_stops_it_and_is_not_a_failed_drill(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the CLI) while a drill's replay runs: exit 130, the run named
    INTERRUPTED (not INCOMPLETE or a bare error), the drill stored as stopped and left
    out of the drill pass rate."""
    import select
    import signal
    import time

    from tests.support.app import cli_env, record_gated_run

    store, run_id, gate = record_gated_run(tmp_path)
    exe = Path(sys.executable).parent / "replay-tui"
    gate.unlink()
    scratch = tmp_path / "scratch"  # TMPDIR: where the replay keeps the program's output.log
    scratch.mkdir()
    proc = subprocess.Popen(
        [str(exe), "--store", str(store), "drill", "--count", "1", "--backend", "local"],
        env={**cli_env(), "TMPDIR": str(scratch)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    # read stderr unbuffered (a buffered readline can hold the line select waits for)
    fd, seen, deadline = proc.stderr.fileno(), b"", time.monotonic() + 300
    while b"[     run] start" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            seen += chunk
    assert b"[     run] start" in seen, seen[-2000:]  # the replay's command is starting

    def program_has_printed() -> bool:  # its first line: the program itself is running
        logs = scratch.glob("replay-tui-replay-*/output.log")
        return any(b"step 0 " in log.read_bytes() for log in logs)

    while not program_has_printed() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert program_has_printed(), "the replayed program printed nothing"
    proc.send_signal(signal.SIGINT)
    out_b, err_b = proc.communicate(timeout=300)
    out, err = out_b.decode(), (seen + err_b).decode(errors="replace")
    assert proc.returncode == 130, (out, err[-2000:])
    [row] = [line for line in out.splitlines() if line.startswith(run_id[:13])]
    assert "INTERRUPTED" in row and "INCOMPLETE" not in row, out
    assert "=> INTERRUPTED (stopped before it finished: not counted)" in out
    with RunStore(store) as s:
        [drill] = s.facts("drills")
        assert drill["body"]["cancelled"] is True and drill["body"]["exit_code"] == 130
        [item] = drill["body"]["runs"]
        assert item["status"] == "error" and item["reason"].startswith("interrupted")
    stats = subprocess.run(
        [str(exe), "--store", str(store), "stats", "--json"],
        env=cli_env(), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(stats.stdout)["drill_pass_rate"]["denominator"] == 0

"""Replays and drills through a real Slurm cluster (``--backend slurm``).

These tests need the one-node cluster of scripts/slurm-env.sh (munge, slurmctld, slurmd,
slurmdbd for sacct; the test command runs it) and the Docker engine, registry and
training image of scripts/docker-env.sh: each job pulls the recorded image by digest
and runs it in the docker backend's sandbox on the node.  A missing cluster or engine is
a failure, never a skip.

The runs are recorded once per module (recording trains in a container, which takes a
while on a shared machine) and every test works on copies of them in its own store.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.store import RunStore
from tests.helpers.commands import cli_json
from tests.support.training import QUICK, cli_env, git, make_repo, record_in_image, replay_tui

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SLURM_ENV = ROOT / "scripts" / "slurm-env.sh"


def _cluster_problem() -> str | None:
    if shutil.which("sbatch") is None:
        return "sbatch is not on PATH"
    p = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
    if "UP" not in p.stdout:
        return f"slurmctld does not answer: {p.stdout.strip()} {p.stderr.strip()}"
    node = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=60
    )
    if not any(s in node.stdout for s in USABLE_NODE_STATES):
        return f"no usable node: sinfo says {node.stdout.strip()!r}"
    return None


USABLE_NODE_STATES = ("idle", "mix", "alloc", "plnd", "comp")
"""A node that is up and takes jobs: free, partly or wholly allocated, planned by the
backfill scheduler for a pending job (``plnd``, seen right after a drill's last job), or
finishing one (``comp``).  Down, drained or failed nodes are none of these."""


@pytest.fixture(scope="module")
def cluster() -> str:
    """The image reference to record with, once cluster and engine both answer."""
    problem = _cluster_problem()
    if problem:
        pytest.fail(f"no Slurm cluster: {problem} (run scripts/slurm-env.sh)")
    image = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    if not image:
        pytest.fail("REPLAY_TUI_TRAIN_IMAGE unset (run scripts/docker-env.sh, source its env)")
    try:
        import docker

        docker.from_env(timeout=60).ping()
    except Exception as e:
        pytest.fail(f"no Docker engine: {e} (run scripts/docker-env.sh)")
    return image


record = record_in_image


# The recording saw a leftover out/fast file (the test puts it there); a replay's fresh
# output folder has none, so the replay runs for minutes while the recording took a
# second: a long Slurm job without a long recording.
LONG_IN_REPLAY = """\
import os, time
print("working", flush=True)
if not os.path.exists("out/fast"):
    time.sleep(600)
with open("out/done.txt", "w") as f:
    f.write("done")
"""


@pytest.fixture(scope="module")
def recorded(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A store with three example runs (seeds 1-3) and one that runs long when replayed."""
    base = tmp_path_factory.mktemp("slurm")
    repo = make_repo(base / "repo")
    (repo / "long.py").write_text(LONG_IN_REPLAY)
    git(repo, "add", "long.py")
    git(repo, "commit", "-q", "-m", "long")
    store = base / "store" / "runs.db"
    runs = []
    for seed in (1, 2, 3):
        runs.append(
            record(store, repo, cluster, "train_mlp.py", "--data", "data/train.npz",
                   "--seed", str(seed), *QUICK)
        )  # fmt: skip
    (repo / "out").mkdir(exist_ok=True)
    (repo / "out" / "fast").write_text("")
    long_run = record(store, repo, cluster, "long.py")
    (repo / "out" / "fast").unlink()
    return {"store": store, "repo": repo, "runs": runs, "long": long_run}


@pytest.fixture
def store(recorded: dict[str, Any], tmp_path: Path) -> Path:
    """A copy of the recorded store for one test (the spool goes beside it)."""
    dest = tmp_path / "store"
    shutil.copytree(recorded["store"].parent, dest, ignore=shutil.ignore_patterns("slurm-spool"))
    return dest / "runs.db"


def replay(store: Path, run_id: str, *args: str) -> tuple[int, dict[str, Any], str]:
    return cli_json(store, "replay", run_id, "--json", "--backend", "slurm", *args)


def sacct(*job_ids: str) -> dict[str, str]:
    """Job id -> state, as Slurm's accounting (slurmdbd) has it."""
    p = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return dict(line.split("|", 1) for line in p.stdout.split() if "|" in line)


def wait_for_sacct(job_ids: list[str], timeout: float = 60) -> dict[str, str]:
    """Accounting is written by slurmctld in the background: wait until it has the end."""
    deadline = time.monotonic() + timeout
    while True:
        states = sacct(*job_ids)
        done = all(states.get(j, "").split(" ")[0] not in ("", "PENDING", "RUNNING")
                   for j in job_ids)  # fmt: skip
        if done or time.monotonic() > deadline:
            return states
        time.sleep(1)


def verify_store(store: Path) -> None:
    proc = replay_tui(store, "verify-store")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with RunStore(store) as s:
        assert s.verify().ok


def job_of(store: Path, replay_run: str) -> dict[str, Any]:
    with RunStore(store) as s:
        m = s.manifest(replay_run)
    assert m.replay is not None and m.replay.backend == "slurm"
    assert m.replay.job is not None
    return m.replay.job.model_dump()


def test_registry_image_run_replays_identical_through_slurm(
    store: Path, recorded: dict[str, Any]
) -> None:
    rid = recorded["runs"][0]
    code, rep, err = replay(store, rid)
    assert code == 0, err[-3000:]
    r = rep["replays"][0]
    assert r["verdict"] == "IDENTICAL" and r["replay_status"] == "completed"
    with RunStore(store) as s:
        original, replayed = s.manifest(rid), s.manifest(r["replay_run"])
        assert s.get_run(rid).last_verdict == "IDENTICAL"
    assert original.image is not None and replayed.image is not None
    assert replayed.image.digest == original.image.digest  # the node pulled it by digest
    assert replayed.image.image_id == original.image.image_id
    assert {a.path: a.sha256 for a in replayed.outputs.artifacts} == {
        a.path: a.sha256 for a in original.outputs.artifacts
    }
    job = job_of(store, r["replay_run"])
    assert job["scheduler"] == "slurm" and job["state"] == "COMPLETED"
    assert job["node"] == socket.gethostname().split(".")[0]
    assert job["partition"] == "main"
    assert wait_for_sacct([job["job_id"]])[job["job_id"]] == "COMPLETED"
    # the job ran in the spool beside the store; a successful job leaves no files there
    spool = store.parent / "slurm-spool"
    assert (spool / "jobs").is_dir() and not any((spool / "jobs").iterdir())
    verify_store(store)


def test_drill_of_three_runs_goes_through_slurm(store: Path, recorded: dict[str, Any]) -> None:
    proc = replay_tui(
        store, "drill", "--backend", "slurm", "--count", "3", "--pick", "oldest", "--json"
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    rep = json.loads(proc.stdout)
    assert rep["passed"] and rep["backend"] == "slurm"
    assert sorted(i["run_id"] for i in rep["runs"]) == sorted(recorded["runs"])
    assert [i["status"] for i in rep["runs"]] == ["reproduced"] * 3
    job_ids = [job_of(store, i["replay_run"])["job_id"] for i in rep["runs"]]
    assert len(set(job_ids)) == 3
    states = wait_for_sacct(job_ids)
    assert [states.get(j) for j in job_ids] == ["COMPLETED"] * 3, states
    with RunStore(store) as s:
        replays = s.facts("replays")
        assert len(replays) == 3
        assert {f["replay_run"] for f in replays} == {i["replay_run"] for i in rep["runs"]}
        assert all(f["verdict"] == "IDENTICAL" for f in replays)
        drills = s.facts("drills")
        assert len(drills) == 1 and drills[0]["body"]["backend"] == "slurm"
    verify_store(store)


def test_replay_times_two_fans_out_to_two_jobs(store: Path, recorded: dict[str, Any]) -> None:
    code, rep, err = replay(store, recorded["runs"][1], "--times", "2")
    assert code == 0, err[-3000:]
    assert [r["verdict"] for r in rep["replays"]] == ["IDENTICAL", "IDENTICAL"]
    assert rep["noise_floor"]["replicas"] == 2
    assert rep["noise_floor"]["largest_identical_group"] == 2
    with RunStore(store) as s:  # a floor-measuring series: the floor is stored, ledgered
        floors = [f for f in s.facts("noise_floors") if "floor" in f["body"]]
        assert [f["id"] for f in floors] == [rep["noise_floor"]["floor_id"]]
        assert sorted(floors[0]["body"]["replicas"]) == sorted(
            r["replay_run"] for r in rep["replays"]
        )
    jobs = [job_of(store, r["replay_run"])["job_id"] for r in rep["replays"]]
    assert len(set(jobs)) == 2
    assert wait_for_sacct(jobs) == dict.fromkeys(jobs, "COMPLETED")
    verify_store(store)


def _running_job(spool: Path, timeout: float = 300) -> tuple[str, Path]:
    """The id and folder of the job whose container printed 'working'."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in (spool / "jobs").glob("*") if (spool / "jobs").is_dir() else []:
            log, jid = d / "output.log", d / "job_id"
            if jid.exists() and log.exists() and "working" in log.read_text():
                return jid.read_text().strip(), d
        time.sleep(0.2)
    raise AssertionError("the replay job never started its container")


def _replay_in_background(store: Path, run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "replay-tui"),
            *("--store", str(store), "replay", run_id),
            *("--backend", "slurm", "--json", "--quiet"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cli_env(), "PYTHONFAULTHANDLER": "1"},
    )


def _containers_of(job_id: str, timeout: float = 60) -> str:
    """Containers (running or not) the ended job left, once dockerd has had time to
    remove them (``--rm`` removal follows the stop asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        ps = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"name=replay-tui-{job_id}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ps.returncode == 0, ps.stderr
        if not ps.stdout.strip() or time.monotonic() > deadline:
            return ps.stdout.strip()
        time.sleep(0.5)


def _aborted_replay_is_consistent(store: Path, rep: dict[str, Any]) -> dict[str, Any]:
    r: dict[str, Any] = rep["replays"][0]
    assert r["verdict"] == "INCOMPLETE"
    with RunStore(store) as s:
        m = s.manifest(r["replay_run"])
        assert s.get_run(m.replay_of or "").last_verdict is None  # not evidence
    verify_store(store)
    return r


def test_job_killed_with_scancel_is_an_incomplete_replay(
    store: Path, recorded: dict[str, Any]
) -> None:
    proc = _replay_in_background(store, recorded["long"])
    try:
        job_id, _jobdir = _running_job(store.parent / "slurm-spool")
        subprocess.run(["scancel", job_id], check=True, timeout=60)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err[-3000:]
    rep = json.loads(out)
    r = _aborted_replay_is_consistent(store, rep)
    assert r["replay_status"] == "infra-error"
    assert f"Slurm job {job_id}" in r["reason"] and "CANCELLED" in r["reason"]
    job = job_of(store, r["replay_run"])
    assert job["job_id"] == job_id and job["state"] == "CANCELLED"
    assert wait_for_sacct([job_id])[job_id].startswith("CANCELLED")
    assert _containers_of(job_id) == ""  # the container went with the job


def test_ctrl_c_cancels_the_job(store: Path, recorded: dict[str, Any]) -> None:
    proc = _replay_in_background(store, recorded["long"])
    try:
        job_id, _jobdir = _running_job(store.parent / "slurm-spool")
        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:  # say where it waits: every thread's stack
            proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER=1 dumps them
            _out, err = proc.communicate(timeout=60)
            why = f"no exit 300 s after Ctrl-C; its threads:\n{err[-8000:]}"
            raise AssertionError(why) from None
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]  # 128 + SIGINT, as a shell expects
    assert "interrupted (Ctrl-C)" in err
    assert wait_for_sacct([job_id])[job_id].startswith("CANCELLED")
    assert _containers_of(job_id) == ""
    with RunStore(store) as s:
        fact = s.facts("replays")[-1]
        assert fact["status"] == "interrupted" and fact["replay_run"] is None
    verify_store(store)


def test_job_over_its_time_limit_is_an_incomplete_replay(
    store: Path, recorded: dict[str, Any]
) -> None:
    # Slurm counts limits in whole minutes and checks them about every 30 s: ~1-1.5 min
    code, rep, err = replay(store, recorded["long"], "--slurm-time", "1")
    assert code == 3, err[-3000:]
    r = _aborted_replay_is_consistent(store, rep)
    assert r["replay_status"] == "timed_out"
    assert "TIMEOUT" in r["reason"] and "time limit" in r["reason"]
    job = job_of(store, r["replay_run"])
    assert job["state"] == "TIMEOUT" and job["time_limit"] == "00:01:00"
    assert wait_for_sacct([job["job_id"]])[job["job_id"]] == "TIMEOUT"


def test_job_on_a_failed_node_is_an_incomplete_replay(
    store: Path, recorded: dict[str, Any]
) -> None:
    node = socket.gethostname().split(".")[0]
    proc = _replay_in_background(store, recorded["long"])
    try:
        job_id, _jobdir = _running_job(store.parent / "slurm-spool")
        subprocess.run(
            ["scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=replay-tui-test"],
            check=True,
            timeout=60,
        )
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        # back to service (ReturnToService=2 may have done it already), then wait for idle
        subprocess.run(
            ["scontrol", "update", f"NodeName={node}", "State=RESUME"],
            capture_output=True,
            timeout=60,
        )
        subprocess.run(["bash", str(SLURM_ENV)], check=True, timeout=600)
    assert proc.returncode == 3, err[-3000:]
    r = _aborted_replay_is_consistent(store, json.loads(out))
    assert r["replay_status"] == "infra-error"
    assert f"Slurm job {job_id}" in r["reason"] and "NODE_FAIL" in r["reason"]
    assert job_of(store, r["replay_run"])["state"] == "NODE_FAIL"
    assert wait_for_sacct([job_id])[job_id] == "NODE_FAIL"  # never requeued
    assert _containers_of(job_id) == ""


@pytest.fixture
def controller_down() -> Iterator[None]:
    subprocess.run(["bash", str(SLURM_ENV), "--stop-controller"], check=True, timeout=120)
    try:
        yield
    finally:
        subprocess.run(["bash", str(SLURM_ENV)], check=True, timeout=600)
        assert _cluster_problem() is None


def test_controller_down_is_an_infrastructure_error(
    store: Path, recorded: dict[str, Any], controller_down: None
) -> None:
    with RunStore(store) as s:
        runs_before = s.count_runs()
    code, _rep, err = replay(store, recorded["runs"][0])
    assert code == 3, err[-3000:]
    assert "Slurm controller does not answer" in err
    assert "slurm-env.sh" in err  # says what to do
    with RunStore(store) as s:
        assert s.count_runs() == runs_before  # no replay manifest
        fact = s.facts("replays")[-1]
        assert fact["replay_run"] is None
        assert "Slurm controller does not answer" in fact["reason"]
    verify_store(store)

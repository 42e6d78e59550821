"""Item 6 of the third trust round (attack D1), on Slurm: a replay job runs within walls.

On the real one-node Slurm cluster with the real engine and training image: the job's
container, inspected while it runs, has a memory limit and a CPU limit sized on the node
(the recorded CPU count, capped at the CPUs Slurm gave the job; half the node's memory)
and a non-root user; the output folder it writes is a tmpfs the job script mounted, of
the replay's bound: a write past it gets ENOSPC inside the container, and what the run
wrote inside the bound reaches the spool's checkout (it is hashed); the replay manifest
records the walls.  Without a cluster or an engine these tests fail, never skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replay_tui.replay.backends.docker.walls import our_mounts
from tests.helpers.engines import docker_client, train_env
from tests.replay.test_slurm import _cluster_problem
from tests.security.test_sandbox_walls import (
    ALLOCATE,
    FILL_OUT,
    WAIT_FOR_GO,
    _check_facts_and_sandbox,
    _check_filled_to_the_bound,
    _check_killed_for_memory,
    _check_limits,
    _ingest,
    _replay_inspected,
    _repo,
)
from tests.security.test_sandbox_walls import _replay as _replay_in_docker

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

MiB = 1 << 20


@pytest.fixture(scope="module")
def image() -> str:
    problem = _cluster_problem()
    if problem:
        pytest.fail(f"no Slurm cluster: {problem} (run scripts/slurm-env.sh)")
    return train_env()


@pytest.fixture
def engine(image: str) -> Iterator[Any]:
    client = docker_client()
    yield client
    client.close()


def _replay(store: Path, rid: str, *args: str) -> tuple[int, dict[str, Any], str]:
    return _replay_in_docker(store, rid, "--backend", "slurm", *args)


def test_the_slurm_jobs_container_has_walls_and_the_manifest_records_them(
    image: str, engine: Any, tmp_path: Path
) -> None:
    repo = _repo(tmp_path, WAIT_FOR_GO)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, repo, image)  # hardware.cpu_count 1
    code, rep, out, seen = _replay_inspected(engine, store, rid, "--backend", "slurm")
    assert seen, f"the test never saw the job's container running: {out[-3000:]}"
    assert seen["attrs"]["Name"].startswith("/replay-tui-")  # the job script's container
    host = _check_limits(seen["attrs"])  # the recorded cpu_count 1, the job's 1 CPU
    r = rep["replays"][0]
    assert r["replay_status"] == "completed", out[-3000:]
    # the tmpfs the job script mounted is 1 GiB
    m = _check_facts_and_sandbox(store, r["replay_run"], host)
    # what the run wrote in the bounded folder came back to the spool's checkout
    got = {a.path: a.sha256 for a in m.outputs.artifacts}
    assert got.get("out/result.txt") == (
        "2689367b205c16ce32ed4200942b8b8b1e262dfc70d9bc9fbc77c49699a4f1df"  # sha256("ok")
    ), got
    assert code in (0, 1)  # judged (the ingested hash is not the output's), not infra


def test_a_write_past_the_slurm_jobs_output_bound_gets_enospc(
    image: str, engine: Any, tmp_path: Path
) -> None:
    repo = _repo(tmp_path, FILL_OUT)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, repo, image)
    code, rep, out = _replay(store, rid, "--output-size", "8m")
    _check_filled_to_the_bound(store, rep, out)  # in the tmpfs the job script mounted
    spool = store.parent / "slurm-spool"
    assert not [p for p, _ in our_mounts() if p.startswith(str(spool))]  # all unmounted
    assert code in (0, 1)


def test_a_slurm_job_killed_for_memory_is_an_infrastructure_result_naming_the_limit(
    image: str, engine: Any, tmp_path: Path
) -> None:
    repo = _repo(tmp_path, ALLOCATE)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, repo, image)
    code, rep, out = _replay(store, rid, "--memory", "96m")
    _check_killed_for_memory(store, rid, rep, code, out, "oom")


SLEEP = """\
import os, time
os.makedirs('out', exist_ok=True)
print('working', flush=True)
time.sleep(600)
"""


def test_a_job_script_killed_before_it_unmounted_leaves_no_bounded_folder(
    image: str, engine: Any, tmp_path: Path
) -> None:
    import subprocess
    import sys

    from tests.replay.test_slurm import _running_job
    from tests.support.training import cli_env

    repo = _repo(tmp_path, SLEEP)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, repo, image)
    argv = [str(Path(sys.executable).parent / "replay-tui"), "--store", str(store)]
    argv += ["replay", rid, "--json", "--backend", "slurm", "--repo", str(repo)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env())  # fmt: skip
    spool = store.parent / "slurm-spool"
    job_id = ""
    try:
        job_id, _ = _running_job(spool)
        assert [p for p, _ in our_mounts() if p.startswith(str(spool))]  # bounded while it runs
        # SIGKILL to the batch script: it never gets to unmount what it mounted
        subprocess.run(["scancel", "--batch", "--signal=KILL", job_id], check=True, timeout=60)
        _out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        if job_id:  # the container the killed script started runs on: the test ends it
            for c in engine.containers.list(all=True, filters={"name": f"replay-tui-{job_id}"}):
                c.remove(force=True)
    assert proc.returncode in (1, 3), err[-3000:]  # ended, not as reproduced
    assert not [p for p, _ in our_mounts() if p.startswith(str(spool))], err[-3000:]

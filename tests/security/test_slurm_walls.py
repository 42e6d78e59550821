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

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replay_tui.replay.backends.docker.walls import our_mounts
from storage.store import RunStore
from tests.replay.test_slurm import _cluster_problem
from tests.security.test_sandbox_walls import (
    ALLOCATE,
    FILL_OUT,
    WAIT_FOR_GO,
    _ingest,
    _log,
    _repo,
)
from tests.support.training import replay_tui

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

MiB = 1 << 20


@pytest.fixture(scope="module")
def image() -> str:
    problem = _cluster_problem()
    if problem:
        pytest.fail(f"no Slurm cluster: {problem} (run scripts/slurm-env.sh)")
    ref = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    if not ref:
        pytest.fail("REPLAY_TUI_TRAIN_IMAGE unset (source /var/lib/replay-tui-env/train-image.env)")
    return ref


@pytest.fixture
def engine(image: str) -> Iterator[Any]:
    try:
        import docker

        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as e:  # an environment problem: a failure, never a skip
        pytest.fail(f"no Docker engine: {e} (run scripts/docker-env.sh)")
    yield client
    client.close()


def _replay(store: Path, rid: str, *args: str) -> tuple[int, dict[str, Any], str]:
    repo = store.parent.parent / "repo"
    proc = replay_tui(
        store, "replay", rid, "--json", "--backend", "slurm", "--repo", str(repo), *args
    )
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {}
    return proc.returncode, data, proc.stderr + proc.stdout


def _inspect_while_running(engine: Any, seen: dict[str, Any], done: threading.Event) -> None:
    """Each replay container that printed its FACTS: inspected, then told to go on."""
    told: set[str] = set()
    while not done.is_set():
        for c in engine.containers.list(filters={"label": "io.replay-tui.run"}):
            if c.id in told or c.status != "running":
                continue
            if b"FACTS" in c.logs(stdout=True, stderr=False):
                seen.setdefault("attrs", c.attrs)
                c.exec_run(["touch", "/tmp/go"])
                told.add(c.id)
        done.wait(0.1)


def test_the_slurm_jobs_container_has_walls_and_the_manifest_records_them(
    image: str, engine: Any, tmp_path: Path
) -> None:
    repo = _repo(tmp_path, WAIT_FOR_GO)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, repo, image)  # hardware.cpu_count 1
    seen: dict[str, Any] = {}
    done = threading.Event()
    t = threading.Thread(target=_inspect_while_running, args=(engine, seen, done), daemon=True)
    t.start()
    try:
        code, rep, out = _replay(store, rid)
    finally:
        done.set()
        t.join(timeout=10)
    assert seen, f"the test never saw the job's container running: {out[-3000:]}"
    attrs = seen["attrs"]
    host = attrs["HostConfig"]
    assert attrs["Name"].startswith("/replay-tui-")  # the job script's container
    assert host["Memory"] > 0 and host["MemorySwap"] == host["Memory"]  # no swap beyond it
    assert host["NanoCpus"] == 1_000_000_000  # the recorded cpu_count 1, the job's 1 CPU
    assert attrs["Config"]["User"] == "65534:65534"  # root submits, nobody inside
    r = rep["replays"][0]
    assert r["replay_status"] == "completed", out[-3000:]
    facts = json.loads(_log(store, r["replay_run"]).split("FACTS ", 1)[1].splitlines()[0])
    assert (facts["uid"], facts["gid"]) == (65534, 65534)
    assert facts["out_bytes"] == 1 << 30  # the tmpfs the job script mounted: 1 GiB
    with RunStore(store) as s:
        m = s.manifest(r["replay_run"])
        assert s.verify().ok
    # what the run wrote in the bounded folder came back to the spool's checkout
    got = {a.path: a.sha256 for a in m.outputs.artifacts}
    assert got.get("out/result.txt") == (
        "2689367b205c16ce32ed4200942b8b8b1e262dfc70d9bc9fbc77c49699a4f1df"  # sha256("ok")
    ), got
    assert m.replay is not None and m.replay.sandbox is not None
    sb = m.replay.sandbox
    assert sb.user == "65534:65534" and sb.cpus == 1.0 and sb.output_bytes == 1 << 30
    assert sb.memory_limit and sb.memory_limit.endswith("m")
    assert int(sb.memory_limit[:-1]) * MiB == host["Memory"]
    assert code in (0, 1)  # judged (the ingested hash is not the output's), not infra


def test_a_write_past_the_slurm_jobs_output_bound_gets_enospc(
    image: str, engine: Any, tmp_path: Path
) -> None:
    repo = _repo(tmp_path, FILL_OUT)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, repo, image)
    code, rep, out = _replay(store, rid, "--output-size", "8m")
    r = rep["replays"][0]
    assert r["replay_status"] == "completed", out[-3000:]
    fill = json.loads(_log(store, r["replay_run"]).split("FILL ", 1)[1].splitlines()[0])
    assert fill["error"] == "ENOSPC", fill  # the wall, inside the container
    assert fill["written"] <= 8 * MiB
    assert fill["fs"] and set(fill["fs"]) == {"tmpfs"}  # mounted by the job script
    with RunStore(store) as s:
        m = s.manifest(r["replay_run"])
    assert m.replay is not None and m.replay.sandbox is not None
    assert m.replay.sandbox.output_bytes == 8 * MiB
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
    assert code == 3, out[-3000:]  # the machine's wall ended it: not "not reproduced"
    r = rep["replays"][0]
    assert r["replay_status"] == "infra-error"
    assert "memory limit of 96m" in r["reason"] and "oom" in r["reason"]
    assert r["verdict"] == "INCOMPLETE"
    with RunStore(store) as s:
        assert s.get_run(rid).last_verdict is None  # never judged
        m = s.manifest(r["replay_run"])
    assert m.replay is not None and m.replay.sandbox is not None
    assert m.replay.sandbox.memory_limit == "96m"


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

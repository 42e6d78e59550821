"""Slurm jobs that start Docker, Podman or Apptainer (``--slurm-runtime``), for real.

On the one-node cluster of scripts/slurm-env.sh, with the runtimes of
scripts/docker-env.sh, podman-env.sh and apptainer-env.sh: runs recorded in the registry
image replay IDENTICAL as Slurm jobs with each runtime, the replay manifest recording the
runtime and the identity of what ran as the one-host backends do; a drill of three on
Slurm with Apptainer converts the image once into the spool's SIF cache (counted in the
cache's record of its conversions); a SIF swapped for another image's is refused before
the job runs anything.  A missing cluster or runtime fails these tests, never skips.

The session's first Slurm+Apptainer drill fills the spool's SIF cache
(tests/support/slurm_runtimes.py); the other Apptainer jobs start from it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from replay_tui.replay.backends.apptainer.runtime import (
    CONVERSIONS,
    ApptainerRuntime,
    sif_name,
)
from replay_tui.replay.backends.slurm.runtimes import read_runtimes
from storage.store import RunStore
from tests.replay.test_slurm import job_of, verify_store, wait_for_sacct
from tests.support.runtimes import push_other_image, train_image
from tests.support.slurm_runtimes import apptainer_drill, recorded_runs, store_copy
from tests.support.training import replay_tui

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.docker,
    pytest.mark.podman,
    pytest.mark.apptainer,
    pytest.mark.slow,
]


@pytest.fixture(scope="session")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp()


def _sif_sha(spool: Path) -> str:
    sif = spool / "sif" / sif_name(train_image()[1].partition("@")[2])
    return hashlib.sha256(sif.read_bytes()).hexdigest()


def test_a_drill_of_three_on_slurm_with_apptainer_converts_the_image_once(base: Path) -> None:
    proof = apptainer_drill(base)
    rec = recorded_runs(base)
    r = proof.result
    assert r["code"] == 0, r["stderr"][-3000:] + r["stdout"][-2000:]
    rep = json.loads(r["stdout"])
    assert rep["passed"] and rep["backend"] == "slurm"
    assert sorted(i["run_id"] for i in rep["runs"]) == sorted(rec.runs)
    assert [i["status"] for i in rep["runs"]] == ["reproduced"] * 3
    # counted, not timed: the cache's record has one conversion for the three jobs
    _, ref = train_image()
    conversions = (proof.spool / "sif" / CONVERSIONS).read_text().splitlines()
    assert [c.split()[0] for c in conversions] == [ref.partition("@")[2]], conversions
    assert [p.name for p in (proof.spool / "sif").glob("*.sif")] == [
        sif_name(ref.partition("@")[2])
    ]
    sha = _sif_sha(proof.spool)
    jobs = []
    with RunStore(proof.store) as s:
        for i in rep["runs"]:
            m = s.manifest(i["replay_run"])
            assert m.replay is not None and m.replay.runtime is not None
            rt = m.replay.runtime
            assert (rt.name, rt.version) == ("apptainer", "1.4.5")
            assert rt.requested_digest == rt.sif_built_from == ref.partition("@")[2]
            assert rt.sif_sha256 == sha  # the one SIF the three jobs ran
            assert m.replay.job is not None and m.replay.job.state == "COMPLETED"
            jobs.append(m.replay.job.job_id)
    assert len(set(jobs)) == 3
    assert wait_for_sacct(jobs) == dict.fromkeys(jobs, "COMPLETED")
    verify_store(proof.store)


@pytest.mark.parametrize("runtime", ["docker", "podman", "apptainer"])
def test_the_recorded_run_replays_identical_as_a_slurm_job_with_each_runtime(
    runtime: str, base: Path, tmp_path: Path
) -> None:
    rec = recorded_runs(base)
    store = store_copy(base, tmp_path / "store")
    spool = apptainer_drill(base).spool if runtime == "apptainer" else tmp_path / "spool"
    # docker: the default, as a probe job finds it on the node (it has all three)
    chosen = [] if runtime == "docker" else ["--slurm-runtime", runtime]
    proc = replay_tui(
        store, "replay", rec.runs[0], "--json", "--backend", "slurm",
        "--slurm-spool", str(spool), *chosen, timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout)["replays"][0]
    assert r["verdict"] == "IDENTICAL" and r["replay_status"] == "completed"
    with RunStore(store) as s:
        original, m = s.manifest(rec.runs[0]), s.manifest(r["replay_run"])
    assert original.image is not None and original.image.digest is not None
    assert m.replay is not None and m.replay.backend == "slurm"
    assert {a.path: a.sha256 for a in m.outputs.artifacts} == {
        a.path: a.sha256 for a in original.outputs.artifacts
    }
    rt = m.replay.runtime
    if runtime == "docker":
        # chosen from what the probe job found on the node, its answer kept beside the store
        (kept,) = (store.parent / "slurm-runtimes").glob("slurm-runtimes-*.json")
        found = read_runtimes(json.loads(kept.read_text())["runtimes"].encode())
        assert list(found) == ["docker", "podman", "apptainer"], found
        assert (found["podman"], found["apptainer"]) == ("4.3.1", "1.4.5")
        assert rt is None  # the docker job's manifests as before
        assert m.image is not None and m.image.image_id == original.image.image_id
    elif runtime == "podman":
        assert rt is not None and (rt.name, rt.version) == ("podman", "4.3.1")
        assert rt.requested_digest == original.image.digest
        assert rt.image_id is not None and rt.image_id.startswith("sha256:")
        assert m.image is not None and m.image.image_id == rt.image_id
        assert m.image.digest == original.image.digest
    else:
        assert rt is not None and (rt.name, rt.version) == ("apptainer", "1.4.5")
        assert rt.sif_built_from == rt.requested_digest == original.image.digest
        assert rt.sif_sha256 == _sif_sha(spool)
        assert m.image is not None and m.image.digest == original.image.digest
        conversions = (spool / "sif" / CONVERSIONS).read_text().splitlines()
        assert len(conversions) == 1  # the drill's conversion, reused
    assert m.replay.sandbox is not None and m.replay.sandbox.user == "65534:65534"
    assert m.replay.network == "none"
    job = job_of(store, r["replay_run"])
    assert wait_for_sacct([job["job_id"]])[job["job_id"]] == "COMPLETED"
    verify_store(store)


def test_a_sif_swapped_for_another_images_is_refused_on_slurm(base: Path, tmp_path: Path) -> None:
    rec = recorded_runs(base)
    store = store_copy(base, tmp_path / "store")
    other = push_other_image("localhost:5000/replay-tui/test-other-sif:1")
    swapped = ApptainerRuntime(tmp_path / "other-cache").ensure_sif(other, lambda _n: None)
    _, ref = train_image()
    spool = tmp_path / "spool"
    (spool / "sif").mkdir(parents=True, mode=0o700)
    spool.chmod(0o700)
    shutil.copy(swapped, spool / "sif" / sif_name(ref.partition("@")[2]))
    proc = replay_tui(
        store, "replay", rec.runs[0], "--json", "--backend", "slurm",
        "--slurm-runtime", "apptainer", "--slurm-spool", str(spool),
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-3000:]
    said = " ".join((proc.stderr + proc.stdout).split())
    assert "the SIF's built-from digest differs" in said
    assert other.partition("@")[2] in said and ref.partition("@")[2] in said
    with RunStore(store) as s:
        facts = [f for f in s.replays_of(rec.runs[0]) if f.backend == "slurm"]
    assert [f.replay_run for f in facts] == [None]  # no replay manifest: nothing ran
    (jobdir,) = (spool / "jobs").iterdir()  # kept, to be looked at
    assert (jobdir / "identity.refused").is_file() and not (jobdir / "identity.ok").exists()
    assert (jobdir / "output.log").read_bytes() == b""  # the command never started
    assert not (jobdir / "end").exists()
    state: dict[str, Any] = wait_for_sacct([(jobdir / "job_id").read_text().strip()])
    assert list(state.values()) == ["FAILED"]

"""Replays with Apptainer (scripts/apptainer-env.sh) of a run recorded in the registry
image: IDENTICAL, converted once to a SIF shared by the replays, the SIF's identity
recorded and checked.  A missing Apptainer fails these tests, never skips them.

The GPU arguments are tested as argument lists against recorded hardware: no GPU is on
this machine, so ``--nv`` is never run here.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from replay_tui.replay.backends.apptainer.runtime import ApptainerRuntime, nv_args, sif_name
from replay_tui.replay.backends.docker.engine import Mount, Sandbox
from replay_tui.replay.backends.runtime import ImageIdentity, RunRequest
from storage.store import RunStore
from tests.support.runtimes import (
    apptainer_first_replays,
    apptainer_replay,
    push_other_image,
    recorded_run,
    replays_of,
    require,
    train_image,
)

pytestmark = [pytest.mark.apptainer, pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="session")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp()


def test_the_recorded_run_replays_identical_in_apptainer_with_its_identity(base: Path) -> None:
    proof = apptainer_first_replays(base)
    rec = recorded_run(base)
    for r in proof.replays:
        assert r["code"] == 0, r["stderr"][-3000:]
    with RunStore(rec.store) as s:
        original = s.manifest(rec.run_id)
    assert original.image is not None and original.image.digest is not None
    done = replays_of(rec.store, rec.run_id, "apptainer")
    assert len(done) >= 2
    sif = proof.cache / sif_name(original.image.digest)
    sif_sha = hashlib.sha256(sif.read_bytes()).hexdigest()
    for fact, m in done[:2]:
        assert fact.verdict == "IDENTICAL"
        assert m.replay is not None and m.replay.runtime is not None
        rt = m.replay.runtime
        assert rt.name == "apptainer" and rt.version == "1.4.5"
        assert rt.requested_digest == original.image.digest
        assert rt.sif_built_from == original.image.digest
        assert rt.sif_sha256 == sif_sha  # the bytes that ran: the cache's one SIF
        assert rt.image_id is None  # Podman's word, not Apptainer's
        assert m.replay.network == "none"
        assert m.replay.sandbox is not None and m.replay.sandbox.user != "0:0"
        assert {a.path: a.sha256 for a in m.outputs.artifacts} == {
            a.path: a.sha256 for a in original.outputs.artifacts
        }


def test_replays_started_together_convert_the_image_once(base: Path) -> None:
    proof = apptainer_first_replays(base)
    said = "".join(r["stderr"] for r in proof.replays)
    assert said.count("converting ") == 1, said[-3000:]
    assert said.count("SIF from the cache") == 1, said[-3000:]
    assert [p.name for p in proof.cache.glob("*.sif")] == [
        sif_name(train_image()[1].partition("@")[2])
    ]


def test_a_sif_swapped_for_another_images_is_refused_naming_the_built_from_digest(
    base: Path, tmp_path: Path
) -> None:
    proof = apptainer_first_replays(base)
    rec = recorded_run(base)
    other = push_other_image("localhost:5000/replay-tui/test-other-sif:1")
    rt = ApptainerRuntime(tmp_path / "other-cache")
    swapped_sif = rt.ensure_sif(other, lambda _n: None)  # a real SIF of another image
    _, ref = train_image()
    cache = tmp_path / "swapped"
    cache.mkdir(mode=0o700)
    shutil.copy(swapped_sif, cache / sif_name(ref.partition("@")[2]))
    before = len(replays_of(rec.store, rec.run_id, "apptainer"))
    proc = apptainer_replay(rec, cache)
    assert proc.returncode == 3, proc.stderr[-2000:]
    said = " ".join((proc.stderr + proc.stdout).split())
    assert "the SIF's built-from digest differs" in said
    assert other.partition("@")[2] in said and ref.partition("@")[2] in said
    assert len(replays_of(rec.store, rec.run_id, "apptainer")) == before  # nothing ran
    assert proof.cache != cache


def test_nv_is_limited_to_the_allocated_gpus_of_the_recorded_count() -> None:
    """No GPU here: the flags and variables are checked as built, never run."""
    assert nv_args(0) == ([], {})
    flags, env = nv_args(2)
    assert flags == ["--nv"]
    assert env["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["APPTAINERENV_NVIDIA_VISIBLE_DEVICES"] == "0,1"
    flags, env = nv_args(1, ["3", "5"])  # a scheduler allocated GPUs 3 and 5; one recorded
    assert env["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "3"


def test_the_run_command_carries_the_sandbox(tmp_path: Path) -> None:
    require("apptainer", "apptainer-env.sh")
    rt = ApptainerRuntime(tmp_path)
    image = ImageIdentity(
        "apptainer", "1.4.5", "r@sha256:" + "a" * 64, "sha256:" + "a" * 64,
        sif_path=tmp_path / "x.sif",
    )  # fmt: skip
    req = RunRequest(
        ["python3", "train.py"],
        {"A": "1,2"},
        "/workspace",
        [Mount("/src", "/workspace", True), Mount("/out", "/workspace/out", False)],
        Sandbox(gpus=2, memory_limit="512m", cpus=1.0, user="65534:65534"),
        "n",
    )
    argv = rt.run_argv(image, req)
    joined = " ".join(argv)
    for flag in ("--containall", "--no-home", "--cleanenv", "--no-privs", "--net --network none"):
        assert flag in joined
    assert "--memory 512m --memory-swap 512m --cpus 1 --pids-limit 512" in joined
    assert "--bind /src:/workspace:ro" in joined and "--bind /out:/workspace/out:rw" in joined
    assert "--nv" in argv and argv[-3:] == [str(tmp_path / "x.sif"), "python3", "train.py"]
    env = rt.process_env(req)
    assert env is not None and env["APPTAINERENV_A"] == "1,2"  # never split at a comma
    assert env["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "0,1"

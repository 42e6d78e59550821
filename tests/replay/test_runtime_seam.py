"""The container-runtime seam: Docker, Podman and Apptainer each answer the four things
a replay asks (resolve by digest, the sandboxed command, stream and exit, what ran) in
one module.  Resolving is real (the engines and the registry of scripts/*-env.sh); the
GPU flags are checked as built: no GPU is on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay_tui.errors import InfraError
from replay_tui.replay.backends.apptainer.runtime import ApptainerRuntime
from replay_tui.replay.backends.docker.engine import Mount, Sandbox
from replay_tui.replay.backends.docker.runtime import DockerRuntime, gpu_flags
from replay_tui.replay.backends.podman.runtime import PodmanRuntime
from replay_tui.replay.backends.runtime import ContainerRuntime, ImageIdentity, RunRequest
from tests.support.runtimes import require, train_image

pytestmark = [pytest.mark.docker, pytest.mark.podman]


def test_docker_and_podman_say_the_same_bytes_for_the_recorded_digest() -> None:
    require("docker", "docker-env.sh")
    require("podman", "podman-env.sh")
    tag, ref = train_image()
    runtimes: list[ContainerRuntime] = [DockerRuntime(), PodmanRuntime()]
    seen = [rt.resolve(ref, lambda _n: None) for rt in runtimes]
    assert {s.requested_digest for s in seen} == {ref.partition("@")[2]}
    assert seen[0].image_id == seen[1].image_id  # one image: its config's digest
    assert [s.runtime for s in seen] == ["docker", "podman"]
    for rt in runtimes:
        with pytest.raises(InfraError, match="not a reference by digest"):
            rt.resolve(tag, lambda _n: None)


def test_docker_gets_the_recorded_gpu_count_never_all() -> None:
    """No GPU here: the flags are checked as built, never run."""
    assert gpu_flags(0) == []
    assert gpu_flags(2) == ["--gpus", "2"]
    assert gpu_flags(1, ["3", "5"]) == ["--gpus", '"device=3"']


def test_every_runtime_builds_one_sandbox(tmp_path: Path) -> None:
    require("docker", "docker-env.sh")
    require("podman", "podman-env.sh")
    require("apptainer", "apptainer-env.sh")
    digest = "sha256:" + "a" * 64
    image = ImageIdentity(
        "x", "1", f"r@{digest}", digest, image_id="sha256:" + "c" * 64,
        sif_path=tmp_path / "x.sif",
    )  # fmt: skip
    req = RunRequest(
        ["python3", "t.py"],
        {},
        "/workspace",
        [Mount("/src", "/workspace", True), Mount("/o", "/workspace/out", False)],
        Sandbox(memory_limit="1g", cpus=1.0, user="65534:65534"),
        "n",
    )
    for rt in (DockerRuntime(), PodmanRuntime(), ApptainerRuntime(tmp_path)):
        argv = " ".join(rt.run_argv(image, req))
        assert "none" in argv and "1g" in argv and "65534" in argv, rt.name
        assert argv.endswith("python3 t.py"), rt.name
        assert "--privileged" not in argv and "--cap-add" not in argv, rt.name

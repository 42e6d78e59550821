"""Replays with Podman (scripts/podman-env.sh) of a run recorded in the registry image:
the same run replays IDENTICAL with --backend docker and --backend podman, and Podman's
image id and version are recorded next to the digest asked for.  A missing Podman fails
these tests, never skips them.

The GPU arguments (CDI devices) are tested as argument lists against recorded hardware:
no GPU is on this machine, so they are never run here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from replay_tui.errors import InfraError
from replay_tui.replay.backends.docker.engine import Mount, Sandbox
from replay_tui.replay.backends.podman.runtime import PodmanRuntime, cdi_devices
from replay_tui.replay.backends.runtime import (
    IdentityMismatch,
    ImageIdentity,
    RunRequest,
    check_identity,
    requested_digest,
)
from storage.store import RunStore
from tests.support.runtimes import recorded_run, replays_of, require, train_image
from tests.support.training import replay_tui

pytestmark = [pytest.mark.podman, pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="session")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp()


def test_the_recorded_run_replays_identical_with_docker_and_podman(base: Path) -> None:
    require("podman", "podman-env.sh")
    rec = recorded_run(base)
    for backend in ("docker", "podman"):
        proc = replay_tui(rec.store, "replay", rec.run_id, "--backend", backend, "--quiet")
        assert proc.returncode == 0, proc.stderr[-3000:]
    with RunStore(rec.store) as s:
        original = s.manifest(rec.run_id)
    assert original.image is not None
    recorded = {a.path: a.sha256 for a in original.outputs.artifacts}
    for backend in ("docker", "podman"):
        fact, m = replays_of(rec.store, rec.run_id, backend)[-1]
        assert fact.verdict == "IDENTICAL", backend
        assert {a.path: a.sha256 for a in m.outputs.artifacts} == recorded
        assert m.image is not None and m.image.digest == original.image.digest
        assert m.image.image_id == original.image.image_id
    _, docker_replay = replays_of(rec.store, rec.run_id, "docker")[-1]
    assert docker_replay.replay is not None and docker_replay.replay.runtime is None  # as before
    _, m = replays_of(rec.store, rec.run_id, "podman")[-1]
    assert m.replay is not None and m.replay.runtime is not None
    rt = m.replay.runtime
    assert rt.name == "podman" and rt.version.startswith("4.")
    assert rt.requested_digest == original.image.digest
    assert rt.image_id == original.image.image_id
    assert rt.sif_sha256 is None and rt.sif_built_from is None
    assert m.replay.sandbox is not None and m.replay.sandbox.user != "0:0"


def test_podman_resolves_by_digest_and_refuses_a_tag() -> None:
    require("podman", "podman-env.sh")
    tag, ref = train_image()
    rt = PodmanRuntime()
    ident = rt.resolve(ref, lambda _n: None)
    assert ident.requested_digest == ref.partition("@")[2]
    assert ident.image_id is not None and ident.image_id.startswith("sha256:")
    with pytest.raises(InfraError, match="not a reference by digest"):
        rt.resolve(tag, lambda _n: None)


def test_an_identity_that_differs_is_named() -> None:
    asked = "sha256:" + "a" * 64
    check_identity(asked, asked, "podman's image digest", "x")
    with pytest.raises(IdentityMismatch, match="podman's image digest differs: x is sha256:b"):
        check_identity(asked, "sha256:" + "b" * 64, "podman's image digest", "x")
    assert requested_digest("r/x@" + asked) == asked


def test_cdi_devices_follow_the_recorded_gpu_count() -> None:
    """No GPU here: the CDI device flags are checked as built, never run."""
    assert cdi_devices(0) == []
    assert cdi_devices(2) == ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1"]
    assert cdi_devices(1, ["GPU-abc", "GPU-def"]) == ["--device", "nvidia.com/gpu=GPU-abc"]


def test_the_run_command_carries_the_sandbox() -> None:
    require("podman", "podman-env.sh")
    image = ImageIdentity(
        "podman", "4.3.1", "r@sha256:" + "a" * 64, "sha256:" + "a" * 64,
        image_id="sha256:" + "c" * 64,
    )  # fmt: skip
    req = RunRequest(
        ["python3", "train.py"],
        {"A": "1"},
        "/workspace",
        [Mount("/src", "/workspace", True), Mount("", "/workspace/.git", True, kind="tmpfs")],
        Sandbox(gpus=1, memory_limit="512m", cpus=2.0, user="65534:65534"),
        "n",
    )
    argv = PodmanRuntime().run_argv(image, req)
    joined = " ".join(argv)
    for flag in (
        "--network none",
        "--cap-drop ALL",
        "--security-opt no-new-privileges",
        "--read-only",
        "--memory 512m --memory-swap 512m",
        "--cpus 2",
        "--user 65534:65534",
        "--pull never",
        "type=bind,source=/src,target=/workspace,ro=true",
        "--device nvidia.com/gpu=0",
    ):
        assert flag in joined, flag
    assert argv[-3:] == ["sha256:" + "c" * 64, "python3", "train.py"]  # by id, as checked

"""Docker behind the container-runtime seam (:mod:`replay_tui.replay.backends.runtime`),
through the ``docker`` command line.

The docker backend's replays keep their own executor (``engine.DockerExecutor``, the
Docker SDK: its behaviour and its manifests predate the seam and stay as they are).
This module is Docker as the seam sees it, for what runs a runtime by its command line
(a bench's bare run, a scheduler's job script):

- **Resolve**: the image ``name@sha256:...`` pulled by digest into the engine
  (``engine.ensure_image``); the engine's repo digest for that repository must be the one
  asked for, and the run is started by the image id inspected.
- **Run**: ``docker run`` with the Docker-compatible sandbox flags of
  :func:`~replay_tui.replay.backends.runtime.oci_run_flags`; GPUs as ``--gpus N`` for the
  recorded count (never ``all``).
- **What ran**: the engine's version and the image id.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from replay_tui.replay.backends.runtime import (
    ImageIdentity,
    OciCommands,
    check_identity,
    gpu_indices,
    installed,
    oci_run_flags,
    requested_digest,
    run_capped,
)

if TYPE_CHECKING:
    from replay_tui.replay.backends.runtime import ContainerRuntime, RunRequest


def gpu_flags(count: int, devices: list[str] | None = None) -> list[str]:
    """``--gpus N`` for the recorded count, or ``--gpus device=…`` for allocated ones."""
    if count <= 0:
        return []
    if devices:
        return ["--gpus", f'"device={",".join(gpu_indices(count, devices))}"']
    return ["--gpus", str(count)]


@dataclass
class DockerRuntime(OciCommands):
    name: str = "docker"
    binary: str = "docker"

    def _docker(self) -> str:
        return installed(
            self.binary, "docker", "install it (scripts/docker-env.sh sets it up here)"
        )

    def version(self) -> str:
        out = run_capped([self._docker(), "version", "--format", "{{.Server.Version}}"])
        return out.strip()[:64]

    def resolve(self, ref: str, on_note: Callable[[str], None]) -> ImageIdentity:
        from replay_tui.replay.backends.docker import engine as dk

        digest = requested_digest(ref)
        c = dk.client()
        img = dk.ensure_image(c, ref)
        info = dk.image_info(c, ref)
        check_identity(
            digest,
            info.get("digest"),
            "the engine's repo digest",
            f"what the engine holds for {ref.split('@', 1)[0]}",
        )
        return ImageIdentity(
            runtime=self.name,
            version=self.version(),
            reference=ref,
            requested_digest=digest,
            image_id=str(img.id),
            platform=info.get("platform"),
        )

    def run_argv(self, image: ImageIdentity, req: RunRequest) -> list[str]:
        assert image.image_id is not None
        gpus = gpu_flags(req.sandbox.gpus, req.gpu_devices)
        return [self._docker(), "run", *oci_run_flags(req), *gpus, image.image_id, *req.argv]

    def probe_argv(self, image: ImageIdentity) -> list[str]:
        from replay_tui.replay.backends.docker.engine import PROBE

        assert image.image_id is not None
        return [
            self._docker(), "run", "--rm", "--network", "none", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--read-only", "--entrypoint", "python3",
            image.image_id, "-I", "-c", PROBE,
        ]  # fmt: skip

    def _cli(self) -> str:
        return self._docker()


if TYPE_CHECKING:  # the seam's protocol, checked by mypy
    _satisfies: ContainerRuntime = DockerRuntime()

"""Podman behind the container-runtime seam (:mod:`replay_tui.replay.backends.runtime`).

- **Resolve**: ``podman pull name@sha256:...`` (``--tls-verify=false`` only for a
  registry on this host, as the local one speaks plain HTTP), then ``podman image
  inspect``: the digest Podman says it holds must be the one asked for, and the run is
  started by the image id inspected, so what ran is what was checked.
- **Run**: ``podman run`` with the Docker-compatible sandbox flags (no network, caps
  dropped, no-new-privileges, read-only root, the limits, the user, every mount); GPUs
  as CDI devices, ``--device nvidia.com/gpu=N`` for each of the recorded count.
- **What ran**: Podman's version and the image id.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from replay_tui.errors import InfraError
from replay_tui.replay.backends.runtime import (
    ContainerRuntime,
    ImageIdentity,
    OciCommands,
    RunRequest,
    check_identity,
    gpu_indices,
    installed,
    oci_run_flags,
    requested_digest,
    run_capped,
)

LOCAL_REGISTRIES = ("localhost", "127.0.0.1", "[::1]")

INSTALL_PODMAN = "install it (scripts/podman-env.sh sets it up here), or use --backend docker"
"""How to get podman onto this host, as its absence is reported."""


def is_local_registry(ref: str) -> bool:
    """Whether ``ref``'s registry is on this host (plain HTTP is allowed only there)."""
    host = ref.split("/", 1)[0] if "/" in ref else ""
    return host.rsplit(":", 1)[0] in LOCAL_REGISTRIES


def cdi_devices(count: int, devices: list[str] | None = None) -> list[str]:
    """``--device nvidia.com/gpu=N`` for each GPU of the recorded count (CDI names)."""
    flags: list[str] = []
    for d in gpu_indices(count, devices):
        flags += ["--device", f"{CDI_GPU}={d}"]
    return flags


CDI_GPU = "nvidia.com/gpu"
"""The CDI kind of an NVIDIA GPU: ``--device nvidia.com/gpu=N``."""


@dataclass
class PodmanRuntime(OciCommands):
    KILL = ("kill", "--signal", "KILL")

    name: str = "podman"
    binary: str = "podman"
    on_node: bool = False
    """The command lines are for another machine (a Slurm job's node): the binary is
    named as it is, not looked up on this host."""
    users: dict[str, str | None] = field(default_factory=dict)
    """Each resolved image's own ``USER``, by image id (from the inspect that resolved
    it: not asked of Podman again)."""

    def _podman(self) -> str:
        return installed(self.binary, "podman", INSTALL_PODMAN, on_node=self.on_node)

    def version_argv(self) -> list[str]:
        return [self._podman(), "version", "--format", "{{.Client.Version}}"]

    def version(self) -> str:
        return run_capped(self.version_argv()).strip()[:64]

    def pull_argv(self, ref: str) -> list[str]:
        """``podman pull`` of ``ref`` by digest (plain HTTP only for a registry here)."""
        argv = [self._podman(), "pull", "--quiet"]
        if is_local_registry(ref):
            argv.append("--tls-verify=false")
        return [*argv, ref]

    def inspect(self, ref: str) -> dict[str, object] | None:
        """``podman image inspect`` of ``ref``, or None when Podman has no such image."""
        proc = subprocess.run(
            [self._podman(), "image", "inspect", ref],
            capture_output=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            return None
        try:
            data = json.loads(proc.stdout[: 4 << 20])
        except ValueError:
            return None
        if not isinstance(data, list) or not data or not isinstance(data[0], dict):
            return None
        return data[0]

    def resolve(self, ref: str, on_note: Callable[[str], None]) -> ImageIdentity:
        requested_digest(ref)
        found = self.inspect(ref)
        if found is None:
            on_note(f"podman pull {ref}")
            try:
                run_capped(self.pull_argv(ref), timeout=1800)
            except InfraError as e:
                raise InfraError(
                    f"cannot pull {ref} with podman: {e.message}",
                    "check that the registry is reachable and still has this digest",
                ) from None
            found = self.inspect(ref)
            if found is None:
                raise InfraError(f"podman pulled {ref} but does not show it")
        return self.identity_of(ref, found, self.version())

    def identity_of(self, ref: str, found: dict[str, object], version: str) -> ImageIdentity:
        """The identity of what ``podman image inspect`` said it holds for ``ref``
        (``found``), checked: the digest Podman says must be the one asked for
        (IdentityMismatch naming *podman's image digest* otherwise), and the image id
        is what runs.  The one check, on this host and for a Slurm job's node."""
        digest = requested_digest(ref)
        repo = ref.split("@", 1)[0]
        said = [str(found.get("Digest") or "")]
        said += [
            str(rd).partition("@")[2]
            for rd in (found.get("RepoDigests") or [])  # type: ignore[attr-defined]
            if str(rd).partition("@")[0] == repo
        ]
        check_identity(
            digest,
            digest if digest in said else said[0] or None,
            "podman's image digest",
            f"what podman holds for {repo}",
        )
        image_id = str(found.get("Id") or "")
        if not image_id:
            raise InfraError(f"podman shows no image id for {ref}")
        image_id = image_id if image_id.startswith("sha256:") else f"sha256:{image_id}"
        config = found.get("Config")
        user = config.get("User") if isinstance(config, dict) else None
        self.users[image_id] = str(user) if user else None
        return ImageIdentity(
            runtime=self.name,
            version=version,
            reference=ref,
            requested_digest=digest,
            image_id=image_id,
            platform=f"{found.get('Os') or 'linux'}/{found.get('Architecture') or 'unknown'}",
        )

    def image_user(self, image: ImageIdentity) -> str | None:
        """The image's own ``USER``, as the walls choose the container's user."""
        if image.image_id in self.users:
            return self.users[image.image_id]
        found = self.inspect(image.image_id or image.reference)
        config = (found or {}).get("Config") or {}
        user = config.get("User") if isinstance(config, dict) else None
        return str(user) if user else None

    def run_argv(self, image: ImageIdentity, req: RunRequest) -> list[str]:
        assert image.image_id is not None
        gpus = cdi_devices(req.sandbox.gpus, req.gpu_devices) if req.sandbox.gpus else []
        return [
            self._podman(),
            "run",
            "--pull",
            "never",
            *oci_run_flags(req),
            *gpus,
            image.image_id,
            *req.argv,
        ]

    def probe_argv(self, image: ImageIdentity) -> list[str]:
        from replay_tui.replay.backends.docker.engine import PROBE

        assert image.image_id is not None
        return [
            self._podman(),
            "run",
            "--rm",
            "--pull",
            "never",
            "--network",
            "none",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--read-only",
            "--entrypoint",
            "python3",
            image.image_id,
            "-I",
            "-c",
            PROBE,
        ]

    def _cli(self) -> str:
        return self._podman()


if TYPE_CHECKING:  # the seam's protocol, checked by mypy
    _satisfies: ContainerRuntime = PodmanRuntime()

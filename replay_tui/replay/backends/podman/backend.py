"""The podman backend: the recorded image by digest in Podman, within the same walls as
the docker backend (no network, read-only code and data, bounded output folders, caps
dropped, limits), Podman's image id recorded and checked against the digest.

Podman is imported (run) only when a replay runs, not when the backend is listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from replay_tui.replay.backends import Backend
from replay_tui.replay.backends.runtime import RuntimeBackend

if TYPE_CHECKING:
    from replay_tui.replay.backends.runtime import ContainerRuntime, ImageIdentity


class PodmanBackend(RuntimeBackend, Backend):
    name = "podman"
    summary = "image by digest in Podman, sandboxed"
    pins_environment = True
    needs_image = True
    mounts_data = True

    def runtime(self, ctx: Any) -> ContainerRuntime:
        from replay_tui.replay.backends.podman.runtime import PodmanRuntime

        return PodmanRuntime()

    def image_user(self, rt: ContainerRuntime, image: ImageIdentity) -> str | None:
        from replay_tui.replay.backends.podman.runtime import PodmanRuntime

        return rt.image_user(image) if isinstance(rt, PodmanRuntime) else None

"""The apptainer backend: the recorded image by digest, converted once to a SIF file in a
shared cache and run by Apptainer within the same walls as the docker backend (no
network, read-only code and data, bounded output folders, no privileges, limits); the
SIF's sha256 and the digest it was built from recorded and checked.

Apptainer is run only when a replay runs, not when the backend is listed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.errors import BadInput
from replay_tui.replay.backends import Backend, BackendOption, OptionValues
from replay_tui.replay.backends.runtime import RuntimeBackend

if TYPE_CHECKING:
    from replay_tui.replay.backends.runtime import ContainerRuntime, ImageIdentity

CACHE_ENV = "REPLAY_TUI_APPTAINER_CACHE"


def sif_cache(store_path: Path | None, given: str | None = None) -> Path:
    """The SIF cache: ``given`` (``--apptainer-cache``), else the variable, else ``sif/``
    beside the store (beside the spool for Slurm jobs)."""
    chosen = given or os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen).expanduser().absolute()
    base = store_path.parent if store_path is not None else Path.home() / ".cache" / "replay-tui"
    return base / "sif"


class ApptainerBackend(RuntimeBackend, Backend):
    name = "apptainer"
    summary = "image by digest as a SIF in Apptainer, sandboxed"
    pins_environment = True
    needs_image = True
    mounts_data = True
    options = (
        BackendOption(
            "cache",
            "--apptainer-cache",
            "Folder of the SIF files converted from OCI images, shared by replays"
            " (default: sif/ beside the store)",
            env=CACHE_ENV,
            label="SIF cache",
        ),
    )

    def check_options(self, options: OptionValues) -> None:
        super().check_options(options)
        for name, value in options:
            if name == "cache" and (not value.strip() or "\x00" in value):
                raise BadInput(f"--apptainer-cache {value!r} is not a folder")

    def runtime(self, ctx: Any) -> ContainerRuntime:
        from replay_tui.replay.backends.apptainer.runtime import ApptainerRuntime

        given = None
        store_path = None
        if ctx is not None:
            given = dict(ctx.plan.options.backend_options).get("cache")
            store_path = ctx.store.path
        return ApptainerRuntime(sif_cache(store_path, given))

    def image_problem(self, ref: str, client: Any = None) -> str | None:
        """Why ``ref`` cannot be run (not by digest, no apptainer here), or None: the SIF
        is converted when a replay runs, into the cache that replay names."""
        import shutil

        from replay_tui.errors import InfraError
        from replay_tui.replay.backends.runtime import requested_digest

        try:
            requested_digest(ref)
        except InfraError as e:
            return e.message
        if shutil.which("apptainer") is None:
            return "apptainer is not installed on this host (scripts/apptainer-env.sh)"
        return None

    def recorded_image(self, image: ImageIdentity) -> dict[str, Any] | None:
        return None  # the recorded image: its digest is what the SIF was proven built from

"""A replay plan: everything a replay will use, taken from the manifest and validated.

The manifest is untrusted input (it may come from another team, or have been edited), so
the plan re-checks everything it takes from it before anything runs: argv, env names and
values, the image reference and digest, the commit, and every path it will mount.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from replay_tui.compare.tolerance import Tolerance
from replay_tui.errors import BadInput
from replay_tui.replay.envpolicy import check_env
from storage.manifest import DataInfo, RunManifest

GpuMode = Literal["auto", "all", "none"]

CONTAINER_ROOT = "/workspace"


@dataclass(frozen=True)
class ReplayOptions:
    backend: str = "docker"  # a name in replay_tui.replay.backends
    gpus: GpuMode = "auto"
    allow_cpu: bool = False
    network: Literal["none", "bridge"] = "none"
    timeout_s: float | None = None
    keep_workdir: bool = False
    force_data: bool = False
    repo: Path | None = None
    determinism: Literal["recorded", "off"] = "recorded"
    memory_limit: str | None = None
    pids_limit: int = 512
    cpus: float | None = None  # --cpus (None: the recorded count, capped at the host's)
    output_size: str | None = None  # --output-size: each writable folder's bound
    output_budget: int | None = None  # --output-budget: bytes of outputs hashed and kept
    container_user: str | None = None  # --container-user (None: never root if avoidable)
    backend_options: tuple[tuple[str, str], ...] = ()  # (name, value) for the backend
    allow_env: tuple[str, ...] = ()  # --allow-env: more manifest variables to pass on
    fetch_repo: bool = False  # --fetch-repo: clone/fetch the manifest's repo_url
    allow_foreign_on_host: bool = False  # run an ingested/imported run's command unsandboxed
    tolerance: Tolerance = field(default_factory=Tolerance)  # how the replay is judged
    defer_judgement: bool = False
    """Run and hash, but leave the comparison and the replay fact to the caller (a replica
    of ``replay --times K``, judged once the series' noise floor is measured)."""


@dataclass
class DataMount:
    info: DataInfo
    host_path: Path | None  # None when this host has no record of where it lives


@dataclass
class ReplayPlan:
    original: RunManifest
    options: ReplayOptions
    argv: list[str]
    env: dict[str, str]
    workdir: str
    commit: str
    image: str | None  # name@sha256:... or a local image id
    data: list[DataMount] = field(default_factory=list)
    output_dirs: list[str] = field(default_factory=list)
    use_gpus: bool = False
    cpu_fallback: bool = False
    notes: list[str] = field(default_factory=list)


def image_reference(m: RunManifest) -> str | None:
    """The pinned image to run: ``repo@sha256:...`` (never a tag), or the local image id."""
    img = m.image
    if img is None:
        return None
    if img.digest:
        if img.reference:
            name = img.reference.split("@", 1)[0]
            last = name.rsplit("/", 1)[-1]
            if ":" in last:
                name = name[: name.rfind(":")]
            return f"{name}@{img.digest}"
        return None
    return img.image_id


def make_plan(
    m: RunManifest,
    options: ReplayOptions,
    *,
    data_locations: dict[str, str],
    host_has_gpu: bool,
    needs_image: bool,
) -> ReplayPlan:
    """Check the manifest and the options, and say what the replay will use.

    ``needs_image``: the backend runs only a pinned image (its ``needs_image``).
    """
    if m.kind != "original":
        raise BadInput(f"run {m.run_id} is itself a replay; replay its original {m.replay_of}")
    if not m.argv:
        raise BadInput(f"run {m.run_id} recorded no command (argv is empty): nothing to replay")
    if m.code.commit is None:
        raise BadInput(
            f"run {m.run_id} has no recorded git commit: the code cannot be checked out",
            "record runs from inside a git repository",
        )
    if m.code.dirty and m.code.diff_sha256 is None:
        raise BadInput(
            f"run {m.run_id} trained from uncommitted changes that were not stored",
            "the code that ran is lost; only a commit-level replay is possible",
        )
    check_env(m.env, options.allow_env)  # an allow-list (replay_tui.replay.envpolicy)
    if any("\x00" in a for a in m.argv):
        raise BadInput("manifest argv contains NUL")
    image = None
    if needs_image:
        image = image_reference(m)
        if image is None:
            ref = m.image.reference if m.image else None
            raise BadInput(
                f"run {m.run_id} has no image digest to replay from"
                + (f" (only the tag {ref!r}, which can move)" if ref else ""),
                f"the {options.backend} backend runs only a pinned image; use --backend local to"
                " replay in this host's environment (recorded as a gap)",
            )
    recorded_gpus = bool(m.hardware.gpus)
    use_gpus = False
    cpu_fallback = False
    if options.gpus == "all":
        use_gpus = True
    elif options.gpus == "auto" and recorded_gpus:
        if host_has_gpu:
            use_gpus = True
        elif options.allow_cpu:
            cpu_fallback = True
        else:
            from replay_tui.errors import InfraError

            gpu = m.hardware.gpus[0].name if m.hardware.gpus else "GPU"
            raise InfraError(
                f"run {m.run_id} was recorded on a GPU ({gpu}) and this host has none",
                "replay on a GPU host, or pass --allow-cpu to run on CPU (recorded as a gap)",
            )
    if use_gpus and not host_has_gpu:
        from replay_tui.errors import InfraError

        raise InfraError("--gpus all was asked for but this host has no GPU")
    data = [DataMount(d, Path(p) if (p := data_locations.get(d.name)) else None) for d in m.data]
    env = dict(m.env)
    if options.determinism == "off":
        env["REPLAY_TUI_DETERMINISM"] = "off"
    out_dirs = list(m.capture.output_dirs) if m.capture else []
    for a in m.outputs.artifacts:
        parts = a.path.split("/")
        if len(parts) > 1 and parts[0] not in out_dirs:
            out_dirs.append(parts[0])
    return ReplayPlan(
        original=m,
        options=options,
        argv=list(m.argv),
        env=env,
        workdir=m.workdir,
        commit=m.code.commit,
        image=image,
        data=data,
        output_dirs=sorted(out_dirs),
        use_gpus=use_gpus,
        cpu_fallback=cpu_fallback,
    )

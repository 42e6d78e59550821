"""The slurm backend: the docker backend's sandboxed container, run as a Slurm batch job.

It prepares like the docker backend (the recorded image by digest, the same mounts and
sandbox) but its executor submits a job (``replay_tui.replay.slurm``) instead of talking
to a local engine: the compute node pulls the image by digest and runs the container.
The checkout and the scratch folder live in the spool, a folder the compute nodes see
(``--slurm-spool`` / ``REPLAY_TUI_SLURM_SPOOL``, default ``slurm-spool`` beside the
store); the job never opens the store.  GPUs recorded in the manifest are requested with
``--gres=gpu:N``.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.capture import probes
from replay_tui.errors import BadInput
from replay_tui.replay import docker as dk
from replay_tui.replay.backends.docker import container_workdir, replay_mounts
from replay_tui.replay.context import Prepared
from replay_tui.replay.slurm import SlurmExecutor, SlurmOptions, slurm_memory, spool_dir

if TYPE_CHECKING:
    from replay_tui.replay.plan import ReplayOptions
    from replay_tui.replay.runner import ReplayContext
    from storage.store import RunStore


OPTION_NAMES = (
    "partition",
    "account",
    "qos",
    "time_limit",
    "sbatch_args",
    "max_in_flight",
    "spool",
)


def slurm_options(options: ReplayOptions) -> SlurmOptions:
    """Flags (``options.backend_options``, name/value strings) over ``REPLAY_TUI_SLURM_*``,
    validated; BadInput names a bad one."""
    given: dict[str, Any] = {}
    for name, value in options.backend_options:
        if name not in OPTION_NAMES:
            raise BadInput(f"the slurm backend has no option {name!r}")
        if name == "sbatch_args":
            try:
                given[name] = tuple(shlex.split(value))
            except ValueError as e:
                raise BadInput(f"--slurm-sbatch-args {value!r} cannot be split: {e}") from None
        elif name == "max_in_flight":
            try:
                given[name] = int(value)
            except ValueError:
                raise BadInput(f"--slurm-max-in-flight {value!r} is not a number") from None
        elif name == "spool":
            given[name] = Path(value)
        else:
            given[name] = value
    return SlurmOptions.from_env(**given)


class SlurmBackend:
    name = "slurm"
    summary = "image by digest, sandboxed, as a Slurm batch job"
    pins_environment = True
    needs_image = True
    mounts_data = True
    gpus_from_scheduler = True  # the cluster has the GPUs, not the submit host
    concurrent = True  # many replays can wait on their jobs at once

    def scratch_base(self, store: RunStore, options: ReplayOptions) -> Path | None:
        return spool_dir(slurm_options(options), store.path) / "work"

    def prepare(self, ctx: ReplayContext) -> Prepared:
        plan, opts = ctx.plan, ctx.plan.options
        assert plan.image is not None
        sopts = slurm_options(opts)
        spool = spool_dir(sopts, ctx.store.path)
        ctx.emit("pull", "start", f"{plan.image} (pulled by the compute node)")
        gpus = len(plan.original.hardware.gpus or []) if plan.use_gpus else 0
        if plan.use_gpus and gpus == 0:  # --gpus all on a run recorded without one
            gpus = 1
        container = dk.DockerExecutor(
            plan.image,  # by digest: the node pulls exactly this image
            replay_mounts(ctx),
            container_workdir(plan.workdir),
            dk.Sandbox(
                network=opts.network,
                gpus=gpus,
                pids_limit=opts.pids_limit,
                memory_limit=opts.memory_limit,
            ),
        )
        digest = plan.image.split("@", 1)[1] if "@" in plan.image else None
        image: dict[str, Any] = {
            "reference": plan.image,
            "digest": digest,
            "image_id": None,
            "platform": None,
        }
        ex = SlurmExecutor(
            container,
            spool,
            sopts,
            gpus=gpus,
            memory=slurm_memory(opts.memory_limit) if opts.memory_limit else None,
            image_info=image,  # the same dict: the job's `docker image inspect` fills it in
            probe_cache=ctx.store.path.parent / "image-probes",
        )
        where = ", ".join(
            f"{k} {v}"
            for k, v in (
                ("partition", sopts.partition),
                ("account", sopts.account),
                ("qos", sopts.qos),
                ("time limit", sopts.time_limit),
            )
            if v
        )
        notes = [f"spool {spool}"]
        if gpus:
            notes.append(f"requesting --gres=gpu:{gpus} (the recorded GPU count)")
        msg = f"Slurm job for {plan.image}" + (f" ({where})" if where else "")
        return Prepared(ex, msg, image, notes)

    def python_env(self, ctx: ReplayContext) -> probes.PythonEnv:
        return probes.PythonEnv()  # the job's image probe fills the environment in

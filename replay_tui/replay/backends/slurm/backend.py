"""The slurm backend: the docker backend's sandboxed container, run as a Slurm batch job.

It prepares like the docker backend (the recorded image by digest, the same mounts and
sandbox) but its executor submits a job (:mod:`replay_tui.replay.backends.slurm.engine`)
instead of talking to a local engine: the compute node pulls the image by digest and
runs the container.  The checkout and the scratch folder live in the spool, a folder the
compute nodes see (``--slurm-spool`` / ``REPLAY_TUI_SLURM_SPOOL``, default
``slurm-spool`` beside the store); the job never opens the store.  GPUs recorded in the
manifest are requested with ``--gres=gpu:N``.

Its options (:data:`OPTIONS`) are the ``--slurm-*`` flags of the commands that replay and
the fields of the TUI's form; each overrides its ``REPLAY_TUI_SLURM_*`` variable.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.errors import BadInput
from replay_tui.replay.backends import Backend, BackendOption, OptionValues
from replay_tui.replay.backends.slurm.words import RUNTIMES

if TYPE_CHECKING:
    from replay_tui.capture import probes
    from replay_tui.replay.backends.slurm.options import SlurmOptions
    from replay_tui.replay.backends.slurm.script import NodeWalls
    from replay_tui.replay.context import Prepared, ReplayContext
    from replay_tui.replay.plan import ReplayOptions
    from storage.store import RunStore


OPTIONS: tuple[BackendOption, ...] = (
    BackendOption(
        "partition", "--slurm-partition", "Slurm partition", env="REPLAY_TUI_SLURM_PARTITION"
    ),
    BackendOption("account", "--slurm-account", "Slurm account", env="REPLAY_TUI_SLURM_ACCOUNT"),
    BackendOption("qos", "--slurm-qos", "Slurm QOS", env="REPLAY_TUI_SLURM_QOS", label="QOS"),
    BackendOption(
        "time_limit",
        "--slurm-time",
        "Job time limit in Slurm's form, e.g. 30 or 2:00:00",
        env="REPLAY_TUI_SLURM_TIME",
    ),
    BackendOption(
        "sbatch_args",
        "--slurm-sbatch-args",
        "Extra sbatch arguments, one shell-quoted string",
        env="REPLAY_TUI_SLURM_SBATCH_ARGS",
        label="extra sbatch args",
    ),
    BackendOption(
        "max_in_flight",
        "--slurm-max-in-flight",
        "Jobs of this command queued or running at once; 0: no limit",
        env="REPLAY_TUI_SLURM_MAX_IN_FLIGHT",
        type=int,
        default="0",
        label="jobs in flight",
    ),
    BackendOption(
        "spool",
        "--slurm-spool",
        "Folder the compute nodes share with this host for job files, checkouts and outputs"
        " (default: slurm-spool beside the store)",
        env="REPLAY_TUI_SLURM_SPOOL",
    ),
    BackendOption(
        "runtime",
        "--slurm-runtime",
        "What a job starts on the node: docker, podman or apptainer"
        " (default: what the nodes have, as a probe job says)",
        env="REPLAY_TUI_SLURM_RUNTIME",
        choices=RUNTIMES,
        label="container runtime",
    ),
)
_BY_NAME = {o.name: o for o in OPTIONS}


def _value(option: BackendOption, text: str) -> Any:
    """A flag's text as the :class:`SlurmOptions` field wants it; BadInput names the flag."""
    if option.name == "sbatch_args":
        try:
            return tuple(shlex.split(text))
        except ValueError as e:
            raise BadInput(f"{option.flag} {text!r} cannot be split: {e}") from None
    if option.type is int:
        try:
            return int(text)
        except ValueError:
            raise BadInput(f"{option.flag} {text!r} is not a number") from None
    if option.name == "spool":
        return Path(text)
    return text


def slurm_options(values: OptionValues, env: Mapping[str, str] | None = None) -> SlurmOptions:
    """The flags (``ReplayOptions.backend_options``, name/value strings) over
    ``REPLAY_TUI_SLURM_*``, validated; BadInput names the bad flag or variable."""
    from replay_tui.replay.backends.slurm.options import SlurmOptions

    e = os.environ if env is None else env
    given: dict[str, Any] = {}
    for name, text in values:
        option = _BY_NAME.get(name)
        if option is None:
            raise BadInput(f"the slurm backend has no option {name!r}")
        value = _value(option, text)
        try:
            SlurmOptions(**{name: value}).validated()
        except BadInput as err:
            raise BadInput(f"{option.flag}: {err.message}", err.hint) from None
        given[name] = value
    for option in OPTIONS:  # a variable no flag overrides: checked alone, named
        if option.name in given or option.env is None or not e.get(option.env):
            continue
        try:
            SlurmOptions.from_env({option.env: e[option.env]})
        except BadInput as err:
            named = err.message if option.env in err.message else f"{option.env}: {err.message}"
            raise BadInput(named, err.hint) from None
    return SlurmOptions.from_env(e, **given)


def node_walls(
    ctx: ReplayContext, sandbox: Any, mounts: list[Any]
) -> tuple[Any, NodeWalls, list[str]]:
    """The container's user (as the docker backend chooses it: never root when it can be
    avoided) and what the job script bounds on the node: the output folders (or the
    whole checkout when the run writes at its top) and the handoff folder, each a tmpfs
    of ``--output-size``; memory and CPUs, where not given, are sized there from the
    job's allocation (the recorded CPU count, capped at the CPUs Slurm gave the job)."""
    import dataclasses

    from replay_tui.replay.backends.docker import walls as w
    from replay_tui.replay.backends.docker.backend import output_bytes
    from replay_tui.replay.backends.slurm.script import NodeWalls

    plan = ctx.plan
    assert ctx.worktree is not None and ctx.cwd is not None
    notes: list[str] = []
    uid, gid = w.choose_user(None, plan.options.container_user)
    me = (os.geteuid(), os.getegid())
    unreadable = w.unreadable_mounts(mounts, uid, gid, ctx.worktree.path)
    if (uid, gid) != me and plan.options.container_user is None and unreadable:
        notes.append(
            f"runs as uid {me[0]}: {unreadable[0]} cannot be read by uid {uid}"
            " (make it readable by others to replay as a non-root user)"
        )
        uid, gid = me
    top_level = any("/" not in a.path for a in plan.original.outputs.artifacts)
    folders = (
        [ctx.worktree.path] if top_level else w.outermost(ctx.cwd / d for d in plan.output_dirs)
    )
    if not top_level and (uid, gid) != me:
        w.open_to_others(ctx.worktree.path)  # read-only to the container's user
    size = output_bytes(plan)
    walls = NodeWalls(
        uid,
        gid,
        tuple(str(f) for f in folders),
        size,
        want_cpus=plan.original.hardware.cpu_count,
    )
    notes.append(
        f"walls on the node: user {uid}:{gid}, memory {sandbox.memory_limit or 'from the job'},"
        f" CPUs {f'{sandbox.cpus:g}' if sandbox.cpus else 'from the job'},"
        f" {len(folders)} writable folder(s) of {size} bytes"
    )
    return dataclasses.replace(sandbox, user=f"{uid}:{gid}"), walls, notes


class SlurmBackend(Backend):
    name = "slurm"
    summary = "image by digest, sandboxed, as a Slurm batch job"
    pins_environment = True
    needs_image = True
    mounts_data = True
    gpus_from_scheduler = True  # the cluster has the GPUs, not the submit host
    writes_on_this_host = False  # a compute node writes; this host's inotify sees nothing
    concurrent = True  # many replays can wait on their jobs at once
    options = OPTIONS

    def check_options(self, options: OptionValues) -> None:
        slurm_options(options)

    def scratch_base(self, store: RunStore, options: ReplayOptions) -> Path | None:
        from replay_tui.replay.backends.slurm.spool import spool_dir

        return spool_dir(slurm_options(options.backend_options), store.path) / "work"

    def prepare(self, ctx: ReplayContext) -> Prepared:
        from replay_tui.replay.backends.docker import engine as dk
        from replay_tui.replay.backends.docker.backend import (
            container_workdir,
            replay_mounts,
            replay_sandbox,
        )
        from replay_tui.replay.backends.slurm.engine import SlurmExecutor
        from replay_tui.replay.backends.slurm.options import slurm_memory
        from replay_tui.replay.backends.slurm.spool import spool_dir
        from replay_tui.replay.context import Prepared

        plan, opts = ctx.plan, ctx.plan.options
        assert plan.image is not None
        sopts = slurm_options(opts.backend_options)
        spool = spool_dir(sopts, ctx.store.path)
        ctx.emit("pull", "start", f"{plan.image} (pulled by the compute node)")
        probe_cache = ctx.store.path.parent / "image-probes"
        runtime_notes: list[str] = []
        runtime = sopts.runtime
        if runtime is None:  # what the nodes have, as a probe job says (kept a day)
            from replay_tui.replay.backends.slurm.runtimes import detect_runtime

            kept = ctx.store.path.parent / "slurm-runtimes"
            detected = detect_runtime(sopts, spool, kept, ctx.should_cancel)
            runtime = detected.chosen
            runtime_notes.append(detected.note())
        from replay_tui.replay.backends.docker.walls import sweep_mounts

        sweep_mounts(lambda note: ctx.emit("pull", "note", note))  # killed jobs' folders
        # memory and CPUs as given; where not, the job script sizes them on the node
        sandbox = replay_sandbox(plan)
        gpus = sandbox.gpus
        mounts = replay_mounts(ctx)
        sandbox, walls, wall_notes = node_walls(ctx, sandbox, mounts)
        container = dk.DockerExecutor(
            plan.image,  # by digest: the node pulls exactly this image
            mounts,
            container_workdir(plan.workdir),
            sandbox,
        )
        from replay_tui.replay.backends.slurm.runtimes import node_runtime

        on_node = node_runtime(runtime, plan.image, spool)
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
            image_info=image,  # the same dict: the job's image inspect fills it in
            probe_cache=probe_cache,
            walls=walls,
            node_runtime=on_node,
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
        notes = [f"spool {spool}", *runtime_notes, *wall_notes]
        if on_node is not None and on_node.cache is not None:
            notes.append(f"SIF cache {on_node.cache} (in the spool, shared by the jobs)")
        if gpus:
            notes.append(f"requesting --gres=gpu:{gpus} (the recorded GPU count)")
        msg = f"Slurm job ({runtime}) for {plan.image}" + (f" ({where})" if where else "")
        # Apptainer: the recorded image, whose digest the SIF is proven built from
        recorded = None if runtime == "apptainer" else image
        return Prepared(ex, msg, recorded, notes)

    def python_env(self, ctx: ReplayContext) -> probes.PythonEnv:
        from replay_tui.capture import probes

        return probes.PythonEnv()  # the job's image probe fills the environment in

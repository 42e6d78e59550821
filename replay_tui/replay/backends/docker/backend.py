"""The docker backend: the recorded image by digest, in the sandbox of
:mod:`replay_tui.replay.backends.docker.engine` (no network, read-only code and data,
caps dropped).

The engine (and the Docker SDK) are imported when a replay runs, not when the backend is
listed or its options read.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from replay_tui.replay.backends import Backend

if TYPE_CHECKING:
    from replay_tui.capture import probes
    from replay_tui.capture.executor import Executor
    from replay_tui.replay.backends.docker.engine import Mount, Sandbox
    from replay_tui.replay.context import Prepared, ReplayContext
    from replay_tui.replay.plan import ReplayPlan


def container_workdir(workdir: str) -> str:
    from replay_tui.replay.backends.docker.engine import CONTAINER_ROOT as root

    return root if workdir == "." else f"{root}/{workdir}"


def replay_mounts(ctx: ReplayContext) -> list[Mount]:
    """The checkout read-only, each output folder writable, each data input read-only.

    Data that lived in the recording repository is mounted at its place in the checkout
    (over whatever the commit tracks there); data outside it at its own absolute path.
    """
    from replay_tui.replay.backends.docker import engine as dk

    plan = ctx.plan
    assert ctx.worktree is not None and ctx.cwd is not None
    root = dk.CONTAINER_ROOT
    ccwd = container_workdir(plan.workdir)
    top_level = [a.path for a in plan.original.outputs.artifacts if "/" not in a.path]
    mounts = [dk.Mount(str(ctx.worktree.path), root, not top_level)]
    mounts += dk.git_masks(ctx.worktree.path, root)  # never .git into a container
    for out_dir in plan.output_dirs:
        mounts.append(dk.Mount(str(ctx.cwd / out_dir), f"{ccwd}/{out_dir}", False))
    for dm in plan.data:
        if dm.host_path is None or not dm.host_path.exists():
            continue
        if dm.info.path in ctx.placed_data:
            mounts.append(dk.Mount(str(dm.host_path), f"{root}/{dm.info.path}", True))
        else:
            mounts.append(dk.Mount(str(dm.host_path), str(dm.host_path), True))
    return mounts


def replay_sandbox(plan: ReplayPlan, *, walls: bool = False) -> Sandbox:
    """The container's limits: the plan's network, pids and memory, and the recorded
    GPU count (at least one when the replay uses GPUs; none when it does not).

    ``walls``: also the limits of :mod:`replay_tui.replay.backends.docker.walls` where
    the flags leave them open, taken on this host: memory (half of this host's) and CPUs
    (the recorded count, capped at this host's).  The docker backend asks for them; a
    backend whose container runs on another machine sizes them there."""
    from replay_tui.replay.backends.docker import engine as dk
    from replay_tui.replay.backends.docker import walls as w

    opts = plan.options
    memory, cpus = opts.memory_limit, opts.cpus
    if walls:
        memory = memory or w.default_memory(w.host_memory_bytes())
        cpus = cpus or w.default_cpus(plan.original.hardware.cpu_count, w.host_cpus())
    return dk.Sandbox(
        network=opts.network,
        gpus=(len(plan.original.hardware.gpus or []) or 1) if plan.use_gpus else 0,
        pids_limit=opts.pids_limit,
        memory_limit=memory,
        cpus=cpus,
    )


def output_bytes(plan: ReplayPlan) -> int:
    """Each bounded folder's size: ``--output-size``, else twice what the original wrote
    (at least 1 GiB)."""
    from replay_tui.replay.backends.docker import walls as w

    if plan.options.output_size:
        return w.size_bytes(plan.options.output_size)
    return w.default_output_bytes(sum(a.size_bytes or 0 for a in plan.original.outputs.artifacts))


def build_walls(
    ctx: ReplayContext, image_user: str | None, mounts: list[Mount]
) -> tuple[Sandbox, Any, int | None, list[str]]:
    """The docker replay's sandbox with its walls, its bounded folders (mounted now: the
    output folders, or the whole checkout when the run writes at its top), each one's
    size (None: not bounded) and what the replay says of them."""
    import dataclasses

    from replay_tui.capture import stale
    from replay_tui.replay.backends.docker import walls as w

    plan = ctx.plan
    assert ctx.worktree is not None and ctx.cwd is not None
    sandbox = replay_sandbox(plan, walls=True)
    notes: list[str] = []
    uid, gid = w.choose_user(image_user, plan.options.container_user)
    unreadable = w.unreadable_mounts(mounts, uid, gid, ctx.worktree.path)
    why_not = w.BoundedFolders.possible()
    me = (os.geteuid(), os.getegid())
    chosen = plan.options.container_user is not None  # --container-user: as given
    if (uid, gid) != me and not chosen and unreadable:
        notes.append(
            f"runs as uid {me[0]}: {unreadable[0]} cannot be read by uid {uid}"
            " (make it readable by others to replay as a non-root user)"
        )
        uid, gid = me
    size = output_bytes(plan)
    top_level = any("/" not in a.path for a in plan.original.outputs.artifacts)
    folders = (
        [ctx.worktree.path] if top_level else w.outermost(ctx.cwd / d for d in plan.output_dirs)
    )
    bounded = w.BoundedFolders(uid, gid)
    if why_not is None:
        try:
            if not top_level and (uid, gid) != me:
                w.open_to_others(ctx.worktree.path)  # read-only to the container's user
            for folder in folders:
                bounded.bound(folder, size)
        except w.CannotMount as e:
            bounded.close()
            why_not = e.message
        except BaseException:
            bounded.close()
            raise
    if why_not is not None:  # plain folders, of the invoking user: it can write them
        if (uid, gid) != me and not chosen:
            uid, gid = me
        notes.append(f"output folders not size-bounded: {why_not}")
        sandbox = dataclasses.replace(sandbox, user=f"{uid}:{gid}")
        return sandbox, None, None, notes
    sandbox = dataclasses.replace(sandbox, user=f"{uid}:{gid}")
    if ctx.stale_before is not None:  # what the folders held is copied: a new identity
        again = stale.snapshot(ctx.cwd, list(ctx.stale_before.files))
        ctx.stale_before = stale.Before(again.files, ctx.stale_before.started_ns)
    notes.append(
        f"walls: memory {sandbox.memory_limit}, {sandbox.cpus:g} CPUs, user {uid}:{gid},"
        f" {len(folders)} writable folder(s) of {size} bytes"
    )
    return sandbox, bounded, size, notes


class DockerBackend(Backend):
    name = "docker"
    summary = "image by digest, sandboxed"
    pins_environment = True
    needs_image = True
    mounts_data = True

    def client(self, ctx: ReplayContext) -> Any:
        from replay_tui.replay.backends.docker import engine as dk

        return ctx.docker_client or dk.client()

    def image_problem(self, ref: str, client: Any = None) -> str | None:
        """The image pulled (by digest) into the local engine, or why it cannot be."""
        from replay_tui.errors import InfraError
        from replay_tui.replay.backends.docker import engine as dk

        try:
            dk.ensure_image(client or dk.client(), ref)
        except InfraError as e:
            return e.message
        return None

    def executor(
        self, ctx: ReplayContext, c: Any, image: Any, mounts: list[Mount]
    ) -> tuple[Executor, list[str]]:
        from replay_tui.replay.backends.docker import engine as dk

        image_user = (image.attrs.get("Config") or {}).get("User") or None
        sandbox, bounded, size, notes = build_walls(ctx, image_user, mounts)
        ex = dk.DockerExecutor(
            image.id,
            mounts,
            container_workdir(ctx.plan.workdir),
            sandbox,
            c,
            probe_cache=ctx.store.path.parent / "image-probes",
            walls=bounded,
            output_bytes=size,
        )
        return ex, notes

    def prepare(self, ctx: ReplayContext) -> Prepared:
        from replay_tui.replay.backends.docker import engine as dk
        from replay_tui.replay.context import Prepared

        plan = ctx.plan
        assert plan.image is not None
        ctx.emit("pull", "start", plan.image)
        c = self.client(ctx)
        dk.sweep_containers(c, lambda note: ctx.emit("pull", "note", note))
        from replay_tui.replay.backends.docker.walls import sweep_mounts

        sweep_mounts(lambda note: ctx.emit("pull", "note", note))
        img = dk.ensure_image(c, plan.image)
        notes = []
        top_level = [a.path for a in plan.original.outputs.artifacts if "/" not in a.path]
        if top_level:  # the run writes beside its code: only a throwaway checkout allows it
            notes.append(
                f"{top_level[0]} is written at the top of the workdir: the throwaway"
                " checkout is mounted writable"
            )
        mounts = replay_mounts(ctx)  # before the walls: the folders as they are
        ex, walls = self.executor(ctx, c, img, mounts)
        try:
            info = dk.image_info(c, plan.image)
        except BaseException:
            ex.close()  # type: ignore[attr-defined]
            raise
        return Prepared(ex, f"image {img.id[:19]}", info, notes + walls)

    def python_env(self, ctx: ReplayContext) -> probes.PythonEnv:
        from replay_tui.capture import probes

        return probes.PythonEnv()  # the image probe fills the environment in

"""The docker backend: the recorded image by digest, in the sandbox of
:mod:`replay_tui.replay.backends.docker.engine` (no network, read-only code and data,
caps dropped).

The engine (and the Docker SDK) are imported when a replay runs, not when the backend is
listed or its options read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from replay_tui.replay.backends import Backend

if TYPE_CHECKING:
    from replay_tui.capture import probes
    from replay_tui.capture.launcher import Executor
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


def replay_sandbox(plan: ReplayPlan) -> Sandbox:
    """The container's limits: the plan's network, pids and memory, and the recorded
    GPU count (at least one when the replay uses GPUs; none when it does not)."""
    from replay_tui.replay.backends.docker import engine as dk

    opts = plan.options
    return dk.Sandbox(
        network=opts.network,
        gpus=(len(plan.original.hardware.gpus or []) or 1) if plan.use_gpus else 0,
        pids_limit=opts.pids_limit,
        memory_limit=opts.memory_limit,
    )


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

    def executor(self, ctx: ReplayContext, c: Any, image_id: str, mounts: list[Mount]) -> Executor:
        from replay_tui.replay.backends.docker import engine as dk

        return dk.DockerExecutor(
            image_id,
            mounts,
            container_workdir(ctx.plan.workdir),
            replay_sandbox(ctx.plan),
            c,
            probe_cache=ctx.store.path.parent / "image-probes",
        )

    def prepare(self, ctx: ReplayContext) -> Prepared:
        from replay_tui.replay.backends.docker import engine as dk
        from replay_tui.replay.context import Prepared

        plan = ctx.plan
        assert plan.image is not None
        ctx.emit("pull", "start", plan.image)
        c = self.client(ctx)
        dk.sweep_containers(c, lambda note: ctx.emit("pull", "note", note))
        img = dk.ensure_image(c, plan.image)
        notes = []
        top_level = [a.path for a in plan.original.outputs.artifacts if "/" not in a.path]
        if top_level:  # the run writes beside its code: only a throwaway checkout allows it
            notes.append(
                f"{top_level[0]} is written at the top of the workdir: the throwaway"
                " checkout is mounted writable"
            )
        ex = self.executor(ctx, c, img.id, replay_mounts(ctx))
        return Prepared(ex, f"image {img.id[:19]}", dk.image_info(c, plan.image), notes)

    def python_env(self, ctx: ReplayContext) -> probes.PythonEnv:
        from replay_tui.capture import probes

        return probes.PythonEnv()  # the image probe fills the environment in

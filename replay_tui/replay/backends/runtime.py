"""Container runtimes as one seam: what a replay asks of Docker, Podman or Apptainer.

A replay asks a runtime four things, whichever it is:

1. **resolve and pull an image by digest** (:meth:`ContainerRuntime.resolve`): the image
   ``name@sha256:...`` made ready on this host, never by tag;
2. **run a command sandboxed** (:meth:`ContainerRuntime.run_argv`): no network, the code
   and data read-only, only the output folders writable (bounded by the walls of
   :mod:`replay_tui.replay.backends.docker.walls`), no added capabilities, the memory,
   CPU and pids limits, GPUs by the recorded count;
3. **stream its log and report its exit** (:class:`RuntimeExecutor`, the same for every
   command-line runtime);
4. **say what ran** (:class:`ImageIdentity`): the runtime and its version, the OCI digest
   asked for, and the identity of the bytes that ran in the runtime's own terms (Podman's
   image id; Apptainer's SIF sha256 and the digest it says the SIF was built from).  An
   identity that does not match the digest asked for is refused
   (:class:`IdentityMismatch`), naming which one differed.

Docker (``backends/docker/runtime.py``), Podman (``backends/podman/runtime.py``) and
Apptainer (``backends/apptainer/runtime.py``) are one module each behind this seam.  The
docker backend's replays keep their own executor (``backends/docker/engine.py``, the
Docker SDK), whose behaviour and manifests predate the seam; :func:`oci_run_flags` is the
Docker-compatible flag set Docker's and Podman's command lines take.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from replay_tui.errors import InfraError

if TYPE_CHECKING:
    from replay_tui.capture.executor import ExecResult, ExecSpec, OnLine, ShouldCancel
    from replay_tui.replay.backends.docker.engine import Mount, Sandbox

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REF = re.compile(r"[a-z0-9][a-z0-9._:/-]{0,254}@(sha256:[0-9a-f]{64})")
OUTPUT_LIMIT = 64 * 1024
"""The most a runtime's own answer (``podman image inspect``, ``apptainer inspect``) is
read to: it is what the runtime says, bounded like any untrusted bytes."""


def requested_digest(ref: str) -> str:
    """The ``sha256:...`` of ``name@sha256:...``; InfraError for a reference not by digest
    (a tag can move: a replay runs what the manifest pinned, or nothing)."""
    m = _REF.fullmatch(ref)
    if m is None:
        raise InfraError(
            f"image {ref!r} is not a reference by digest (name@sha256:<64 hex>)",
            "record the run in a pushed image so its digest is known",
        )
    return m.group(1)


class IdentityMismatch(InfraError):
    """What the runtime holds for the image is not the digest the replay asked for."""


@dataclass(frozen=True)
class ImageIdentity:
    """Which bytes ran: the runtime's own words for them, next to the digest asked for."""

    runtime: str
    version: str
    reference: str
    """``name@sha256:...``: what was asked for."""
    requested_digest: str
    image_id: str | None = None
    """The OCI image id (its config's digest) the runtime ran (Podman)."""
    sif_sha256: str | None = None
    """The SIF file's own sha256 (Apptainer): not the OCI digest."""
    sif_built_from: str | None = None
    """The digest Apptainer says the SIF was built from."""
    platform: str | None = None
    sif_path: Path | None = None

    def runtime_info(self) -> dict[str, Any]:
        """What the replay manifest records (``ReplayInfo.runtime``), unset ones left out."""
        info: dict[str, Any] = {
            "name": self.runtime,
            "version": self.version,
            "requested_digest": self.requested_digest,
            "image_id": self.image_id,
            "sif_sha256": self.sif_sha256,
            "sif_built_from": self.sif_built_from,
        }
        return {k: v for k, v in info.items() if v is not None}

    def image_info(self) -> dict[str, Any]:
        """What the replay manifest records of the image (``RunManifest.image``)."""
        return {
            "reference": self.reference,
            "digest": self.requested_digest,
            "image_id": self.image_id,
            "platform": self.platform,
        }


def check_identity(asked: str, said: str | None, what: str, where: str) -> None:
    """IdentityMismatch naming ``what`` (``podman's image digest``, ``the SIF's
    built-from digest``) unless the runtime ``said`` exactly the digest ``asked``."""
    if said != asked:
        raise IdentityMismatch(
            f"{what} differs: {where} is {said or 'unknown'}, the recorded digest is {asked}",
            "nothing was run; remove the image (or the SIF) so it is pulled again by digest",
        )


@dataclass
class RunRequest:
    """One sandboxed run, in the runtime's neutral terms."""

    argv: list[str]
    env: dict[str, str]
    workdir: str
    mounts: list[Mount]
    sandbox: Sandbox
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    gpu_devices: list[str] | None = None
    """The GPUs this run may use, by index or UUID (None: the first ``sandbox.gpus``)."""


class ContainerRuntime(Protocol):
    """What a replay asks of a container runtime (see the module's docstring)."""

    name: str

    def version(self) -> str:
        """The runtime's version (``4.3.1``), or InfraError when it does not answer."""
        ...

    def resolve(self, ref: str, on_note: Callable[[str], None]) -> ImageIdentity:
        """The image ``ref`` (by digest) ready to run here, its identity checked."""
        ...

    def run_argv(self, image: ImageIdentity, req: RunRequest) -> list[str]:
        """The command line that runs ``req`` in ``image``, sandboxed."""
        ...

    def probe_argv(self, image: ImageIdentity) -> list[str]:
        """A sandboxed ``python3 -I -c PROBE`` in ``image`` (its Python, packages, OS)."""
        ...

    def process_env(self, req: RunRequest | None) -> dict[str, str] | None:
        """The runtime process's own environment for ``req`` (or the probe: None);
        None: this process's."""
        ...

    def kill(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        """Stop the run called ``name`` now (SIGKILL)."""
        ...

    def finish(self, name: str, exit_code: int) -> str | None:
        """After the run (its command exited with ``exit_code``): remove what is left of
        it; say why the machine ended it (an out-of-memory kill at the limit), or None."""
        ...


def gpu_indices(count: int, devices: Sequence[str] | None = None) -> list[str]:
    """The GPUs a run gets: the ``devices`` allocated to it (a scheduler's), else the
    first ``count`` of this host; never every GPU when fewer were recorded."""
    if count <= 0:
        return []
    if devices:
        return [str(d) for d in devices][:count]
    return [str(i) for i in range(count)]


def oci_run_flags(req: RunRequest) -> list[str]:
    """The Docker-compatible ``run`` flags of a sandboxed run (Podman takes them): no
    network, caps dropped, no-new-privileges, read-only root, a private /tmp, the pids,
    memory and CPU limits, the user, every mount.  GPUs are the runtime's own flags."""
    sb = req.sandbox
    flags = [
        "--name",
        req.name,
        "--network",
        sb.network,
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--pids-limit",
        str(sb.pids_limit),
        "--tmpfs",
        "/tmp:rw,nosuid,nodev,size=1g",
        "--shm-size",
        "256m",
        "--user",
        sb.user or f"{os.getuid()}:{os.getgid()}",
        "--workdir",
        req.workdir,
    ]
    if sb.read_only_rootfs:
        flags.append("--read-only")
    if sb.memory_limit:
        flags += ["--memory", sb.memory_limit, "--memory-swap", sb.memory_limit]
    if sb.cpus:
        flags += ["--cpus", f"{sb.cpus:g}"]
    for k, v in req.labels.items():
        flags += ["--label", f"{k}={v}"]
    for k, v in req.env.items():
        flags += ["--env", f"{k}={v}"]
    for m in req.mounts:
        for p in (m.source, m.target):
            if "," in p or "\n" in p:
                raise InfraError(f"{p!r} holds a comma: it cannot be mounted by --mount")
        if m.kind == "tmpfs":
            flags += ["--mount", f"type=tmpfs,target={m.target},tmpfs-size=4096,ro=true"]
        else:
            ro = ",ro=true" if m.read_only else ""
            flags += ["--mount", f"type=bind,source={m.source},target={m.target}{ro}"]
    return flags


def container_env(spec_env: dict[str, str]) -> dict[str, str]:
    """The run's environment inside any runtime: the SDK on PYTHONPATH, the handoff
    folder where the container sees it, no bytecode written into read-only code."""
    from replay_tui.replay.backends.docker import engine as dk

    env = dict(spec_env)
    env["REPLAY_TUI_HANDOFF"] = dk.HANDOFF_MOUNT
    env["PYTHONPATH"] = dk.SDK_MOUNT
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("HOME", "/tmp")
    return env


def run_request(
    spec: ExecSpec,
    mounts: Sequence[Mount],
    workdir: str,
    sandbox: Sandbox,
    name: str,
    gpu_devices: list[str] | None = None,
    sdk_source: str | None = None,
) -> RunRequest:
    """The sandboxed run of ``spec`` in any runtime: the replay's mounts, the handoff
    folder writable, the SDK read-only (from ``sdk_source``, else this checkout's
    package), the run's environment (:func:`container_env`), the owner labels."""
    from replay_tui.replay.backends.docker import engine as dk

    given = list(mounts)
    given.append(dk.Mount(str(spec.handoff_dir), dk.HANDOFF_MOUNT, False))
    given.append(dk.Mount(sdk_source or str(dk.SDK_DIR), f"{dk.SDK_MOUNT}/replay_tui", True))
    return RunRequest(
        argv=list(spec.argv),
        env=container_env(spec.env),
        workdir=workdir,
        mounts=given,
        sandbox=sandbox,
        name=name,
        labels=dk.owner_labels(),
        gpu_devices=gpu_devices,
    )


def oci_oom_argv(cli: str, name: str) -> list[str]:
    """What asks ``cli`` (docker or podman) whether the container ``name`` was killed at
    its memory limit: it prints ``true`` then."""
    return [cli, "container", "inspect", "--format", "{{.State.OOMKilled}}", name]


def oci_rm_argv(cli: str, name: str) -> list[str]:
    """What removes the finished container ``name`` with ``cli``."""
    return [cli, "rm", "--force", name]


def oci_finish(cli: str, name: str, exit_code: int) -> str | None:
    """Remove the finished container ``name`` with ``cli`` (docker or podman, which share
    these commands), first asking whether it was killed at its memory limit: the
    infrastructure fault to report, or None.  A command that exited 0 finished its work
    whatever a worker of it met, so it is not asked (one runtime call less on every
    replay that succeeds: bench/bench_runtimes.py)."""
    oom = False
    if exit_code != 0:
        proc = subprocess.run(
            oci_oom_argv(cli, name),
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        oom = proc.returncode == 0 and proc.stdout.strip() == b"true"
    subprocess.run(
        oci_rm_argv(cli, name), capture_output=True, timeout=120, stdin=subprocess.DEVNULL
    )
    if oom:
        return (
            "out of memory: the container was killed at its memory limit"
            " (OOMKilled; pass a larger --memory)"
        )
    return None


def installed(binary: str, tool: str, how: str, *, on_node: bool = False) -> str:
    """The path of ``binary`` on this host's PATH; missing, an infrastructure error saying
    that ``tool`` is not installed and ``how`` to install it.  ``on_node``: the command
    line is for another machine (a Slurm job's node), ``binary`` named as it is."""
    if on_node:
        return binary
    found = shutil.which(binary)
    if found is None:
        raise InfraError(f"{tool} is not installed on this host", how)
    return found


class OciCommands:
    """What docker and podman (which share these commands) do alike once a run's
    container runs: a runtime names its command line tool (``_cli``) and how it kills."""

    KILL: tuple[str, ...] = ("kill",)
    """The ``kill`` subcommand and its flags."""

    def _cli(self) -> str:
        raise NotImplementedError

    def process_env(self, req: RunRequest | None) -> dict[str, str] | None:
        return None  # the run's variables are its --env flags

    def kill(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        subprocess.run(
            [self._cli(), *self.KILL, name],
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    def finish(self, name: str, exit_code: int) -> str | None:
        return oci_finish(self._cli(), name, exit_code)


def run_capped(argv: list[str], timeout: float = 120, env: dict[str, str] | None = None) -> str:
    """Run a runtime's own command and return its stdout (at most :data:`OUTPUT_LIMIT`
    characters), or InfraError with its stderr."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise InfraError(
            f"{argv[0]} is not installed on this host",
            f"install it (scripts/{Path(argv[0]).name}-env.sh sets it up here)",
        ) from None
    except subprocess.TimeoutExpired:
        raise InfraError(f"{' '.join(argv[:3])} did not answer within {timeout:g}s") from None
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip()[-400:]
        raise InfraError(f"{' '.join(argv[:3])} failed (exit {proc.returncode}): {why}")
    return proc.stdout[:OUTPUT_LIMIT].decode("utf-8", "replace")


def probe_environment(
    runtime: ContainerRuntime, image: ImageIdentity, key: str, cache_dir: Path | None
) -> dict[str, Any]:
    """Python version, packages and OS inside ``image`` as ``runtime`` runs it; cached
    per runtime and ``key`` (the identity of the bytes: immutable), read back through
    ``replay_tui.door`` as the docker backend's probes are."""
    from replay_tui.capture import probes
    from replay_tui.replay.backends.docker.engine import keep_probe, kept_probe

    name = f"{runtime.name}-{key.replace(':', '_')}.json"
    kept = kept_probe(cache_dir, name)
    if kept is not None:
        return kept
    try:
        argv = runtime.probe_argv(image)
        data = json.loads(run_capped(argv, timeout=300, env=runtime.process_env(None)))
    except (InfraError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    data["packages_sha256"] = probes.packages_sha256(data.get("packages") or [])
    keep_probe(cache_dir, name, data)
    return data


def _pump(stream: Any, log_path: Path, on_line: OnLine) -> None:
    from replay_tui.replay.backends.docker.engine import pump_lines

    pump_lines(iter(lambda: stream.read1(65536), b""), log_path, on_line)


@dataclass
class RuntimeExecutor:
    """Runs an ExecSpec with a command-line runtime: streams the log to the spec's log
    file and to ``on_line``, kills the run on cancel, stops it at the timeout, and says
    what ran (``runtime_info``) and within which walls (``sandbox_info``)."""

    runtime: ContainerRuntime
    image: ImageIdentity
    mounts: list[Mount]
    workdir: str
    sandbox: Sandbox
    probe_cache: Path | None = None
    walls: Any = None
    """The size-bounded folders (``walls.BoundedFolders``), or None."""
    output_bytes: int | None = None
    infra_fault: str | None = None
    gpu_devices: list[str] | None = None
    argv_seen: list[str] = field(default_factory=list)
    """The last command line run (for tests of the sandbox's flags)."""

    @property
    def sandbox_info(self) -> dict[str, Any]:
        from replay_tui.replay.backends.docker.engine import sandbox_record

        return sandbox_record(self.sandbox, self.output_bytes)

    @property
    def runtime_info(self) -> dict[str, Any]:
        return self.image.runtime_info()

    def close(self, *, keep: bool = False) -> None:
        if self.walls is not None:
            self.walls.close(keep=keep)

    def request(self, spec: ExecSpec) -> RunRequest:
        from replay_tui.replay.debris import me

        owner = me()
        return run_request(
            spec,
            self.mounts,
            self.workdir,
            self.sandbox,
            f"replay-tui-{owner['pid']}-{int(time.time() * 1000) % 10**9}",
            self.gpu_devices,
        )

    def run(self, spec: ExecSpec, on_line: OnLine, should_cancel: ShouldCancel) -> ExecResult:
        from replay_tui.capture.executor import ExecResult
        from storage.ledger import utc_now

        if self.walls is not None:
            from replay_tui.replay.backends.docker.walls import HANDOFF_BYTES

            self.walls.bound(spec.handoff_dir, HANDOFF_BYTES)
        req = self.request(spec)
        argv = self.runtime.run_argv(self.image, req)
        self.argv_seen = argv
        started, t0 = utc_now(), time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.runtime.process_env(req),
            )
        except OSError as e:
            raise InfraError(f"cannot start {argv[0]}: {e.strerror}") from None
        assert proc.stdout is not None
        pump = threading.Thread(
            target=_pump, args=(proc.stdout, spec.log_path, on_line), daemon=True
        )
        pump.start()
        interrupted = timed_out = False
        code = -1
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if should_cancel() and not interrupted:
                    interrupted = True
                    self.runtime.kill(req.name, proc)
                if spec.timeout_s and time.monotonic() - t0 > spec.timeout_s and not timed_out:
                    timed_out = True
                    self.runtime.kill(req.name, proc)
        except BaseException:  # Ctrl-C while waiting: the run is stopped, then it goes up
            self.runtime.kill(req.name, proc)
            proc.wait()
            raise
        finally:
            pump.join(timeout=10)
            fault = self.runtime.finish(req.name, code)
        reason: str | None = None
        if timed_out:
            status = "timed_out"
            reason = (
                f"timed out after {spec.timeout_s:g}s (killed after {time.monotonic() - t0:.1f}s)"
            )
        elif interrupted:
            status, reason = "interrupted", "cancelled: the container was killed (SIGKILL)"
        elif fault:
            status = "failed"
            reason = self.infra_fault = fault
        elif code == 0:
            status = "succeeded"
        elif code in (137, -signal.SIGKILL):
            status, reason = "failed", "killed (SIGKILL, exit 137)"
        else:
            status, reason = "failed", f"exit code {code}"
        ended, duration = utc_now(), time.monotonic() - t0
        key = self.image.sif_sha256 or self.image.image_id or self.image.requested_digest
        probed = probe_environment(self.runtime, self.image, key, self.probe_cache)
        env_view = {
            k: probed[k]
            for k in ("python_version", "packages", "packages_sha256", "os")
            if probed.get(k)
        }
        return ExecResult(
            code if code >= 0 else 1,
            status,
            started,
            ended,
            duration,
            reason,
            environment=env_view,
        )


class RuntimeBackend:
    """What a backend over a command-line runtime does (Podman, Apptainer): the recorded
    image by digest, its identity checked, run within the docker backend's walls (the
    same mounts, limits, user and bounded folders).  A subclass (which also starts from
    :class:`replay_tui.replay.backends.Backend`) says which runtime."""

    name: str = ""

    def runtime(self, ctx: Any) -> ContainerRuntime:
        raise NotImplementedError

    def image_user(self, rt: ContainerRuntime, image: ImageIdentity) -> str | None:
        """The image's own ``USER`` (None: not known, the walls choose)."""
        return None

    def gpu_devices(self, ctx: Any) -> list[str] | None:
        """The GPUs allocated to this run (None: the first of the recorded count)."""
        return None

    def recorded_image(self, image: ImageIdentity) -> dict[str, Any] | None:
        """What the replay manifest records of the image (None: the recorded one, whose
        digest the runtime's identity proved)."""
        return image.image_info()

    def image_problem(self, ref: str, client: Any = None) -> str | None:
        try:
            self.runtime(None).resolve(ref, lambda _n: None)
        except InfraError as e:
            return e.message
        return None

    def prepare(self, ctx: Any) -> Any:
        from replay_tui.replay.backends.docker import backend as db
        from replay_tui.replay.backends.docker.walls import sweep_mounts
        from replay_tui.replay.context import Prepared

        plan = ctx.plan
        assert plan.image is not None
        ctx.emit("pull", "start", plan.image)
        sweep_mounts(lambda note: ctx.emit("pull", "note", note))
        rt = self.runtime(ctx)
        image = rt.resolve(plan.image, lambda note: ctx.emit("pull", "note", note))
        notes = []
        top_level = [a.path for a in plan.original.outputs.artifacts if "/" not in a.path]
        if top_level:
            notes.append(
                f"{top_level[0]} is written at the top of the workdir: the throwaway"
                " checkout is mounted writable"
            )
        mounts = db.replay_mounts(ctx)
        sandbox, bounded, size, walls = db.build_walls(ctx, self.image_user(rt, image), mounts)
        ex = RuntimeExecutor(
            rt,
            image,
            mounts,
            db.container_workdir(plan.workdir),
            sandbox,
            probe_cache=ctx.store.path.parent / "image-probes",
            walls=bounded,
            output_bytes=size,
            gpu_devices=self.gpu_devices(ctx),
        )
        what = image.image_id or f"SIF sha256:{image.sif_sha256}"
        return Prepared(
            ex,
            f"{rt.name} {image.version}, image {what[:19]}",
            self.recorded_image(image),
            notes + walls,
        )

    def python_env(self, ctx: Any) -> Any:
        from replay_tui.capture import probes

        return probes.PythonEnv()  # the image probe fills the environment in

"""The Docker backend: pull by digest, run in a sandbox, stream the log, stop on cancel.

Sandbox: no network, code and data read-only, only the planned output folders
writable, all capabilities dropped, no-new-privileges, a pids limit, a read-only root
filesystem with a private /tmp, never privileged, never the Docker socket or any host
path outside the plan.  A replay's container also has walls
(:mod:`replay_tui.replay.backends.docker.walls`): a memory and a CPU limit, a non-root
user, and size-bounded folders for what it writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay_tui.capture import probes
from replay_tui.capture.executor import ExecResult, ExecSpec, OnLine, ShouldCancel
from replay_tui.capture.options import RecordOptions
from replay_tui.errors import BadInput, InfraError
from storage.ledger import utc_now

CONTAINER_ROOT = "/workspace"
HANDOFF_MOUNT = "/replay-tui/handoff"
SDK_MOUNT = "/replay-tui/sdk"
LABEL = "io.replay-tui.run"
OWNER_LABEL = "io.replay-tui.owner"  # pid, process start time, host of who started it
SDK_DIR = Path(__file__).resolve().parents[3]
"""The replay_tui package (this file is replay_tui/replay/backends/docker/engine.py):
mounted read-only into the container as the SDK."""


def client() -> Any:
    """A Docker client that answers, or InfraError saying what to do."""
    import docker

    try:
        c = docker.from_env(timeout=120)
        c.ping()
    except Exception as e:
        raise InfraError(
            f"no Docker engine answers ({type(e).__name__}: {str(e)[:160]})",
            "start it (scripts/docker-env.sh sets one up), or use --backend local",
        ) from None
    return c


def owner_labels() -> dict[str, str]:
    """Labels that say a container is ours and which process started it."""
    from replay_tui.replay.debris import me

    return {LABEL: "1", OWNER_LABEL: json.dumps(me(), sort_keys=True)}


def sweep_containers(c: Any, on_note: Callable[[str], None] = lambda _: None) -> list[str]:
    """Remove our containers whose starting process died (SIGKILL, reboot): they would
    otherwise run on, or stay, forever."""
    from replay_tui.replay.debris import owner_alive

    removed: list[str] = []
    try:
        found = c.containers.list(all=True, filters={"label": OWNER_LABEL})
    except Exception:
        return removed
    for container in found:
        try:
            owner = json.loads(container.labels.get(OWNER_LABEL) or "{}")
        except ValueError:
            owner = {}
        if isinstance(owner, dict) and owner_alive(owner):
            continue
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.id)
            on_note(
                f"removed container {container.id[:12]} left by a replay that was killed"
                f" (pid {owner.get('pid') if isinstance(owner, dict) else '?'})"
            )
    return removed


@dataclass
class Mount:
    source: str
    target: str
    read_only: bool = True
    kind: str = "bind"  # "tmpfs": an empty in-memory folder (source unused)


def _empty_file() -> Path:
    """An empty read-only regular file of this user, to mount over a ``.git`` file."""
    import stat
    import tempfile

    path = Path(tempfile.gettempdir()) / f"replay-tui-empty-{os.getuid()}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        os.close(fd)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_size or st.st_uid != os.getuid():
        raise InfraError(f"{path} is not an empty file of this user: remove it and retry")
    return path


def git_masks(host_root: Path, container_root: str) -> list[Mount]:
    """Mounts that hide ``host_root/.git`` from the container.

    A container that can write a repository's ``.git`` (hooks, ``core.fsmonitor``, a
    ``.git`` file pointing elsewhere) runs code on the host at the next git command, and
    one that can read it sees history the run does not need.  A ``.git`` folder is covered
    by an empty read-only tmpfs, a ``.git`` file (a worktree's) by an empty read-only file.
    """
    dot_git = host_root / ".git"
    target = f"{container_root}/.git"
    if dot_git.is_symlink() or dot_git.is_file():
        return [Mount(str(_empty_file()), target, True)]
    if dot_git.is_dir():
        return [Mount("", target, True, kind="tmpfs")]
    return []


@dataclass
class Sandbox:
    network: str = "none"
    gpus: int = 0
    """GPUs to request: the recorded count (0: none; never every GPU of the host)."""
    pids_limit: int = 512
    memory_limit: str | None = None
    read_only_rootfs: bool = True
    cpus: float | None = None
    """CPUs the container may use (``--cpus``; None: no limit)."""
    user: str | None = None
    """``UID:GID`` the container runs as (None: the invoking user's)."""


def ensure_image(c: Any, ref: str, *, pull: bool = True) -> Any:
    """The image for ``ref`` (``name@sha256:...`` or an image id), pulled by digest if absent."""
    import docker

    try:
        return c.images.get(ref)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as e:
        raise InfraError(f"cannot inspect image {ref}: {e.explanation}") from None
    if not pull or "@sha256:" not in ref:
        raise InfraError(
            f"image {ref} is not on this host and cannot be pulled by digest",
            "load or push the image so its digest is available",
        )
    try:
        return c.images.pull(ref)
    except docker.errors.APIError as e:
        raise InfraError(
            f"cannot pull {ref}: {(e.explanation or str(e))[:300]}",
            "check that the registry is reachable and still has this digest",
        ) from None


def image_info(c: Any, ref: str) -> dict[str, Any]:
    """What the manifest records of an image: reference, repo digest, id, platform."""
    img = c.images.get(ref)
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: name.rfind(":")]
    digest = None  # only a digest of this very repository can be pulled as name@digest
    for rd in img.attrs.get("RepoDigests") or []:
        repo, _, d = rd.partition("@")
        if repo == name:
            digest = d
            break
    attrs = img.attrs
    return {
        "reference": ref,
        "digest": digest,
        "image_id": img.id,
        "platform": f"{attrs.get('Os', 'linux')}/{attrs.get('Architecture', 'unknown')}",
    }


PROBE = (
    "import importlib.metadata as m, json, platform, sys\n"
    "try:\n"
    "    osr = platform.freedesktop_os_release().get('PRETTY_NAME')\n"
    "except OSError:\n"
    "    osr = None\n"
    "pk = sorted({f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions()"
    " if d.metadata['Name']})\n"
    "print(json.dumps({'python_version': sys.version.split()[0], 'packages': pk, 'os': osr}))\n"
)


def sandbox_record(sb: Sandbox, output_bytes: int | None) -> dict[str, Any]:
    """The walls of a run as its replay manifest records them (``ReplayInfo.sandbox``):
    ``sb``'s limits, the user (this process's own when ``sb`` names none) and the bound
    of its output folders."""
    return {
        "memory_limit": sb.memory_limit,
        "cpus": sb.cpus,
        "user": sb.user or f"{os.getuid()}:{os.getgid()}",
        "pids_limit": sb.pids_limit,
        "output_bytes": output_bytes,
    }


def kept_probe(cache_dir: Path | None, name: str) -> dict[str, Any] | None:
    """The image probe kept as ``name`` in ``cache_dir``, read through ``replay_tui.door``
    (a regular file, no link, at most ``LIMITS["image probe"]``); None when there is none
    or it is anything else."""
    from replay_tui.door import Refused, read_under_or_none

    if cache_dir is None:
        return None
    try:
        raw = read_under_or_none(cache_dir, name, "image probe")
        kept = json.loads(raw) if raw is not None else None
    except (Refused, ValueError):
        return None
    return kept if isinstance(kept, dict) else None


def keep_probe(cache_dir: Path | None, name: str, data: dict[str, Any]) -> None:
    """Keep ``data`` as ``name`` in ``cache_dir`` (best effort): written beside, then
    renamed, never through a link there."""
    if cache_dir is None:
        return
    with contextlib.suppress(OSError):
        cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = cache_dir / f".{name}.{os.getpid()}.{threading.get_ident()}"
        tmp.write_text(json.dumps(data))
        os.replace(tmp, cache_dir / name)


def probe_image(c: Any, image_id: str, cache_dir: Path | None) -> dict[str, Any]:
    """Python version, packages and OS inside an image; cached per image id (immutable).

    The cache (beside the store) is read through ``replay_tui.door``: a regular file, no
    link, at most ``LIMITS["image probe"]``; anything else there is probed afresh."""
    key = image_id.replace(":", "_")
    name = f"{key}.json"
    kept = kept_probe(cache_dir, name)
    if kept is not None:
        return kept
    try:
        out = c.containers.run(
            image_id,
            ["python3", "-I", "-c", PROBE],
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            remove=True,
            stdout=True,
            stderr=False,
        )
        data: dict[str, Any] = json.loads(out)
    except Exception:
        return {}
    data["packages_sha256"] = probes.packages_sha256(data.get("packages") or [])
    keep_probe(cache_dir, name, data)
    return data


@dataclass
class DockerExecutor:
    """Runs an ExecSpec in a container of ``image`` with the given mounts."""

    image: str
    mounts: list[Mount]
    workdir: str
    sandbox: Sandbox = field(default_factory=Sandbox)
    docker_client: Any = None
    probe_cache: Path | None = None
    container_id: str | None = None
    walls: Any = None
    """The size-bounded folders of this replay (``walls.BoundedFolders``), or None; the
    handoff folder is bounded too when the run starts, all unmounted by :meth:`close`."""
    output_bytes: int | None = None
    """Each bounded output folder's size in bytes (None: not bounded)."""
    infra_fault: str | None = None
    """Why the machine, not the run, ended it (killed at the memory limit)."""
    close_after_run: bool = False
    """Unmount the bounded folders as the run ends, what the run changed copied back
    (``record --image``, whose caller reads the folders after the run)."""
    bound_at_run: list[tuple[Path, int]] = field(default_factory=list)
    """Folders (and sizes) :attr:`walls` bounds as the run starts, not before: the
    caller notes what they hold first (``record --image``)."""

    @property
    def sandbox_info(self) -> dict[str, Any]:
        """The walls as the replay manifest records them (``ReplayInfo.sandbox``)."""
        return sandbox_record(self.sandbox, self.output_bytes)

    def close(self, *, keep: bool = False) -> None:
        """Unmount the bounded folders (``keep``: their content stays in the folders)."""
        if self.walls is not None:
            self.walls.close(keep=keep)

    def create_kwargs(self, spec: ExecSpec) -> dict[str, Any]:
        """The Docker SDK's ``containers.create`` arguments for ``spec``: the one definition
        of the sandbox (``replay_tui.replay.backends.slurm.script`` turns it into
        ``docker run`` flags)."""
        from docker.types import DeviceRequest
        from docker.types import Mount as DMount

        env = dict(spec.env)
        env["REPLAY_TUI_HANDOFF"] = HANDOFF_MOUNT
        env["PYTHONPATH"] = SDK_MOUNT
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.setdefault("HOME", "/tmp")
        mounts = [
            DMount(m.target, m.source or None, type=m.kind, read_only=m.read_only)
            for m in self.mounts
        ]
        mounts.append(DMount(HANDOFF_MOUNT, str(spec.handoff_dir), type="bind", read_only=False))
        mounts.append(DMount(f"{SDK_MOUNT}/replay_tui", str(SDK_DIR), type="bind", read_only=True))
        sb = self.sandbox
        kwargs: dict[str, Any] = {
            "command": spec.argv,
            "working_dir": self.workdir,
            "environment": env,
            "mounts": mounts,
            "network_mode": sb.network,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "pids_limit": sb.pids_limit,
            "read_only": sb.read_only_rootfs,
            "tmpfs": {"/tmp": "rw,nosuid,nodev,size=1g"},
            "shm_size": "256m",
            "privileged": False,
            "user": sb.user or f"{os.getuid()}:{os.getgid()}",
            "labels": owner_labels(),
            "detach": True,
        }
        if sb.memory_limit:
            kwargs["mem_limit"] = sb.memory_limit
            kwargs["memswap_limit"] = sb.memory_limit
        if sb.cpus:
            kwargs["nano_cpus"] = round(sb.cpus * 1e9)
        if sb.gpus:
            # The recorded number of GPUs, never every GPU of the host (count=-1): a
            # replay of a 1-GPU run on a shared 8-GPU node takes one, as the slurm
            # backend asks --gres=gpu:N.  ``sandbox.gpus`` is that count; a bare True
            # (a caller that gives no count) asks for one.
            count = max(1, int(sb.gpus))
            kwargs["device_requests"] = [DeviceRequest(count=count, capabilities=[["gpu"]])]
        return kwargs

    def run(self, spec: ExecSpec, on_line: OnLine, should_cancel: ShouldCancel) -> ExecResult:
        try:
            return self._run(spec, on_line, should_cancel)
        finally:
            if self.close_after_run and self.walls is not None:
                self.walls.close(keep=True, changed_only=True)

    def _run(self, spec: ExecSpec, on_line: OnLine, should_cancel: ShouldCancel) -> ExecResult:
        import docker

        c = self.docker_client or client()
        img = ensure_image(c, self.image)
        if self.walls is not None:
            from replay_tui.replay.backends.docker.walls import HANDOFF_BYTES, CannotMount

            try:
                for folder, size in self.bound_at_run:
                    self.walls.bound(folder, size)
                self.walls.bound(spec.handoff_dir, HANDOFF_BYTES)
            except CannotMount:
                if not self.bound_at_run:
                    raise
                self.walls.close(keep=True, changed_only=True)  # as the invoking user
                self.walls = None
                self.sandbox = dataclasses.replace(self.sandbox, user=None)
        kwargs = self.create_kwargs(spec)
        sb = self.sandbox
        started, t0 = utc_now(), time.monotonic()
        try:
            container = c.containers.create(img.id, **kwargs)
        except docker.errors.APIError as e:
            raise InfraError(f"the engine refused the container: {e.explanation}") from None
        self.container_id = container.id
        reason: str | None = None
        status = "failed"
        code = -1
        pump = None
        try:
            try:
                container.start()
            except docker.errors.APIError as e:
                # The recorded command cannot start in the recorded image (no such
                # executable, a bad working folder): the run failed, as a shell says 127.
                why = (e.explanation or str(e)).strip()[:300]
                spec.log_path.write_text(f"cannot start {spec.argv[0]!r} in the image: {why}\n")
                on_line(f"cannot start {spec.argv[0]!r} in the image: {why}")
                return ExecResult(
                    127,
                    "failed",
                    started,
                    utc_now(),
                    time.monotonic() - t0,
                    f"cannot start {spec.argv[0]!r} in the image: {why}",
                )
            pump = threading.Thread(
                target=_pump_logs, args=(container, spec.log_path, on_line), daemon=True
            )
            pump.start()
            interrupted = timed_out = False
            signalled: list[int] = []  # Ctrl-C / SIGTERM while the container runs
            with _signals_stop_the_run(signalled):
                while True:
                    try:
                        res = container.wait(timeout=0.5)
                        code = int(res.get("StatusCode", -1))
                        break
                    except Exception as e:  # read timeout while running, or engine gone
                        if not _is_timeout(e):
                            raise InfraError(
                                f"lost the Docker engine during the run: {str(e)[:200]}",
                                "restart the engine and replay again",
                            ) from None
                    if (should_cancel() or signalled) and not interrupted:
                        # A cancel stops the run now: SIGKILL.  ``stop`` would send SIGTERM,
                        # which a command running as the container's PID 1 ignores unless it
                        # handles it, and let the run go on for the whole grace period.
                        interrupted = True
                        with contextlib.suppress(Exception):
                            container.kill()
                    if spec.timeout_s and time.monotonic() - t0 > spec.timeout_s and not timed_out:
                        timed_out = True
                        with contextlib.suppress(Exception):
                            container.stop(timeout=5)
            if pump is not None:
                pump.join(timeout=10)
            container.reload()
            state = container.attrs.get("State", {})
            if timed_out:
                status, reason = (
                    "timed_out",
                    f"timed out after {spec.timeout_s:g}s (then SIGTERM, and SIGKILL after a 5s"
                    f" grace period: stopped after {time.monotonic() - t0:.1f}s)",
                )
            elif interrupted and signalled and not should_cancel():
                status, reason = (
                    "interrupted",
                    "interrupted (Ctrl-C): the container was killed (SIGKILL)",
                )
            elif interrupted:
                status, reason = "interrupted", "cancelled: the container was killed (SIGKILL)"
            elif state.get("OOMKilled"):
                # the machine's wall ended it, not the program: no verdict on reproduction
                status = "failed"
                reason = self.infra_fault = (
                    f"out of memory: the container was killed at its memory limit of"
                    f" {sb.memory_limit} (OOMKilled; pass a larger --memory)"
                )
            elif code == 0:
                status = "succeeded"
            elif code == 137:
                status, reason = "failed", "killed (SIGKILL, exit 137)"
            else:
                status, reason = "failed", f"exit code {code}"
        finally:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        env_view: dict[str, Any] = {}
        probed = probe_image(c, img.id, self.probe_cache)
        for k in ("python_version", "packages", "packages_sha256", "os"):
            if probed.get(k):
                env_view[k] = probed[k]
        return ExecResult(
            code if code >= 0 else 1,
            status,
            started,
            utc_now(),
            time.monotonic() - t0,
            reason,
            environment=env_view,
        )


@contextlib.contextmanager
def _signals_stop_the_run(signalled: list[int]) -> Iterator[None]:
    """While the container runs, Ctrl-C and SIGTERM to this process are noted in
    ``signalled`` (the wait loop then kills the container and the replay goes on to hash
    and compare what it left, as the local backend does) instead of raising
    KeyboardInterrupt mid-wait.  Only the main thread can take signals."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def note(signum: int, frame: object) -> None:
        signalled.append(signum)

    old = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _is_timeout(e: Exception) -> bool:
    text = f"{type(e).__name__} {e}"
    return "timed out" in text.lower() or "Timeout" in text


def pump_lines(
    chunks: Iterable[bytes], log_path: Path, on_line: OnLine, *, tolerate_errors: bool = False
) -> None:
    """Write ``chunks`` to ``log_path`` as they come and hand ``on_line`` each line (the
    last one even without its newline).  ``tolerate_errors``: a stream that breaks off
    ends the log there, not the caller."""
    buf = b""
    with log_path.open("wb") as log:
        try:
            for chunk in chunks:
                log.write(chunk)
                log.flush()
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    on_line(line.decode("utf-8", "replace").rstrip("\r"))
        except Exception:
            if not tolerate_errors:
                raise
        if buf:
            on_line(buf.decode("utf-8", "replace"))


def _pump_logs(container: Any, log_path: Path, on_line: OnLine) -> None:
    def chunks() -> Iterator[bytes]:  # asked for once the log is open, inside its guard
        yield from container.logs(stream=True, follow=True, stdout=True, stderr=True)

    pump_lines(chunks(), log_path, on_line, tolerate_errors=True)


def container_recorder(image_ref: str, opts: RecordOptions) -> tuple[DockerExecutor, Any]:
    """Executor and image-info callback for ``record --image``.

    The repository is mounted read-only at /workspace with its ``.git`` hidden, the
    output folders (the first folder of each --artifact glob) read-write at their place
    in it, external data read-only at the same paths.  The real repository is never
    mounted writable: code in the container could plant a git hook or edit the sources
    the user runs next, so outputs at the top of the workdir are refused.
    """
    c = client()
    img = ensure_image(c, image_ref, pull=False) if _exists(c, image_ref) else _pull(c, image_ref)
    git_state = probes.probe_git(opts.cwd)
    root = git_state.root or opts.cwd.resolve()
    workdir = git_state.workdir
    cwd = root / workdir if workdir != "." else root
    top_level = [
        p
        for p in opts.artifacts
        if len(Path(p).parts) == 1 or any(c in Path(p).parts[0] for c in "*?[")
    ]
    if top_level:
        raise BadInput(
            f"--artifact {top_level[0]!r} is at the top of the workdir: record --image never"
            " mounts the repository writable (code in the container could plant a git hook"
            " or change the sources)",
            "write outputs into a folder and name it, e.g. --artifact 'out/*'",
        )
    mounts = [Mount(str(root), CONTAINER_ROOT, True), *git_masks(root, CONTAINER_ROOT)]
    from replay_tui.capture.options import capture_info

    for d in capture_info(opts)["output_dirs"]:
        if ".git" in Path(d).parts or (cwd / d).is_symlink():
            raise BadInput(
                f"--artifact folder {d!r} is a link or inside .git: it is never mounted writable"
            )
        host = (cwd / d).resolve()
        if not host.is_relative_to(root):
            raise BadInput(f"--artifact folder {d!r} leads out of the repository")
        host.mkdir(parents=True, exist_ok=True)
        target = f"{CONTAINER_ROOT}/{workdir}/{d}" if workdir != "." else f"{CONTAINER_ROOT}/{d}"
        mounts.append(Mount(str(host), target, False))
    for arg in opts.data:
        p = (opts.cwd / arg.partition("=")[2 if "=" in arg else 0]).resolve()
        if not p.is_relative_to(root):
            mounts.append(Mount(str(p), str(p), True))
    container_cwd = CONTAINER_ROOT if workdir == "." else f"{CONTAINER_ROOT}/{workdir}"
    sandbox, bounded, folders = record_walls(img, mounts, opts)
    ex = DockerExecutor(img.id, mounts, container_cwd, sandbox, c, walls=bounded)
    ex.close_after_run, ex.bound_at_run = True, folders
    info = image_info(c, image_ref)
    return ex, lambda: info


def record_walls(
    img: Any, mounts: list[Mount], opts: RecordOptions
) -> tuple[Sandbox, Any, list[tuple[Path, int]]]:
    """``record --image``'s walls, as a replay's (:mod:`.walls`): a memory limit (half of
    this host's) and a CPU limit (half of its CPUs), and a non-root user where the image
    allows: the invoking user, or when that is root the image's own non-root ``USER``,
    else ``nobody``, whose output folders are then tmpfs folders owned by it (bounded at
    ``--output-budget``, else at the memory limit, which their pages count against),
    mounted as the run starts, what the run changed copied back when it ends.  Root
    stays the user when a folder the run reads is not readable by others, or this host
    refuses the mount.  Returns the sandbox, the bounded folders and what they bound."""
    from replay_tui.replay.backends.docker import walls as w

    host = w.host_memory_bytes()
    memory = w.default_memory(host)
    sandbox = Sandbox(memory_limit=memory, cpus=w.default_cpus(None, w.host_cpus()))
    me = (os.geteuid(), os.getegid())
    uid, gid = w.choose_user((img.attrs.get("Config") or {}).get("User") or None)
    writable = [Path(m.source) for m in mounts if m.kind == "bind" and not m.read_only]
    readable = [Path(m.source) for m in mounts if m.kind == "bind" and m.read_only and m.source]
    if (uid, gid) == me or w.BoundedFolders.possible() is not None:
        return sandbox, None, []
    if not all(_readable_tree(p, uid, gid) for p in readable):
        return sandbox, None, []  # the run would not read its code or data as that user
    size = opts.output_budget or (w.size_bytes(memory) if memory else w.MIN_OUTPUT_BYTES)
    folders = [(f, max(w.MIN_OUTPUT_BYTES, size)) for f in w.outermost(writable)]
    return dataclasses.replace(sandbox, user=f"{uid}:{gid}"), w.BoundedFolders(uid, gid), folders


def _readable_tree(path: Path, uid: int, gid: int, limit: int = 20000) -> bool:
    """Whether ``uid:gid`` can read ``path`` and everything below it (up to ``limit``
    entries, ``.git`` left out); False when there are more."""
    from replay_tui.replay.backends.docker.walls import readable_by

    if not readable_by(path, uid, gid):
        return False
    if not path.is_dir() or path.is_symlink():
        return True
    seen = 0
    for base, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in (*dirs, *files):
            seen += 1
            p = Path(base) / name
            if seen > limit or (not p.is_symlink() and not readable_by(p, uid, gid)):
                return False
    return True


def _exists(c: Any, ref: str) -> bool:
    import docker

    try:
        c.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def _pull(c: Any, ref: str) -> Any:
    import docker

    try:
        return c.images.pull(ref)
    except docker.errors.APIError as e:
        raise InfraError(f"cannot pull {ref}: {(e.explanation or str(e))[:300]}") from None

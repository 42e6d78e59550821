"""Apptainer behind the container-runtime seam (:mod:`replay_tui.replay.backends.runtime`).

- **Resolve**: the OCI image ``name@sha256:...`` is converted once to a SIF file in a
  cache shared by every replay of this store (beside the store, or the folder
  ``--apptainer-cache`` names): ``apptainer build <cache>/<digest>.sif docker://REF``
  under a lock, so N replays of one image convert it once; later runs start from the
  file.  A SIF's sha256 is not the OCI digest, so both are recorded, and the digest
  Apptainer says the SIF was built from (its definition's ``From:``) must be the one
  asked for: a SIF swapped for another image's is refused before anything runs.
- **Run**: ``apptainer exec --containall --no-home --cleanenv --no-privs`` with no network
  (``--net --network none``), read-only binds of the code and data, writable binds of
  the (bounded) output folders only, the limits (``--memory``, ``--cpus``,
  ``--pids-limit``), the user (``--security uid:…,gid:…`` as root), the environment as
  ``APPTAINERENV_*`` (never through a comma-separated flag); GPUs with ``--nv`` limited
  to the allocated devices (``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES``).
- **What ran**: Apptainer's version, the SIF's sha256 and its built-from digest.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from replay_tui.errors import InfraError
from replay_tui.replay.backends.runtime import (
    ContainerRuntime,
    ImageIdentity,
    RunRequest,
    check_identity,
    gpu_indices,
    installed,
    requested_digest,
    run_capped,
)

_FROM = re.compile(r"^\s*from:\s*(\S+)\s*$", re.IGNORECASE | re.MULTILINE)
_VERSION = re.compile(r"apptainer version ([0-9A-Za-z.+~-]{1,60})")
_BAD_PATH = re.compile(r"[,:\n\x00]")
LOCAL_REGISTRIES = ("localhost", "127.0.0.1", "[::1]")

INSTALL_APPTAINER = "install it (scripts/apptainer-env.sh sets it up here), or use --backend docker"
"""How to get apptainer onto this host, as its absence is reported."""


def is_local_registry(ref: str) -> bool:
    host = ref.split("/", 1)[0] if "/" in ref else ""
    return host.rsplit(":", 1)[0] in LOCAL_REGISTRIES


SQUASHFS_COMPRESSION = "-comp zstd -Xcompression-level 3"
"""How the SIF's squashfs is compressed.  mksquashfs's default (gzip at level 9) took
86.7 s to convert the training image here; zstd at level 3 takes 30.3 s for a file 2.6 %
larger (371 against 362 MB), and it starts as fast (docs/speed.md).  Readers: Linux's
squashfs since 4.14, and squashfuse built with zstd."""

CONVERSIONS = "conversions.log"
"""The cache's record of its conversions: one line per SIF built (``<digest> <seconds>
<where>``), appended under the image's lock."""


def sif_name(digest: str) -> str:
    """The cache's file for an OCI digest: ``<hex>.sif``."""
    return f"{digest.partition(':')[2]}.sif"


def nv_args(count: int, devices: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``--nv`` and the variables that limit it to the allocated GPUs (the first
    ``count`` of this host when no scheduler allocated them); nothing for no GPU."""
    chosen = gpu_indices(count, devices)
    if not chosen:
        return [], {}
    visible = ",".join(chosen)
    return ["--nv"], {
        "APPTAINERENV_CUDA_VISIBLE_DEVICES": visible,
        "APPTAINERENV_NVIDIA_VISIBLE_DEVICES": visible,
    }


def parse_version(out: str) -> str:
    """The version in ``apptainer --version``'s answer, or InfraError."""
    m = _VERSION.search(out)
    if m is None:
        raise InfraError(f"apptainer --version said {out.strip()[:80]!r}")
    return m.group(1)


def parse_built_from(deffile: str) -> str | None:
    """The digest a SIF's definition (``apptainer inspect --deffile``) says it was built
    from (``From: …@sha256:…``), or None."""
    m = _FROM.search(deffile)
    if m is None:
        return None
    src = m.group(1).strip().strip("'\"")
    _, sep, digest = src.rpartition("@")
    return digest if sep and digest.startswith("sha256:") else None


def _own_folder(path: Path) -> Path:
    """``path`` as a folder of this user that is no link (made 0700 when absent)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise InfraError(
            f"the SIF cache {path} is not a folder of this user (a link, or another user's)",
            "remove it, or name another with --apptainer-cache",
        )
    return path


def sha256_file(path: Path) -> str:
    """The sha256 of the regular file ``path`` (no link followed)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InfraError(f"{path} is not a regular file")
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def sif_sha256(sif: Path) -> str:
    """The sha256 of the SIF ``sif`` in the cache, hashed once per file: what was hashed
    is kept beside it (``<name>.sha256.json``) with the file's device, inode, size, link
    count and modification and change times, and taken again only while all of them are
    the same (a write to the file changes its change time, which only root can set
    back).  Anything else, or a kept answer that does not read back, is hashed again."""
    import json

    from replay_tui.door import Refused, read_under_or_none

    st = os.lstat(sif)
    if not stat.S_ISREG(st.st_mode):
        raise InfraError(f"{sif} is not a regular file")
    key = [st.st_dev, st.st_ino, st.st_size, st.st_nlink, st.st_mtime_ns, st.st_ctime_ns]
    name = f"{sif.name}.sha256.json"
    try:
        raw = read_under_or_none(sif.parent, name, "spool file")
        kept = json.loads(raw) if raw is not None else None
    except (Refused, ValueError):
        kept = None
    if (
        isinstance(kept, dict)
        and kept.get("stat") == key
        and isinstance(kept.get("sha256"), str)
        and re.fullmatch(r"[0-9a-f]{64}", kept["sha256"])
    ):
        return str(kept["sha256"])
    digest = sha256_file(sif)
    if list(_stat_key(sif)) == key:  # unchanged while it was hashed: kept
        tmp = sif.parent / f".{name}.{os.getpid()}.{time.monotonic_ns()}"
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps({"stat": key, "sha256": digest}))
            os.replace(tmp, sif.parent / name)
        with contextlib.suppress(OSError):
            tmp.unlink()
    return digest


def _stat_key(path: Path) -> tuple[int, ...]:
    st = os.lstat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_nlink, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class ApptainerRuntime:
    cache: Path
    """The SIF cache folder (shared by every replay that names it)."""
    name: str = "apptainer"
    binary: str = "apptainer"
    conversions: list[float] = field(default_factory=list)
    """Seconds of each conversion this runtime made (none: the SIF came from the cache)."""
    empties: list[str] = field(default_factory=list)
    """The empty folders bound over a ``.git`` folder, removed when the run is over."""
    on_node: bool = False
    """The command lines are for another machine (a Slurm job's node): the binary is
    named as it is, not looked up on this host."""
    make_empty: Callable[[], str] | None = None
    """Makes the empty folder bound over a ``.git`` folder (None: one in this host's
    temporary folder; a Slurm job's is in its job folder, which the node sees)."""

    def _apptainer(self) -> str:
        return installed(self.binary, "apptainer", INSTALL_APPTAINER, on_node=self.on_node)

    def _env(self, ref: str | None = None) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "LANG": "C.UTF-8",
            "APPTAINER_CACHEDIR": str(self.cache / "oci-cache"),
            "HOME": os.environ.get("HOME", "/root"),
        }
        if ref is not None and is_local_registry(ref):
            env["APPTAINER_NOHTTPS"] = "1"  # the local registry speaks plain HTTP
        return env

    def version_argv(self) -> list[str]:
        return [self._apptainer(), "--version"]

    def version(self) -> str:
        return parse_version(run_capped(self.version_argv(), env=self._env()))

    def inspect_argv(self, sif: Path | str) -> list[str]:
        """What prints the SIF's definition (its ``From:`` line names its source)."""
        return [self._apptainer(), "inspect", "--deffile", str(sif)]

    def build_argv(self, target: Path | str, ref: str) -> list[str]:
        """What converts the OCI image ``ref`` to the SIF file ``target`` (its squashfs
        compressed as :data:`SQUASHFS_COMPRESSION` says)."""
        return [
            self._apptainer(),
            "build",
            "--force",
            "--mksquashfs-args",
            SQUASHFS_COMPRESSION,
            str(target),
            f"docker://{ref}",
        ]

    def build_env(self, ref: str) -> dict[str, str]:
        """The conversion's environment (its OCI cache in the SIF cache; plain HTTP only
        for a registry on this host)."""
        return self._env(ref)

    def built_from(self, sif: Path) -> str | None:
        """The digest the SIF's definition says it was built from (``From: …@sha256:…``)."""
        return parse_built_from(run_capped(self.inspect_argv(sif), env=self._env()))

    def convert(self, ref: str, target: Path, on_note: Callable[[str], None]) -> None:
        """Build ``target`` from ``docker://ref``: beside it first, renamed into place."""
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        on_note(f"converting {ref} to a SIF file (once per image): {target}")
        t0 = time.monotonic()
        try:
            run_capped(self.build_argv(tmp, ref), timeout=3600, env=self.build_env(ref))
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        took = time.monotonic() - t0
        self.conversions.append(took)
        with contextlib.suppress(OSError):  # the cache's record (the lock is held)
            fd = os.open(
                target.parent / CONVERSIONS,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
            with os.fdopen(fd, "a") as log:
                log.write(f"{requested_digest(ref)} {took:.1f} {os.uname().nodename}\n")
        on_note(f"converted in {took:.1f}s")

    def ensure_sif(self, ref: str, on_note: Callable[[str], None]) -> Path:
        """The SIF of ``ref`` in the cache, converted under a lock when absent."""
        digest = requested_digest(ref)
        folder = _own_folder(self.cache)
        target = folder / sif_name(digest)
        lock = os.open(
            folder / f"{sif_name(digest)}.lock",
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
            0o600,
        )
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one conversion; the others wait for it
            if target.is_symlink() or (target.exists() and not target.is_file()):
                raise InfraError(f"{target} is not a regular file: remove it")
            if target.exists():
                on_note(f"SIF from the cache: {target}")
            else:
                self.convert(ref, target, on_note)
        finally:
            os.close(lock)
        return target

    def resolve(self, ref: str, on_note: Callable[[str], None]) -> ImageIdentity:
        sif = self.ensure_sif(ref, on_note)
        return self.identity_of(ref, sif, self.built_from(sif), sif_sha256(sif), self.version())

    def identity_of(
        self, ref: str, sif: Path, built_from: str | None, sif_sha256: str, version: str
    ) -> ImageIdentity:
        """The identity of the SIF ``sif``, checked: the digest it says it was built from
        must be the one asked for (IdentityMismatch naming *the SIF's built-from digest*
        otherwise).  The one check, on this host and for a Slurm job's node."""
        digest = requested_digest(ref)
        check_identity(
            digest, built_from, "the SIF's built-from digest", f"what {sif} was built from"
        )
        if not re.fullmatch(r"[0-9a-f]{64}", sif_sha256):
            raise InfraError(f"the sha256 of {sif} is not known ({sif_sha256[:80]!r})")
        return ImageIdentity(
            runtime=self.name,
            version=version,
            reference=ref,
            requested_digest=digest,
            sif_sha256=sif_sha256,
            sif_built_from=digest,
            sif_path=sif,
        )

    def _binds(self, req: RunRequest) -> list[str]:
        flags: list[str] = []
        for m in req.mounts:
            source = m.source
            if m.kind == "tmpfs" and self.make_empty is not None:
                source = self.make_empty()
            elif m.kind == "tmpfs":  # an empty read-only folder over it (a .git folder)
                source = tempfile.mkdtemp(prefix="replay-tui-empty-")
                os.chmod(source, 0o555)
                self.empties.append(source)
            for p in (source, m.target):
                if _BAD_PATH.search(p):
                    raise InfraError(f"{p!r} holds a comma or colon: apptainer cannot bind it")
            flags += ["--bind", f"{source}:{m.target}:{'ro' if m.read_only else 'rw'}"]
        return flags

    def limits(self, req: RunRequest) -> list[str]:
        """The limits' flags (cgroups): memory with no swap beyond it, CPUs, pids."""
        sb = req.sandbox
        flags: list[str] = []
        if sb.memory_limit:
            flags += ["--memory", sb.memory_limit, "--memory-swap", sb.memory_limit]
        if sb.cpus:
            flags += ["--cpus", f"{sb.cpus:g}"]
        if sb.pids_limit:
            flags += ["--pids-limit", str(sb.pids_limit)]
        return flags

    def user_flags(self, req: RunRequest) -> list[str]:
        """``--security uid:…,gid:…:…`` when the walls chose another user (root only).
        The group is given as the whole list of groups: otherwise Apptainer keeps the
        caller's supplementary groups (a Slurm job's root keeps group 0, which could then
        reach what root's group may read or write)."""
        user = req.sandbox.user
        if not user or os.geteuid() != 0:
            return []
        uid, _, gid = user.partition(":")
        if (uid, gid or uid) == ("0", "0"):
            return []
        return ["--security", f"uid:{uid},gid:{gid or uid}:{gid or uid}"]

    def exec_prefix(self, req: RunRequest | None) -> list[str]:
        flags = [
            self._apptainer(),
            "--silent",
            "exec",
            "--containall",
            "--no-home",
            "--cleanenv",
            "--no-privs",
            "--net",
            "--network",
            "none",
        ]
        if req is not None:
            flags += self.user_flags(req)
            flags += self.limits(req)
            flags += ["--pwd", req.workdir]
            flags += self._binds(req)
        return flags

    def process_env(self, req: RunRequest | None) -> dict[str, str] | None:
        """The apptainer process's environment: the run's variables as APPTAINERENV_*
        (and the GPUs it may see)."""
        env = self._env()
        if req is None:
            return env
        for k, v in req.env.items():
            env[f"APPTAINERENV_{k}"] = v
        env.update(nv_args(req.sandbox.gpus, req.gpu_devices)[1])
        return env

    def run_argv(self, image: ImageIdentity, req: RunRequest) -> list[str]:
        assert image.sif_path is not None
        gpus, _ = nv_args(req.sandbox.gpus, req.gpu_devices)
        return [*self.exec_prefix(req), *gpus, str(image.sif_path), *req.argv]

    def probe_argv(self, image: ImageIdentity) -> list[str]:
        from replay_tui.replay.backends.docker.engine import PROBE

        assert image.sif_path is not None
        return [*self.exec_prefix(None), str(image.sif_path), "python3", "-I", "-c", PROBE]

    def kill(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 9)

    def finish(self, name: str, exit_code: int) -> str | None:
        for folder in self.empties:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        self.empties.clear()
        return None


if TYPE_CHECKING:  # the seam's protocol, checked by mypy
    _satisfies: ContainerRuntime = ApptainerRuntime(Path("."))

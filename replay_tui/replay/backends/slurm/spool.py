"""The spool: a folder the submit host and the compute nodes share, its whole path
trusted (:func:`trusted_spool`), and each job's folder in it (:class:`JobFolder`),
held open by descriptor: the job's files made there without following a link, what
the job wrote read back through the door; the SDK copied in (:func:`sdk_copy`); the
image-probe cache beside the store (:func:`probe_cache_fd`) and the MAC that keys a
probe or an identity answer by the job's secret (:func:`probe_mac`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay_tui.errors import InfraError
from replay_tui.replay.backends.docker.engine import SDK_DIR
from replay_tui.replay.backends.slurm.options import SlurmOptions


def spool_dir(options: SlurmOptions, store_path: Path) -> Path:
    """The spool: ``options.spool``, else ``slurm-spool`` beside the store; its whole
    path trusted (:func:`trusted_spool`), made owner-only when missing, and refused when
    someone else could write into it or into a folder above it: its content runs in the
    replay's container, and the job writes there as this user."""
    return trusted_spool((options.spool or store_path.parent / "slurm-spool").resolve())


_SPOOL_HINT = (
    "keep the spool under folders only you and root can write (a sticky one such as"
    " /tmp will do), e.g. mkdir -m 700 ~/slurm-spool, and name it with --slurm-spool or"
    " REPLAY_TUI_SLURM_SPOOL"
)


def path_problem(folder: Path) -> tuple[Path, str] | None:
    """The first folder from ``folder`` (an absolute path without links) up to ``/``
    that someone other than root or this user could change, and what is wrong with it.

    Each folder there must belong to root or to this user, and must not be writable by
    its group or others unless it is sticky (as ``/tmp`` is), where only an entry's
    owner may rename or remove it, and every entry on the path is checked to be root's
    or this user's.  Otherwise its owner, or anyone who can write into it, could move
    the spool away while a job waits and put a folder of their own in its place, full
    of links the job would write through as this user.  A folder not there yet is
    skipped (it is made by this user)."""
    me = os.geteuid()
    for d in (folder, *folder.parents):
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            continue
        except OSError as e:
            return d, f"cannot be inspected ({e.strerror})"
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            return d, "is a symbolic link (put in since the path was resolved)"
        if not stat.S_ISDIR(st.st_mode):
            return d, "is not a folder"
        if st.st_uid not in (0, me):
            return d, (
                f"belongs to uid {st.st_uid}, neither you (uid {me}) nor root: its owner"
                " could move the spool away and put a folder of their own in its place"
            )
        if mode & 0o022 and not mode & stat.S_ISVTX:
            who = "others" if mode & 0o002 else "its group"
            return d, (
                f"can be written by {who} (mode {mode:04o}) and is not sticky: they could"
                " move the spool away and put a folder of their own in its place"
            )
    return None


def _refuse_path(spool: Path) -> None:
    from replay_tui.door import Refused

    problem = path_problem(spool.parent)
    if problem is not None:
        where, what = problem
        raise Refused(f"Slurm spool {spool}: the folder {where} above it {what}", _SPOOL_HINT)


def trusted_spool(spool: Path) -> Path:
    """``spool`` (absolute, resolved) when its whole path is trusted: every folder above
    it passes :func:`path_problem` (checked before anything is made there, and again
    after), and the spool itself is this user's alone (``door.private_folder``: made
    0700 when missing, tightened when ours, refused when not).  Refusals are
    ``door.Refused`` (exit 2) naming the folder and what is wrong with it."""
    from replay_tui.door import private_folder

    _refuse_path(spool)
    private_folder(spool, "Slurm spool")
    _refuse_path(spool)  # the folders made on the way are checked too
    return spool


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _own_folder(parent_fd: int | None, name: str | Path, shown: Path, what: str) -> int:
    """A descriptor of the folder ``name`` (under ``parent_fd``, or a path whose folders
    above it the caller trusts), made 0700 when missing; opened without following a
    link, refused (``door.Refused``) unless it is this user's, tightened to 0700."""
    from replay_tui.door import Refused

    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        pass
    except OSError as e:
        raise Refused(f"{what} {shown}: cannot make it ({e.strerror})") from None
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        raise Refused(
            f"{what} {shown} is not a folder of ours (a link, or not a folder: {e.strerror})"
        ) from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise Refused(
            f"{what} {shown} belongs to uid {st.st_uid} with mode"
            f" {stat.S_IMODE(st.st_mode):04o}: only a folder of yours alone is used"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def write_new(dir_fd: int, name: str, data: str | bytes, mode: int = 0o600) -> None:
    """Make the new file ``name`` in the folder ``dir_fd`` holding ``data``, owner-only:
    an existing file or link of that name is an error, never written through."""
    fd = os.open(name, _NEW_FILE, mode & 0o700, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def keep_json(dir_fd: int, name: str, entry: Mapping[str, Any]) -> None:
    """Put ``entry`` as JSON at ``name`` in the folder ``dir_fd``, best effort: written to a
    new file (:func:`write_new`) renamed into place, nothing of it left when that fails;
    ``dir_fd`` is closed either way."""
    tmp = f".{name}.{secrets.token_hex(8)}"
    try:
        with contextlib.suppress(OSError):
            write_new(dir_fd, tmp, json.dumps(entry).encode())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        os.close(dir_fd)


@dataclass
class JobFolder:
    """A job's folder in the spool (``jobs/<name>/``), held open by descriptor.

    Every file of the job is made relative to that descriptor (``O_CREAT | O_EXCL |
    O_NOFOLLOW``, 0600) and read from it through the door (no link followed, bounded),
    so a folder moved away and replaced under the same name is neither written nor
    read.  ``token`` is the job's secret: the job script checks the folder holds it
    before running anything, and keys the image probe's MAC with it."""

    path: Path
    fd: int
    jobs_fd: int
    token: str

    @classmethod
    def make(cls, spool: Path) -> JobFolder:
        trusted_spool(spool)
        spool_fd = _own_folder(None, spool, spool, "Slurm spool")
        try:
            jobs_fd = _own_folder(spool_fd, "jobs", spool / "jobs", "Slurm spool's jobs folder")
        finally:
            os.close(spool_fd)
        try:
            for _ in range(64):
                name = secrets.token_hex(4)
                try:
                    os.mkdir(name, 0o700, dir_fd=jobs_fd)
                except FileExistsError:
                    continue
                break
            else:
                raise InfraError(f"cannot make a job folder in {spool / 'jobs'}")
            fd = _own_folder(jobs_fd, name, spool / "jobs" / name, "Slurm job folder")
        except BaseException:
            os.close(jobs_fd)
            raise
        job = cls(spool / "jobs" / name, fd, jobs_fd, secrets.token_hex(32))
        job.create("job.token", job.token)
        return job

    @property
    def name(self) -> str:
        return self.path.name

    def create(
        self, name: str, data: str | bytes = b"", *, at: int | None = None, mode: int = 0o600
    ) -> None:
        """Make the new file ``name`` (in the job folder, or the folder ``at``) holding
        ``data``; an existing file or link there is an error, never written through."""
        write_new(self.fd if at is None else at, name, data, mode)

    def folder(self, parts: Sequence[str]) -> int:
        """A descriptor of the folder ``parts`` below the job folder, made as needed."""
        fd = os.dup(self.fd)
        shown = self.path
        for part in parts:
            shown = shown / part
            try:
                nxt = _own_folder(fd, part, shown, "Slurm job folder")
            finally:
                os.close(fd)
            fd = nxt
        return fd

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return False
        return True

    def read(self, name: str, kind: str = "spool file") -> bytes:
        """A file the job wrote, through the door from the held descriptor (a regular
        file, no link, at most ``LIMITS[kind]``); ``ValueError`` when it is not that."""
        from replay_tui.door import Refused, read_under

        try:
            return read_under(self.path, name, kind, root_fd=self.fd)
        except Refused as e:
            raise ValueError(str(e)) from None

    def remove(self) -> None:
        """Remove the folder and all in it (from the jobs folder's descriptor, no link
        followed)."""
        with contextlib.suppress(OSError):
            shutil.rmtree(self.name, dir_fd=self.jobs_fd)

    def close(self) -> None:
        for fd in (self.fd, self.jobs_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def sdk_copy(job: JobFolder) -> Path:
    """The replay_tui package (what the container imports as the SDK) copied into the
    job's own owner-only folder, fresh for each job, so compute nodes that cannot see
    this checkout have it, and nothing another user left in the spool is ever run."""
    folders: dict[tuple[str, ...], int] = {}
    try:
        for p in sorted(SDK_DIR.rglob("*")):
            if p.suffix not in (".py", ".typed") or p.is_symlink() or not p.is_file():
                continue
            rel = ("sdk", "replay_tui", *p.relative_to(SDK_DIR).parts)
            where = rel[:-1]
            if where not in folders:
                folders[where] = job.folder(where)
            job.create(rel[-1], p.read_bytes(), at=folders[where])
    finally:
        for fd in folders.values():
            os.close(fd)
    return job.path / "sdk" / "replay_tui"


def probe_cache_fd(cache: Path | None) -> int | None:
    """The probe cache folder's descriptor: made 0700 when missing; None (no cache:
    every job probes) when it, or a folder above it, is not this user's to trust."""
    from replay_tui.door import Refused

    if cache is None or path_problem(cache.parent) is not None:
        return None
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        return _own_folder(None, cache, cache, "image-probe cache")
    except (OSError, Refused):
        return None


def identity_answer(token: str, body: bytes) -> str:
    """What ``identity.ok`` holds for the identity ``body``: its MAC keyed by the job's
    secret (the image probe's, :func:`probe_mac`)."""
    return probe_mac(token, body) + "\n"


def probe_mac(token: str, body: bytes) -> str:
    """The MAC the job script writes beside the probe: ``sha256("TOKEN:" + sha256(body))``
    (hex), the inner digest fixed in length so the outer one cannot be extended."""
    inner = hashlib.sha256(body).hexdigest()
    return hashlib.sha256(f"{token}:{inner}".encode()).hexdigest()

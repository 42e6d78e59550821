"""The sandbox's walls on this host: how much memory and CPU a replay container gets,
which user it runs as, and how much it can write.

- **Memory and CPUs.** ``--memory`` and ``--cpus`` when given; otherwise half of this
  host's memory (swap included in the limit: none beyond it), and the recorded CPU count
  capped at this host's (half of this host's CPUs when none was recorded).
- **User.** Never root when the tool can avoid it: the invoking user when that is not
  root; when the tool runs as root, the image's own numeric non-root ``USER`` if it has
  one, else ``nobody`` (65534:65534).  ``--container-user`` overrides; a data input the
  chosen user could not read falls back to the invoking user, with a note.
- **Output folders.** Each folder the container may write (the output folders, or the
  whole throwaway checkout when a run writes at its top, and the handoff folder) is a
  tmpfs of a fixed size mounted there by the tool (root only), owned by the container's
  user: a write past it fails inside the container with ENOSPC and never fills this
  host's disk.  The default size is twice what the original run wrote, at least 1 GiB;
  ``--output-size`` sets it.  Without root (no mount) the folders stay plain folders and
  the replay says so.

The mounts carry their owner (pid and start time) in their source name; a replay killed
before it unmounted leaves them, and the next docker replay unmounts them
(:func:`sweep_mounts`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from replay_tui.errors import InfraError

if TYPE_CHECKING:
    from replay_tui.replay.backends.docker.engine import Mount

MiB = 1 << 20
GiB = 1 << 30
NOBODY = (65534, 65534)
MOUNT_SOURCE = "replay-tui-walls"
"""The source name of every tmpfs the tool mounts (``/proc/self/mountinfo`` shows it),
followed by ``.PID.START`` of the process that mounted it."""
HANDOFF_BYTES = 256 * MiB
"""The handoff folder's size: the SDK's files there are at most 64 MiB each
(``replay_tui.door.LIMITS``), written beside and renamed."""
MIN_OUTPUT_BYTES = 1 * GiB
MIN_MEMORY_BYTES = 6 * MiB

_SIZE = re.compile(r"([0-9]{1,15})([bkmg]?)", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def size_bytes(text: str) -> int:
    """``512m``, ``2g``, ``1048576`` as bytes; ValueError for anything else."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a size: a whole number with b, k, m or g")
    return int(m.group(1)) * _UNIT[m.group(2).lower()]


def host_memory_bytes() -> int | None:
    """This host's memory (MemTotal), or None when /proc does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def host_cpus() -> int:
    """The CPUs this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_memory(host_bytes: int | None) -> str | None:
    """Half of this host's memory, in whole MiB (None when unknown)."""
    if not host_bytes:
        return None
    return f"{max(MIN_MEMORY_BYTES, host_bytes // 2) // MiB}m"


def default_cpus(recorded: int | None, host: int) -> float:
    """The recorded CPU count capped at this host's, else half of this host's."""
    if recorded:
        return float(min(recorded, host))
    return float(max(1, host // 2))


def default_output_bytes(recorded_bytes: int) -> int:
    """Twice what the original run wrote, at least :data:`MIN_OUTPUT_BYTES`."""
    return max(MIN_OUTPUT_BYTES, 2 * recorded_bytes)


_USER = re.compile(r"([0-9]{1,10})(?::([0-9]{1,10}))?")


def parse_user(text: str) -> tuple[int, int] | None:
    """``UID`` or ``UID:GID`` (numbers; ``root`` is 0:0) as numbers, None otherwise."""
    t = text.strip()
    if t == "root":
        return (0, 0)
    m = _USER.fullmatch(t)
    if m is None:
        return None
    uid = int(m.group(1))
    return (uid, int(m.group(2)) if m.group(2) is not None else uid)


def choose_user(image_user: str | None, override: str | None = None) -> tuple[int, int]:
    """The container's ``uid, gid``: ``override`` (``--container-user``) when given; the
    invoking user when that is not root; else the image's numeric non-root ``USER``,
    else ``nobody``."""
    if override is not None:
        chosen = parse_user(override)
        if chosen is None:
            raise InfraError(f"--container-user {override!r} is not UID, UID:GID or root")
        return chosen
    if os.geteuid() != 0:
        return (os.geteuid(), os.getegid())
    declared = parse_user(image_user) if image_user else None
    if declared is not None and declared[0] != 0:
        return declared
    return NOBODY


def readable_by(path: Path, uid: int, gid: int) -> bool:
    """Whether ``uid:gid`` (no supplementary groups) can read ``path`` (and enter it, a
    folder): its own mode bits only, as a bind mount shows it without its parents."""
    try:
        st = path.stat()
    except OSError:
        return False
    need = 0o5 if path.is_dir() else 0o4
    if uid == 0:
        return True
    if st.st_uid == uid:
        bits = (st.st_mode >> 6) & 0o7
    elif st.st_gid == gid:
        bits = (st.st_mode >> 3) & 0o7
    else:
        bits = st.st_mode & 0o7
    return bits & need == need


def unreadable_mounts(mounts: Iterable[Mount], uid: int, gid: int, checkout: Path) -> list[str]:
    """The read-only bind mounts' sources that ``uid:gid`` cannot read (see
    :func:`readable_by`), those inside the ``checkout`` aside (opened to others there)."""
    return [
        m.source
        for m in mounts
        if m.kind == "bind"
        and m.read_only
        and m.source
        and not readable_by(Path(m.source), uid, gid)
        and not Path(m.source).is_relative_to(checkout)
    ]


def open_to_others(root: Path) -> None:
    """Let any user read ``root`` (a throwaway checkout, inside a 0700 scratch folder that
    no other user of this host can enter): folders o+rx, files o+r, links untouched."""
    for base, dirs, files in os.walk(root):
        for name in (".", *dirs, *files):
            p = Path(base) / name if name != "." else Path(base)
            with contextlib.suppress(OSError):
                st = p.lstat()
                if p.is_symlink():
                    continue
                want = 0o005 if os.path.isdir(p) else 0o004
                if st.st_mode & want != want:
                    os.chmod(p, (st.st_mode & 0o7777) | want)


def _me_tag() -> str:
    from replay_tui.replay.debris import me

    owner = me()
    return f"{MOUNT_SOURCE}.{owner['pid']}.{owner['start']}"


def _unescape(path: str) -> str:
    """A mountinfo path (spaces and the like as ``\\NNN``) as it is."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def our_mounts() -> list[tuple[str, str]]:
    """``(mount point, source)`` of every tmpfs of ours in this mount namespace."""
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        if not sep:
            continue
        fields, rest = head.split(), tail.split()
        ours = len(rest) >= 2 and rest[0] == "tmpfs" and rest[1].startswith(MOUNT_SOURCE + ".")
        if len(fields) >= 5 and ours:
            found.append((_unescape(fields[4]), rest[1]))
    return found


def _umount(path: str) -> bool:
    proc = subprocess.run(["umount", "--lazy", path], capture_output=True, text=True)
    return proc.returncode == 0


def sweep_mounts(on_note: Callable[[str], None] = lambda _: None) -> list[str]:
    """Unmount the tmpfs folders a killed replay left (its process is gone), and remove
    its scratch folder once nothing claims it."""
    from replay_tui.replay.debris import OWNER_FILE, SCRATCH_PREFIX, owner_alive

    if os.geteuid() != 0:
        return []
    import socket

    swept = []
    for point, source in sorted(our_mounts(), key=lambda m: -len(m[0])):
        _name, _, owner = source.partition(".")
        pid, _, start = owner.partition(".")
        alive = owner_alive(
            {"pid": int(pid) if pid.isdigit() else -1, "start": start, "host": socket.gethostname()}
        )
        if alive or not _umount(point):
            continue
        swept.append(point)
        on_note(f"unmounted {point}, left by a replay that was killed (pid {pid})")
        scratch = next((p for p in Path(point).parents if p.name.startswith(SCRATCH_PREFIX)), None)
        unclaimed = scratch is not None and not (scratch / OWNER_FILE).exists()
        if unclaimed and not any(m[0].startswith(f"{scratch}/") for m in our_mounts()):
            shutil.rmtree(str(scratch), ignore_errors=True)
    return swept


class CannotMount(InfraError):
    """This host refuses the tool a tmpfs mount (no CAP_SYS_ADMIN, a locked-down host)."""


@dataclass
class BoundedFolders:
    """Size-bounded tmpfs folders mounted over host folders, owned by ``uid:gid``."""

    uid: int
    gid: int
    mounted: list[Path] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def possible() -> str | None:
        """Why no folder can be bounded here (a sentence), or None when one can."""
        if os.geteuid() != 0:
            return "mounting a size-bounded folder needs root"
        if shutil.which("mount") is None or shutil.which("umount") is None:
            return "mount(8) is not on PATH"
        return None

    def bound(self, path: Path, size: int) -> None:
        """Mount a tmpfs of ``size`` bytes over the folder ``path``, with what it held
        copied in (owned by the container's user), or InfraError."""
        stash = Path(tempfile.mkdtemp(prefix=".walls-", dir=path.parent))
        try:
            held = list(path.iterdir())
            if held:
                shutil.copytree(
                    path, stash, symlinks=True, dirs_exist_ok=True, copy_function=copy_holes
                )
            opts = f"size={size},mode=0700,uid={self.uid},gid={self.gid},nosuid,nodev"
            proc = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", opts, _me_tag(), str(path)],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise CannotMount(
                    f"cannot mount a {size}-byte folder at {path}: {proc.stderr.strip()[:200]}",
                    "replay as root on a host that allows mounts, or see docs/security.md",
                )
            self.mounted.append(path)
            self.sizes[str(path)] = size
            if held:
                try:
                    shutil.copytree(
                        stash, path, symlinks=True, dirs_exist_ok=True, copy_function=copy_holes
                    )
                except OSError as e:
                    raise InfraError(
                        f"{path} holds more than its bound of {size} bytes before the run:"
                        f" {e.strerror}",
                        "pass a larger --output-size",
                    ) from None
            self._own(path)
        finally:
            shutil.rmtree(stash, ignore_errors=True)

    def _own(self, root: Path) -> None:
        for base, dirs, files in os.walk(root):
            for name in (*dirs, *files):
                with contextlib.suppress(OSError):
                    os.lchown(Path(base) / name, self.uid, self.gid)

    def close(self, *, keep: bool = False, changed_only: bool = False) -> None:
        """Unmount every folder (innermost first); ``keep``: copy what each held into
        the folder underneath first (a checkout kept for inspection).  ``changed_only``
        (with ``keep``): a file the run left as it was copied in stays the file it was
        underneath (same inode: what it left there is told apart from what it wrote),
        what it removed is removed there, and no link there is written through."""
        for path in sorted(self.mounted, key=lambda p: -len(p.parts)):
            stash = None
            if keep:
                stash = Path(tempfile.mkdtemp(prefix=".walls-", dir=path.parent))
                with contextlib.suppress(OSError):
                    shutil.copytree(
                        path, stash, symlinks=True, dirs_exist_ok=True, copy_function=copy_holes
                    )
            if not _umount(str(path)):
                continue
            if stash is not None:
                with contextlib.suppress(OSError):
                    if changed_only:
                        sync_into(stash, path)
                    else:
                        shutil.copytree(
                            stash, path, symlinks=True, dirs_exist_ok=True, copy_function=copy_holes
                        )
                shutil.rmtree(stash, ignore_errors=True)
        self.mounted.clear()


def _kind(st: os.stat_result) -> str:
    import stat

    return "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"


def copy_holes(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> str:
    """Copy the regular file ``src`` to ``dst`` (new) byte for byte where it has data and
    with holes where it has none (``SEEK_DATA``/``SEEK_HOLE``), then its times and mode:
    a sparse file a run wrote into its tmpfs (an 8 GiB ``truncate``) stays sparse on the
    host's disk, where the door then refuses it, instead of being written out densely by
    a plain copy.  No link is followed (``O_NOFOLLOW``); a pipe, a socket or a device is
    refused (``O_NONBLOCK``, ``fstat``); a file already at ``dst`` is replaced, not written
    through."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(src, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise shutil.SpecialFileError(f"{src} is not a regular file")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(dst)  # replaced, never written through (a link there is removed)
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            pos = 0
            while pos < st.st_size:
                try:
                    start = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:  # ENXIO: only a hole is left
                    break
                end = os.lseek(fd, start, os.SEEK_HOLE)
                while start < end:
                    chunk = os.pread(fd, min(1 << 20, end - start), start)
                    if not chunk:
                        break
                    os.pwrite(out, chunk, start)
                    start += len(chunk)
                pos = end
            os.ftruncate(out, st.st_size)
            os.fchmod(out, stat.S_IMODE(st.st_mode))
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return str(dst)


def sync_into(src: Path, dest: Path) -> None:
    """Make the folder ``dest`` hold what ``src`` holds: an entry of ``dest`` that ``src``
    lacks, has as another kind, or that is a link, is removed; a regular file of the same
    size and modification time is left as it is; everything else is copied."""
    for base, dirs, files in os.walk(dest, topdown=False):
        for name in (*files, *dirs):
            d = Path(base) / name
            s = src / d.relative_to(dest)
            try:
                dst, sst = d.lstat(), s.lstat()
                same = _kind(dst) == _kind(sst) != "other"
            except OSError:
                same = False
            if not same:
                if d.is_dir() and not d.is_symlink():
                    shutil.rmtree(d, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        d.unlink()
    for base, dirs, files in os.walk(src):
        rel = Path(base).relative_to(src)
        for name in dirs:
            s, d = Path(base) / name, dest / rel / name
            if s.is_symlink():  # listed with the folders, never followed
                with contextlib.suppress(FileExistsError):
                    os.symlink(os.readlink(s), d)
                continue
            with contextlib.suppress(FileExistsError):
                d.mkdir()
            with contextlib.suppress(OSError):
                shutil.copystat(s, d, follow_symlinks=False)
        for name in files:
            s, d = Path(base) / name, dest / rel / name
            sst = s.lstat()
            if _kind(sst) == "other" and not s.is_symlink():
                continue  # a pipe, a socket: nothing to keep
            try:
                dst = d.lstat()
                if (dst.st_size, dst.st_mtime_ns) == (sst.st_size, sst.st_mtime_ns):
                    continue
                d.unlink()
            except FileNotFoundError:
                pass
            if s.is_symlink():
                os.symlink(os.readlink(s), d)
            else:
                copy_holes(s, d)


def outermost(paths: Iterable[Path]) -> list[Path]:
    """``paths`` without those inside another of them (a bound covers its subfolders)."""
    ordered = sorted({p.resolve() for p in paths}, key=lambda p: (len(p.parts), str(p)))
    kept: list[Path] = []
    for p in ordered:
        if not any(p == k or p.is_relative_to(k) for k in kept):
            kept.append(p)
    return kept

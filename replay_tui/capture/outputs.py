"""A run's outputs, each read once: its sha256, a checkpoint's tensor digest and its copy
into the object store come from the same pass; and, while the run still runs, each output
read as soon as the run closes it.

:func:`read_once` is that pass over one open descriptor.  :class:`EarlyOutputs` watches
the folders the artifact patterns can match (Linux inotify, through the C library with
``ctypes``: a file closed after writing, or renamed into place) and reads each matching
file then, in a thread at a lower priority, staging its copy beside the objects
(``ObjectStore.stage_fd``).  Once the command has ended, the launcher opens each output
as always (through the door) and takes the early result only where the file is still
the very one that was read: same device, inode, size, modification and status-change
times, one link, and no close or rename of it seen after that read began.  Anything
else (a file rewritten, replaced, never seen closing, a folder the watch never reached,
a lost event) is read after the end as before, so the manifest is the same either way;
only the time after the end changes.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import select
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from replay_tui.capture.hashing import ChangedWhileHashingError

if TYPE_CHECKING:
    from replay_tui.compare.tensors import Buffer
    from storage.objects import ObjectStore, Staged

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors")

Keep = Callable[[int], "tuple[str, int] | None"]
"""Copies what a descriptor reads somewhere, hashing it: that sha256 and size, or None."""

Identity = tuple[int, int, int, int, int]
"""A file as ``fstat`` sees it: device, inode, size, modification and status-change times."""


def identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def lower_priority() -> None:
    """This thread, and every thread or process it starts, at nice 10: where the machine
    is busy, the launcher's side work gives way to the command (Linux nice values are
    per thread; elsewhere a thread id is no process id, and nothing is changed)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


# -- one read of one file -------------------------------------------------------------


def tensor_digest_or_none(p: Path, data: Buffer | None = None) -> str | None:
    """The checkpoint's tensor digest, or None where it is no checkpoint we can read
    safely (the file's hash then stands alone)."""
    try:
        from replay_tui.compare.tensors import tensor_digest

        return tensor_digest(p) if data is None else tensor_digest(p, data=data)
    except Exception:
        return None


def _sha256_and_tensor_digest(
    mapped: Buffer, shown: Path, keep: Callable[[], tuple[str, int] | None] | None = None
) -> tuple[str, str | None]:
    """The file's sha256 in a thread while the tensor digest is worked out here: that of
    its copy (``keep``), else of ``mapped``."""
    box: dict[str, str | BaseException] = {}

    def hash_file() -> None:
        try:
            kept = keep() if keep is not None else None
            box["sha256"] = hashlib.sha256(mapped).hexdigest() if kept is None else kept[0]
        except BaseException as e:  # handed to the caller below
            box["error"] = e

    worker = threading.Thread(target=hash_file, name="replay-tui-sha256", daemon=True)
    worker.start()
    try:
        tensor = tensor_digest_or_none(shown, mapped)
    finally:
        worker.join()
    got = box.get("sha256")
    if not isinstance(got, str):
        err = box.get("error")
        raise err if isinstance(err, BaseException) else RuntimeError("not hashed")
    return got, tensor


def read_once(
    fd: int, shown: Path, keep: Keep | None, *, tensor: bool
) -> tuple[str, int, str | None] | None:
    """The sha256, size and (``tensor``) tensor digest of the regular file open as ``fd``
    (opened through the door by the caller), from one read.

    A checkpoint is memory-mapped once: its sha256 (a thread: ``hashlib`` lets go of the
    GIL; or that of its copy, ``keep``) and its tensor digest (torch-free for safetensors
    and ``torch.save`` zips) are worked out over the same pages together.  A file that
    is no checkpoint is only copied (``keep``), hashed as it is.  The descriptor's size
    and times must be the same after (:class:`ChangedWhileHashingError`).  None where
    this pass cannot serve (an empty file, no map, nothing to keep a plain file in): the
    caller hashes it as before.
    """
    import mmap

    before = os.fstat(fd)
    if before.st_size == 0:
        return None
    if not tensor:
        kept = keep(fd) if keep is not None else None
        if kept is None:
            return None
        (digest, read), digest_t = kept, None
    else:
        try:
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        try:
            digest, digest_t = _sha256_and_tensor_digest(
                mapped, shown, None if keep is None else lambda: keep(fd)
            )
            read = len(mapped)
        finally:
            with contextlib.suppress(BufferError):
                mapped.close()  # a view still held: the map goes with it
    after = os.fstat(fd)
    if (
        read != before.st_size
        or after.st_size != before.st_size
        or after.st_mtime_ns != before.st_mtime_ns
        or after.st_ctime_ns != before.st_ctime_ns
    ):
        raise ChangedWhileHashingError(f"{str(shown)!r} changed while it was being hashed")
    return digest, before.st_size, digest_t


# -- which folders and files the patterns can reach -----------------------------------


def _has_magic(part: str) -> bool:
    return any(c in part for c in "*?[")


def _matches(parts: Sequence[str], pats: Sequence[str]) -> bool:
    """Whether a path's ``parts`` match the glob's (``**``: any number of folders)."""
    if not pats:
        return not parts
    if pats[0] == "**":
        return any(_matches(parts[i:], pats[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pats[0]) and _matches(parts[1:], pats[1:])


@dataclass(frozen=True)
class _Reach:
    """Which folders and files a set of artifact globs can reach."""

    patterns: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, globs: Sequence[str]) -> _Reach:
        pats = []
        for g in globs:
            parts = PurePosixPath(g).parts
            if not parts or parts[0] == "/" or ".." in parts:
                continue  # refused, with its message, by the collection after the run
            pats.append(tuple(parts))
        return cls(tuple(pats))

    def file(self, parts: Sequence[str]) -> bool:
        return any(_matches(parts, p) for p in self.patterns)

    def folder(self, parts: Sequence[str]) -> bool:
        """Whether files the globs match can lie in this folder or below it."""
        for pats in self.patterns:
            folders = pats[:-1]  # the last part names the files
            if "**" in folders:
                k = folders.index("**")
                if all(
                    fnmatch.fnmatchcase(a, b) for a, b in zip(parts[:k], folders[:k], strict=False)
                ):
                    return True
            elif len(parts) <= len(folders) and all(
                fnmatch.fnmatchcase(a, b) for a, b in zip(parts, folders, strict=False)
            ):
                return True
        return False


# -- inotify, through the C library ---------------------------------------------------

_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_EXCL_UNLINK = 0x04000000
_IN_ISDIR = 0x40000000
_MASK = (
    _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE | _IN_ONLYDIR | _IN_DONT_FOLLOW | _IN_EXCL_UNLINK
)
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then name
MAX_WATCHES = 1000
"""Folders watched at most; files in the rest are read after the run, as before."""


class _Inotify:
    def __init__(self) -> None:
        import ctypes

        self._ctypes = ctypes
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd: int = fd

    def add(self, path: Path) -> int | None:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), self._ctypes.c_uint32(_MASK))
        return wd if wd >= 0 else None

    def events(self) -> Iterator[tuple[int, int, str]]:
        """What is waiting: (watch, mask, name), without blocking."""
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            off = 0
            while off + _EVENT.size <= len(buf):
                wd, mask, _cookie, n = _EVENT.unpack_from(buf, off)
                name = buf[off + _EVENT.size : off + _EVENT.size + n].split(b"\0", 1)[0]
                off += _EVENT.size + n
                yield wd, mask, os.fsdecode(name)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


# -- the early reads ------------------------------------------------------------------


@dataclass
class _Read:
    identity: Identity
    value: tuple[str, int, str | None]  # sha256, size, tensor digest
    staged: Staged | None


@dataclass
class EarlyStats:
    """What the early reads did, for the launcher's timings."""

    closed: int = 0  # closes and renames seen of files the globs match
    read: int = 0  # files read while the run ran
    skipped: int = 0  # refused by the door, linked twice, left before, changed, ...
    taken: int = 0  # of those, taken once the run had ended
    seconds: float = 0.0  # spent reading
    waited_s: float = 0.0  # how long the end waited for a read under way
    lost_events: bool = False
    watched: int = 0  # folders


class EarlyOutputs:
    """Outputs read as soon as the run closes them.  Start it just before the command
    (:meth:`start`), :meth:`finish` it once the command has ended, :meth:`take` what it
    read while opening each output, and :meth:`close` it (staged copies not taken are
    dropped)."""

    def __init__(
        self,
        base: Path,
        globs: Sequence[str],
        objects: ObjectStore | None,
        left_before: Mapping[str, tuple[int, int, int, int]],
    ) -> None:
        self.base = base.resolve()
        self.reach = _Reach.of(globs)
        self.objects = objects
        self.left_before = left_before
        self.stats = EarlyStats()
        self._wake_r, self._wake_w = os.pipe()
        self._folders: dict[int, tuple[str, ...]] = {}
        self._pending: dict[str, None] = {}  # rel paths closed and not read since, in order
        self._results: dict[str, _Read] = {}
        self._stopping = False
        self._finished = False
        self._closed = False
        self.ready = threading.Event()  # the first watches are set (or none can be)
        self._done = threading.Event()  # the last events read: nothing more changes
        self._thread = threading.Thread(target=self._run, name="replay-tui-early", daemon=True)

    @classmethod
    def start(
        cls,
        base: Path,
        globs: Sequence[str],
        objects: ObjectStore | None,
        left_before: Mapping[str, tuple[int, int, int, int]],
    ) -> EarlyOutputs | None:
        """Watch ``base`` for the outputs ``globs`` can match (in a thread of its own,
        which sets the watches up while the command starts); None where there is nothing
        to watch or no inotify (not Linux)."""
        if not sys.platform.startswith("linux") or not _Reach.of(globs).patterns:
            return None
        early = cls(base, globs, objects, left_before)
        early._thread.start()
        return early

    # the watcher's thread ------------------------------------------------------------

    def _watch_tree(self, ino: _Inotify, parts: tuple[str, ...], *, queue_files: bool) -> None:
        """Watch this folder and the folders below it the globs reach.  ``queue_files``:
        a folder that appeared while the run ran: the matching files already in it may
        have been closed before the watch began, and are read now."""
        todo = [parts]
        while todo:
            here = todo.pop()
            if len(self._folders) >= MAX_WATCHES:
                return
            path = self.base.joinpath(*here)
            wd = ino.add(path)
            if wd is None:
                continue
            self._folders[wd] = here
            self.stats.watched = len(self._folders)
            with contextlib.suppress(OSError), os.scandir(path) as it:
                for entry in it:
                    sub = (*here, entry.name)
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name != ".git" and self.reach.folder(sub):
                            todo.append(sub)
                    elif queue_files and self.reach.file(sub):
                        self._pending["/".join(sub)] = None

    def _take_events(self, ino: _Inotify) -> None:
        for wd, mask, name in ino.events():
            if mask & _IN_Q_OVERFLOW:
                self.stats.lost_events = True  # closes may be unseen: nothing early is kept
                continue
            if mask & _IN_IGNORED:
                self._folders.pop(wd, None)
                continue
            here = self._folders.get(wd)
            if here is None or not name:
                continue
            parts = (*here, name)
            if mask & _IN_ISDIR:
                if mask & (_IN_CREATE | _IN_MOVED_TO) and self.reach.folder(parts):
                    self._watch_tree(ino, parts, queue_files=True)
            elif mask & (_IN_CLOSE_WRITE | _IN_MOVED_TO) and self.reach.file(parts):
                rel = "/".join(parts)
                self.stats.closed += 1
                self._pending.pop(rel, None)
                self._pending[rel] = None  # last closed, last read

    def _run(self) -> None:
        lower_priority()
        try:
            ino = _Inotify()
        except (OSError, AttributeError):  # out of instances, no C library: all read after
            self.ready.set()
            self._done.set()
            return
        try:
            self._watch_and_read(ino)
        except BaseException:  # events may have gone unseen: nothing early is kept
            self.stats.lost_events = True
            for rel in list(self._results):
                self._drop(rel)
            raise
        finally:
            self.ready.set()
            self._done.set()
            # closing an inotify instance waits for the kernel (5-20 ms): here, while
            # the launcher goes on with what the run left behind
            ino.close()

    def _watch_and_read(self, ino: _Inotify) -> None:
        self._watch_tree(ino, (), queue_files=False)  # what is there was not written yet
        self.ready.set()
        while True:
            select.select([ino.fd, self._wake_r], [], [], 0 if self._pending else None)
            self._take_events(ino)
            if self._stopping:
                break
            if self._pending:
                rel = next(iter(self._pending))
                del self._pending[rel]
                t0 = time.monotonic()
                self._read(rel)
                self.stats.seconds += time.monotonic() - t0
        self._take_events(ino)  # closes seen after a read began make that read stale
        for rel in self._pending:
            self._drop(rel)
        if self.stats.lost_events:
            for rel in list(self._results):
                self._drop(rel)

    def _read(self, rel: str) -> None:
        from replay_tui.door import Refused, open_under

        staged: list[Staged] = []
        shown = self.base / rel

        def keep(fd: int) -> tuple[str, int] | None:
            if self.objects is None:
                return None
            try:
                s = self.objects.stage_fd(fd, name=str(shown))
            except (OSError, ValueError):
                return None
            staged.append(s)
            return s.sha256, s.size

        self._drop(rel)
        got, seen = None, None
        try:
            with open_under(self.base, rel, "run output") as f:
                st = os.fstat(f.fd)
                left = self.left_before.get(rel) == (
                    st.st_ino,
                    st.st_size,
                    st.st_mtime_ns,
                    st.st_ctime_ns,
                )
                if st.st_nlink == 1 and not left:  # a file the run wrote, linked once
                    tensor = PurePosixPath(rel).suffix in CHECKPOINT_SUFFIXES
                    got, seen = read_once(f.fd, shown, keep, tensor=tensor), identity(st)
        except (Refused, OSError, ValueError, RuntimeError):
            got = None  # said after the run, when the file is opened again
        if got is None or seen is None:
            for s in staged:
                self._discard(s)
            self.stats.skipped += 1
            return
        self._results[rel] = _Read(seen, got, staged[0] if staged else None)
        self.stats.read += 1

    def _discard(self, staged: Staged | None) -> None:
        if staged is not None and self.objects is not None:
            self.objects.discard(staged)

    def _drop(self, rel: str) -> None:
        old = self._results.pop(rel, None)
        if old is not None:
            self._discard(old.staged)

    # the launcher's thread -----------------------------------------------------------

    def finish(self) -> None:
        """The command has ended: read what was closed and not yet read, no more; wait
        for a read under way."""
        if self._finished:
            return
        t0 = time.monotonic()
        self._stopping = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        self._done.wait()
        self.stats.waited_s = round(time.monotonic() - t0, 4)
        self._finished = True

    def take(self, rel: str, fd: int) -> tuple[str, int, str | None] | None:
        """What was read of ``rel`` while the run ran, where ``fd`` (opened by the caller
        through the door, now) is still that very file; its staged copy becomes an
        object.  None: read it now."""
        if not self._finished:
            return None
        got = self._results.pop(rel, None)
        if got is None:
            return None
        st = os.fstat(fd)
        if identity(st) != got.identity or st.st_nlink != 1:
            self._discard(got.staged)
            return None
        if got.staged is not None and self.objects is not None:
            try:
                self.objects.commit(got.staged)
            except OSError:
                return None
        self.stats.taken += 1
        return got.value

    def close(self) -> None:
        """Stop watching; drop every staged copy not taken.  Once: a second call does
        nothing."""
        if self._closed:
            return
        self._closed = True
        self.finish()
        for rel in list(self._results):
            self._drop(rel)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def timings(self) -> dict[str, float | int | bool]:
        s = self.stats
        return {
            "closed": s.closed,
            "read": s.read,
            "skipped": s.skipped,
            "taken": s.taken,
            "read_s": round(s.seconds, 4),
            "waited_at_end_s": s.waited_s,
            "lost_events": s.lost_events,
            "folders_watched": s.watched,
        }

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
    from replay_tui.checkpoints.formats import Buffer
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
        from replay_tui.checkpoints.digest import tensor_digest

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


# -- the budget of one run's outputs ---------------------------------------------------

OUTPUT_BUDGET_ENV = "REPLAY_TUI_OUTPUT_BUDGET"
DEFAULT_OUTPUT_BUDGET = 64 << 30
"""The most bytes of one run's outputs (record's artifacts, a replay's output folder)
hashed and kept in ``objects/``, all its files together; ``--output-budget`` (record) or
``REPLAY_TUI_OUTPUT_BUDGET`` sets another."""
MAX_OUTPUT_FILES = 9000
"""The most output files one run has hashed and kept: a manifest lists 10,000 artifacts
at most, the refused ones included."""
BUDGET_REFUSALS_SAID = 10
"""Outputs past the budget said one by one; the rest in one line."""
BUDGET_HELP = (
    "The most bytes of this run's outputs hashed and kept in objects/, all its files"
    " together (default 64 GiB, or REPLAY_TUI_OUTPUT_BUDGET). Files past it are listed"
    " unhashed, a gap, and never copied. SIZE: bytes, or with a unit: 500MiB, 8GiB, 1TiB."
)

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}


def parse_size(text: str, where: str) -> int:
    """A size as people write it (``8GiB``, ``500M``, ``1.5 GiB``, ``4096``; units are
    binary: K = 1024) in bytes; :class:`BadInput` naming ``where`` when it is none or
    not positive."""
    import re

    from replay_tui.errors import BadInput

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text or "")
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise BadInput(
            f"{where} {text[:40]!r} is not a size: give bytes, or a number with a unit"
            " (KiB, MiB, GiB, TiB), e.g. 8GiB"
        )
    n = (
        int(float(m.group(1)) * _UNITS[unit])
        if "." in m.group(1)
        else int(m.group(1)) * _UNITS[unit]
    )
    if n <= 0 or n > 1 << 60:
        raise BadInput(f"{where} {text[:40]!r}: give a size from 1 byte to 1 EiB")
    return n


@dataclass
class OutputBudget:
    """What one run's outputs may take in all: bytes (:data:`DEFAULT_OUTPUT_BUDGET`, or
    the flag's or the variable's) and files (:data:`MAX_OUTPUT_FILES`).  Files are charged
    in the order they are read (by path); a file that does not fit is refused, listed
    without a hash, and never copied; smaller ones after it may still fit."""

    limit: int = DEFAULT_OUTPUT_BUDGET
    set_by: str = "the default"
    raise_with: str = f"{OUTPUT_BUDGET_ENV}=SIZE"
    max_files: int = MAX_OUTPUT_FILES
    used: int = 0
    files: int = 0
    refused: int = 0
    refused_bytes: int = 0

    @classmethod
    def chosen(cls, value: int | None = None, *, flag: str | None = None) -> OutputBudget:
        """``value`` (a flag's, already parsed) where given, else the environment's
        ``REPLAY_TUI_OUTPUT_BUDGET``, else the default.  ``flag``: the command's own flag,
        named in the message that says how to raise the budget."""
        how = f"{flag} SIZE or {OUTPUT_BUDGET_ENV}=SIZE" if flag else f"{OUTPUT_BUDGET_ENV}=SIZE"
        if value is not None:
            return cls(value, f"set by {flag or 'the caller'}", how)
        env = os.environ.get(OUTPUT_BUDGET_ENV, "").strip()
        if env:
            return cls(parse_size(env, OUTPUT_BUDGET_ENV), f"set by {OUTPUT_BUDGET_ENV}", how)
        return cls(DEFAULT_OUTPUT_BUDGET, "the default", how)

    def fits(self, size: int) -> bool:
        return self.files < self.max_files and self.used + size <= self.limit

    def charge(self, rel: str, size: int) -> str | None:
        """Take ``size`` bytes of the file ``rel`` from the budget; None where they fit,
        else why it is refused (and nothing is taken)."""
        from replay_tui.door import amount

        if self.files >= self.max_files:
            why = (
                f"{rel}: not hashed or kept: this run already has {self.max_files} outputs"
                f" hashed, the most one run may have"
            )
        elif self.used + size > self.limit:
            why = (
                f"{rel}: not hashed or kept: its {amount(size)} would bring this run's outputs"
                f" {amount(self.used + size - self.limit)} past the output budget of"
                f" {amount(self.limit)} ({self.set_by}); raise it with {self.raise_with}"
            )
        else:
            self.used += size
            self.files += 1
            return None
        self.refused += 1
        self.refused_bytes += size
        return why

    def summary(self, said: int) -> str | None:
        """One line for the refusals past the first ``said``, or None."""
        from replay_tui.door import amount

        more = self.refused - said
        if more <= 0:
            return None
        return (
            f"and {more} more output(s) past the output budget of {amount(self.limit)}"
            f" ({amount(self.refused_bytes)} refused in all): listed unhashed, never copied;"
            f" raise it with {self.raise_with}"
        )


def _budget_or_default() -> int:
    """The output budget's bytes from the environment, else the default (a bad value is
    said by the collection after the run, which reads it too)."""
    from replay_tui.errors import BadInput

    try:
        return OutputBudget.chosen().limit
    except BadInput:
        return DEFAULT_OUTPUT_BUDGET


# -- which folders and files the patterns can reach -----------------------------------


@dataclass(frozen=True)
class _Reach:
    """Which folders and files a set of artifact globs can reach, by the one matcher
    (``door.glob_match``) the collection after the run uses too."""

    patterns: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, globs: Sequence[str]) -> _Reach:
        from replay_tui.door import glob_parts

        pats = []
        for g in globs:
            parts = glob_parts(g)
            if parts is None:
                continue  # refused, with its message, by the collection after the run
            pats.append(parts)
        return cls(tuple(pats))

    def file(self, parts: Sequence[str]) -> bool:
        from replay_tui.door import glob_match

        return any(glob_match(parts, p) for p in self.patterns)

    def folder(self, parts: Sequence[str]) -> bool:
        """Whether files the globs match can lie in this folder or below it."""
        from replay_tui.door import glob_reaches

        return any(glob_reaches(parts, p) for p in self.patterns)


# -- inotify, through the C library ---------------------------------------------------

_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_EXCL_UNLINK = 0x04000000
_IN_ISDIR = 0x40000000
_MASK = (
    _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_ONLYDIR
    | _IN_EXCL_UNLINK
)
_GONE = _IN_DELETE | _IN_MOVED_FROM
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then name
MAX_WATCHES = 1000
"""Folders watched at most; files in the rest are read after the run, as before."""
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _Inotify:
    def __init__(self) -> None:
        import ctypes

        self._ctypes = ctypes
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd: int = fd

    def add(self, folder_fd: int) -> int | None:
        """Watch the folder open as ``folder_fd``: named through ``/proc/self/fd``, the
        folder watched is the one opened, whatever its path leads to by now."""
        path = f"/proc/self/fd/{folder_fd}".encode()
        wd = self._libc.inotify_add_watch(self.fd, path, self._ctypes.c_uint32(_MASK))
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
    staged: Staged


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
    dropped).

    The run's file is never memory-mapped while the run may still write it (a file cut
    short under a map kills the reader with SIGBUS): its bytes are copied into the
    object store with ``pread`` and hashed as they are written, and a checkpoint's
    tensor digest is worked out over that private copy, torch-free; a checkpoint the
    torch-free readers decline is left to the read after the end.  A copy is staged
    only while the object store's disk keeps twice its size free and the copies staged
    stay within the run's output budget (``budget``, bytes: :class:`OutputBudget`), and
    dropped as soon as the run deletes or renames the file away.  A sparse file is
    refused by the door, never staged."""

    def __init__(
        self,
        base: Path,
        globs: Sequence[str],
        objects: ObjectStore,
        left_before: Mapping[str, tuple[int, int, int, int]],
        budget: int | None = None,
    ) -> None:
        self.base = base.resolve()
        # the object store's own folder is never watched, even where it lies under the
        # run's folder (a copy closing there would be read again, and so on)
        self._own = Path(os.path.realpath(objects.root))
        self.reach = _Reach.of(globs)
        self.objects = objects
        self.left_before = left_before
        self.budget = budget if budget is not None else _budget_or_default()
        self._staged_bytes = 0  # staged by this reader and not dropped since
        self.stats = EarlyStats()
        self._wake_r, self._wake_w = os.pipe()
        self._folders: dict[int, tuple[str, ...]] = {}
        self._pending: dict[str, None] = {}  # rel paths closed and not read since, in order
        self._results: dict[str, _Read] = {}
        self._lock = threading.Lock()  # _results and the pipe, once the launcher may close early
        self._pipe_open = True
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
        budget: int | None = None,
    ) -> EarlyOutputs | None:
        """Watch ``base`` for the outputs ``globs`` can match (in a thread of its own,
        which sets the watches up while the command starts); None where there is nothing
        to watch, no object store to stage copies in, or no inotify (not Linux)."""
        if objects is None or not sys.platform.startswith("linux"):
            return None
        if not _Reach.of(globs).patterns:
            return None
        early = cls(base, globs, objects, left_before, budget)
        early._thread.start()
        return early

    # the watcher's thread ------------------------------------------------------------

    def _open_folder(self, parts: tuple[str, ...]) -> int | None:
        """The run's folder ``parts`` open, walked from ``base`` one name at a time with
        ``O_NOFOLLOW``: a link anywhere on the way is never followed.  Only folders are
        opened here, to watch and list them; files are read through the door."""
        try:
            fd = os.open(self.base, _FOLDER_FLAGS)
        except OSError:
            return None
        for name in parts:
            try:
                nxt = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except OSError:
                os.close(fd)
                return None
            os.close(fd)
            fd = nxt
        return fd

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
            if path == self._own or self._own in path.parents:
                continue
            fd = self._open_folder(here)
            if fd is None:
                continue
            try:
                wd = ino.add(fd)
                if wd is None:
                    continue
                self._folders[wd] = here
                with contextlib.suppress(OSError), os.scandir(fd) as it:
                    for entry in it:
                        sub = (*here, entry.name)
                        if entry.is_dir(follow_symlinks=False):
                            if entry.name != ".git" and self.reach.folder(sub):
                                todo.append(sub)
                        elif queue_files and self.reach.file(sub):
                            self._pending["/".join(sub)] = None
                # counted once listed: from then on, what lands in it comes as events only
                self.stats.watched = len(self._folders)
            finally:
                os.close(fd)

    def _gone(self, parts: tuple[str, ...], folder: bool) -> None:
        """The run deleted ``parts`` or renamed it away: what was read of it (or below
        it) is no use any more, its copies go now, not at the end."""
        rel = "/".join(parts)
        under = [r for r in (*self._results, *self._pending) if r == rel or r.startswith(rel + "/")]
        for r in under if folder else [rel]:
            self._pending.pop(r, None)
            self._drop(r)
        if folder:  # its watches now name the wrong paths: events from them are ignored
            for wd, there in list(self._folders.items()):
                if there[: len(parts)] == parts:
                    del self._folders[wd]

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
            if mask & _GONE:
                self._gone(parts, folder=bool(mask & _IN_ISDIR))
            elif mask & _IN_ISDIR:
                if mask & (_IN_CREATE | _IN_MOVED_TO) and self.reach.folder(parts):
                    self._watch_tree(ino, parts, queue_files=True)
            elif mask & (_IN_CLOSE_WRITE | _IN_MOVED_TO) and self.reach.file(parts):
                rel = "/".join(parts)
                self.stats.closed += 1
                self._pending.pop(rel, None)
                self._pending[rel] = None  # last closed, last read

    def _run(self) -> None:
        ino = None
        try:
            lower_priority()
            self.objects.sweep_staged()  # copies left by launchers that died mid-read
            ino = _Inotify()
            self._watch_and_read(ino)
        except BaseException:  # no inotify, or events gone unseen: nothing early is kept
            self.stats.lost_events = ino is not None
            self._drop_all()
        finally:
            self.ready.set()
            if self._closed:  # the launcher closed early (Ctrl-C): its copies go here,
                self._drop_all()  # before the end is said, so close() returns after them
            self._done.set()
            if self._closed:
                self._drop_all()
                self._close_pipe()
            if ino is not None:
                # closing an inotify instance waits for the kernel (5-20 ms): here,
                # while the launcher goes on with what the run left behind
                ino.close()

    def _watch_and_read(self, ino: _Inotify) -> None:
        # what the run may have closed before a folder's watch began is read too (a file
        # left by an earlier run and unchanged is passed over by _read)
        self._watch_tree(ino, (), queue_files=True)
        self.ready.set()
        poller = select.poll()  # not select(): a descriptor past 1024 is fine
        poller.register(ino.fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            poller.poll(0 if self._pending else None)
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
            self._drop_all()

    def _room_for(self, size: int) -> bool:
        """Whether the object store's disk keeps twice ``size`` free."""
        where = self.objects.root
        while not where.exists() and where != where.parent:
            where = where.parent
        try:
            st = os.statvfs(where)
        except OSError:
            return False
        return 2 * size < st.f_bavail * st.f_frsize

    def _read(self, rel: str) -> None:
        from replay_tui.door import Refused, open_under

        self._drop(rel)
        shown = self.base / rel
        staged: Staged | None = None
        try:
            with open_under(self.base, rel, "run output") as f:
                st = os.fstat(f.fd)
                left = self.left_before.get(rel) == (
                    st.st_ino,
                    st.st_size,
                    st.st_mtime_ns,
                    st.st_ctime_ns,
                )
                # a file the run wrote, linked once, with room for its copy on the disk
                # and in the run's output budget
                if (
                    st.st_nlink == 1
                    and not left
                    and st.st_size
                    and self._staged_bytes + st.st_size <= self.budget
                    and self._room_for(st.st_size)
                ):
                    staged = self.objects.stage_fd(f.fd, name=str(shown), max_bytes=st.st_size)
                    after = os.fstat(f.fd)
            changed = staged is not None and identity(after) != identity(st)
            if changed or (staged is not None and staged.size != st.st_size):
                raise ChangedWhileHashingError(rel)
            tensor = None
            if staged is not None and PurePosixPath(rel).suffix in CHECKPOINT_SUFFIXES:
                tensor = self._digest_staged(staged, shown)
                if tensor is None:  # declined: torch decides, after the end
                    raise ChangedWhileHashingError(rel)
        except (Refused, OSError, ValueError, RuntimeError):
            if staged is not None:
                self.objects.discard(staged)
            staged = None  # said after the run, when the file is opened again
        if staged is None:
            self.stats.skipped += 1
            return
        with self._lock:
            self._results[rel] = _Read(identity(st), (staged.sha256, staged.size, tensor), staged)
            self._staged_bytes += staged.size
        self.stats.read += 1

    @staticmethod
    def _digest_staged(staged: Staged, shown: Path) -> str | None:
        """The tensor digest of a staged copy (the tool's own file: nobody else writes
        it), torch-free; None where those readers decline it.  ``shown`` names the
        format (its suffix)."""
        import mmap

        from replay_tui.checkpoints.digest import tensor_digest_torch_free

        fd = os.open(staged.tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        try:
            return tensor_digest_torch_free(shown, mapped)
        except Exception:
            return None
        finally:
            with contextlib.suppress(BufferError):
                mapped.close()

    def _drop(self, rel: str) -> None:
        with self._lock:
            old = self._results.pop(rel, None)
            if old is not None:
                self._staged_bytes -= old.staged.size
        if old is not None:
            self.objects.discard(old.staged)

    def _drop_all(self) -> None:
        with self._lock:
            old, self._results = list(self._results.values()), {}
            self._staged_bytes -= sum(r.staged.size for r in old)
        for r in old:
            self.objects.discard(r.staged)

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
        with self._lock:
            got = self._results.pop(rel, None)
        if got is None:
            return None
        st = os.fstat(fd)
        if identity(st) != got.identity or st.st_nlink != 1:
            with self._lock:
                self._staged_bytes -= got.staged.size
            self.objects.discard(got.staged)
            return None
        try:
            self.objects.commit(got.staged)
        except OSError:
            return None
        self.stats.taken += 1
        return got.value

    def close(self) -> None:
        """Stop watching; drop every staged copy not taken.  Once: a second call does
        nothing.  Interrupted (Ctrl-C while a read is under way), the watcher's thread
        drops them itself when that read ends."""
        if self._closed:
            return
        self._closed = True
        try:
            self.finish()
            self._drop_all()
        finally:
            if self._done.is_set():  # else the watcher's thread closes it when it ends
                self._close_pipe()

    def _close_pipe(self) -> None:
        with self._lock:
            if not self._pipe_open:
                return
            self._pipe_open = False
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

"""Content-addressed copies of artifacts, beside the store.

Checkpoints get overwritten by later runs; comparing tensors months later needs the
bytes that were hashed.  Files are stored under ``objects/ab/cdef...`` by sha256, copied
(never hard-linked: a later ``torch.save`` to the same path rewrites the inode in place),
written through a temporary name and renamed.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import queue
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

_BLOCK = 1 << 20
_BLOCKS_IN_FLIGHT = 8  # read and hashed ahead of the writer: 8 MiB at most
_staged_ids = itertools.count()


@dataclass(frozen=True)
class Staged:
    """A copy hashed as it was written, under a temporary name: not an object yet."""

    tmp: Path
    sha256: str
    size: int


class ObjectStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @classmethod
    def beside(cls, store_path: str | os.PathLike[str]) -> ObjectStore:
        return cls(Path(store_path).parent / "objects")

    def path_for(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256[2:]

    def get(self, sha256: str) -> Path | None:
        p = self.path_for(sha256)
        return p if p.is_file() else None

    def put(
        self, src: str | os.PathLike[str], sha256: str, *, max_bytes: int | None = None
    ) -> Path:
        """Keep a copy of ``src`` (whose sha256 the caller computed) and return its path.

        ``src`` is opened without following a symlink and must be a regular file; its
        bytes are hashed while copied and the copy is refused (``ValueError``) unless they
        hash to ``sha256``.  ``max_bytes``: the size the caller measured (and budgeted):
        a file longer than that, or growing past it while copied, is refused before more
        is written (:meth:`stage_fd`).  Objects are owner-only: files 0400, folders 0700.
        """
        dst = self.path_for(sha256)
        if dst.is_file():
            return dst
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(src, flags)
        try:
            return self.put_fd(fd, sha256, name=os.fspath(src), max_bytes=max_bytes)
        finally:
            os.close(fd)

    def put_fd(
        self, fd: int, sha256: str | None, *, name: str, max_bytes: int | None = None
    ) -> Path:
        """Keep a copy of what the open descriptor ``fd`` reads (a regular file, checked
        here; the caller keeps and closes it), as :meth:`put` does; ``name`` is how
        messages name it.

        The bytes are read once (from offset 0, the descriptor's position untouched):
        each block is hashed here while a thread writes it to a temporary file beside
        the objects, renamed at the end.  ``sha256`` None: the object is named by the
        sha256 of the very bytes written (:meth:`sha256_of` its path), which the caller
        records; else it is refused (``ValueError``) unless they hash to ``sha256``.
        """
        if sha256 is not None:
            dst = self.path_for(sha256)
            if dst.is_file():
                return dst
        staged = self.stage_fd(fd, name=name, max_bytes=max_bytes)
        if sha256 is not None and staged.sha256 != sha256:
            self.discard(staged)
            raise ValueError(f"{name!r} no longer hashes to {sha256[:12]}: not kept")
        return self.commit(staged)

    def stage_fd(self, fd: int, *, name: str, max_bytes: int | None = None) -> Staged:
        """Copy what ``fd`` reads (a regular file) to a temporary name of its own beside
        the objects, hashing each block as it is written: not an object yet.
        :meth:`commit` makes it one (named by that hash), :meth:`discard` drops it.
        ``record`` stages an output as soon as the run closes it and commits it only if
        the file is still the same once the run has ended.

        ``max_bytes``: no more than that is ever written; a file longer than it (or one
        that grows past it while copied) is refused (``ValueError``), its partial copy
        removed."""
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{name!r} is not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise ValueError(f"{name!r} is {st.st_size} bytes, more than the {max_bytes} measured")
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.root / f".put.{os.getpid()}.{threading.get_ident()}.{next(_staged_ids)}.tmp"
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                got = _copy_hashing(fd, out, max_bytes, name)
                size = os.fstat(out).st_size
            finally:
                os.close(out)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return Staged(tmp, got, size)

    def commit(self, staged: Staged) -> Path:
        """The object ``staged`` became (renamed into place, 0400; dropped where the
        same bytes were kept before)."""
        dst = self.path_for(staged.sha256)
        try:
            if dst.is_file():  # kept before (the same bytes): this copy is not needed
                os.unlink(staged.tmp)
                return dst
            dst.parent.mkdir(mode=0o700, exist_ok=True)
            os.chmod(staged.tmp, 0o400)
            os.replace(staged.tmp, dst)
        except BaseException:
            self.discard(staged)
            raise
        return dst

    def sweep_staged(self) -> int:
        """Remove the staged copies (``.put.<pid>.*.tmp``) of processes that are gone: a
        launcher killed while it copied.  How many went."""
        gone = 0
        try:
            names = [e.name for e in os.scandir(self.root) if e.name.startswith(".put.")]
        except OSError:
            return 0
        for name in names:
            pid = name.split(".")[2] if name.count(".") >= 4 else ""
            if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
                continue
            with contextlib.suppress(OSError):
                os.unlink(self.root / name)
                gone += 1
        return gone

    @staticmethod
    def discard(staged: Staged) -> None:
        with contextlib.suppress(OSError):
            os.unlink(staged.tmp)

    @staticmethod
    def sha256_of(path: Path) -> str:
        """The sha256 an object's path names (``objects/ab/cdef...``)."""
        return path.parent.name + path.name

    def verify(self, sha256: str) -> bool:
        p = self.get(sha256)
        if p is None:
            return False
        h = hashlib.sha256()
        with p.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest() == sha256


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # there, someone else's
    return True


def _copy_hashing(src: int, dst: int, max_bytes: int | None = None, name: str = "") -> str:
    """Copy what ``src`` reads from offset 0 to ``dst``; the sha256 of the bytes written.
    ``max_bytes``: a source that holds more is refused (``ValueError``) before any byte
    past it is written.

    This thread reads and hashes each block (``hashlib`` lets go of the GIL); a writer
    thread writes the same block object, so what is hashed is what is written, and the
    hashing and the writing of a large file overlap instead of following each other.
    """
    blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=_BLOCKS_IN_FLIGHT)
    failed: list[BaseException] = []

    def write() -> None:
        while (block := blocks.get()) is not None:
            if failed:
                continue  # drained, so the reader never waits on a full queue
            try:
                view = memoryview(block)
                while view:
                    view = view[os.write(dst, view) :]
            except BaseException as e:  # raised again in the caller's thread
                failed.append(e)

    writer = threading.Thread(target=write, name="objects-write", daemon=True)
    writer.start()
    h = hashlib.sha256()
    offset = 0
    try:
        while not failed and (block := os.pread(src, _BLOCK, offset)):
            if max_bytes is not None and offset + len(block) > max_bytes:
                raise ValueError(f"{name!r} grew past the {max_bytes} bytes measured while copied")
            h.update(block)
            blocks.put(block)
            offset += len(block)
    finally:
        blocks.put(None)
        writer.join()
    if failed:
        raise failed[0]
    return h.hexdigest()

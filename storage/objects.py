"""Content-addressed copies of artifacts, beside the store.

Checkpoints get overwritten by later runs; comparing tensors months later needs the
bytes that were hashed.  Files are stored under ``objects/ab/cdef...`` by sha256, copied
(never hard-linked: a later ``torch.save`` to the same path rewrites the inode in place),
written through a temporary name and renamed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path


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

    def put(self, src: str | os.PathLike[str], sha256: str) -> Path:
        """Keep a copy of ``src`` (whose sha256 the caller computed) and return its path.

        ``src`` is opened without following a symlink and must be a regular file; its
        bytes are hashed while copied and the copy is refused (``ValueError``) unless they
        hash to ``sha256``.  Objects are owner-only: files 0400, folders 0700.
        """
        dst = self.path_for(sha256)
        if dst.is_file():
            return dst
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(src, flags)
        try:
            return self.put_fd(fd, sha256, name=os.fspath(src))
        finally:
            os.close(fd)

    def put_fd(self, fd: int, sha256: str, *, name: str) -> Path:
        """Keep a copy of what the open descriptor ``fd`` reads (a regular file, checked
        here; the caller keeps and closes it), as :meth:`put` does; ``name`` is how
        messages name it."""
        dst = self.path_for(sha256)
        if dst.is_file():
            return dst
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        dst.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"{name!r} is not a regular file")
            h = hashlib.sha256()
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                with open(fd, "rb", closefd=False) as fin, open(out, "wb", closefd=False) as fout:
                    while chunk := fin.read(1 << 20):
                        h.update(chunk)
                        fout.write(chunk)
            finally:
                os.close(out)
            if h.hexdigest() != sha256:
                raise ValueError(f"{name!r} no longer hashes to {sha256[:12]}: not kept")
            os.chmod(tmp, 0o400)
            os.replace(tmp, dst)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return dst

    def verify(self, sha256: str) -> bool:
        p = self.get(sha256)
        if p is None:
            return False
        h = hashlib.sha256()
        with p.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest() == sha256

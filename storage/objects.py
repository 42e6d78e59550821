"""Content-addressed copies of artifacts, beside the store.

Checkpoints get overwritten by later runs; comparing tensors months later needs the
bytes that were hashed.  Files are stored under ``objects/ab/cdef...`` by sha256, copied
(never hard-linked: a later ``torch.save`` to the same path rewrites the inode in place),
written through a temporary name and renamed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
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
        """Keep a copy of ``src`` (whose sha256 the caller computed) and return its path."""
        dst = self.path_for(sha256)
        if dst.is_file():
            return dst
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o444)
        os.replace(tmp, dst)
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

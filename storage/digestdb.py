"""The file of the hashing stat cache: digests of files and folders by absolute path.

``replay_tui.capture.hashing.StatCache`` decides what may be cached (the stat key, the
racy-clean window, the folder fingerprint); this module only keeps the rows, so that
``storage/`` stays the one package that holds SQL.  WAL and a busy timeout let several
processes share the file; an instance may be used from several threads.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence

StatRow = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS file_digest (
        path BLOB PRIMARY KEY,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        ctime_ns INTEGER NOT NULL,
        inode INTEGER NOT NULL,
        sha256 TEXT NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS tree_digest (
        path BLOB PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        file_count INTEGER NOT NULL
    ) WITHOUT ROWID""",
)
_LOOKUP_BATCH = 500  # bound parameters per query (SQLite allows 32766 since 3.32)


class DigestDB:
    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA:
            self._db.execute(statement)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def files(self, keys: Sequence[bytes]) -> dict[bytes, tuple[StatRow, str]]:
        """``path -> (stat row, sha256)`` of the given paths that have a row."""
        rows: dict[bytes, tuple[StatRow, str]] = {}
        with self._lock:
            for start in range(0, len(keys), _LOOKUP_BATCH):
                batch = keys[start : start + _LOOKUP_BATCH]
                query = (
                    "SELECT path, size, mtime_ns, ctime_ns, inode, sha256 FROM file_digest"
                    f" WHERE path IN ({','.join('?' * len(batch))})"
                )
                for path, size, mtime, ctime, inode, digest in self._db.execute(query, batch):
                    rows[path] = ((size, mtime, ctime, inode), digest)
        return rows

    def tree(self, root: bytes, fingerprint: str) -> tuple[str, int, int] | None:
        """(sha256, size_bytes, file_count) of a folder whose fingerprint is unchanged."""
        with self._lock:
            row = self._db.execute(
                "SELECT sha256, size_bytes, file_count FROM tree_digest"
                " WHERE path = ? AND fingerprint = ?",
                (root, fingerprint),
            ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]), int(row[2]))

    def put(
        self,
        files: Sequence[tuple[bytes, int, int, int, int, str]],
        tree: tuple[bytes, str, str, int, int] | None = None,
    ) -> None:
        """Store file rows (path, size, mtime_ns, ctime_ns, inode, sha256) and optionally
        one folder row (path, fingerprint, sha256, size_bytes, file_count), atomically."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO file_digest"
                    " (path, size, mtime_ns, ctime_ns, inode, sha256) VALUES (?, ?, ?, ?, ?, ?)",
                    files,
                )
                if tree is not None:
                    self._db.execute(
                        "INSERT OR REPLACE INTO tree_digest"
                        " (path, fingerprint, sha256, size_bytes, file_count)"
                        " VALUES (?, ?, ?, ?, ?)",
                        tree,
                    )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

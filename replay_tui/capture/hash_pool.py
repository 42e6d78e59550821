"""The processes that hash many small files: ``concurrent.futures`` with forked workers.

``hashing.hash_path`` hands a tree of 2,000 files or more (no stat cache, fork safe) to
:func:`run_children`: a ``ProcessPoolExecutor`` of two to eight workers forked once,
fed chunks of paths (at most :data:`DEPTH` a worker outstanding) while the parent goes on
walking the tree one folder at a time, each chunk answered with its raw digests and stat
keys. :func:`in_processes` is the same for a list of paths already known (the
stat-cache path).

This replaced a pool of our own (a pipe per child, ``select``, ``os.fork`` and
``os._exit`` by hand, ~230 lines), measured against it in the same runs by
``bench/bench_hashing.py`` on a 20,000-file tree (664 MB), the executor in place of the
pool (2026-12-01, load 9-11 on 2 cores): the median over rounds of the executor's time
over the pool's in the same round 0.81, 0.84 and 0.84 in three runs (the executor first
in each round in the last), its CPU time 1.07, 1.05 and 1.02 times the pool's. So it
costs no more wall time (less: a worker given less CPU holds no chunk another could
take) for at most 7 % more CPU. The pool is at commit a5f4fc0, whose
``bench/bench_hashing.py`` times both (``tree.futures_vs_pool``); the bench now keeps the
executor's own figures (``tree.parallel_*``, ``tree.speedup``).

Forking is the only start method that fits: ``spawn`` and ``forkserver`` re-import the
``__main__`` of the process, and that is a user's unguarded training script when a run
hashes its outputs. So the workers are forked only with no other thread alive
(:func:`fork_is_safe`; the executor forks them all at its first task, before it starts
its own threads); elsewhere ``hashing`` uses batched threads. What a worker runs
(:data:`_digest`) is set before the fork and inherited, not pickled.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = [
    "DEPTH",
    "Chunk",
    "Columns",
    "DigestFile",
    "OnDigests",
    "fork_is_safe",
    "in_processes",
    "run_children",
]

Chunk: TypeAlias = tuple[int, list[bytes]]  # index of its first file, paths
StatKey: TypeAlias = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode
DigestFile: TypeAlias = Callable[[bytes], tuple[bytes, StatKey]]
"""Raw SHA-256 and stat key of one file (``hashing._digest_file``): what a worker runs."""
Columns: TypeAlias = tuple[bytes, "array[int]"]
"""Digests of many files: raw SHA-256s (32 bytes a file), stat keys (4 int64 a file)."""
OnDigests: TypeAlias = Callable[[int, bytes, memoryview], None]
"""Called with a chunk's first index, its raw digests (32 bytes a file) and its stat keys
(an int64 view, 4 a file)."""

DEPTH = 2
"""Chunks outstanding per worker: enough that none waits for the parent, few enough that
a worker given less CPU holds little of what is left."""

_digest: DigestFile | None = None
"""What the workers run on each path, set by :func:`run_children` before they fork."""


def fork_is_safe() -> bool:
    """Forking is fast and re-runs no ``__main__``; it is safe only with no other threads."""
    import multiprocessing  # here, not at the top: most hashing never forks

    return (
        sys.platform.startswith("linux")
        and "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
    )


def _digest_chunk(paths: list[bytes]) -> tuple[bytes, bytes]:  # pragma: no cover - a worker
    """One task, in a forked worker: the chunk's raw digests and stat keys, as bytes."""
    digest_file = _digest
    if digest_file is None:
        raise RuntimeError("a hashing worker started without its digest function")
    digests = []
    keys: array[int] = array("q")
    for path in paths:
        digest, key = digest_file(path)
        digests.append(digest)
        keys.extend(key)
    return b"".join(digests), keys.tobytes()


def in_processes(
    paths: Sequence[bytes], bounds: Sequence[int], workers: int, digest_file: DigestFile
) -> Columns:
    """Digest ``paths`` in forked processes, chunk by chunk (``bounds``); see
    :func:`run_children`."""
    n = len(paths)
    digests = bytearray(32 * n)
    keys = array("q", bytes(32 * n))

    def store(start: int, raw: bytes, chunk_keys: memoryview) -> None:
        k = len(raw) // 32
        digests[32 * start : 32 * (start + k)] = raw
        keys[4 * start : 4 * (start + k)] = array("q", chunk_keys)

    backlog = deque((lo, list(paths[lo:hi])) for lo, hi in pairwise(bounds))

    def take() -> Chunk | None:
        return backlog.popleft() if backlog else None

    run_children(workers, take, None, store, digest_file)
    return bytes(digests), keys


def run_children(
    workers: int,
    take: Callable[[], Chunk | None],
    more: Callable[[], bool] | None,
    on_digests: OnDigests,
    digest_file: DigestFile,
) -> None:
    """Digest (``digest_file``) every chunk that ``take`` hands out (None: none ready) in
    ``workers`` forked processes.

    ``more`` (None: ``take`` has every chunk already) is called while the workers work, to
    find more files (the walk, one folder a call); it returns False once it has found the
    last. A worker's error is raised here (the hash stops: chunks not started are
    cancelled); a worker that dies without a word (SIGBUS on a file truncated under
    ``mmap``) raises ``BrokenProcessPool``. Every worker has ended when this returns.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    global _digest
    _digest = digest_file
    pending: dict[Future[tuple[bytes, bytes]], int] = {}
    context = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            try:
                walking = more is not None
                while True:
                    while len(pending) < DEPTH * workers and (task := take()) is not None:
                        pending[pool.submit(_digest_chunk, task[1])] = task[0]
                    if not pending and not walking:
                        return
                    timeout = 0.0 if walking else None
                    done, _ = wait(pending, timeout=timeout, return_when=FIRST_COMPLETED)
                    for future in done:
                        raw, keys = future.result()
                        on_digests(pending.pop(future), raw, memoryview(keys).cast("q"))
                    if walking and more is not None:
                        walking = more()
            except BaseException:
                for future in pending:
                    future.cancel()  # what no worker has begun: the shutdown waits for the rest
                raise
    finally:
        _digest = None

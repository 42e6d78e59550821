"""The forked processes that hash many small files: a pool of our own (moved out of hashing).

``hashing.hash_path`` hands a tree of 2,000 files or more (no stat cache, fork safe) to
:func:`run_children`: two to eight children forked once, each fed chunks of paths
(NUL-separated, down a pipe of its own, two chunks ahead) while the parent goes on
walking the tree one folder at a time, and answering with one message per chunk of raw
digests and stat keys (no pickling, no thread in the parent). :func:`in_processes` is
the same for a list of paths already known (the stat-cache path).

Against ``concurrent.futures.ProcessPoolExecutor`` (fork context): measured in
the same run as this pool, on the same 20,000-file tree, by ``bench/bench_hashing.py``
(``tree.futures_vs_pool``, the median over rounds of its time over this pool's in the
same round). On 2026-12-01, 2 cores at load 9-11, three runs: 0.81, 0.84 and 0.84
(the executor first in each round in the last), its CPU time 1.07, 1.05 and 1.02
times the pool's: the executor is the one to keep, and replaces this module next.

Forking is the only start method that fits: ``spawn`` and ``forkserver`` re-import the
``__main__`` of the process, and that is a user's unguarded training script when a run
hashes its outputs. So children are forked only with no other thread alive
(:func:`fork_is_safe`); elsewhere ``hashing`` uses batched threads.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import threading
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import TypeAlias

__all__ = [
    "Chunk",
    "Columns",
    "DigestFile",
    "OnDigests",
    "fork_is_safe",
    "in_processes",
    "run_children",
]


def fork_is_safe() -> bool:
    """Forking is fast and re-runs no ``__main__``; it is safe only with no other threads."""
    import multiprocessing  # here, not at the top: most hashing never forks

    return (
        sys.platform.startswith("linux")
        and "fork" in multiprocessing.get_all_start_methods()
        and threading.active_count() == 1
    )


Chunk: TypeAlias = tuple[int, list[bytes]]  # index of its first file, paths
StatKey: TypeAlias = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode
DigestFile: TypeAlias = Callable[[bytes], tuple[bytes, StatKey]]
"""Raw SHA-256 and stat key of one file (``hashing._digest_file``): what a child runs."""
Columns: TypeAlias = tuple[bytes, "array[int]"]
"""Digests of many files: raw SHA-256s (32 bytes a file), stat keys (4 int64 a file)."""
OnDigests: TypeAlias = Callable[[int, bytes, memoryview], None]
"""Called with a chunk's first index, its raw digests (32 bytes a file) and its stat keys
(an int64 view, 4 a file)."""
_HEADER = struct.Struct("<II")  # a message: status (0 results, 1 pickled error), length


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
    forked processes.

    ``more`` (None: ``take`` has every chunk already) is called while the children work,
    to find more files (the walk, one folder a call); it returns False once it has found
    the last. Each child gets at most ``_DEPTH`` chunks ahead of its work, so one
    given less CPU takes fewer and no core idles before the end; the paths go down a pipe
    per child and the digests and stat keys come back in one message a chunk (no
    pickling). A child that raises sends the pickled exception and the hash stops; one
    that dies without a word (SIGBUS on a file truncated under ``mmap``) raises
    ``BrokenProcessPool``. The children start by ``fork``, only with no other thread
    alive (:func:`fork_is_safe`), and leave by ``os._exit``.
    """
    children: list[_ChildPipes] = []
    try:
        for _ in range(workers):
            children.append(_fork_child(children, digest_file))
        walking = more is not None
        while True:
            for child in children:  # keep every child _DEPTH chunks ahead
                while len(child.starts) < _DEPTH and (task := take()) is not None:
                    child.send(*task)
            busy = [child for child in children if child.starts]
            if not busy and not walking:
                return
            timeout = 0.0 if walking else None
            sending = {child.tasks: child for child in busy if child.out}
            ready, writable, _ = select.select(busy, list(sending), [], timeout)
            for fd in writable:
                sending[fd].flush()
            for child in ready:
                start, raw, keys = child.receive()
                on_digests(start, raw, keys)
            if walking and more is not None:
                walking = more()
    finally:
        _stop_children(children)


_DEPTH = 2  # chunks sent ahead to a child


class _ChildPipes:
    """The parent's ends of one hashing child: its pid, task pipe and result pipe."""

    def __init__(self, pid: int, tasks: int, results: int) -> None:
        self.pid = pid
        self.tasks = tasks
        self.results = results
        self.starts: deque[int] = deque()  # first index of each chunk sent, not answered
        self.out = bytearray()  # what the task pipe (non-blocking) has not taken yet

    def fileno(self) -> int:
        return self.results

    def send(self, start: int, chunk: list[bytes]) -> None:
        body = b"\0".join(chunk)  # no path holds a NUL
        self.out += _HEADER.pack(len(chunk), len(body))
        self.out += body
        self.starts.append(start)
        self.flush()

    def flush(self) -> None:
        """Write what the task pipe takes now; the rest waits for the loop's ``select``
        (a blocking write could wait on a child that waits for its answer to be read)."""
        try:
            while self.out:
                del self.out[: os.write(self.tasks, self.out)]
        except BlockingIOError:
            pass
        except BrokenPipeError:
            from concurrent.futures.process import BrokenProcessPool

            raise BrokenProcessPool("a hashing process died without an error") from None

    def receive(self) -> tuple[int, bytes, memoryview]:
        header = _read_exact(self.results, _HEADER.size)
        if len(header) < _HEADER.size:
            from concurrent.futures.process import BrokenProcessPool

            _, status = os.waitpid(self.pid, 0)
            self.pid = 0
            raise BrokenProcessPool(
                f"a hashing process died ({_describe_status(status)}) without an error"
            )
        status, length = _HEADER.unpack(header)
        body = _read_exact(self.results, length)
        if status:
            raise pickle.loads(body)
        n = length // 64
        return self.starts.popleft(), body[: 32 * n], memoryview(body)[32 * n :].cast("q")


def _fork_child(siblings: Sequence[_ChildPipes], digest_file: DigestFile) -> _ChildPipes:
    task_r, task_w = os.pipe()
    result_r, result_w = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child leaves by os._exit
            code = 1
            try:
                for fd in (task_w, result_r, *(f for s in siblings for f in (s.tasks, s.results))):
                    os.close(fd)  # a sibling's task pipe must see EOF when the parent closes it
                _child_loop(task_r, result_w, digest_file)
                code = 0
            finally:
                os._exit(code)
    except BaseException:
        os.close(task_w)
        os.close(result_r)
        raise
    finally:
        os.close(task_r)
        os.close(result_w)
    os.set_blocking(task_w, False)
    return _ChildPipes(pid, task_w, result_r)


def _child_loop(
    tasks: int, results: int, digest_file: DigestFile
) -> None:  # pragma: no cover - in a forked child
    """Digest the chunks sent down ``tasks`` until EOF; answer each on ``results``."""
    try:
        while header := _read_exact(tasks, _HEADER.size):
            count, length = _HEADER.unpack(header)
            paths = _read_exact(tasks, length).split(b"\0") if count else []
            digests = []
            keys: array[int] = array("q")
            for path in paths:
                digest, key = digest_file(path)
                digests.append(digest)
                keys.extend(key)
            body = b"".join(digests) + keys.tobytes()
            _write_all(results, _HEADER.pack(0, len(body)) + body)
    except BaseException as exc:
        try:
            payload = pickle.dumps(exc)
        except Exception:
            payload = pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))
        _write_all(results, _HEADER.pack(1, len(payload)) + payload)
        raise


def _stop_children(children: Sequence[_ChildPipes]) -> None:
    """Close the task pipes (a child at EOF leaves), kill children still busy, reap all."""
    for child in children:
        os.close(child.tasks)
        if child.starts and child.pid:
            os.kill(child.pid, signal.SIGKILL)  # stopped early: no need to finish its chunks
    for child in children:
        if child.pid:
            os.waitpid(child.pid, 0)
        os.close(child.results)


def _read_exact(fd: int, n: int) -> bytes:
    """``n`` bytes from ``fd``, fewer only at EOF."""
    data = os.read(fd, n)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n and (part := os.read(fd, n - got)):
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"

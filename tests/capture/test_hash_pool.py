"""The parallel paths of tree hashing, on real files: the forked workers of
``capture/hash_pool.py`` (a ``ProcessPoolExecutor`` fed while the walk goes on, or from a
list), batched threads, how errors and dead workers end a hash, and that no worker
outlives it."""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from itertools import pairwise
from pathlib import Path

import pytest

from replay_tui.capture import hash_pool, hashing
from replay_tui.capture.hashing import StatCache, hash_path

Digest = tuple[bytes, tuple[int, int, int, int]]  # raw sha256, stat key (size first)
DigestFile = Callable[[bytes], Digest]


def _make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def test_process_pool_matches_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {f"d{i % 7}/f{i:04d}.bin": os.urandom(1 + (i * 997) % 40_000) for i in range(300)}
    root = _make_tree(tmp_path / "ds", files)
    serial = hash_path(root, workers=1)
    monkeypatch.setattr(hashing, "_POOL_MIN_FILES", 50)
    monkeypatch.setattr(hash_pool, "fork_is_safe", lambda: True)  # whatever threads pytest has
    assert hashing._choose_strategy(300, 0, 2) == "processes"
    pools: list[tuple[int, bool]] = []
    real = hash_pool.run_children

    def spy(
        workers: int,
        take: Callable[[], tuple[int, list[bytes]] | None],
        more: Callable[[], bool] | None,
        on_digests: Callable[[int, bytes, memoryview], None],
        digest_file: DigestFile,
    ) -> None:
        pools.append((workers, more is not None))
        real(workers, take, more, on_digests, digest_file)

    monkeypatch.setattr(hash_pool, "run_children", spy)
    assert hash_path(root, workers=2) == serial  # the walk goes on while children hash
    with StatCache(tmp_path / "cache.db") as cache:
        assert hash_path(root, workers=2, cache=cache) == serial  # a list of paths
    assert pools == [(2, True), (2, False)]
    (root / "d3" / "out").symlink_to(tmp_path)  # the walk fails while children work
    with pytest.raises(ValueError, match="points outside"):
        hash_path(root, workers=2)


def test_process_pool_with_one_page_pipes_and_long_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task and answer messages far larger than the pipes: the parent never blocks on a
    child that is itself waiting for its answer to be read."""
    long = "n" * 200
    files = {f"d{i % 3}/{long}{i:04d}.bin": os.urandom(1 + i % 5000) for i in range(700)}
    root = _make_tree(tmp_path / "ds", files)
    serial = hash_path(root, workers=1)
    real_pipe = os.pipe

    def small_pipe() -> tuple[int, int]:
        read_end, write_end = real_pipe()
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # one page, as when over the limit
        return read_end, write_end

    monkeypatch.setattr(os, "pipe", small_pipe)  # the pool's pipes
    monkeypatch.setattr(hashing, "_POOL_MIN_FILES", 50)
    monkeypatch.setattr(hash_pool, "fork_is_safe", lambda: True)

    def too_long(signum: int, frame: object) -> None:
        raise TimeoutError("the pool is stuck")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(60)
    try:
        assert hash_path(root, workers=2) == serial
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_thread_paths_match_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = {f"f{i:03d}.bin": os.urandom(50_000 + i) for i in range(60)}
    root = _make_tree(tmp_path / "ds", files)
    serial = hash_path(root, workers=1)
    monkeypatch.setattr(hashing, "_POOL_MIN_FILES", 10)
    monkeypatch.setattr(hash_pool, "fork_is_safe", lambda: False)  # as with other threads alive
    assert hashing._choose_strategy(60, 0, 2) == "threads"
    assert hash_path(root, workers=2) == serial
    monkeypatch.setattr(hashing, "_POOL_MIN_FILES", 1000)
    monkeypatch.setattr(hashing, "_THREADS_MIN_BYTES", 1000)  # a few big files
    assert hashing._choose_strategy(60, 3_000_000, 2) == "threads"
    assert hash_path(root, workers=2) == serial


def test_errors_in_workers_propagate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _make_tree(tmp_path / "ds", {f"f{i:03d}.bin": b"x" for i in range(40)})
    real: DigestFile = hashing._digest_file

    def unreadable(path: bytes) -> Digest:
        if path.endswith(b"f007.bin"):
            raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(hashing, "_digest_file", unreadable)  # forked workers inherit it
    monkeypatch.setattr(hashing, "_POOL_MIN_FILES", 10)
    monkeypatch.setattr(hash_pool, "fork_is_safe", lambda: True)
    assert hashing._choose_strategy(40, 0, 2) == "processes"
    with pytest.raises(PermissionError, match="f007"):
        hash_path(root, workers=2)


def test_a_dead_worker_fails_the_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _make_tree(tmp_path / "ds", {f"f{i:03d}.bin": b"x" for i in range(40)})
    real: DigestFile = hashing._digest_file

    def crash(path: bytes) -> Digest:
        if path.endswith(b"f007.bin"):
            os._exit(7)  # as a SIGBUS would kill it
        return real(path)

    monkeypatch.setattr(hashing, "_digest_file", crash)
    monkeypatch.setattr(hashing, "_POOL_MIN_FILES", 10)
    monkeypatch.setattr(hash_pool, "fork_is_safe", lambda: True)
    with pytest.raises(BrokenProcessPool):
        hash_path(root, workers=2)


def test_chunks_keep_order_and_balance() -> None:
    sizes = [10 << 20 if i == 50 else 1000 for i in range(100)]
    bounds = hashing._chunks(sizes, 8)
    assert bounds[0] == 0 and bounds[-1] == 100 and bounds == sorted(set(bounds))
    assert 51 in bounds  # a big file closes its chunk
    even = hashing._chunks([1000] * 100, 8)
    lengths = [hi - lo for lo, hi in pairwise(even)]
    assert 8 <= len(lengths) <= 9 and max(lengths) <= 13
    assert hashing._chunks([], 8) == [0]


def test_process_pool_one_chunk_per_file_and_child_errors(tmp_path: Path) -> None:
    """Every chunk is taken exactly once, whatever the children's pace; a child's error is
    raised in the parent and the other children stop."""
    files = {f"f{i:03d}.bin": os.urandom(i * 37) for i in range(50)}
    root = _make_tree(tmp_path / "ds", files)
    paths = [os.fsencode(root / name) for name in sorted(files)]
    bounds = list(range(51))  # one file a chunk
    raw, keys = hash_pool.in_processes(paths, bounds, 3, hashing._digest_file)
    assert [raw[32 * i : 32 * i + 32] for i in range(50)] == [
        hashlib.sha256(files[name]).digest() for name in sorted(files)
    ]
    assert list(keys[::4]) == [len(files[name]) for name in sorted(files)]
    os.mkfifo(root / "pipe")
    with pytest.raises(ValueError, match="not a regular file"):
        hash_pool.in_processes(
            [*paths, os.fsencode(root / "pipe")], [0, 25, 51], 2, hashing._digest_file
        )


# --------------------------------------------------------------------------- the pool itself


def _alive(pid: int) -> bool:
    """Whether ``pid`` is still a process of ours (a zombie counts: it was not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _spy_forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the pid of every child the pool forks."""
    pids: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)  # the pool's forks
    return pids


def test_chunks_found_while_walking_all_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``take`` has nothing for a while, then more after each ``more``: every chunk is
    answered once, at its own index, and every child is reaped at the end."""
    files = [(tmp_path / f"f{i:03d}").as_posix().encode() for i in range(60)]
    blobs = [os.urandom(i * 11) for i in range(60)]
    for path, blob in zip(files, blobs, strict=True):
        Path(os.fsdecode(path)).write_bytes(blob)
    found: list[bytes] = []
    sent = 0
    walks = 0

    def more() -> bool:  # finds 6 files a call, as a walk finds one folder a call
        nonlocal walks
        walks += 1
        found.extend(files[len(found) : len(found) + 6])
        return len(found) < len(files)

    def take() -> hash_pool.Chunk | None:
        nonlocal sent
        if sent == len(found):
            return None
        start, sent = sent, min(sent + 4, len(found))
        return start, found[start:sent]

    answers: dict[int, tuple[bytes, list[int]]] = {}

    def on_digests(start: int, raw: bytes, keys: memoryview) -> None:
        assert start not in answers
        answers[start] = (raw, keys.tolist())

    pids = _spy_forks(monkeypatch)
    hash_pool.run_children(2, take, more, on_digests, hashing._digest_file)
    assert walks == 10 and len(pids) == 2
    raw = b"".join(answers[start][0] for start in sorted(answers))
    sizes = [size for start in sorted(answers) for size in answers[start][1][::4]]
    assert raw == b"".join(hashlib.sha256(blob).digest() for blob in blobs)
    assert sizes == [len(blob) for blob in blobs]
    assert not any(_alive(pid) for pid in pids)


def test_a_failing_walk_stops_and_reaps_the_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [(tmp_path / f"f{i}").as_posix().encode() for i in range(8)]
    for path in paths:
        Path(os.fsdecode(path)).write_bytes(b"x" * 100)
    chunks = [(0, paths[:4]), (4, paths[4:])]

    def more() -> bool:
        raise ValueError("the walk met a device")

    pids = _spy_forks(monkeypatch)
    with pytest.raises(ValueError, match="met a device"):
        hash_pool.run_children(
            2,
            lambda: chunks.pop() if chunks else None,
            more,
            lambda *_: None,
            hashing._digest_file,
        )
    assert len(pids) == 2
    assert not any(_alive(pid) for pid in pids)


def test_fork_is_unsafe_while_another_thread_runs() -> None:
    """The children are forked only with no other thread alive (one could hold a lock
    the child would wait on for ever); ``hash_path`` then uses threads."""
    assert hash_pool.fork_is_safe() == (threading.active_count() == 1)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not hash_pool.fork_is_safe()
        assert hashing._choose_strategy(5_000, 0, 2) == "threads"
    finally:
        stop.set()
        other.join()

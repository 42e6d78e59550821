"""SHA-256 of files and folders, and a stat cache so unchanged data is not read twice.

A file's digest is plain SHA-256 of its bytes (what ``sha256sum`` prints). A folder's
digest is a *tree hash*: SHA-256 of a canonical listing described in :func:`hash_path`.
Everything is stdlib; hashing uses the SHA instructions through ``hashlib`` (OpenSSL).
Many small files are hashed in forked workers (:mod:`replay_tui.capture.hash_pool`), a
few big ones in threads; ``docs/speed.md`` lists each such choice with its measurement.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import stat
import time
from array import array
from bisect import bisect_left
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from itertools import chain, compress, islice, pairwise
from operator import attrgetter
from stat import S_ISDIR, S_ISLNK, S_ISREG
from types import TracebackType
from typing import Any, Literal, TypeAlias

from replay_tui.capture import hash_pool
from storage.digestdb import DigestDB

__all__ = [
    "TREE_HEADER",
    "ChangedWhileHashingError",
    "StatCache",
    "TreeDigest",
    "hash_path",
    "sha256_file",
    "sha256_regular_file",
    "verify_path",
]

StrPath: TypeAlias = str | os.PathLike[str]
Strategy: TypeAlias = Literal["serial", "threads", "processes"]

TREE_HEADER = b"replay-tui tree v1\n"
"""First line of every tree listing; a new format gets a new version."""
_FINGERPRINT_HEADER = b"replay-tui tree fingerprint v2\n"
"""First bytes of a folder fingerprint (the stat cache's folder record); v1 was per line."""

_READ_WHOLE_MAX = 1 << 20  # files up to this size: one read(); above: mmap
_STREAM_CHUNK = 1 << 20
_POOL_MIN_FILES = 2_000  # fewer files to hash than this: no process pool
_THREADS_MIN_BYTES = 64 << 20  # fewer files but this many bytes: threads (no GIL in hashing)
_CHUNKS_PER_WORKER = 8
_FILES_PER_CHUNK = 32  # forked processes: chunks this small (~1 ms), so none ends long alone
_CHUNK_FILES_MAX = 256  # the tree walk's chunks: this big while many are left (~10 ms)
_PER_FILE_COST = 64 << 10  # open/stat/close overhead, in bytes of hashing time
_MAX_WORKERS = 8

_SAFE_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/"
_ESCAPES = tuple(chr(b) if b in _SAFE_BYTES else f"%{b:02X}" for b in range(256))
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_OPEN_FLAGS_NONBLOCK = _OPEN_FLAGS | getattr(os, "O_NONBLOCK", 0)  # a FIFO: no wait
_INT64 = 1 << 63


_StatKey: TypeAlias = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


def _stat_key(st: os.stat_result) -> _StatKey:
    """What must be unchanged for a cached digest to stand; inode folded into int64."""
    inode = st.st_ino - 2 * _INT64 if st.st_ino >= _INT64 else st.st_ino
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, inode)


class ChangedWhileHashingError(RuntimeError):
    """The file's size or timestamps changed while it was read: the digest would be a guess."""


@dataclass(frozen=True)
class TreeDigest:
    """Digest of a file or folder: sha256 hex, total bytes of files, number of files."""

    sha256: str
    size_bytes: int
    file_count: int


# --------------------------------------------------------------------------- files


def _digest_fd(fd: int, size: int) -> tuple[bytes, int]:
    """SHA-256 (raw 32 bytes) and byte count of an open file, read from its start."""
    if 0 < size <= _READ_WHOLE_MAX:
        data = os.read(fd, size + 1)  # +1 notices growth: the stat check then fails
        if len(data) == size:
            return hashlib.sha256(data).digest(), size
        os.lseek(fd, 0, os.SEEK_SET)
    elif size > 0:
        try:
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
                return hashlib.sha256(mapped).digest(), len(mapped)
        except (OSError, ValueError):
            pass  # not mappable (some pseudo and network files): stream it instead
    return _digest_stream(fd)


def _digest_stream(fd: int) -> tuple[bytes, int]:
    """Fallback: 1 MiB ``readinto`` + ``update`` until EOF."""
    hasher = hashlib.sha256()
    buf = bytearray(_STREAM_CHUNK)
    view = memoryview(buf)
    total = 0
    with open(fd, "rb", buffering=0, closefd=False) as stream:
        while n := stream.readinto(buf):
            hasher.update(view[:n])
            total += n
    return hasher.digest(), total


def sha256_file(path: StrPath) -> str:
    """SHA-256 hex digest of a file's bytes (same as ``sha256sum``), at memory speed."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        return _digest_fd(fd, size)[0].hex()
    finally:
        os.close(fd)


def sha256_regular_file(path: StrPath) -> tuple[str, int]:
    """SHA-256 hex and size of a regular file, never through a symlink.

    Opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked with ``fstat``: a link, a device,
    a FIFO or a socket raises ``OSError``/``ValueError`` instead of being read.
    """
    digest, key = _digest_file(os.fsencode(path))
    return digest.hex(), key[0]


_Digest: TypeAlias = tuple[bytes, _StatKey]  # raw SHA-256, stat key before reading


def _digest_file(path: bytes) -> _Digest:
    """Raw digest and pre-read stat key (its size first) of one regular file.

    Refuses symlinks (``O_NOFOLLOW``), anything but a regular file (checked on the open
    descriptor before a byte is read) and changes. Five calls for a small file: open,
    fstat, one read, fstat, close (the second fstat notices a change during the read).
    """
    fd = os.open(path, _OPEN_FLAGS_NONBLOCK)
    try:
        before = os.fstat(fd)
        if not S_ISREG(before.st_mode):
            raise ValueError(f"{os.fsdecode(path)!r} is not a regular file; refusing to hash it")
        size = before.st_size
        digest, read = _digest_fd(fd, size)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    if (
        read != size
        or after.st_size != size
        or after.st_mtime_ns != before.st_mtime_ns
        or after.st_ctime_ns != before.st_ctime_ns
    ):
        raise ChangedWhileHashingError(f"{os.fsdecode(path)!r} changed while it was being hashed")
    return digest, _stat_key(before)


def _digest_batch(paths: Sequence[bytes]) -> list[_Digest]:
    """One task of the thread pool: many files, so the per-task overhead is paid once."""
    return [_digest_file(p) for p in paths]


# --------------------------------------------------------------------------- many files


def _worker_count(workers: int | None) -> int:
    if workers is not None:
        return max(1, workers)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, _MAX_WORKERS))


def _choose_strategy(n_files: int, total_bytes: int, workers: int) -> Strategy:
    """Serial for little work; forked processes for many files; threads for a few big ones.

    Threads pay off only where ``hashlib`` holds no GIL for long (big files); for many
    small files a thread pool is no faster than serial here (measured), so those go to
    processes. ``spawn``/``forkserver`` would re-import an unguarded ``__main__`` (a
    training script): where forking is unsafe, batched threads are used instead.
    """
    if workers <= 1 or n_files < 2:
        return "serial"
    if n_files >= _POOL_MIN_FILES:
        return "processes" if hash_pool.fork_is_safe() else "threads"
    if total_bytes >= _THREADS_MIN_BYTES:
        return "threads"
    return "serial"


def _chunks(sizes: Sequence[int], count: int) -> list[int]:
    """Bounds of about ``count`` runs of similar cost: run k is ``[b[k], b[k + 1])``."""
    total = sum(sizes) + _PER_FILE_COST * len(sizes)
    target = max(total // max(count, 1), 1)
    bounds = [0]
    cost = 0
    for i, size in enumerate(sizes, 1):
        cost += size + _PER_FILE_COST
        if cost >= target:
            bounds.append(i)
            cost = 0
    if bounds[-1] != len(sizes):
        bounds.append(len(sizes))
    return bounds


_Columns: TypeAlias = tuple[bytes, "array[int]"]
"""Digests of many files: raw SHA-256s (32 bytes a file), stat keys (4 int64 a file)."""


def _columns(results: Iterable[_Digest]) -> _Columns:
    digests: list[bytes] = []
    keys: array[int] = array("q")
    for digest, key in results:
        digests.append(digest)
        keys.extend(key)
    return b"".join(digests), keys


def _digest_many(
    paths: Sequence[bytes], sizes: Sequence[int] | None, workers: int | None
) -> _Columns:
    """Digest files in order, choosing serial, threads or forked processes.

    ``sizes`` (None: not known) only plan the work. Unknown, they are looked up where the
    choice depends on them (a few files, several workers) and taken as equal elsewhere.
    """
    n_workers = _worker_count(workers)
    if sizes is None:
        sizes = _planning_sizes(paths, n_workers)
    strategy = _choose_strategy(len(paths), sum(sizes), n_workers)
    if strategy == "serial":
        return _columns(_digest_file(p) for p in paths)
    if strategy == "processes":
        # Small chunks (~32 files, ~1 ms): the last one leaves a core idle only briefly.
        count = max(n_workers * _CHUNKS_PER_WORKER, len(paths) // _FILES_PER_CHUNK)
        bounds = _chunks(sizes, count)
        return hash_pool.in_processes(paths, bounds, n_workers, _digest_file)
    from concurrent.futures import ThreadPoolExecutor  # here: most hashing needs no pool

    bounds = _chunks(sizes, n_workers * _CHUNKS_PER_WORKER)  # a big file: a chunk alone
    chunks = [paths[lo:hi] for lo, hi in pairwise(bounds)]
    with ThreadPoolExecutor(min(n_workers, len(chunks)), thread_name_prefix="sha256") as pool:
        return _columns(result for batch in pool.map(_digest_batch, chunks) for result in batch)


def _planning_sizes(paths: Sequence[bytes], workers: int) -> list[int]:
    if workers <= 1 or not 2 <= len(paths) < _POOL_MIN_FILES:
        return [0] * len(paths)  # the choice and the chunks do not depend on bytes
    sizes = []
    for path in paths:
        try:
            sizes.append(os.lstat(path).st_size)
        except OSError:
            sizes.append(0)  # reading it will say what is wrong
    return sizes


def _digest_files(
    items: Sequence[tuple[bytes, _StatKey]], cache: StatCache | None, workers: int | None
) -> tuple[list[tuple[str, int]], list[tuple[bytes, _StatKey, str]]]:
    """(sha256, size) per (path, stat key), reading only files the cache cannot vouch for.

    Also returns what was read, as (path, stat key before reading, sha256) for the cache.
    """
    if cache is None:
        known: list[str | None] = [None] * len(items)
    else:
        known = cache._lookup([p for p, _ in items], [key for _, key in items])
    results = [(digest or "", key[0]) for (_, key), digest in zip(items, known, strict=True)]
    todo = [i for i, digest in enumerate(known) if digest is None]
    raw, keys = _digest_many([items[i][0] for i in todo], [results[i][1] for i in todo], workers)
    hexes = raw.hex()
    read = []
    for j, i in enumerate(todo):
        digest = hexes[64 * j : 64 * j + 64]
        key = (keys[4 * j], keys[4 * j + 1], keys[4 * j + 2], keys[4 * j + 3])
        results[i] = (digest, key[0])
        read.append((items[i][0], key, digest))
    return results, read


# --------------------------------------------------------------------------- trees

_File: TypeAlias = tuple[bytes, _StatKey]  # relative path, stat key
_Line: TypeAlias = tuple[bytes, str]  # relative path, listing line


def _quote(raw: bytes) -> str:
    """Percent-encode a path as RFC 3986 does, keeping ``/``: no spaces or newlines remain."""
    if not raw.translate(None, _SAFE_BYTES):
        return raw.decode("ascii")
    return "".join(_ESCAPES[b] for b in raw)


def _quote_all(raws: Sequence[bytes]) -> list[str]:
    """:func:`_quote` of each path; when none needs an escape (the usual case), in one go."""
    joined = b"\n".join(raws)  # "\n" is escaped by _quote, so it splits back exactly
    if not joined.translate(None, _SAFE_BYTES + b"\n"):
        return joined.decode("ascii").split("\n") if raws else []
    return [_quote(raw) for raw in raws]


def _link_target(root: bytes, link: bytes) -> bytes:
    """In-tree target of a symlink, relative to ``root`` (``.`` for the root itself)."""
    resolved = os.path.realpath(link)
    if resolved == root:
        return b"."
    prefix = root.rstrip(b"/") + b"/"
    if not resolved.startswith(prefix):
        raise ValueError(
            f"symlink {os.fsdecode(link)!r} -> {os.fsdecode(os.readlink(link))!r} points "
            f"outside {os.fsdecode(root)!r}; refusing to hash it (copy the data into the "
            "folder, or record the target as its own path)"
        )
    return resolved[len(prefix) :]


def _walk(root: bytes, with_stat: bool) -> tuple[list[bytes], array[int], list[_Line]]:
    """Walk ``root`` without following symlinks, in walk order (nothing sorted).

    Returns the relative paths of regular files, their stat keys flattened (four int64 per
    file, empty unless ``with_stat``) and the listing lines of folders and links. With
    ``with_stat`` each entry costs one ``lstat`` (what re-verification must pay anyway) and
    its mode decides; without, the type the directory listing carries decides (``d_type``,
    no call at all; ``scandir`` falls back to ``lstat`` where a filesystem gives none).
    Per file only a path and four machine integers are kept: no tuples or stat objects, so
    a big tree allocates little (fresh heap pages cost a page fault each) and no object the
    garbage collector counts (each 700 of those start a collection).
    """
    rels: list[bytes] = []
    keys: array[int] = array("q")
    others: list[_Line] = []
    for _ in _walk_folders(root, with_stat, rels, keys, others):
        pass
    return rels, keys, others


def _walk_folders(
    root: bytes, with_stat: bool, rels: list[bytes], keys: array[int], others: list[_Line]
) -> Iterator[bool]:
    """:func:`_walk`, one folder a step: adds to the lists and yields after each folder.

    With ``with_stat`` each folder is opened (``O_DIRECTORY | O_NOFOLLOW``) and listed
    through its descriptor, so an entry's ``lstat`` is an ``fstatat`` of one name, not a
    lookup of its whole path again. Entries come ``_WALK_BATCH`` at a time, and the paths
    and stat keys of a batch's regular files are added by comprehensions and one
    ``fromlist`` (a loop per entry cost as much again as the ``lstat``); only folders,
    links and the rare oddity go one by one.
    """
    stack = [(root, b"")]
    while stack:
        folder, rel_folder = stack.pop()
        prefix = folder if folder.endswith(b"/") else folder + b"/"
        batches = _batches_by_fd(folder) if with_stat else _batches_by_path(folder)
        with closing(batches):
            for entries, names in batches:
                if with_stat:
                    stats = [entry.stat(follow_symlinks=False) for entry in entries]
                    regular = list(map(S_ISREG, map(_MODE, stats)))
                else:
                    regular = [entry.is_file(follow_symlinks=False) for entry in entries]
                if all(regular):
                    rels += [rel_folder + name for name in names]
                    if with_stat:
                        _add_keys(keys, stats)
                    continue
                rels += [rel_folder + name for name in compress(names, regular)]
                if with_stat:
                    _add_keys(keys, list(compress(stats, regular)))
                for entry, name, is_regular in zip(entries, names, regular, strict=True):
                    if not is_regular:
                        rel = rel_folder + name
                        _walk_other(root, prefix + name, rel, entry, rels, others, stack)
        yield True


_Batch: TypeAlias = tuple[list["os.DirEntry[Any]"], list[bytes]]  # entries, their names


def _batches_by_fd(folder: bytes) -> Generator[_Batch, None, None]:
    """A folder's entries, listed through its descriptor (an entry's ``lstat`` is then an
    ``fstatat`` of its name), ``_WALK_BATCH`` at a time, with their names encoded."""
    fd = os.open(folder, _DIR_FLAGS)
    try:
        with os.scandir(fd) as listing:
            while entries := list(islice(listing, _WALK_BATCH)):
                names = os.fsencode("\0".join([entry.name for entry in entries]))
                yield entries, names.split(b"\0")  # no name holds a NUL
    finally:
        os.close(fd)


def _batches_by_path(folder: bytes) -> Generator[_Batch, None, None]:
    """A folder's entries, listed by its path (no ``lstat`` is wanted), in batches."""
    with os.scandir(folder) as listing:
        while entries := list(islice(listing, _WALK_BATCH)):
            yield entries, [entry.name for entry in entries]


def _walk_other(
    root: bytes,
    path: bytes,
    rel: bytes,
    entry: os.DirEntry[Any],
    rels: list[bytes],
    others: list[_Line],
    stack: list[tuple[bytes, bytes]],
) -> None:
    """A folder, link or oddity found by :func:`_walk_folders`."""
    mode = entry.stat(follow_symlinks=False).st_mode  # cached by scandir
    if S_ISDIR(mode):
        others.append((rel, f"D {_quote(rel)}\n"))
        stack.append((path, rel + b"/"))
    elif S_ISLNK(mode):
        target = _link_target(root, path)
        others.append((rel, f"L {_quote(target)} {_quote(rel)}\n"))
    elif S_ISREG(mode):  # was something else when listed: hash it all the same
        rels.append(rel)  # (only without stat: with it, the one lstat decided)
    else:
        raise ValueError(
            f"{os.fsdecode(path)!r} is not a file, folder or symlink (a device, FIFO or "
            "socket); refusing to hash the folder"
        )


_WALK_BATCH = 512  # entries of a folder handled at once (their stat objects live together)
_DIR_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_DIRECTORY", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_MODE = attrgetter("st_mode")
_KEY_FIELDS = attrgetter("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino")


def _add_keys(keys: array[int], stats: list[os.stat_result]) -> None:
    """Append each stat's key (as :func:`_stat_key`: four int64) to ``keys``, in one go
    while every inode fits an int64 (the usual case), else one by one with it folded."""
    try:
        keys.fromlist(list(chain.from_iterable(map(_KEY_FIELDS, stats))))  # all or nothing
    except OverflowError:
        for st in stats:
            keys.extend(_stat_key(st))


def _scan(root: bytes) -> tuple[list[_File], list[_Line]]:
    """Walk ``root`` without following symlinks: files with stat keys, and listing lines of
    folders/links, both sorted by relative path."""
    rels, keys, others = _walk(root, with_stat=True)
    others.sort(key=_by_path)
    return _sorted_files(rels, keys), others


def _sorted_files(rels: list[bytes], keys: array[int]) -> list[_File]:
    """(relative path, stat key) per file, sorted by path (paths are unique)."""
    it = iter(keys)
    files = list(zip(rels, zip(it, it, it, it, strict=True), strict=True))
    files.sort(key=_by_path)
    return files


def _by_path(item: tuple[bytes, object]) -> bytes:
    return item[0]


def _fingerprint(rels: Sequence[bytes], keys: array[int], others: Sequence[_Line]) -> str:
    """SHA-256 of every name, link target and file stat key: equal means nothing changed.

    Taken in walk order, which an unchanged folder repeats (directory listings are stable
    while nothing in them changes); where a filesystem reorders its listings, the folder
    record only misses and the per-file lookups answer. Unambiguous: the counts come first,
    listing lines end in a newline (quoted paths hold none), every file path ends in a NUL
    (no path holds one) and the stat keys are 32 bytes per file.
    """
    hasher = hashlib.sha256(_FINGERPRINT_HEADER + b"%d %d\n" % (len(others), len(rels)))
    hasher.update("".join([line for _, line in others]).encode("ascii"))
    hasher.update(b"\0".join(rels))
    hasher.update(b"\0")
    hasher.update(keys.tobytes())
    return hasher.hexdigest()


def _listing_digest(
    files: Sequence[bytes], hexes: str, sizes: Sequence[int], others: Sequence[_Line]
) -> TreeDigest:
    """The tree hash of sorted ``files`` with their sha256s (``hexes``, 64 characters a
    file) and sizes, and the listing lines of folders and links (``others``, any order)."""
    starts = range(0, 64 * len(files), 64)
    lines = [
        f"F {hexes[j : j + 64]} {size} {quoted}\n"
        for j, size, quoted in zip(starts, sizes, _quote_all(files), strict=True)
    ]
    placed = sorted(others, key=_by_path)
    at = [bisect_left(files, rel) for rel, _ in placed]  # files are sorted and unique
    for i, (_, line) in zip(reversed(at), reversed(placed), strict=True):
        lines.insert(i, line)  # from the end: earlier places do not move
    hasher = hashlib.sha256(TREE_HEADER)
    hasher.update("".join(lines).encode("ascii"))
    return TreeDigest(hasher.hexdigest(), sum(sizes), len(files))


def _hash_tree(root: bytes, cache: StatCache | None, workers: int | None) -> TreeDigest:
    top = root if root.endswith(b"/") else root + b"/"
    if cache is None:  # no stat keys needed: the walk makes no call per file
        rels: list[bytes] = []
        others: list[_Line] = []
        steps = _walk_folders(root, False, rels, array("q"), others)
        n_workers = _worker_count(workers)
        if n_workers > 1 and hash_pool.fork_is_safe():
            while len(rels) < _POOL_MIN_FILES:
                if not next(steps, False):
                    break
            else:  # many files: hash them in forked children while the walk goes on
                return _hash_tree_in_children(top, rels, others, steps, n_workers)
        for _ in steps:
            pass
        rels.sort()
        raw, keys = _digest_many([top + rel for rel in rels], None, workers)
        return _listing_digest(rels, raw.hex(), keys[::4], others)
    rels, keys, others = _walk(root, with_stat=True)
    fingerprint = _fingerprint(rels, keys, others)
    known = cache._lookup_tree(root, fingerprint)
    if known is not None:
        return known
    files = _sorted_files(rels, keys)
    paths = [top + rel for rel, _ in files]  # what scandir's entry.path was
    digests, read = _digest_files(
        [(path, key) for path, (_, key) in zip(paths, files, strict=True)], cache, workers
    )
    hexes = "".join([digest for digest, _ in digests])
    result = _listing_digest([rel for rel, _ in files], hexes, [s for _, s in digests], others)
    scanned = {path: key for path, (_, key) in zip(paths, files, strict=True)}
    unchanged = all(scanned[path] == key for path, key, _ in read)
    tree = (root, fingerprint, result, [key for _, key in files]) if unchanged else None
    cache._store(read, tree)
    return result


def _hash_tree_in_children(
    top: bytes, rels: list[bytes], others: list[_Line], steps: Iterator[bool], workers: int
) -> TreeDigest:
    """The tree hash with no cache, the walk (``steps``, begun) and the hashing overlapped.

    The parent walks one folder at a time between answers from the children, cutting
    the files found into chunks in walk order; each answer becomes its listing lines at
    once, and the sort by path is worked out when the walk ends, so after the last
    answer only the join and one SHA-256 of the listing are left.
    """
    lines: list[str] = []  # per file, in walk order
    order: list[int] = []
    sent = 0
    total = 0
    walking = True

    def take() -> hash_pool.Chunk | None:
        """The next chunk: big while many files are left, smaller towards the end (each
        a quarter of a fair share), so the children finish together."""
        nonlocal sent
        left = len(rels) - sent
        if walking:
            size = _CHUNK_FILES_MAX if left >= _CHUNK_FILES_MAX else 0
        else:
            size = min(left, max(_FILES_PER_CHUNK // 2, left // (4 * workers)), _CHUNK_FILES_MAX)
        if size <= 0:
            return None
        start, sent = sent, sent + size
        lines.extend([""] * size)
        return start, [top + rel for rel in rels[start:sent]]

    def more() -> bool:
        nonlocal walking
        walking = next(steps, False)
        if not walking:
            entries = rels + [rel for rel, _ in others]
            order.extend(sorted(range(len(entries)), key=entries.__getitem__))
        return walking

    def add_lines(start: int, raw: bytes, keys: memoryview) -> None:
        nonlocal total
        hexes = raw.hex()
        sizes = keys[::4].tolist()
        quoted = _quote_all(rels[start : start + len(sizes)])
        lines[start : start + len(sizes)] = [
            f"F {hexes[64 * j : 64 * j + 64]} {size} {name}\n"
            for j, (size, name) in enumerate(zip(sizes, quoted, strict=True))
        ]
        total += sum(sizes)

    hash_pool.run_children(workers, take, more, add_lines, _digest_file)
    texts = lines + [line for _, line in others]
    hasher = hashlib.sha256(TREE_HEADER)
    hasher.update("".join([texts[i] for i in order]).encode("ascii"))
    return TreeDigest(hasher.hexdigest(), total, len(rels))


def hash_path(
    path: StrPath, *, cache: StatCache | None = None, workers: int | None = None
) -> TreeDigest:
    """Digest a file (its SHA-256) or a folder (its tree hash), reusing ``cache`` when given.

    The tree hash is SHA-256 over this ASCII listing: the line ``replay-tui tree v1``
    (:data:`TREE_HEADER`), then one line per entry below the folder, sorted by the raw
    bytes of its relative POSIX path::

        F <sha256-hex> <size> <path>\\n   regular file
        D <path>\\n                       folder (so empty folders count)
        L <target> <path>\\n              symlink

    Paths are percent-encoded (every byte but ``A-Z a-z 0-9 - . _ ~ /`` becomes ``%XX``,
    upper-case hex), so fields never contain spaces or newlines. Symlinks are recorded,
    not followed: ``<target>`` is the fully resolved target relative to the folder
    (``.`` for the folder itself), which is portable across hosts, counts no content
    twice and cannot loop; the target's content is hashed under its own path, and a
    dangling in-tree link is recorded like any other. A symlink that resolves outside
    the folder raises ``ValueError``, as do devices, FIFOs and sockets. Nothing is
    skipped: hidden files and empty folders count. ``size_bytes`` and ``file_count``
    cover regular files only. A symlink given as ``path`` itself is followed.

    ``workers``: ``None`` = one per available core (at most 8), ``1`` = serial. Many
    small files go to forked processes in batches; a few big ones to threads.
    """
    root = os.fsencode(os.path.realpath(path))
    st = os.stat(root)
    if stat.S_ISDIR(st.st_mode):
        return _hash_tree(root, cache, workers)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{os.fsdecode(root)!r} is neither a file nor a folder; refusing it")
    ((digest, size),), read = _digest_files([(root, _stat_key(st))], cache, 1)
    if cache is not None:
        cache._store(read)
    return TreeDigest(sha256=digest, size_bytes=size, file_count=1)


def verify_path(path: StrPath, expected_sha256: str, *, cache: StatCache | None = None) -> bool:
    """True when ``path`` (file or folder) has this digest; accepts a ``sha256:`` prefix."""
    expected = expected_sha256.strip().lower().removeprefix("sha256:")
    return hash_path(path, cache=cache).sha256 == expected


# --------------------------------------------------------------------------- stat cache

_TreeRecord: TypeAlias = tuple[bytes, str, TreeDigest, list[_StatKey]]


def _path_key(path: StrPath) -> bytes:
    return os.fsencode(os.path.abspath(path))


class StatCache:
    """SQLite map of (absolute path, size, mtime_ns, ctime_ns, inode) -> sha256.

    A digest is returned only while all five are unchanged; any change means rehash.
    ``ctime`` catches content rewritten with its mtime put back (``touch -r``, rsync,
    tar). Files changed less than ``racy_window_s`` before they are stored are not
    cached: a second write within the same timestamp tick would leave the stat equal
    (git's "racy clean" problem). :func:`hash_path` also keeps one record per folder
    (a fingerprint of every name and stat key), so re-verifying an unchanged tree costs
    one walk and one query. WAL and a busy timeout let several processes share the
    file; an instance may be used from several threads.
    """

    def __init__(
        self, path: StrPath, *, timeout_s: float = 30.0, racy_window_s: float = 2.0
    ) -> None:
        self.path = os.fspath(path)
        self._racy_ns = int(racy_window_s * 1e9)
        self._db = DigestDB(self.path, timeout_s=timeout_s)

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __enter__(self) -> StatCache:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def lookup(self, path: StrPath, st: os.stat_result) -> str | None:
        """The cached sha256 of ``path`` if its stat still matches, else ``None``."""
        return self.lookup_many([(path, st)])[0]

    def lookup_many(self, items: Sequence[tuple[StrPath, os.stat_result]]) -> list[str | None]:
        """:meth:`lookup` for many files in a few queries, in the order given."""
        return self._lookup([_path_key(p) for p, _ in items], [_stat_key(st) for _, st in items])

    def store(self, path: StrPath, st: os.stat_result, digest: str) -> bool:
        """Remember ``digest`` for ``path`` as it was at ``st``; False if too recent to trust."""
        return self.store_many([(path, st, digest)]) == 1

    def store_many(self, items: Iterable[tuple[StrPath, os.stat_result, str]]) -> int:
        """:meth:`store` for many files in one transaction; returns how many were stored."""
        return self._store([(_path_key(p), _stat_key(st), digest) for p, st, digest in items])

    def _lookup(self, keys: Sequence[bytes], stat_keys: Sequence[_StatKey]) -> list[str | None]:
        rows = self._db.files(keys)
        out: list[str | None] = []
        for key, stat_key in zip(keys, stat_keys, strict=True):
            row = rows.get(key)
            out.append(row[1] if row is not None and row[0] == stat_key else None)
        return out

    def _lookup_tree(self, root: bytes, fingerprint: str) -> TreeDigest | None:
        row = self._db.tree(root, fingerprint)
        return None if row is None else TreeDigest(*row)

    def _store(
        self, items: Sequence[tuple[bytes, _StatKey, str]], tree: _TreeRecord | None = None
    ) -> int:
        """Store settled file digests, and the tree record if all its files are settled."""
        cutoff = time.time_ns() - self._racy_ns
        rows = [(path, *key, digest) for path, key, digest in items if max(key[1:3]) < cutoff]
        if tree is not None and any(max(key[1:3]) >= cutoff for key in tree[3]):
            tree = None
        if not rows and tree is None:
            return 0
        self._db.put(
            rows,
            None
            if tree is None
            else (tree[0], tree[1], tree[2].sha256, tree[2].size_bytes, tree[2].file_count),
        )
        return len(rows)

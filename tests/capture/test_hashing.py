"""File and tree digests and the stat cache, on real files (the parallel paths:
test_hash_pool.py)."""

from __future__ import annotations

import hashlib
import mmap
import multiprocessing
import os
import shutil
import subprocess
import threading
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from replay_tui.capture import hashing
from replay_tui.capture.hashing import (
    ChangedWhileHashingError,
    StatCache,
    TreeDigest,
    hash_path,
    sha256_file,
    verify_path,
)

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
Digest = tuple[bytes, tuple[int, int, int, int]]  # raw sha256, stat key (size first)
DigestFile = Callable[[bytes], Digest]


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        _write(root / rel, data)
    return root


TREE = {
    "train/a.bin": b"alpha" * 1000,
    "train/b.bin": os.urandom(70_000),
    "val/c.txt": b"gamma\n",
    "labels.csv": b"id,label\n1,cat\n",
    ".hidden": b"counted too",
}


def _mtime_back(path: Path, st: os.stat_result) -> None:
    """Give ``path`` an mtime a second before ``st``'s: a stat key unlike the one cached
    at ``st`` whatever the filesystem's clock did (a coarse one may not have ticked since
    the last write), and in the past (a file changed in the racy window is not cached)."""
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 1_000_000_000))


def _count_digests(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every real read of a file append its path to the returned list."""
    calls: list[str] = []
    real: DigestFile = hashing._digest_file

    def counting(path: bytes) -> Digest:
        calls.append(os.fsdecode(path))
        return real(path)

    monkeypatch.setattr(hashing, "_digest_file", counting)
    return calls


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize("size", [1, 2047, 3000, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 7])
def test_file_digest_matches_hashlib(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = _write(tmp_path / "f.bin", data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert hash_path(path) == TreeDigest(hashlib.sha256(data).hexdigest(), size, 1)


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="coreutils sha256sum missing")
def test_file_digest_matches_sha256sum(tmp_path: Path) -> None:
    path = _write(tmp_path / "f.bin", os.urandom(5 * (1 << 20) + 3))
    out = subprocess.run(["sha256sum", str(path)], check=True, capture_output=True, text=True)
    assert sha256_file(path) == out.stdout.split()[0]


def test_empty_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "empty", b"")
    assert sha256_file(path) == EMPTY_SHA256
    assert hash_path(path) == TreeDigest(EMPTY_SHA256, 0, 1)


def test_unmappable_file_is_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(3 * (1 << 20) + 5)
    path = _write(tmp_path / "f.bin", data)

    def no_mmap(*args: object, **kwargs: object) -> None:
        raise OSError("not mappable")

    monkeypatch.setattr(mmap, "mmap", no_mmap)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_fifo_is_streamed(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    data = os.urandom(2_500_000)

    def feed() -> None:
        with open(fifo, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    assert sha256_file(fifo) == hashlib.sha256(data).hexdigest()
    writer.join()


def test_file_changed_while_hashing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "f.bin", b"x" * 10_000)
    real = hashing._digest_fd

    def digest_then_append(fd: int, size: int) -> tuple[bytes, int]:
        result = real(fd, size)
        with open(path, "ab") as out:
            out.write(b"more")
        return result

    monkeypatch.setattr(hashing, "_digest_fd", digest_then_append)
    with pytest.raises(ChangedWhileHashingError, match="changed while"):
        hash_path(tmp_path)


# --------------------------------------------------------------------------- trees


def test_tree_digest_counts_and_is_stable(tmp_path: Path) -> None:
    root = _make_tree(tmp_path / "ds", TREE)
    first = hash_path(root)
    assert first == hash_path(root)
    assert first.file_count == len(TREE)
    assert first.size_bytes == sum(len(d) for d in TREE.values())


def test_tree_digest_is_independent_of_creation_order_and_location(tmp_path: Path) -> None:
    a = _make_tree(tmp_path / "a", TREE)
    b = _make_tree(tmp_path / "elsewhere" / "b", dict(reversed(list(TREE.items()))))
    assert hash_path(a) == hash_path(b)


def test_tree_listing_format(tmp_path: Path) -> None:
    """Pins the documented format: a change here changes every recorded tree hash."""
    root = _make_tree(tmp_path / "ds", {"b.bin": b"bee", "my dir/x": b"", "a.txt": b"aye\n"})
    (root / "empty").mkdir()
    os.symlink("b.bin", root / "link")
    sha = {
        name: hashlib.sha256(data).hexdigest()
        for name, data in {"a": b"aye\n", "b": b"bee", "x": b""}.items()
    }
    listing = (
        "replay-tui tree v1\n"
        f"F {sha['a']} 4 a.txt\n"
        f"F {sha['b']} 3 b.bin\n"
        "D empty\n"
        "L b.bin link\n"
        "D my%20dir\n"
        f"F {sha['x']} 0 my%20dir/x\n"
    )
    expected = TreeDigest(hashlib.sha256(listing.encode()).hexdigest(), 7, 3)
    assert hash_path(root) == expected


def _flip_byte(root: Path) -> None:
    path = root / "train/b.bin"
    data = bytearray(path.read_bytes())
    data[12_345] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "change",
    [
        _flip_byte,
        lambda root: (root / "val/c.txt").rename(root / "val/c2.txt"),
        lambda root: (root / "train/a.bin").rename(root / "a.bin"),
        lambda root: _write(root / "val/new.txt", b""),
        lambda root: (root / "labels.csv").unlink(),
        lambda root: (root / "val/empty").mkdir(),
        lambda root: os.symlink("labels.csv", root / "alias.csv"),
    ],
    ids=["one-byte", "rename", "move", "add-empty-file", "remove", "add-empty-folder", "symlink"],
)
def test_tree_digest_changes(tmp_path: Path, change: Callable[[Path], object]) -> None:
    root = _make_tree(tmp_path / "ds", TREE)
    before = hash_path(root)
    change(root)
    assert hash_path(root).sha256 != before.sha256


def test_odd_file_names_are_unambiguous(tmp_path: Path) -> None:
    one = _make_tree(tmp_path / "one", {"a\nF x 1 b": b"1"})
    two = _make_tree(tmp_path / "two", {"a": b"1", "b": b"1"})
    assert hash_path(one).sha256 != hash_path(two).sha256
    raw = os.fsencode(tmp_path / "three") + b"/\xff\xfe"
    os.mkdir(tmp_path / "three")
    with open(raw, "wb") as out:
        out.write(b"not utf-8 name")
    assert hash_path(tmp_path / "three").file_count == 1


def test_symlink_escaping_the_tree_is_refused(tmp_path: Path) -> None:
    root = _make_tree(tmp_path / "ds", TREE)
    _write(tmp_path / "secret", b"outside")
    os.symlink("../../secret", root / "train/escape")
    with pytest.raises(ValueError, match="outside"):
        hash_path(root)
    (root / "train/escape").unlink()
    os.symlink(tmp_path / "secret", root / "abs-escape")
    with pytest.raises(ValueError, match="outside"):
        hash_path(root)


def test_in_tree_symlinks_are_recorded_not_followed(tmp_path: Path) -> None:
    root = _make_tree(tmp_path / "ds", TREE)
    os.symlink("../train", root / "val/train-again")  # folder link: no loop, no double count
    os.symlink(root, root / "self")  # absolute, to the root itself
    os.symlink("missing.bin", root / "dangling")
    digest = hash_path(root)
    assert digest.file_count == len(TREE)
    (root / "dangling").unlink()
    os.symlink("labels.csv", root / "dangling")
    assert hash_path(root).sha256 != digest.sha256


def test_symlinked_root_is_followed(tmp_path: Path) -> None:
    root = _make_tree(tmp_path / "ds", TREE)
    os.symlink(root, tmp_path / "current")
    assert hash_path(tmp_path / "current") == hash_path(root)


def test_special_files_are_refused(tmp_path: Path) -> None:
    root = _make_tree(tmp_path / "ds", TREE)
    os.mkfifo(root / "val/pipe")
    with pytest.raises(ValueError, match="FIFO"):
        hash_path(root)


def test_verify_path(tmp_path: Path) -> None:
    root = _make_tree(tmp_path / "ds", TREE)
    digest = hash_path(root).sha256
    assert verify_path(root, digest)
    assert verify_path(root, "sha256:" + digest.upper())
    assert not verify_path(root, EMPTY_SHA256)


# --------------------------------------------------------------------------- stat cache


def test_cache_is_used_only_while_files_are_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _make_tree(tmp_path / "ds", TREE)
    calls = _count_digests(monkeypatch)
    with StatCache(tmp_path / "cache.db", racy_window_s=0) as cache:
        first = hash_path(root, cache=cache)
        assert len(calls) == len(TREE)

        calls.clear()
        assert hash_path(root, cache=cache) == first
        assert calls == []  # every digest came from the cache

        before = (root / "train/b.bin").stat()
        _flip_byte(root)  # same size, same inode
        _mtime_back(root / "train/b.bin", before)  # another mtime, set: no clock tick awaited
        changed = hash_path(root, cache=cache)
        assert calls == [str(root.resolve() / "train/b.bin")]
        assert changed.sha256 != first.sha256

        calls.clear()
        _mtime_back(root / "val/c.txt", (root / "val/c.txt").stat())  # content unchanged
        assert hash_path(root, cache=cache) == changed
        assert calls == [str(root.resolve() / "val/c.txt")]

        calls.clear()
        data = (root / "labels.csv").read_bytes()
        st = (root / "labels.csv").stat()
        _write(root / "replacement", data)
        os.replace(root / "replacement", root / "labels.csv")  # new inode
        os.utime(root / "labels.csv", ns=(st.st_atime_ns, st.st_mtime_ns))
        assert hash_path(root, cache=cache) == changed
        assert calls == [str(root.resolve() / "labels.csv")]


def test_cache_persists_and_is_keyed_on_stat(tmp_path: Path) -> None:
    path = _write(tmp_path / "f.bin", b"payload")
    st = path.stat()
    db = tmp_path / "cache.db"
    with StatCache(db, racy_window_s=0) as cache:
        assert cache.lookup(path, st) is None
        assert cache.store(path, st, "ab" * 32)
    with StatCache(db) as cache:
        assert cache.lookup(path, st) == "ab" * 32
        assert cache.lookup(tmp_path / "." / "f.bin", st) == "ab" * 32  # absolute, normalised
        for field in ("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino"):
            fields = {
                name: getattr(st, name)
                for name in ("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino")
            }
            fields[field] += 1
            other = os.stat_result(
                (
                    st.st_mode,
                    fields["st_ino"],
                    st.st_dev,
                    st.st_nlink,
                    st.st_uid,
                    st.st_gid,
                    fields["st_size"],
                    st.st_atime,
                    st.st_mtime,
                    st.st_ctime,
                ),
                {"st_mtime_ns": fields["st_mtime_ns"], "st_ctime_ns": fields["st_ctime_ns"]},
            )
            assert cache.lookup(path, other) is None, field


def test_recently_changed_files_are_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _make_tree(tmp_path / "ds", TREE)  # written just now: inside the racy window
    calls = _count_digests(monkeypatch)
    with StatCache(tmp_path / "cache.db") as cache:
        hash_path(root, cache=cache)
        hash_path(root, cache=cache)
    assert len(calls) == 2 * len(TREE)


def test_cache_file_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "model.pt", os.urandom(4096))
    calls = _count_digests(monkeypatch)
    with StatCache(tmp_path / "cache.db", racy_window_s=0) as cache:
        first = hash_path(path, cache=cache)
        assert hash_path(path, cache=cache) == first
        assert verify_path(path, first.sha256, cache=cache)
    assert len(calls) == 1


def _store_rows(db: str, tag: str, paths: list[str]) -> None:
    with StatCache(db, racy_window_s=0) as cache:
        for _ in range(5):
            cache.store_many((p, os.stat(p), tag * 64) for p in paths)
            cache.lookup_many([(p, os.stat(p)) for p in paths])


def test_cache_shared_by_processes(tmp_path: Path) -> None:
    root = _make_tree(tmp_path / "ds", {f"f{i}": b"" for i in range(400)})
    paths = sorted(str(p) for p in root.iterdir())
    db = str(tmp_path / "cache.db")
    context = multiprocessing.get_context("fork")
    procs = [
        context.Process(target=_store_rows, args=(db, tag, paths[i::2]))
        for i, tag in enumerate("ab")
    ]
    for proc in procs:
        proc.start()
    _store_rows(db, "c", paths)
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    with StatCache(db) as cache:
        found = cache.lookup_many([(p, os.stat(p)) for p in paths])
    assert all(digest is not None and len(set(digest)) == 1 for digest in found)


def test_unchanged_tree_is_verified_from_one_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _make_tree(tmp_path / "ds", TREE)
    calls = _count_digests(monkeypatch)
    with StatCache(tmp_path / "cache.db", racy_window_s=0) as cache:
        first = hash_path(root, cache=cache)
        lookups: list[int] = []
        real_lookup = cache._lookup

        def counting_lookup(
            keys: Sequence[bytes], stat_keys: Sequence[tuple[int, int, int, int]]
        ) -> list[str | None]:
            lookups.append(len(keys))
            return real_lookup(keys, stat_keys)

        monkeypatch.setattr(cache, "_lookup", counting_lookup)
        assert hash_path(root, cache=cache) == first
        assert lookups == []  # the folder record answered; no per-file query
        (root / "val/empty").mkdir()
        second = hash_path(root, cache=cache)
        assert lookups == [len(TREE)] and second.sha256 != first.sha256
    assert len(calls) == len(TREE)  # the new folder needed no file to be read again


def test_fingerprint_has_no_ambiguous_boundary() -> None:
    def fingerprint(
        files: list[tuple[bytes, tuple[int, ...]]], others: list[tuple[bytes, str]]
    ) -> str:
        keys = array("q", [k for _, key in files for k in key])
        return hashing._fingerprint([rel for rel, _ in files], keys, others)

    key = (1, 2, 3, 4)
    folder_and_file = fingerprint([(b"b", key)], [(b"a", "D a\n")])
    one_odd_name = fingerprint([(b"D a\nb", key)], [])
    assert folder_and_file != one_odd_name
    two_files = fingerprint([(b"a", key), (b"b", key)], [])
    assert two_files != fingerprint([(b"a\0b", key)], [])  # no name holds a NUL anyway
    assert fingerprint([(b"a", (1, 2, 3, 4))], []) != fingerprint([(b"a", (1, 2, 3, 5))], [])
    assert fingerprint([(b"a", key)], []) != fingerprint([(b"a", key)], [(b"d", "D d\n")])


def test_quote_all_matches_quote() -> None:
    for raws in ([], [b"a"], [b"a/b.bin", b"c"], [b"a", b"new\nline", b"sp ace"], [b"\xff", b""]):
        assert hashing._quote_all(raws) == [hashing._quote(raw) for raw in raws]


def test_scan_and_walk_agree(tmp_path: Path) -> None:
    """The stat-free walk (no cache) and the lstat walk (cache) see the same tree."""
    root = _make_tree(tmp_path / "ds", TREE)
    (root / "empty").mkdir()
    (root / "link").symlink_to("train/a.bin")
    top = os.fsencode(root.resolve())
    files, others = hashing._scan(top)
    rels, keys, others_walk = hashing._walk(top, with_stat=False)
    assert sorted(rels) == [rel for rel, _ in files] and len(keys) == 0
    assert sorted(others_walk) == others
    for rel, key in files:
        st = os.lstat(top + b"/" + rel)
        assert key == (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def test_walk_batches_odd_names_and_big_inodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batched walk: a folder bigger than a batch, mixed with folders, links and a
    name that is not UTF-8, sees what a per-entry lstat sees; an inode past int64 is
    folded as ``_stat_key`` folds it."""
    monkeypatch.setattr(hashing, "_WALK_BATCH", 3)
    root = tmp_path / "ds"
    root.mkdir()
    for i in range(7):
        _write(root / f"f{i}.bin", b"x" * i)
    (root / "sub").mkdir()
    _write(root / "sub" / "g.bin", b"g")
    (root / "link").symlink_to("f1.bin")
    top = os.fsencode(root.resolve())
    odd = top + b"/\xff\xfe.bin"
    with open(odd, "wb") as out:
        out.write(b"odd")
    rels, keys, others = hashing._walk(top, with_stat=True)
    expected = sorted([*os.listdir(top), b"sub/g.bin"])
    assert sorted(rels + [rel for rel, _ in others]) == expected
    for j, rel in enumerate(rels):
        st = os.lstat(top + b"/" + rel)
        assert tuple(keys[4 * j : 4 * j + 4]) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_ino,
        )
    assert sorted(hashing._walk(top, with_stat=False)[0]) == sorted(rels)

    big = os.lstat(odd)
    fields = list(big)
    fields[1] = (1 << 64) - 5  # st_ino
    huge = os.stat_result(fields, {"st_mtime_ns": big.st_mtime_ns, "st_ctime_ns": big.st_ctime_ns})
    folded: array[int] = array("q", [7])
    hashing._add_keys(folded, [big, huge])
    assert folded.tolist() == [7, *hashing._stat_key(big), *hashing._stat_key(huge)]
    assert hashing._stat_key(huge)[3] == -5

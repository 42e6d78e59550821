"""Outputs read as soon as the run closes them (capture/outputs.py, EarlyOutputs).

Real files, a real inotify watch, a real object store.  The tests wait for conditions
(the watcher's counters, a staged copy on disk), never for a fixed time; what they
assert is the end state: an early read is taken only where the file is still that very
file, and whatever the timing, the value taken is never that of bytes the file no
longer holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from replay_tui.capture.artifacts import artifact_entries
from replay_tui.capture.launcher import SEQUENTIAL_ENV, record
from replay_tui.capture.options import RecordOptions
from replay_tui.capture.outputs import EarlyOutputs, _Reach
from replay_tui.capture.timing import TIMINGS_ENV
from replay_tui.checkpoints.digest import tensor_digest
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.support.manifests import comparable, fields_of
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="inotify: Linux only (the launcher reads after the run elsewhere)",
)


def safetensors_bytes(values: list[float]) -> bytes:
    data = struct.pack(f"<{len(values)}f", *values)
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [len(values)], "data_offsets": [0, len(data)]}}
    )
    raw = header.encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write(path: Path, data: bytes, mode: str = "wb") -> None:
    with path.open(mode) as f:
        f.write(data)


@pytest.fixture
def objects(tmp_path: Path) -> ObjectStore:
    return ObjectStore(tmp_path / "store" / "objects")


@pytest.fixture
def watch(tmp_path: Path, objects: ObjectStore) -> Iterator[Callable[..., EarlyOutputs]]:
    made: list[EarlyOutputs] = []

    def start(
        *globs: str, left: dict[str, tuple[int, int, int, int]] | None = None
    ) -> EarlyOutputs:
        early = EarlyOutputs.start(tmp_path / "w", list(globs), objects, left or {})
        assert early is not None
        assert early.ready.wait(60), "the first watches never set"
        assert early.stats.watched >= 1
        made.append(early)
        return early

    (tmp_path / "w").mkdir()
    yield start
    for early in made:
        early.close()


def staged(objects: ObjectStore) -> list[Path]:
    return sorted(objects.root.glob(".put.*.tmp")) if objects.root.is_dir() else []


def kept(objects: ObjectStore) -> set[str]:
    """The objects kept (named by their sha256)."""
    if not objects.root.is_dir():
        return set()
    return {p.parent.name + p.name for p in objects.root.glob("??/*")}


def take(early: EarlyOutputs, path: Path, rel: str) -> tuple[str, int, str | None] | None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return early.take(rel, fd)
    finally:
        os.close(fd)


# -- which folders and files the globs reach (fixed cases) ------------------------------


def test_the_globs_reach_the_folders_on_the_way_and_the_files_they_match() -> None:
    r = _Reach.of(["out/*", "runs/*/ckpt.pt", "deep/**/*.safetensors", "/abs/x", "../up/*"])
    assert r.folder(()) and r.folder(("out",)) and r.folder(("runs",))
    assert r.folder(("runs", "a")) and not r.folder(("runs", "a", "b"))
    assert not r.folder(("out", "sub"))  # out/* names files in out/ alone
    assert r.folder(("deep", "a", "b", "c")) and not r.folder(("other",))
    assert r.file(("out", "ckpt.pt")) and r.file(("out", ".hidden"))
    assert not r.file(("out", "sub", "ckpt.pt"))
    assert r.file(("runs", "7", "ckpt.pt")) and not r.file(("runs", "7", "other.pt"))
    assert r.file(("deep", "m.safetensors")) and r.file(("deep", "a", "b", "m.safetensors"))
    assert not r.file(("abs", "x")) and not r.file(("up", "x"))  # refused later, not watched


# -- the watcher on its own -------------------------------------------------------------


def test_a_file_closed_in_a_folder_the_run_makes_is_read_and_taken(
    tmp_path: Path, objects: ObjectStore, watch: Callable[..., EarlyOutputs]
) -> None:
    early = watch("out/*")
    out = tmp_path / "w" / "out"
    out.mkdir()  # made by the run: watched as it appears
    wait_until(lambda: early.stats.watched >= 2, "the watch on out/")
    body = safetensors_bytes([1.0, 2.0, 3.0])
    write(out / "model.safetensors", body)
    write(out / "notes.txt", b"not a checkpoint\n")
    wait_until(lambda: early.stats.read == 2, "both files read")
    early.finish()
    got = take(early, out / "model.safetensors", "out/model.safetensors")
    assert got == (sha(body), len(body), tensor_digest(out / "model.safetensors"))
    assert take(early, out / "notes.txt", "out/notes.txt") == (sha(b"not a checkpoint\n"), 17, None)
    assert early.stats.taken == 2
    early.close()
    assert kept(objects) == {sha(body), sha(b"not a checkpoint\n")}
    assert staged(objects) == []
    assert (objects.path_for(sha(body))).read_bytes() == body


def test_a_file_rewritten_after_its_read_is_read_again_and_the_first_copy_dropped(
    tmp_path: Path, objects: ObjectStore, watch: Callable[..., EarlyOutputs]
) -> None:
    (tmp_path / "w" / "out").mkdir()
    early = watch("out/*")
    path = tmp_path / "w" / "out" / "ckpt.bin"
    write(path, b"A" * 4096)
    wait_until(lambda: early.stats.read == 1, "the first read")
    with path.open("r+b") as f:  # same size, same inode: only the times and a close tell
        f.write(b"B" * 4096)
    wait_until(lambda: early.stats.read == 2, "the second read")
    early.finish()
    assert take(early, path, "out/ckpt.bin") == (sha(b"B" * 4096), 4096, None)
    early.close()
    assert kept(objects) == {sha(b"B" * 4096)}
    assert staged(objects) == []


def test_a_file_rewritten_as_the_run_ends_is_never_taken_with_its_old_bytes(
    tmp_path: Path, objects: ObjectStore, watch: Callable[..., EarlyOutputs]
) -> None:
    """The rewrite's close is seen and the end comes at once: the second read is under
    way (then waited for) or not begun (then nothing is taken, the launcher reads the
    file itself); never the first read's value."""
    (tmp_path / "w" / "out").mkdir()
    early = watch("out/*")
    path = tmp_path / "w" / "out" / "ckpt.bin"
    write(path, b"A" * 4096)
    wait_until(lambda: early.stats.read == 1, "the first read")
    with path.open("r+b") as f:
        f.write(b"B" * 4096)
    early.finish()
    assert take(early, path, "out/ckpt.bin") in ((sha(b"B" * 4096), 4096, None), None)
    early.close()
    assert sha(b"A" * 4096) not in kept(objects)
    assert staged(objects) == []


def test_a_file_with_a_second_link_is_not_read_early(
    tmp_path: Path, objects: ObjectStore, watch: Callable[..., EarlyOutputs]
) -> None:
    """Writes through a link in a folder nobody watches would go unseen: such a file is
    read after the run, never early."""
    (tmp_path / "w" / "out").mkdir()
    early = watch("out/*")
    path = tmp_path / "w" / "out" / "ckpt.bin"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"")
    os.link(elsewhere, path)
    write(path, b"C" * 100, "ab")
    wait_until(lambda: early.stats.skipped == 1, "the close seen and the file passed over")
    early.finish()
    assert take(early, path, "out/ckpt.bin") is None
    assert early.stats.read == 0
    early.close()
    assert kept(objects) == set() and staged(objects) == []


def test_a_file_left_before_the_run_and_closed_unchanged_is_not_read(
    tmp_path: Path, objects: ObjectStore, watch: Callable[..., EarlyOutputs]
) -> None:
    out = tmp_path / "w" / "out"
    out.mkdir()
    old = out / "ckpt.bin"
    old.write_bytes(b"an earlier run's\n")
    st = old.lstat()
    early = watch(
        "out/*", left={"out/ckpt.bin": (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)}
    )
    # the first look at the folder finds the file and passes over it; only then is it
    # closed, so the count below is the close's own (had the close come first, the two
    # would have made one read, and a wait for 1 could have seen 1 on its way to 2)
    wait_until(lambda: early.stats.skipped == 1, "the file found at the start passed over")
    assert early.stats.closed == 0
    with old.open("ab"):
        pass  # opened for writing and closed, nothing written: still the earlier run's
    wait_until(
        lambda: early.stats.closed == 1 and early.stats.skipped == 2,
        "the close seen and the file passed over",
    )
    early.finish()
    assert early.stats.read == 0
    early.close()
    assert kept(objects) == set() and staged(objects) == []


def test_a_file_renamed_into_place_is_read_under_its_final_name(
    tmp_path: Path, objects: ObjectStore, watch: Callable[..., EarlyOutputs]
) -> None:
    (tmp_path / "w" / "out").mkdir()
    early = watch("out/*.safetensors")
    body = safetensors_bytes([4.0] * 250)
    tmp = tmp_path / "w" / "out" / "ckpt.safetensors.tmp"  # not matched: never read
    write(tmp, body)
    path = tmp_path / "w" / "out" / "ckpt.safetensors"
    os.replace(tmp, path)
    wait_until(lambda: early.stats.read == 1, "the renamed file read")
    early.finish()
    assert take(early, path, "out/ckpt.safetensors") == (sha(body), len(body), tensor_digest(path))
    assert early.stats.closed == 1
    early.close()


def test_a_checkpoint_the_torch_free_readers_decline_is_left_to_the_end(
    tmp_path: Path, objects: ObjectStore, watch: Callable[..., EarlyOutputs]
) -> None:
    """Not read early (torch would decide, and torch is not imported beside the run):
    the read after the end gives what it gives without the early reader."""
    (tmp_path / "w" / "out").mkdir()
    early = watch("out/*")
    write(tmp_path / "w" / "out" / "odd.pt", b"not a zip, not safetensors" * 10)
    wait_until(lambda: early.stats.skipped == 1, "the close seen and the file passed over")
    early.finish()
    with_early = artifact_entries(
        tmp_path / "w", ["out/*"], [], [], one_pass=True, objects=objects, early=early
    )
    early.close()
    assert early.stats.read == 0 and early.stats.taken == 0
    assert with_early == artifact_entries(tmp_path / "w", ["out/*"], [], [])
    assert staged(objects) == []


def test_a_file_deleted_or_renamed_away_loses_its_copy_at_once(
    tmp_path: Path, objects: ObjectStore, watch: Callable[..., EarlyOutputs]
) -> None:
    """A run keeping its last checkpoints only, or writing a folder and renaming it: the
    copies of what is gone go as it goes, not at the end."""
    out = tmp_path / "w" / "out"
    out.mkdir()
    early = watch("out/*", "out/*/*")
    write(out / "old.bin", b"E" * 3000)
    (out / "tmpdir").mkdir()
    wait_until(lambda: early.stats.watched >= 3, "the watch on out/tmpdir")
    write(out / "tmpdir" / "shard.bin", b"F" * 3000)
    wait_until(lambda: early.stats.read == 2, "both files read")
    assert len(staged(objects)) == 2
    (out / "old.bin").unlink()
    os.rename(out / "tmpdir", out / "final")  # the watch on it now names the wrong path
    wait_until(lambda: len(staged(objects)) <= 1, "the deleted file's copy dropped")
    early.finish()
    early.close()
    assert staged(objects) == [] and kept(objects) == set()


# -- the launcher: the same manifest, read while the run ran -----------------------------

PROGRAM = textwrap.dedent(
    """
    import glob, json, os, struct, sys, time
    objects = os.environ.get("EARLY_TEST_OBJECTS")  # unset: nobody reads early
    os.makedirs("out", exist_ok=True)
    vals = [float(i) for i in range(4096)]
    data = struct.pack("<%df" % len(vals), *vals)
    w = {"dtype": "F32", "shape": [len(vals)], "data_offsets": [0, len(data)]}
    head = json.dumps({"w": w}).encode()
    head += b" " * (-len(head) % 8)
    with open("out/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + data)
    with open("out/metrics.txt", "w") as f:
        f.write("loss 0.5\\n")
    # wait (with a deadline) until the launcher has begun copying both: its reads are
    # then under way or done, and the end waits for one under way
    deadline = time.monotonic() + 60
    while objects and len(glob.glob(os.path.join(objects, ".put.*.tmp"))) < 2:
        if time.monotonic() > deadline:
            sys.exit("the launcher never began reading the closed files")
        time.sleep(0.01)
    print("done", flush=True)
    """
)


def test_record_takes_what_it_read_while_the_run_ran_and_stores_the_same_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same run recorded in turn (everything read after the end) and overlapped (both
    outputs read while the run ran, the run waiting until those reads have begun): the
    manifests are equal field by field, but for what differs between any two runs."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "train.py").write_text(PROGRAM)
    store_path = tmp_path / "store" / "runs.db"
    objects = ObjectStore.beside(store_path)
    manifests = {}
    for mode in ("sequential", "overlapped"):
        timings = tmp_path / f"{mode}.json"
        monkeypatch.setenv(TIMINGS_ENV, str(timings))
        if mode == "sequential":
            monkeypatch.setenv(SEQUENTIAL_ENV, "1")
        else:
            monkeypatch.delenv(SEQUENTIAL_ENV)
            monkeypatch.setenv("EARLY_TEST_OBJECTS", str(objects.root))  # not recorded
            shutil.rmtree(work / "out")  # the same bytes written anew
            shutil.rmtree(objects.root)  # this way's reads keep them itself
        opts = RecordOptions(argv=[sys.executable, "train.py"], cwd=work, artifacts=["out/*"])
        with RunStore(store_path) as store:
            result = record(opts, store)
        assert result.exit.exit_code == 0, result.exit.reason
        manifests[mode] = result.manifest
        t = json.loads(timings.read_text())
        if mode == "overlapped":
            assert t["early"]["read"] == 2 and t["early"]["taken"] == 2, t["early"]
            assert t["early"]["lost_events"] is False
        else:
            assert t["early"] is None
    seq, ovl = (comparable(fields_of(manifests[m].model_dump(mode="json"))) for m in manifests)
    assert set(seq) == set(ovl)
    differ = {k: (seq[k], ovl[k]) for k in seq if seq[k] != ovl[k]}
    assert not differ, f"fields that differ between the two ways: {differ}"
    body = (work / "out" / "model.safetensors").read_bytes()
    entry = {a.path: a for a in manifests["overlapped"].outputs.artifacts}["out/model.safetensors"]
    assert entry.sha256 == sha(body)
    assert entry.tensor_sha256 == tensor_digest(work / "out" / "model.safetensors")
    assert objects.path_for(sha(body)).read_bytes() == body
    assert staged(objects) == []


def test_artifact_entries_with_an_early_read_gives_the_entries_it_gives_without(
    tmp_path: Path, objects: ObjectStore, watch: Callable[..., EarlyOutputs]
) -> None:
    early = watch("out/*")
    out = tmp_path / "w" / "out"
    out.mkdir()
    wait_until(lambda: early.stats.watched >= 2, "the watch on out/")
    write(out / "a.safetensors", safetensors_bytes([0.5] * 64))
    write(out / "b.bin", b"\x00\x01" * 500)
    wait_until(lambda: early.stats.read == 2, "both files read")
    early.finish()
    with_early = artifact_entries(
        tmp_path / "w", ["out/*"], [], [], one_pass=True, objects=objects, early=early
    )
    early.close()
    assert early.stats.taken == 2
    without = artifact_entries(tmp_path / "w", ["out/*"], [], [])
    assert with_early == without

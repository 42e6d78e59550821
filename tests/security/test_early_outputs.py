"""Attacks on the early reader of a run's outputs (capture/outputs.py, EarlyOutputs).

The run decides what lies in its output folder and when: it can swap a file it closed
for a link to a secret, rename a FIFO into place, or make its output folder a link out
of the tree.  The early reader opens everything through the door, so none of it reads
anything outside the folder, blocks, or leaves a copy behind; what the launcher says
after the run is what it says without the early reader.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from replay_tui.capture.outputs import EarlyOutputs
from storage.objects import ObjectStore
from tests.helpers.early import collect
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="inotify: Linux only (nothing is read early)"
)

SECRET = b"the host's secret, never to be read by a run's collection\n"


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Path, ObjectStore, Path, EarlyOutputs]]:
    work = tmp_path / "w"
    (work / "out").mkdir(parents=True)
    secret = tmp_path / "secret.pt"
    secret.write_bytes(SECRET)
    objects = ObjectStore(tmp_path / "store" / "objects")
    early = EarlyOutputs.start(work, ["out/*"], objects, {})
    assert early is not None
    assert early.ready.wait(60)
    yield work, objects, secret, early
    early.close()


def nothing_of_the_secret_kept(objects: ObjectStore) -> None:
    files = [p for p in objects.root.rglob("*") if p.is_file()] if objects.root.is_dir() else []
    assert all(p.read_bytes() != SECRET for p in files)
    assert not [p for p in files if p.name.startswith(".put.")], "a staged copy left behind"


def test_a_closed_file_swapped_for_a_link_to_a_secret_is_never_read(
    setup: tuple[Path, ObjectStore, Path, EarlyOutputs],
) -> None:
    work, objects, secret, early = setup
    ckpt = work / "out" / "ckpt.bin"
    ckpt.write_bytes(b"real weights" * 100)
    wait_until(lambda: early.stats.read == 1, "the real file read")
    link = work / "out" / ".swap"
    os.symlink(secret, link)
    os.replace(link, ckpt)  # renamed into place: the watcher sees it and tries it
    wait_until(lambda: early.stats.skipped == 1, "the link seen and refused")
    early.finish()
    entries, refused = collect(work, ["out/*"], objects, early)
    early.close()
    assert entries == [{"path": "out/ckpt.bin", "sha256": None, "size_bytes": None, "kind": "file"}]
    assert any("symbolic link" in r for r in refused), refused
    assert early.stats.taken == 0
    nothing_of_the_secret_kept(objects)


def test_a_fifo_renamed_into_place_does_not_block_the_reader(
    setup: tuple[Path, ObjectStore, Path, EarlyOutputs],
) -> None:
    work, objects, _, early = setup
    fifo = work / "out" / ".pipe"
    os.mkfifo(fifo)
    os.replace(fifo, work / "out" / "model.pt")
    wait_until(lambda: early.stats.skipped == 1, "the FIFO seen and refused")
    (work / "out" / "after.bin").write_bytes(b"still reading")  # the reader is not stuck
    wait_until(lambda: early.stats.read == 1, "the next file read")
    early.finish()
    entries, refused = collect(work, ["out/*"], objects, early)
    early.close()
    by_path = {e["path"]: e for e in entries}
    assert by_path["out/model.pt"]["sha256"] is None
    assert any("not a regular file" in r for r in refused), refused
    assert by_path["out/after.bin"]["sha256"] is not None
    nothing_of_the_secret_kept(objects)


def test_an_output_folder_that_is_a_link_out_of_the_tree_is_never_watched(
    tmp_path: Path,
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    objects = ObjectStore(tmp_path / "store" / "objects")
    early = EarlyOutputs.start(work, ["out/*"], objects, {})
    assert early is not None
    try:
        assert early.ready.wait(60)
        os.symlink(outside, work / "out")  # the run makes out/ a link, then writes through it
        (work / "out" / "ckpt.pt").write_bytes(SECRET)
        early.finish()
        assert early.stats.watched == 1  # the run's folder; never the link's target
        assert early.stats.closed == 0 and early.stats.read == 0
        entries, refused = collect(work, ["out/*"], objects, early)
    finally:
        early.close()
    # the link itself is listed, unhashed; what lies behind it is never listed, not even
    # by name (the collection's walk never looks through a link)
    assert entries == [{"path": "out", "sha256": None, "size_bytes": None, "kind": "file"}]
    assert any("out is a symbolic link" in r for r in refused), refused
    nothing_of_the_secret_kept(objects)


def test_a_file_named_to_climb_out_is_never_read(
    setup: tuple[Path, ObjectStore, Path, EarlyOutputs],
) -> None:
    """Names come from the kernel's events, one path component each: a run cannot name
    a file ``..`` or put a slash in a name, and a name that looks like a path is just a
    name in the folder."""
    work, objects, _, early = setup
    odd = work / "out" / "..\\..\\secret.bin"
    odd.write_bytes(b"an odd name, a plain file")
    wait_until(lambda: early.stats.read == 1, "the oddly named file read in place")
    early.finish()
    entries, _ = collect(work, ["out/*"], objects, early)
    early.close()
    assert [e["path"] for e in entries] == ["out/..\\..\\secret.bin"]
    assert early.stats.taken == 1
    nothing_of_the_secret_kept(objects)

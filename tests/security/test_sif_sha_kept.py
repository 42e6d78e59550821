"""The SIF's sha256 is hashed once per file and kept beside it: the kept answer is read
through the door and taken only while the file's device, inode, size, link count and
times are those it was hashed with.  A changed file, a planted answer for another
file's identity, or a link in the answer's place is hashed again, never believed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from replay_tui.replay.backends.apptainer.runtime import sif_sha256


def _sif(tmp_path: Path, data: bytes) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    sif = cache / f"{'a' * 64}.sif"
    sif.write_bytes(data)
    return sif


def test_the_sha_is_kept_and_taken_while_the_file_is_the_same(tmp_path: Path) -> None:
    sif = _sif(tmp_path, b"one")
    assert sif_sha256(sif) == hashlib.sha256(b"one").hexdigest()
    kept = sif.with_name(sif.name + ".sha256.json")
    assert json.loads(kept.read_text())["sha256"] == hashlib.sha256(b"one").hexdigest()
    body = json.loads(kept.read_text())
    kept.write_text(json.dumps({**body, "sha256": "f" * 64}))  # same stat: it is taken
    assert sif_sha256(sif) == "f" * 64  # (what shows that the kept answer is used)


def test_a_changed_or_swapped_file_is_hashed_again(tmp_path: Path) -> None:
    sif = _sif(tmp_path, b"one")
    sif_sha256(sif)
    with sif.open("ab") as f:  # written in place: its size and change time move
        f.write(b"two")
    assert sif_sha256(sif) == hashlib.sha256(b"onetwo").hexdigest()
    other = tmp_path / "other.sif"
    other.write_bytes(b"another image")
    os.replace(other, sif)  # swapped for another file: another inode
    assert sif_sha256(sif) == hashlib.sha256(b"another image").hexdigest()


def test_a_planted_answer_or_a_link_in_its_place_is_not_believed(tmp_path: Path) -> None:
    sif = _sif(tmp_path, b"one")
    kept = sif.with_name(sif.name + ".sha256.json")
    st = os.lstat(sif)
    wrong_key = [st.st_dev, st.st_ino + 1, st.st_size, 1, st.st_mtime_ns, st.st_ctime_ns]
    kept.write_text(json.dumps({"stat": wrong_key, "sha256": "f" * 64}))
    assert sif_sha256(sif) == hashlib.sha256(b"one").hexdigest()
    kept.unlink()
    right = [st.st_dev, st.st_ino, st.st_size, st.st_nlink, st.st_mtime_ns, st.st_ctime_ns]
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"stat": right, "sha256": "f" * 64}))
    kept.symlink_to(planted)
    assert sif_sha256(sif) == hashlib.sha256(b"one").hexdigest()  # the link not followed

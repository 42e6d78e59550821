"""The records of a TensorBoard event file are framed by record's reader and each of
their two CRCs checked (with ``google-crc32c``, or TensorBoard's own CRC32C where that is
missing): a record whose length claims more than the file holds, or whose length's CRC
is wrong, refuses the file with where, and gives no point."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from replay_tui.capture.frameworks import read_outputs
from replay_tui.capture.frameworks.tensorboard import crc32c
from tests.security.test_framework_files import _event_file


def _masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _append(ev: Path, length: int, good_header_crc: bool) -> None:
    head = struct.pack("<Q", length)
    crc = _masked(crc32c()(head)) ^ (0 if good_header_crc else 1)
    with ev.open("ab") as fh:
        fh.write(head + struct.pack("<I", crc) + b"\x00" * 16)


@pytest.mark.parametrize(
    ("length", "good", "why"),
    [(1 << 62, True, "(its data)"), (4, False, "(its length's CRC)")],
    ids=["length-past-the-file", "length-crc"],
)
def test_a_record_that_lies_about_its_length_is_refused(
    tmp_path: Path, length: int, good: bool, why: str
) -> None:
    ev = _event_file(tmp_path / "out", 20)
    _append(ev, length, good)
    f = read_outputs(tmp_path, ["out/**"], [])
    rel = ev.relative_to(tmp_path).as_posix()
    assert not f.files
    # the file's version record, then 20 scalars: the 22nd record is the bad one
    assert f.unread[rel] == (
        f"refused: TensorBoard event file {rel}: record 22 is truncated or corrupted {why}"
    )


def test_without_the_compiled_crc_the_same_points_and_refusals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ev = _event_file(tmp_path / "out", 20)
    fast = read_outputs(tmp_path, ["out/**"], [])
    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # not installed
    assert crc32c().__module__.startswith("tensorboard.")
    slow = read_outputs(tmp_path, ["out/**"], [])
    assert slow.files["out/" + ev.name].points == fast.files["out/" + ev.name].points
    data = bytearray(ev.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ev.write_bytes(bytes(data))
    assert (
        "truncated or corrupted" in read_outputs(tmp_path, ["out/**"], []).unread["out/" + ev.name]
    )
